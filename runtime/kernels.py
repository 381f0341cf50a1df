"""Each kernel kind's concrete kernel for one shape set, without and with a GPU: :func:`source` (the CUDA text
and Schedule Plan a step runs at the bound sizes, for the disk cache and the measurement log) and
:func:`prepare` (its launch on device tensors, for the eager run and the CUDA Graph capture). Each is the
kind's own verb in the one kind table (backend/kinds.py ``KernelKind.source`` / ``.prepare``)."""
from __future__ import annotations

from typing import Any, Mapping

from ..backend.kinds import kind_named


def source(kind_name: str, spec: Any, env: Mapping[str, int], arch: str) -> Any:
    """The KernelSource the kind launches for spec at the sizes env, planned for arch (sm80 | sm90)."""
    return kind_named(kind_name).source(spec, env, arch)


def prepare(kind_name: str, spec: Any, tensors: Mapping[str, Any], env: Mapping[str, int]) -> Any:
    """The kind's prepared Launch (backend/common/launch.py) of spec on device tensors (inputs and output)."""
    return kind_named(kind_name).prepare(spec, tensors, env)
