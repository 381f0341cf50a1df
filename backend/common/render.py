"""What every kind's renderer shares: the jinja2 environment over ``templates/``, the inlined skeleton
headers (every .cu stands alone, so its hash covers everything it compiles), the kernel ABI records
(:class:`Param`, :class:`TmaOperand`, :class:`KernelSource`), specialisation hashes for kernel names, the
C types of the element types, and the template arguments of an elementwise epilogue.
"""
from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

import jinja2

from ...ir.dtypes import DType
from . import epilogue_fn
from .names import unique_idents
from .spec import EpilogueOp, epilogue_tensors

TEMPLATES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "templates")
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
    strides: tuple[int, ...] = ()  # element strides of the dims after the innermost (default: packed)
    offset: int = 0                # elements from the tensor's start to the map's


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
    plan: Any       # the kind's plan
    spec: Any       # the kind's spec

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
def jinja_env() -> jinja2.Environment:
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
        elif op.kind == "fn":
            d.update(lines=epilogue_fn.c_lines(op.steps))
        ops.append(d)
    return idents, tensors, ops


def cbool(x: bool) -> str:
    """A C++ bool literal."""
    return "true" if x else "false"
