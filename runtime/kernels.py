"""Each kernel kind's concrete kernel for one shape set, without and with a GPU: :func:`source` (the CUDA text
and Schedule Plan a step runs at the bound sizes, for the disk cache and the measurement log) and
:func:`prepare` (its launch on device tensors, for the eager run and the CUDA Graph capture). The kinds
specialise their plans per concrete shape each in its own ``launch`` module; this table is the one place that
knows their entry points."""
from __future__ import annotations

from typing import Any, Mapping


def source(kind_name: str, spec: Any, env: Mapping[str, int], arch: str) -> Any:
    """The KernelSource the kind launches for spec at the sizes env, planned for arch (sm80 | sm90)."""
    if kind_name == "gemm":
        from ..backend.gemm import launch as m
        return m._plan_and_source(m.concrete_spec(spec, env), arch)
    if kind_name == "attention":
        from ..backend.attention import launch as m
        from ..backend.attention.kind import region_algo
        return m._plan_and_source(m.concrete_spec(spec, env), arch, region_algo(spec))
    if kind_name == "softmax_scores":
        from ..backend.scores import launch as m
        return m._plan_and_source(m.concrete_spec(spec, env), arch)
    if kind_name in ("conv", "conv_pool"):
        from ..backend.conv import launch as m
        return m._source(spec, arch)
    if kind_name == "simt":
        from ..backend.simt import launch as m
        return m._source(spec, arch, tuple(sorted(m._env(spec, env).items())))
    raise KeyError(kind_name)


def prepare(kind_name: str, spec: Any, tensors: Mapping[str, Any], env: Mapping[str, int]) -> Any:
    """The kind's prepared Launch (backend/common/launch.py) of spec on device tensors (inputs and output)."""
    if kind_name == "gemm":
        from ..backend.gemm.launch import prepare as p
        return p(spec, tensors, env)
    if kind_name == "attention":
        from ..backend.attention.kind import region_algo
        from ..backend.attention.launch import prepare as p
        return p(spec, tensors, env, algo=region_algo(spec))
    if kind_name == "softmax_scores":
        from ..backend.scores.launch import prepare as p
        return p(spec, tensors, env)
    if kind_name in ("conv", "conv_pool"):
        from ..backend.conv.launch import prepare as p
        return p(spec, tensors)
    if kind_name == "simt":
        from ..backend.simt.launch import prepare as p
        return p(spec, tensors, env)
    raise KeyError(kind_name)
