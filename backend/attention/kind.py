"""The attention kind's entry in the kernel-kind table (:mod:`..kinds`)."""
from __future__ import annotations

from typing import Mapping

from ...ir.region import Region
from ..common.region_match import NoBind
from ..kinds import KernelKind
from .bind import bind as match
from .gpu_ir import build_gpu_ir
from .plan import ALGOS, AttentionSearchResult, p_dtype_reason, search
from .render import render
from .reference import reference
from .spec import AttentionSpec

ALGO_OF_PASSES = {1: "online_softmax", 2: "streaming_softmax_2pass"}


def bind(region: Region):
    """The attention binding of the region, or NoBind: not attention, a walk count the template does not make,
    or P rounded to another type than V."""
    binding = match(region)
    if isinstance(binding, NoBind):
        return binding
    spec = binding.spec
    if spec.passes not in ALGO_OF_PASSES:
        return NoBind(f"its streamed softmax walks the keys {spec.passes} times; the template makes 1 or 2 passes")
    why = p_dtype_reason(spec)
    return binding if why is None else NoBind(why)


def region_algo(spec: AttentionSpec) -> str | None:
    """The algorithm the spec's region prescribes (None: the spec did not come from a region)."""
    return ALGO_OF_PASSES.get(spec.passes)


def _search(spec: AttentionSpec, arch: str = "sm90", env: Mapping[str, int] | None = None, hints=None,
            **kw) -> AttentionSearchResult:
    algo = region_algo(spec)
    if algo is not None and "algos" not in kw and not (hints or {}).get("algo_choice"):
        kw["algos"] = (algo,)
    return search(spec, arch, env, hints, **kw)


def _launch(spec, tensors, env, out) -> None:
    from .launch import run
    run(spec, tensors, env, out=out, algo=region_algo(spec))


def _source(spec, env, arch: str):
    from . import launch
    return launch._plan_and_source(launch.concrete_spec(spec, env), arch, region_algo(spec))


def _prepare(spec, tensors, env):
    from .launch import prepare
    return prepare(spec, tensors, env, algo=region_algo(spec))


assert set(ALGO_OF_PASSES.values()) == set(ALGOS)

KIND = KernelKind("attention", bind=bind, search=_search, render=render, gpu_ir=build_gpu_ir,
                  launch=_launch, reference=reference, source=_source, prepare=_prepare)
