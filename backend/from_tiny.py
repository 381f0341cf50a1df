"""Recognise a whole Tiny IR program that is one GEMM-family kernel and describe it as a GemmSpec.

This is the bridge the backend offers before regions come out of the e-graph: the C-CON1 form of a
contraction (seed 000 §6.3.1, seed 001 §1) -- ``REDUCE(SUM, last axis, fp32)`` of ``MUL`` of two
movement chains (RESHAPE that only adds/drops size-1 axes, PERMUTE, EXPAND) around one widening CAST
of an INPUT --
followed by a chain of epilogue ops on the accumulator: ADD of a broadcast vector (bias along n or
m) or of a same-shape input (residual), MUL by a scalar CONST (scale), RELU / MAX(x, 0), the
frontend's sigmoid and silu, CAST to a 16-bit type and back (cast), and a final CAST (output dtype).
Anything else returns None (the program is not one GEMM-family kernel).
"""
from __future__ import annotations

import math
import re

from ..ir.dtypes import DType
from ..ir.tiny import Ops, Program, UOp
from .gemm_spec import EpilogueOp, GemmSpec

_SYMBOL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
LOG2E = 1.0 / math.log(2.0)


class _NoMatch(Exception):
    pass


def _need(cond: bool) -> None:
    if not cond:
        raise _NoMatch


def _size(d):
    if isinstance(d, int):
        return d
    text = str(d)
    _need(bool(_SYMBOL.match(text)))
    return text


def _const(p: Program, n: UOp) -> float | None:
    """The scalar value of a CONST (possibly broadcast by movement ops), else None."""
    while n.op in (Ops.RESHAPE, Ops.EXPAND):
        n = p[n.src[0]]
    if n.op == Ops.CONST and not isinstance(n.arg["value"], (list, tuple)):
        return float(n.arg["value"])
    return None


def _labels_to_input(p: Program, n: UOp, labels: list) -> tuple[UOp, list]:
    """Follow a movement chain down to its INPUT, carrying axis labels (None = broadcast axis)."""
    while True:
        if n.op == Ops.INPUT:
            return n, labels
        src = p[n.src[0]]
        if n.op == Ops.CAST:  # the one widening cast of the operand (movement may sit on either side)
            _need(n.dtype == DType.fp32 and src.dtype in (DType.fp16, DType.bf16))
            n = src
        elif n.op == Ops.EXPAND:
            labels = [lab if s == d else None for lab, s, d in zip(labels, src.shape, n.shape, strict=True)]
            n = src
        elif n.op == Ops.PERMUTE:
            perm = n.arg["perm"]
            new = [None] * len(perm)
            for i, pi in enumerate(perm):
                new[pi] = labels[i]
            labels, n = new, src
        elif n.op == Ops.RESHAPE:  # only size-1 axes may appear or disappear
            keep_out = [(lab, d) for lab, d in zip(labels, n.shape, strict=True) if d != 1]
            keep_in = [d for d in src.shape if d != 1]
            _need([d for _, d in keep_out] == keep_in)
            it = iter(lab for lab, _ in keep_out)
            labels = [None if d == 1 else next(it) for d in src.shape]
            n = src
        else:
            raise _NoMatch


def _is_sigmoid_of(p: Program, n: UOp, x: UOp) -> bool:
    """RECIPROCAL(ADD(EXP2(MUL(x, -log2 e)), 1)) -- the frontend's sigmoid."""
    try:
        _need(n.op == Ops.RECIPROCAL)
        add = p[n.src[0]]
        _need(add.op == Ops.ADD)
        e, one = (p[s] for s in add.src)
        if e.op != Ops.EXP2:
            e, one = one, e
        _need(e.op == Ops.EXP2 and _const(p, one) == 1.0)
        mul = p[e.src[0]]
        _need(mul.op == Ops.MUL)
        a, c = (p[s] for s in mul.src)
        if a.id != x.id:
            a, c = c, a
        _need(a.id == x.id and _const(p, c) is not None and abs(_const(p, c) + LOG2E) < 1e-6)
        return True
    except _NoMatch:
        return False


def _reaches(p: Program, n: UOp, target: str) -> bool:
    stack, seen = [n.id], set()
    while stack:
        i = stack.pop()
        if i == target:
            return True
        if i not in seen:
            seen.add(i)
            stack.extend(p[i].src)
    return False


def match_gemm(program: Program, name: str = "gemm") -> GemmSpec | None:
    """The GemmSpec computing the program's single output, or None if it is not one GEMM kernel."""
    try:
        return _match(program, name)
    except (_NoMatch, KeyError, StopIteration):
        return None


