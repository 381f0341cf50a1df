"""CUDA text from the one jinja2 MMA template (seed 000 §9-§10 step 7, seed 001 §7; `--dump=cu`).

``render(spec, plan)`` fills ``templates/gemm.cu.j2`` with the plan's parameters and the epilogue op
list; the skeleton itself is the hand-written ``polysat_gemm.cuh`` (inlined, so every .cu stands
alone and its hash covers everything it compiles). Arch and tail are the template's only branches:
the skeleton (sm80 / sm90) and the vector widths the operands' alignment allows.

The kernel ABI (seed 000 §12) is ``KernelSource.params``, in order:
sm80: A, B, C, epilogue tensors..., M, N, K, batch, a_bstride, b_bstride (elements; 0 = broadcast)
sm90: tmA, tmB (CUtensorMap by value), C, epilogue tensors..., M, N, K, batch
"""
from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping

import jinja2

from ..ir.dtypes import DType
from .gemm_spec import EpilogueOp, GemmSpec, epilogue_tensors
from .gpu_ir import build_gpu_ir, check_tokens
from .layouts import sm90_operand
from .names import c_ident, unique_idents
from .plan import SchedulePlan

TEMPLATES = os.path.join(os.path.dirname(__file__), "templates")
CTYPE = {DType.fp16: "__half", DType.bf16: "__nv_bfloat16", DType.fp32: "float"}


@dataclass(frozen=True)
class Param:
    ident: str
    kind: str   # ptr | i32 | i64 | tmap
    role: str   # A, B, C, a tensor name, or a size / stride name


@dataclass(frozen=True)
class TmaOperand:
    """How the host encodes one operand's tensor map (cuTensorMapEncodeTiled), innermost dim first."""
    role: str                  # "A" | "B"
    dims: tuple[str, ...]      # size names, innermost first: e.g. ("k", "m", "batch")
    box: tuple[int, ...]       # elements per box, innermost first


@dataclass(frozen=True)
class KernelSource:
    name: str
    arch: str
    skeleton: str
    source: str
    threads: int
    smem_bytes: int
    params: tuple[Param, ...]
    tma: tuple[TmaOperand, ...]
    plan: SchedulePlan
    spec: GemmSpec

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.source.encode("utf-8")).hexdigest()

    def grid(self, sizes: Mapping[str, int], sms: int) -> tuple[int, int, int]:
        """sm80 (ceil(N/bn), ceil(M/bm), batch); sm90 (min(ceil(M/bm) * ceil(N/bn) * batch, SMs), 1, 1)."""
        bm, bn, _ = self.plan.tile
        tm, tn = math.ceil(sizes["m"] / bm), math.ceil(sizes["n"] / bn)
        if self.skeleton == "sm90":
            return (max(1, min(tm * tn * sizes["batch"], sms)), 1, 1)
        return (tn, tm, sizes["batch"])


@lru_cache(maxsize=None)
def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                              autoescape=False, keep_trailing_newline=True)


def template_text(name: str) -> str:
    """A header of templates/ without its ``#pragma once`` (the headers are inlined into one .cu)."""
    with open(os.path.join(TEMPLATES, name), encoding="utf-8") as f:
        return f.read().replace("#pragma once\n", "")


@lru_cache(maxsize=None)
def skeleton_header() -> str:
    return template_text("polysat_gemm.cuh").replace('#include "polysat_wgmma.cuh"\n', template_text("polysat_wgmma.cuh"))


def specialisation_hash(key: Mapping, plan) -> str:
    """10 hex digits of the specialisation key, the plan and its arch (the tail of a kernel's name)."""
    return hashlib.sha256(repr((key, plan.key(), plan.arch)).encode()).hexdigest()[:10]


def kernel_name(spec: GemmSpec, plan: SchedulePlan) -> str:
    """Named by every specialisation parameter, not by the sizes (runtime arguments): shapes that get
    the same plan share one kernel, and so one compiled cubin."""
    key = {**spec.to_json(), "m": None, "n": None, "k": None, "batch": len(spec.batch)}
    return c_ident(spec.name, "polysat_")[:48] + f"_{plan.skeleton}_{specialisation_hash(key, plan)}"


