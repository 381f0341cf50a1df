"""CUDA text of one flash-attention kernel from the jinja2 template (`--dump=cu`).

``render(spec, plan)`` fills ``templates/attention.cu.j2`` with the plan's parameters; the skeleton
is the hand-written ``polysat_attention.cuh`` (on top of ``polysat_gemm.cuh``'s primitives), inlined
so that every .cu stands alone and its hash covers everything it compiles. Arch and tail are the
only branches of the skeleton; head dims, dtypes, causality, tile, ring depth and the softmax
algorithm are template arguments; the scale is a compile-time constant of the kernel.

Kernel ABI (``AttentionKernelSource.params``, in order):
  sm80: Q, K, V, O (device pointers), M, N, batch (i32)
  sm90: tmQ, tmK, tmV (CUtensorMap by value), O, M, N, batch
Grid: one CTA per (batch entry, BLOCK_M query rows), ``tiles_m * batch`` CTAs along x.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping

from ..common.gpu_ir import check_tokens
from ..common.names import c_ident
from ..common.render import (CTYPE, KernelSource, Param, TmaOperand, cbool, jinja_env, skeleton_header,
                             specialisation_hash, template_text)
from .gpu_ir import build_gpu_ir
from .plan import AttentionPlan
from .spec import AttentionSpec

LOG2E = 1.0 / math.log(2.0)


@dataclass(frozen=True)
class AttentionKernelSource(KernelSource):
    """A flash-attention kernel: the grid is one CTA per (batch entry, BLOCK_M query rows)."""
    plan: AttentionPlan
    spec: AttentionSpec

    def grid(self, sizes: Mapping[str, int], sms: int | None = None) -> tuple[int, int, int]:
        """(ceil(M/BLOCK_M) * batch, 1, 1): one CTA per batch entry and BLOCK_M query rows."""
        return (-(-sizes["m"] // self.plan.block_m) * sizes["batch"], 1, 1)


@lru_cache(maxsize=None)
def attention_header() -> str:
    """polysat_gemm.cuh (+ wgmma wrappers) and polysat_attention.cuh as one include-free text."""
    return skeleton_header() + "\n" + template_text("polysat_attention.cuh").replace('#include "polysat_gemm.cuh"\n', "")


def scale_constants(scale: float) -> tuple[int, float]:
    """(sign, c): scores enter exp2 as c * sign * s with c = |scale| * log2(e) (scale 0: sign 0, c = 1)."""
    if scale == 0.0:
        return 0, 1.0
    return (1 if scale > 0 else -1), abs(scale) * LOG2E


def kernel_name(spec: AttentionSpec, plan: AttentionPlan, prefix: str = "polysat_attn_") -> str:
    """Named by every specialisation parameter, not by the sizes (runtime arguments)."""
    key = {**spec.to_json(), "m": None, "n": None, "batch": len(spec.batch)}
    return c_ident(spec.name, prefix)[:48] + f"_{plan.skeleton}_{specialisation_hash(key, plan)}"


def render_text(spec, plan: AttentionPlan, kname: str, summary: str, out_dtype, *, dv: int, two_pass: bool,
                store_p: bool) -> str:
    """templates/attention.cu.j2 filled for spec (an AttentionSpec or a scores_spec.ScoresSpec) and plan,
    after the plan's GPU IR passed check_tokens."""
    check_tokens(build_gpu_ir(spec, plan))
    bm, bn, d = plan.tile
    sign, c = scale_constants(spec.scale)
    return jinja_env().get_template("attention.cu.j2").render(
        kernel=kname, summary=summary, skeleton=plan.skeleton, plan_key=plan.key(), algo=plan.algo,
        header=attention_header(), c_literal=f"{c:.9e}f", sign=sign, threads=plan.threads,
        in_t=CTYPE[spec.in_dtype], out_t=CTYPE[out_dtype], d=spec.d, dv=dv, bm=bm, bn=bn,
        stages=plan.stages, consumers=plan.warps[0], causal=cbool(spec.causal), two_pass=cbool(two_pass), store_p=store_p,
        q_regs=cbool(plan.q_regs),
        cols=_ints(_cols(spec, 3)) + f", {out_ld(spec)}LL", out_ld=f"{out_ld(spec)}LL", qk_cols=_ints(_cols(spec, 2)))


def _cols(spec, n: int) -> tuple:
    """The (offset, ld, head stride) of the spec's first n tensors; ld 0 (packed) when it has none."""
    return spec.cols[:n] if spec.cols else ((0, 0, 0),) * n


def _ints(cols: tuple) -> str:
    return ", ".join(f"{x}LL" for c in cols for x in c)


def out_ld(spec) -> int:
    """O's row stride for the kernel: 0 (packed) or H*dv (the heads interleaved; attention only)."""
    return spec.cols[3][1] if len(spec.cols) > 3 else 0


def render(spec: AttentionSpec, plan: AttentionPlan) -> AttentionKernelSource:
    kname = kernel_name(spec, plan)
    bm, bn, d = plan.tile
    summary = (f"O[{'batch,' if spec.batch else ''}M,Dv] = softmax({'causal ' if spec.causal else ''}"
               f"{spec.scale:g} * Q K^T) V, D={spec.d} Dv={spec.dv}, {spec.in_dtype.value}->{spec.out_dtype.value}")
    src = render_text(spec, plan, kname, summary, spec.out_dtype, dv=spec.dv, two_pass=plan.two_pass, store_p=False)
    if plan.skeleton == "sm90":
        params = [Param("tmQ", "tmap", "Q"), Param("tmK", "tmap", "K"), Param("tmV", "tmap", "V")]
        def window(k: int) -> dict:  # column windows: rows ld apart, heads hs, from an offset
            return {"strides": spec.cols[k][1:], "offset": spec.cols[k][0]} if spec.cols else {}
        tma = (TmaOperand("Q", ("d", "m", "batch"), (64, bm, 1), **window(0)),
               TmaOperand("K", ("d", "n", "batch"), (64, bn, 1), **window(1)),
               TmaOperand("V", ("dv", "n", "batch"), (64, bn, 1), **window(2)))
    else:
        params = [Param("Q", "ptr", "Q"), Param("K", "ptr", "K"), Param("V", "ptr", "V")]
        tma = ()
    params += [Param("O", "ptr", "O"), Param("M", "i32", "M"), Param("N", "i32", "N"), Param("batch", "i32", "batch")]
    return AttentionKernelSource(kname, plan.arch, plan.skeleton, src, plan.threads, plan.smem_bytes, tuple(params),
                                 tma, plan, spec)