def _match(p: Program, name: str) -> GemmSpec:
    _need(len(p.outputs) == 1)
    out_name, out_id = p.outputs[0]
    top = p[out_id]
    out_dtype = top.dtype
    _need(out_dtype in (DType.fp16, DType.bf16, DType.fp32))
    reduce = next(n for n in p.nodes if n.op == Ops.REDUCE)
    _need(reduce.arg["op"] == "SUM" and reduce.dtype == DType.fp32 and tuple(reduce.arg["axes"]) == (p[reduce.src[0]].ndim - 1,))
    _need(len(reduce.shape) >= 2)
    # ---- epilogue, from the output down to the REDUCE ----
    ops: list[EpilogueOp] = []
    n = top
    if n.op == Ops.CAST and p[n.src[0]].dtype == DType.fp32:
        n = p[n.src[0]]
    while n.id != reduce.id:
        _need(n.dtype == DType.fp32 and n.shape == reduce.shape)
        srcs = [p[s] for s in n.src]
        if n.op == Ops.RELU:
            ops.append(EpilogueOp("relu"))
            n = srcs[0]
        elif n.op == Ops.MAX and any(_const(p, s) == 0.0 for s in srcs):
            ops.append(EpilogueOp("relu"))
            n = next(s for s in srcs if _const(p, s) != 0.0)
        elif n.op == Ops.MUL and any(_const(p, s) is not None for s in srcs) and not all(_const(p, s) is not None for s in srcs):
            c = next(s for s in srcs if _const(p, s) is not None)
            ops.append(EpilogueOp("scale", value=_const(p, c)))
            n = next(s for s in srcs if s.id != c.id)
        elif n.op == Ops.MUL and any(_is_sigmoid_of(p, a, b) for a, b in (srcs, srcs[::-1])):
            x = srcs[0] if _is_sigmoid_of(p, srcs[1], srcs[0]) else srcs[1]
            ops.append(EpilogueOp("silu"))
            n = x
        elif n.op == Ops.RECIPROCAL and _is_sigmoid_of(p, n, _sigmoid_arg(p, n)):
            ops.append(EpilogueOp("sigmoid"))
            n = _sigmoid_arg(p, n)
        elif n.op == Ops.CAST and srcs[0].op == Ops.CAST and srcs[0].dtype in (DType.fp16, DType.bf16):
            ops.append(EpilogueOp("cast", dtype=srcs[0].dtype))
            n = p[srcs[0].src[0]]
        elif n.op == Ops.ADD:
            main = [s for s in srcs if _reaches(p, s, reduce.id)]
            _need(len(main) == 1)
            other = next(s for s in srcs if s.id != main[0].id)
            ops.append(_addend(p, other, reduce))
            n = main[0]
        else:
            raise _NoMatch
    ops.reverse()
    # ---- the contraction ----
    mul = p[reduce.src[0]]
    _need(mul.op == Ops.MUL and mul.dtype == DType.fp32)
    nb = mul.ndim - 3
    labels = [f"b{i}" for i in range(nb)] + ["m", "n", "k"]
    x, y = (_labels_to_input(p, p[s], list(labels)) for s in mul.src)
    (a_in, a_lab), (b_in, b_lab) = (x, y) if "m" in x[1] else (y, x)
    _need("m" in a_lab and "k" in a_lab and "n" not in a_lab and "n" in b_lab and "k" in b_lab and "m" not in b_lab)
    _need(a_in.dtype == b_in.dtype and a_in.dtype in (DType.fp16, DType.bf16) and a_in.id != b_in.id)
    batch_labels = labels[:nb]

    def layout(lab: list, mn: str, row: tuple) -> tuple[str, bool]:
        core = [x for x in lab if x is not None and not x.startswith("b")]
        bl = [x for x in lab if x is not None and x.startswith("b")]
        _need(None not in lab and bl in ([], batch_labels) and lab[:len(bl)] == bl)
        _need(sorted(core) == sorted(row))
        return ("row" if core == list(row) else "col"), not bl

    a_layout, a_bcast = layout(a_lab, "m", ("m", "k"))
    b_layout, b_bcast = layout(b_lab, "n", ("k", "n"))
    _need(not (a_bcast and b_bcast) or nb == 0)
    m, nn, k = (_size(d) for d in mul.shape[-3:])
    batch = tuple(_size(d) for d in mul.shape[:nb])
    return GemmSpec(name, m, nn, k, batch=batch, in_dtype=a_in.dtype, out_dtype=out_dtype, a_layout=a_layout,
                    b_layout=b_layout, a_broadcast=bool(nb) and a_bcast, b_broadcast=bool(nb) and b_bcast,
                    epilogue=tuple(ops), a=a_in.arg["tensor_id"], b=b_in.arg["tensor_id"], c=out_name)


def _sigmoid_arg(p: Program, n: UOp) -> UOp:
    add = p[n.src[0]]
    _need(add.op == Ops.ADD)
    e = next(p[s] for s in add.src if p[s].op == Ops.EXP2)
    mul = p[e.src[0]]
    return next(p[s] for s in mul.src if _const(p, p[s]) is None)


def _addend(p: Program, other: UOp, reduce: UOp) -> EpilogueOp:
    nd = len(reduce.shape)
    labels = [f"b{i}" for i in range(nd - 2)] + ["m", "n"]
    inp, lab = _labels_to_input(p, other, labels)
    _need(inp.dtype in (DType.fp16, DType.bf16, DType.fp32))
    present = [x for x in lab if x is not None]
    tid = inp.arg["tensor_id"]
    if present == ["n"]:
        return EpilogueOp("bias", tid, "n", inp.dtype)
    if present == ["m"]:
        return EpilogueOp("bias", tid, "m", inp.dtype)
    _need(lab == labels)
    return EpilogueOp("residual", tid, dtype=inp.dtype)
