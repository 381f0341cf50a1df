"""The attention kernel kind: QK^T -> row softmax -> PV in one flash-style kernel (issue 7, seed 000 §15.3).

Regions are recognised by ``attention_from_region.attention_binding``; P must be rounded to the inputs'
type (the PV MMA takes P and V in one type).

A bound region also fixes the softmax algorithm: its ``online_softmax_sum`` makes one walk over the keys
(P rounded at the running max: ``online_softmax``) or two (P rounded after the division by the row sum:
``streaming_softmax_2pass``), and the kernel must round P where the region does: the spec carries the
region's ``passes`` and the kind's search ranks only that algorithm; a spec with ``passes=None`` (made
directly, not from a region) gets both algorithms, online first.
"""
from __future__ import annotations

from typing import Mapping

from ..ir.diagnostics import fail
from ..ir.region import Region
from .attention_codegen import render
from .attention_from_region import attention_binding
from .attention_gpu_ir import build_attention_gpu_ir
from .attention_plan import ALGOS
from .attention_search import AttentionSearchResult, check_p_dtype, search
from .attention_spec import AttentionSpec, attention_reference
from .kinds import KernelKind

ALGO_OF_PASSES = {1: "online_softmax", 2: "streaming_softmax_2pass"}


def _bind(region: Region):
    binding = attention_binding(region)
    spec = binding.spec
    if spec.passes not in ALGO_OF_PASSES:
        fail("NoKernelTemplate", f"region {region.name}",
             f"its streamed softmax walks the keys {spec.passes} times; the template makes 1 or 2 passes")
    check_p_dtype(spec, f"region {region.name}")
    return binding


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
    from .attention_runtime import run_attention
    run_attention(spec, tensors, env, out=out, algo=region_algo(spec))


assert set(ALGO_OF_PASSES.values()) == set(ALGOS)

KIND = KernelKind("attention", bind=_bind, search=_search, render=render, gpu_ir=build_attention_gpu_ir,
                  launch=_launch, reference=attention_reference)
