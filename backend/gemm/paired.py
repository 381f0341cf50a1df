"""Two sibling GEMMs combined column by column in one epilogue (a gated MLP: ``SiLU(x @ W_gate) * (x @ W_up)``):
a region that yields ``f(y_0[m, j], y_1[m, j])`` with ``y_i = reduce(sum, k){ mul(cast(read A[m, k]),
cast(read B_i[k, j])) }`` binds as ONE GEMM over B = [B_0 | B_1] (``GemmSpec.b_pieces``) whose CTA tiles hold
column j of both pieces (``GemmSpec.pair``: the kernel interleaves the pieces inside each N tile), so the
epilogue computes ``C[m, j] = f(acc_0, acc_1)`` in registers and C is [M, W], never the [M, 2W] concatenation.

Region synthesis spells the rules' concatenation and its slices with Selects guarding column ranges of the
output axis; over the region's own [0, W) every such guard is decided (the other piece's branch is never
taken), so :func:`paired` first folds them (and the ``+ 0`` of the branch not taken), then finds exactly two
contractions reading one A the same way and each its own whole packed [K, W] B, and the rest as an
:mod:`..common.epilogue_fn` program of the two accumulators (``("v",)`` the first, ``("x", 0)`` the second).
Anything else is not a pair (the caller binds the region as it is).
"""
from __future__ import annotations

import dataclasses

from ...ir.dtypes import DType
from ...ir.expr import Expr
from ...ir.region import Buffer, Let, MemRef, R, Region, RNode
from ...ir.region import walk as rwalk
from ..common import epilogue_fn
from ..common.region_match import Lets, walk
from .concat import _operand_reads, rebuild, a_dtype, fold, kept_axes, one_matrix, same_a


def paired(r: Region) -> "tuple[Region, tuple, tuple] | None":
    """(the region as one contraction over a virtual B = [B_0 | B_1] writing a virtual [M, 2W] output,
    ((B_0, W), (B_1, W)), the pair program) when r is such a pair; None otherwise."""
    got = one_matrix(r)
    if got is None:
        return None
    lets, y, width = got
    if sum(n.op == R.REDUCE for let in r.lets for n in rwalk(let.expr)) < 2:
        return None  # most regions: no pair, and no fold to pay for
    m_ax, n_ax = y.axes
    top = fold(lets, lets.map[y.src], n_ax, 0, width)
    flat = Lets(dataclasses.replace(r, lets=()))
    reds: list[RNode] = []
    for n in walk(flat, top):
        if n.op == R.REDUCE and n not in reds:
            reds.append(n)
    inner = {id(x) for n in reds for x in walk(flat, n.src[0]) if x.op == R.REDUCE}
    reds = [n for n in reds if id(n) not in inner]  # one inside A: a prologue's statistic (prologue.py)
    if len(reds) != 2 or any(n.op == R.SELECT and flat(n.src[0]).op == R.PRED for n in walk(flat, top)):
        return None
    reads = [_operand_reads(flat, a) for a in reds]
    if any(x is None for x in reads) or any(a.arg[0] != "sum" or len(a.arg[1]) != 1 or a.dtype != DType.fp32
                                            or tuple(a.axes) != (m_ax, n_ax) for a in reds):
        return None
    k0 = reds[0].arg[1][0]
    a0 = reads[0][0]
    bs = []
    for acc, (a, b) in zip(reds, reads):
        ren = {acc.arg[1][0]: Expr.var(k0)}
        if not same_a(flat, a, a0, acc.arg[1][0], k0) or b.dtype != a_dtype(flat, a0):
            return None  # both read the same A, the same way, in one input type
        t, index = b.arg
        if tuple(str(Expr.of(e).subs(ren)) for e in index) != (k0, n_ax):
            return None  # B_i read [k, j]: row-major [K, W], N contiguous
        buf = next((x for x in r.inputs if x.name == t), None)
        if buf is None or tuple(buf.memref.shape) != (r.axis_sizes[k0], width) or buf.memref.layout.kind != "row_major":
            return None
        bs.append(t)
    if bs[0] == bs[1]:
        return None
    steps = epilogue_fn.from_region(flat, top, None, lambda n: ("v",) if n == reds[0] else ("x", 0) if n == reds[1]
                                    else None)
    if steps is None or not any(("x", 0) in args for _, args in steps) or not any(("v",) in args for _, args in steps):
        return None
    virtual = "|".join(bs)
    b0 = reads[0][1]
    iters = tuple((a, 2 * width if a == n_ax else s) for a, s in r.iters)

    def swap(n: RNode) -> "RNode | None":
        return RNode(R.READ, (), (virtual, (Expr.var(k0), Expr.var(n_ax))), b0.dtype, n.axes) if n == b0 else None
    acc = rebuild(reds[0], flat, swap)
    out = r.outputs[0]
    layout = next(x.memref.layout for x in r.inputs if x.name == bs[0])
    inputs = tuple(x for x in r.inputs if x.name not in bs) + (
        Buffer(virtual, MemRef((r.axis_sizes[k0], 2 * width), b0.dtype, 128, True, layout), None, False),)
    wide = dataclasses.replace(out, memref=dataclasses.replace(out.memref, shape=(r.axis_sizes[m_ax], 2 * width)))
    one = dataclasses.replace(r, iters=iters, reduce_axes=kept_axes(r, k0, reds),
                              inputs=inputs, outputs=(wide,), lets=(Let(y.src, acc),))
    return one, ((bs[0], width), (bs[1], width)), steps
