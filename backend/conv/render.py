"""CUDA text of the implicit-GEMM conv and of conv + pool, from the MMA template family (`--dump=cu`).

``render_conv(spec, plan)`` fills ``templates/conv.cu.j2`` (the epilogue macro shared with gemm.cu.j2)
over the same skeleton header (polysat_gemm.cuh + polysat_wgmma.cuh) plus polysat_conv.cuh, inlined,
so the .cu stands alone. The conv window (Kh, Kw, stride, dilation, top/left pad) and the pool window
are template constants; N, C, H, W, Co, Ho, Wo, groups (and Hp, Wp) are launch arguments, so shapes
that share a plan share one cubin.

Kernel ABI, in order:
sm80: X, W, Y, epilogue tensors..., N, C, H, W, Co, Ho, Wo, groups [, Hp, Wp]
sm90: tmW (CUtensorMap of W as [Co, K] or [G, Cog, K], by value), X, Y, epilogue tensors..., the same ints
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping

from ..common.gpu_ir import check_tokens
from ..common.layouts import sm90_operand
from ..common.names import c_ident
from ..common.render import (CTYPE, KernelSource, Param, TmaOperand, cbool, epilogue_args, jinja_env, skeleton_header,
                             specialisation_hash, template_text)
from ..conv_pool.spec import ConvPoolSpec
from .gpu_ir import build_gpu_ir
from .plan import SM90_CHUNK, SM90_REGS, ConvPlan
from .spec import ConvSpec

SIZE_PARAMS = ("N", "C", "H", "W_", "Co", "Ho", "Wo", "groups")


@lru_cache(maxsize=None)
def conv_header() -> str:
    return skeleton_header() + "\n" + template_text("polysat_conv.cuh")


@dataclass(frozen=True)
class ConvKernelSource(KernelSource):
    """A conv kernel: the grid comes from the conv's sizes (tiles of N*Ho*Wo, or of pool tiles, x Cog x groups)."""

    def grid(self, sizes: Mapping[str, int], sms: int) -> tuple[int, int, int]:
        """sm80 (ceil(Cout/groups/bn), ceil(N*Ho*Wo/bm) or pool tiles, groups); sm90 (min(that product, SMs), 1, 1)."""
        bm, bn, _ = self.plan.tile
        tm, tn = math.ceil(sizes["rows"] / bm) if "rows" in sizes else sizes["tiles_m"], math.ceil(sizes["cog"] / bn)
        if self.skeleton == "sm90":
            return (max(1, min(tm * tn * sizes["groups"], sms)), 1, 1)
        return (tn, tm, sizes["groups"])


def launch_sizes(spec: "ConvSpec | ConvPoolSpec", plan: ConvPlan) -> dict[str, int]:
    """The runtime ints of the ABI by parameter name, and the grid's tile counts."""
    conv = spec.conv if isinstance(spec, ConvPoolSpec) else spec
    ho, wo = spec.conv_hw if isinstance(spec, ConvPoolSpec) else conv.out_hw
    out = {"N": conv.n, "C": conv.cin, "H": conv.h, "W_": conv.w, "Co": conv.co, "Ho": ho, "Wo": wo,
           "groups": conv.groups, "cog": conv.cog, "k": conv.gemm_sizes()["k"]}
    if isinstance(spec, ConvPoolSpec):
        hp, wp = spec.out_hw
        out.update(Hp=hp, Wp=wp, tiles_m=conv.n * math.ceil(hp / plan.pool_tile[0]) * math.ceil(wp / plan.pool_tile[1]))
    else:
        out["rows"] = conv.n * ho * wo
    return out


def conv_kernel_name(spec, plan: ConvPlan) -> str:
    """Named by the specialisation (window, dtypes, epilogue, plan), not by the runtime sizes."""
    conv = spec.conv if isinstance(spec, ConvPoolSpec) else spec
    key = {"window": conv.window(), "grouped": conv.groups > 1, "in": conv.in_dtype.value, "out": conv.out_dtype.value,
           "epilogue": [op.to_json() for op in conv.epilogue],
           "pool": [spec.kernel, spec.stride, spec.pad, spec.dilation] if isinstance(spec, ConvPoolSpec) else None}
    kind = "convpool" if isinstance(spec, ConvPoolSpec) else "conv"
    return c_ident(conv.name, "polysat_")[:44] + f"_{kind}_{plan.skeleton}_{specialisation_hash(key, plan)}"


def render(spec: "ConvSpec | ConvPoolSpec", plan: ConvPlan) -> ConvKernelSource:
    conv = spec.conv if isinstance(spec, ConvPoolSpec) else spec
    pooled = isinstance(spec, ConvPoolSpec)
    ir = build_gpu_ir(spec, plan)
    check_tokens(ir)
    kname = conv_kernel_name(spec, plan)
    idents, tensors, ops = epilogue_args(conv.epilogue)
    bm, bn, bk = plan.tile
    layouts = []
    if plan.skeleton == "sm90":
        layouts = [("la", sm90_operand(False, bm)), ("lb", sm90_operand(True, bn))]
    pool = None
    if pooled:
        pool = (*plan.pool_tile, *spec.kernel, *spec.stride, *spec.dilation, *spec.pad)
    summary = (f"{'MaxPool(' if pooled else ''}{'+'.join(o['kind'] for o in ops) or 'id'}(conv{conv.kh}x{conv.kw} "
               f"s{conv.stride} d{conv.dilation} g{conv.groups}){')' if pooled else ''} as implicit GEMM, "
               f"{conv.in_dtype.value}->{conv.out_dtype.value}, NCHW")
    src = jinja_env().get_template("conv.cu.j2").render(
        kernel=kname, summary=summary, skeleton=plan.skeleton, plan_key=plan.key(), header=conv_header(),
        in_t=CTYPE[conv.in_dtype], out_t=CTYPE[conv.out_dtype], tensors=tensors, ops=ops, threads=plan.threads,
        bm=bm, bn=bn, bk=bk, wm=plan.warps[0], wn=plan.warps[1], stages=plan.stages, consumers=plan.warps[0],
        vec_b=plan.gemm.vec_b, win=conv.window(), pool=pool, layouts=layouts, w_rank3=cbool(conv.groups > 1),
        regs=SM90_REGS, chunk=SM90_CHUNK)
    if plan.skeleton == "sm90":
        params = [Param("tmW", "tmap", "W"), Param("X", "ptr", "X")]
    else:
        params = [Param("X", "ptr", "X"), Param("W", "ptr", "W")]
    params.append(Param("Y", "ptr", "C"))
    params += [Param(ident, "ptr", n) for n, ident in idents.items()]
    params += [Param(x, "i32", x) for x in SIZE_PARAMS + (("Hp", "Wp") if pooled else ())]
    tma: tuple[TmaOperand, ...] = ()
    if plan.skeleton == "sm90":
        lb = layouts[1][1]
        dims, box = ("k", "cog"), lb.box
        if conv.groups > 1:
            dims, box = dims + ("groups",), box + (1,)
        tma = (TmaOperand("B", dims, box),)
    return ConvKernelSource(kname, plan.arch, plan.skeleton, src, plan.threads, plan.smem_bytes, tuple(params), tma,
                            plan, spec)
