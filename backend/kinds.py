"""Kernel kinds: which template family computes an extracted region (docs/DESIGN.md §Backend).

One region = one kernel. Each kind (``gemm``, ``attention``, ``softmax_scores``, ``conv``, ``conv_pool``; one
package each under ``backend/``, with the same file names) knows how to recognise a region (``bind``: a
Binding, or :class:`NoBind` saying why not), plan it (``search``), render its CUDA text (``render``), show its
GPU IR (``gpu_ir``) and launch it on a GPU (``launch``); ``reference`` is the spec's numpy meaning that
kernels are checked against; ``source`` is the kernel text planned for one set of sizes (the model cache and
the measurement log) and ``prepare`` its launch on device tensors (the runtime's eager run and CUDA Graph
capture); ``gathers`` says it reads through indices known only at run time (a Gather: SIMT), and only such
kinds are tried on a region that does. The backend stages (:mod:`.stages`) and the runtime only talk to this table.

Protocols the kinds share:
  Binding: ``.spec`` and ``.arrays(arrays, env, reshape) -> {spec tensor name: array in the spec's shape}``.
  spec:    ``.name``, ``.c`` (output tensor), ``.inputs``, ``.shapes(env)``, ``.dtypes()``, ``.to_json()``;
           hashable (plans are cached per spec, arch and shape).
  Shared:  a Binding of a region's canonical form (:func:`bind_shared`), with ``.names`` back to the region's own.
  SearchResult: ``.best`` (a plan) and ``.to_json(spec)`` (the plan with its ranked and pruned candidates).
  KernelSource: ``.name``, ``.source`` (standalone CUDA text), ``.arch``, ``.skeleton``.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from ..ir.diagnostics import PolysatError, fail
from ..ir.region import R, Region, walk
from ..ir.region_squeeze import squeeze_units
from .common.canonical import Names, canonical
from .common.region_match import NoBind

# packages whose ``kind`` module defines ``KIND``, tried in this order (the first that binds a region computes it);
# the SIMT kind (no tensor cores) comes last
_PACKAGES = ("gemm", "attention", "scores", "conv", "conv_pool", "simt")


@dataclass(frozen=True)
class KernelKind:
    name: str
    bind: Callable[[Region], Any]  # -> Binding | NoBind
    search: Callable[[Any, str, Mapping[str, int] | None], Any]
    render: Callable[[Any, Any], Any]
    gpu_ir: Callable[[Any, Any], Any]
    launch: Callable[[Any, Mapping[str, Any], Mapping[str, int] | None, Any], None]
    reference: Callable[[Any, Mapping[str, Any], Mapping[str, int] | None], Any]  # the spec's numpy meaning
    source: Callable[[Any, Mapping[str, int] | None, str], Any]  # (spec, sizes, arch) -> the KernelSource launched there
    prepare: Callable[[Any, Mapping[str, Any], Mapping[str, int] | None], Any]  # (spec, device tensors, sizes) -> Launch
    gathers: bool = False  # it reads through indices known only at run time (a Gather); only such kinds are tried on one


@lru_cache(maxsize=None)
def kinds() -> tuple[KernelKind, ...]:
    return tuple(importlib.import_module(f"{__package__}.{m}.kind").KIND for m in _PACKAGES)


def kind_named(name: str) -> KernelKind:
    for k in kinds():
        if k.name == name:
            return k
    raise KeyError(name)


def bind(region: Region) -> tuple[KernelKind, Any]:
    """The kind that computes the region and its binding; E1504 NoKernelTemplate with every kind's reason.
    Each kind, in order, is tried on the region as it is and then without its size-1 axes (a batch of one;
    ir/region_squeeze.py): the buffers are the same bytes, the binding reads them reshaped."""
    candidates = _candidates(region)
    found, reasons = _first(region, candidates)
    reasons += [f"it reads at indices computed at run time (a Gather), which the {k.name} kind does not"
                for k in kinds() if k not in candidates]
    if found is not None:
        return found
    fail("NoKernelTemplate", f"region {region.name}", "; ".join(reasons) or "no kernel kind is registered")


@dataclass(frozen=True)
class Shared:
    """The binding of a region's canonical form (backend/common/canonical.py), told in the region's names:
    ``spec`` is the canonical spec, one per distinct kernel (its plan, text and cubin are made once for every
    region with that form); ``names`` leads from the spec's tensor names to the region's."""
    binding: Any
    names: Names

    @property
    def spec(self) -> Any:
        return self.binding.spec

    def user(self, name: str) -> str:
        """The region's name of a spec tensor."""
        return self.names.user(name)

    def arrays(self, arrays: Mapping[str, Any], env: Mapping[str, int] | None = None, reshape=np.reshape) -> dict:
        """{spec tensor name: array in the spec's shape} from the region's arrays by the region's names."""
        return self.binding.arrays(_ByUser(arrays, self.names.to_user), env, reshape)