def epilogue_args(epilogue: tuple[EpilogueOp, ...]) -> tuple[dict[str, str], list[dict], list[dict]]:
    """The template arguments of an epilogue (templates/_epilogue.j2): ({tensor name: its C identifier}, the
    tensor parameters, the op list)."""
    tensor_names = epilogue_tensors(epilogue)
    idents = dict(zip(tensor_names, unique_idents(tensor_names, "t_"), strict=True))
    tensors = [{"ident": idents[op.tensor], "ctype": CTYPE[op.dtype]} for op in epilogue if op.tensor is not None]
    ops = []
    for op in epilogue:
        d = {"kind": op.kind}
        if op.kind == "bias":
            d.update(ident=idents[op.tensor], axis=op.axis)
        elif op.kind == "residual":
            d.update(ident=idents[op.tensor])
        elif op.kind == "scale":
            d.update(literal=f"{float(op.value):.9e}f")
        elif op.kind == "cast":
            d.update(ctype=CTYPE[op.dtype])
        ops.append(d)
    return idents, tensors, ops


def render(spec: GemmSpec, plan: SchedulePlan) -> KernelSource:
    ir = build_gpu_ir(spec, plan)
    check_tokens(ir)
    kname = kernel_name(spec, plan)
    idents, tensors, ops = epilogue_args(spec.epilogue)
    bm, bn, bk = plan.tile
    wm, wn = plan.warps
    a_rank3 = bool(spec.batch) and not spec.a_broadcast
    b_rank3 = bool(spec.batch) and not spec.b_broadcast
    summary = (f"C[{'batch,' if spec.batch else ''}M,N] = "
               f"{'+'.join(o['kind'] for o in ops) or 'id'}(A({spec.a_layout}) @ B({spec.b_layout})), "
               f"{spec.in_dtype.value}->{spec.out_dtype.value}")
    layouts = []
    if plan.skeleton == "sm90":
        layouts = [("la", sm90_operand(plan.a_kmajor, bm)), ("lb", sm90_operand(plan.b_kmajor, bn))]
    src = _env().get_template("gemm.cu.j2").render(layouts=layouts,
        kernel=kname, summary=summary, skeleton=plan.skeleton, plan_key=plan.key(), header=skeleton_header(),
        in_t=CTYPE[spec.in_dtype], out_t=CTYPE[spec.out_dtype], tensors=tensors, ops=ops, threads=plan.threads,
        bm=bm, bn=bn, bk=bk, wm=wm, wn=wn, stages=plan.stages, consumers=plan.warps[0],
        a_kmajor=_b(plan.a_kmajor), b_kmajor=_b(plan.b_kmajor), vec_a=plan.vec_a, vec_b=plan.vec_b,
        a_rank3=_b(a_rank3), b_rank3=_b(b_rank3))
    if plan.skeleton == "sm90":
        params = [Param("tmA", "tmap", "A"), Param("tmB", "tmap", "B")]
    else:
        params = [Param("A", "ptr", "A"), Param("B", "ptr", "B")]
    params.append(Param("C", "ptr", "C"))
    params += [Param(ident, "ptr", n) for n, ident in idents.items()]
    params += [Param(x, "i32", x) for x in ("M", "N", "K", "batch")]
    if plan.skeleton == "sm80":
        params += [Param("a_bstride", "i64", "a_bstride"), Param("b_bstride", "i64", "b_bstride")]
    tma: tuple[TmaOperand, ...] = ()
    if plan.skeleton == "sm90":
        tma = (_tma("A", layouts[0][1], "m", a_rank3), _tma("B", layouts[1][1], "n", b_rank3))
    return KernelSource(kname, plan.arch, plan.skeleton, src, plan.threads, plan.smem_bytes, tuple(params), tma, plan, spec)


def _tma(role: str, lay, mn: str, rank3: bool) -> TmaOperand:
    dims = ("k", mn) if lay.kmajor else (mn, "k")
    box = lay.box
    if rank3:
        dims, box = dims + ("batch",), box + (1,)
    return TmaOperand(role, dims, box)


def _b(x: bool) -> str:
    return "true" if x else "false"
