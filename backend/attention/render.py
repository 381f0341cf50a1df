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
from ...ir.dtypes import DType
from ..common import epilogue_fn
from .gpu_ir import build_gpu_ir
from .prologue import c_functor
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
                store_p: bool, parts: "dict | None" = None) -> str:
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
        q_regs=cbool(plan.q_regs), parts=parts,
        cols=_ints(_cols(spec, 3)) + f", {out_ld(spec)}LL", out_ld=f"{out_ld(spec)}LL", qk_cols=_ints(_cols(spec, 2)))


def _cols(spec, n: int) -> tuple:
    """The (offset, ld, head stride) of the spec's first n tensors; ld 0 (packed) when it has none."""
    return spec.cols[:n] if spec.cols else ((0, 0, 0),) * n


def _ints(cols: tuple) -> str:
    return ", ".join(f"{x}LL" for c in cols for x in c)


def out_ld(spec) -> int:
    """O's row stride for the kernel: 0 (packed) or H*dv (the heads interleaved; attention only)."""
    return spec.cols[3][1] if len(spec.cols) > 3 else 0


def operand_parts(spec: AttentionSpec, kname: str) -> dict:
    """The C text of the spec's Q/K prologues, score program and mask (:mod:`.prologue`; structs the sm80
    skeleton takes as template arguments, ``polysat::attn::NoPro`` / ``NoFn`` / ``NoMask`` when absent) and the
    extra kernel parameters (``X0, X1, ..``: ``spec.extra_inputs``)."""
    ident = {spec.q: "Q", spec.k: "K", spec.v: "V", **{t: f"X{i}" for i, t in enumerate(spec.extra_inputs)}}
    dts = spec.dtypes()
    structs, types, objs = [], {}, {}
    for role, p in (("qp", spec.q_pro), ("kp", spec.k_pro)):
        if p is None:
            types[role], objs[role] = "polysat::attn::NoPro", "polysat::attn::NoPro{}"
            continue
        structs.append(c_functor(p, f"{kname}_{role}", spec.in_dtype))
        types[role] = f"{kname}_{role}"
        objs[role] = f"{kname}_{role}{{{', '.join(ident[t] for t in p.tensors)}}}"
    if spec.fn:
        body = "\n".join("    " + x for x in epilogue_fn.c_lines(spec.fn, "v"))
        structs.append(f"struct {kname}_fn {{\n  static constexpr bool on = true;\n  __device__ __forceinline__ static "
                       f"float f(float v) {{\n  {{\n{body}\n  }}\n    return v;\n  }}\n}};")
    types["fn"] = f"{kname}_fn" if spec.fn else "polysat::attn::NoFn"
    if spec.mask is not None:
        at = f"(long long)i * {spec.mask.ld}LL + {spec.mask.col} + j" if spec.mask.role == "mk" else "j"
        structs.append(f"struct {kname}_mask {{\n  static constexpr bool on = true;\n  const unsigned char* __restrict__ t;\n"
                       f"  __device__ __forceinline__ bool keep(int i, int j) const {{ (void)i; return t[{at}] != 0; }}\n}};")
        types["mk"], objs["mk"] = f"{kname}_mask", f"{kname}_mask{{{ident[spec.mask.tensor]}}}"
    else:
        types["mk"], objs["mk"] = "polysat::attn::NoMask", "polysat::attn::NoMask{}"
    extra = [(f"X{i}", "const unsigned char*" if dts[t] == DType.bool else f"const {CTYPE[dts[t]]}*", t)
             for i, t in enumerate(spec.extra_inputs)]
    return {"structs": "\n".join(structs), "types": types, "objs": objs, "extra": extra, "kv_rep": spec.kv_rep,
            "on": bool(spec.q_pro or spec.k_pro or spec.fn or spec.mask is not None or spec.kv_rep != 1)}


def render(spec: AttentionSpec, plan: AttentionPlan) -> AttentionKernelSource:
    kname = kernel_name(spec, plan)
    bm, bn, d = plan.tile
    summary = (f"O[{'batch,' if spec.batch else ''}M,Dv] = softmax({'causal ' if spec.causal else ''}"
               f"{spec.scale:g} * Q K^T) V, D={spec.d} Dv={spec.dv}, {spec.in_dtype.value}->{spec.out_dtype.value}")
    parts = operand_parts(spec, kname)
    if parts["on"]:
        summary += (", with" + (" Q/K prologues" if spec.q_pro or spec.k_pro else "") + (" a score program" if spec.fn
                    else "") + (" a mask tensor" if spec.mask is not None else ""))
    src = render_text(spec, plan, kname, summary, spec.out_dtype, dv=spec.dv, two_pass=plan.two_pass, store_p=False,
                      parts=parts)
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
    params += [Param(x, "ptr", t) for x, _, t in parts["extra"]]
    params += [Param("O", "ptr", "O"), Param("M", "i32", "M"), Param("N", "i32", "N"), Param("batch", "i32", "batch")]
    return AttentionKernelSource(kname, plan.arch, plan.skeleton, src, plan.threads, plan.smem_bytes, tuple(params),
                                 tma, plan, spec)