class _ByUser(Mapping):
    """The region's arrays looked up by canonical name."""

    def __init__(self, arrays: Mapping[str, Any], to_user: Mapping[str, str]):
        self.arrays, self.to_user = arrays, to_user

    def __getitem__(self, name: str) -> Any:
        return self.arrays[self.to_user.get(name, name)]

    def __iter__(self) -> Iterator[str]:
        back = {u: c for c, u in self.to_user.items()}
        return (back.get(u, u) for u in self.arrays)

    def __len__(self) -> int:
        return len(self.arrays)


def bind_shared(region: Region) -> tuple[KernelKind, Shared]:
    """:func:`bind` of the region's canonical form, made once per distinct form: a repeated layer's kernels are
    bound (and so planned and rendered) once; a diagnostic names the region's own tensors."""
    canon, names = canonical(region)
    try:
        kind, b = _bind_canonical(canon)
    except PolysatError as e:
        raise names.told_error(e) from None
    return kind, Shared(b, names)


@lru_cache(maxsize=1024)
def _bind_canonical(canon: Region) -> tuple[KernelKind, Any]:
    return bind(canon)


def _gathers(region: Region) -> bool:
    return any(n.op == R.GATHER for let in region.lets for n in walk(let.expr))


def _candidates(region: Region) -> tuple:
    """The kinds to try on the region: all, or for a region that reads through run-time indices (a Gather: a
    non-affine read) those that do (``KernelKind.gathers``)."""
    return tuple(k for k in kinds() if k.gathers) if _gathers(region) else kinds()


def _first(region: Region, candidates) -> tuple:
    """((kind, binding) of the first of `candidates` that binds the region, or None; the reasons of the others)."""
    reasons = []
    forms = [r for r in (region, squeeze_units(region)) if r is not None]
    for k in candidates:  # kinds outermost: a tensor-core kind that takes the squeezed form beats SIMT as it is
        for r in forms:
            b = k.bind(r)
            if not isinstance(b, NoBind):
                return (k, b), reasons
            if r is region:
                reasons.append(b.reason)
    return None, reasons


def tensor_core_kind(region: Region) -> "str | None":
    """The name of the tensor-core kind :func:`bind` gives the region, or None when the SIMT kind (tried last)
    computes it; SIMT's binder is not run. The cost model prices a region's contractions on tensor cores
    exactly when this is not None (pricing/kernels.py ``as_emitted``), so the price follows this fixed
    order of preference, as the backend does (docs/DESIGN.md §Cost model)."""
    assert _PACKAGES[-1] == "simt"
    found = tensor_core_binding(region)
    return None if found is None else found[0].name


def tensor_core_binding(region: Region) -> "tuple[KernelKind, Any] | None":
    """(the tensor-core kind, its binding of the region's canonical form) as :func:`tensor_core_kind` finds them,
    or None."""
    if _gathers(region):
        return None  # only the SIMT kind reads through run-time indices
    return _tensor_core_binding(canonical(region)[0])


@lru_cache(maxsize=1024)
def _tensor_core_binding(canon: Region) -> "tuple[KernelKind, Any] | None":
    return _first(canon, kinds()[:-1])[0]
