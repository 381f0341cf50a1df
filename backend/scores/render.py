"""CUDA text of one softmax_scores kernel (`--dump=cu`): ``templates/attention.cu.j2`` in its ``store_p``
branch, which instantiates ``scores_sm80`` (the sm80 flash skeleton in STORE_P mode, polysat_attention.cuh).

Kernel ABI (``AttentionKernelSource.params``, in order): Q, K, P (device pointers), M, N, batch (i32).
Grid: one CTA per (batch entry, BLOCK_M query rows), ``tiles_m * batch`` CTAs along x.
"""
from __future__ import annotations

from ...ir.diagnostics import fail
from ..attention.render import AttentionKernelSource, kernel_name as attention_kernel_name, render_text
from ..common.render import Param
from .plan import ScoresPlan
from .spec import ScoresSpec


def kernel_name(spec: ScoresSpec, plan: ScoresPlan) -> str:
    """Named by every specialisation parameter, not by the sizes (runtime arguments)."""
    return attention_kernel_name(spec, plan, "polysat_scores_")


def render(spec: ScoresSpec, plan: ScoresPlan) -> AttentionKernelSource:
    if plan.skeleton != "sm80" or not plan.store_p:
        fail("InternalError", f"softmax_scores {spec.name!r}", f"plan {plan.key()} is not an sm80 ScoresPlan")
    kname = kernel_name(spec, plan)
    summary = (f"P[{'batch,' if spec.batch else ''}M,N] = softmax({'causal ' if spec.causal else ''}"
               f"{spec.scale:g} * Q K^T), D={spec.d}, {spec.in_dtype.value}->{spec.p_dtype.value}")
    src = render_text(spec, plan, kname, summary, spec.p_dtype, dv=0, two_pass=True, store_p=True)
    params = (Param("Q", "ptr", "Q"), Param("K", "ptr", "K"), Param("P", "ptr", "P"), Param("M", "i32", "M"),
              Param("N", "i32", "N"), Param("batch", "i32", "batch"))
    return AttentionKernelSource(kname, plan.arch, plan.skeleton, src, plan.threads, plan.smem_bytes, params, (),
                                 plan, spec)
