"""Sibling GEMMs merged into one (rules/siblings.egg): a region that yields the concatenation along N
of contractions reading one A binds as ONE GEMM whose B is the concatenation of their B operands
(``GemmSpec.b_pieces``).

Region synthesis spells the rules' term ``concat_N(y_1, .., y_p)`` as a sum (an ``add`` tree) of
pieces, each a Select guarding the column range ``[lo, hi)`` of its piece (possibly under casts and
nested Selects) around ``y_j = reduce(sum, k){ mul(cast(read A[m, k]), cast(read B_j[k, n - lo])) }``.
:func:`merged` checks that the ranges tile ``[0, N)`` in order, that every piece reads the same A the
same way and its own B shifted by exactly its ``lo``, and rewrites the region as one contraction over
a virtual B read at ``[k, n]``; the GEMM binder then checks it like any region (layouts, epilogue) and
the pieces become ``b_pieces``. Anything else is not a concatenation (the caller binds the region as
it is).
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from ...ir import trampoline
from ...ir.dtypes import DType
from ...ir.expr import Expr
from ...ir.region import Buffer, Let, MemRef, R, Region, RNode
from ..common.region_match import Lets, same_value, walk


@dataclasses.dataclass(frozen=True)
class Piece:
    lo: int
    hi: int
    acc: RNode  # the piece's REDUCE


def _terms(lets: Lets, n: RNode) -> list:
    """The summands of a tree of adds, left to right (from a stack: a sum of many is a deep tree)."""
    out, stack = [], [n]
    while stack:
        n = lets(stack.pop())
        if n.op == R.BINARY and n.arg == "add":
            stack.extend(reversed(n.src))
        else:
            out.append(n)
    return out


def _piece(lets: Lets, n: RNode, n_ax: str, width: int, out: DType) -> "Piece | None":
    """The column range and contraction of one summand: casts to the output type and Selects on n_ax
    around a REDUCE."""
    lo, hi = 0, width
    while True:
        n = lets(n)
        if n.op == R.UNARY and n.arg == "cast" and n.dtype == out:
            n = n.src[0]
        elif n.op == R.SELECT:
            pred, then, other = n.src
            if not (lets(other).op == R.CONST and lets(other).arg == 0) or lets(pred).op != R.PRED:
                return None
            for e in lets(pred).arg:
                if e.variables() != {n_ax} or e.coeff(n_ax) not in (1, -1):
                    return None
                c = e.subs({n_ax: 0}).constant
                if e.coeff(n_ax) == 1:  # n + c >= 0
                    lo = max(lo, -c)
                else:  # c - n >= 0
                    hi = min(hi, c + 1)
            n = then
        elif n.op == R.REDUCE:
            return Piece(lo, hi, n) if lo < hi else None
        else:
            return None


def rebuild(n: RNode, lets: Lets, f: Callable[[RNode], "RNode | None"]) -> RNode:
    return trampoline.run(_rebuilt(n, lets, f))


def _rebuilt(n: RNode, lets: Lets, f: Callable[[RNode], "RNode | None"]):
    n = lets(n)
    got = f(n)
    if got is not None:
        return got
    src = []
    for s in n.src:  # a generator walk (ir/trampoline.py)
        src.append((yield _rebuilt(s, lets, f)))
    return dataclasses.replace(n, src=tuple(src))


def _decided(lets: Lets, pred: RNode, n_ax: str, lo: int, hi: int) -> "bool | None":
    """Whether every guard of pred (affine in n_ax alone, ``e >= 0``) holds on all of [lo, hi) (True), on none
    of it (False), or either (None)."""
    always = True
    for e in lets(pred).arg:
        if not e.variables() <= {n_ax}:
            return None
        a, b = (Expr.of(e).subs({n_ax: v}) for v in (lo, hi - 1))
        if not (a.is_const and b.is_const):
            return None
        if a.constant < 0 and b.constant < 0:  # affine: its extremes are at the ends
            return False
        always = always and a.constant >= 0 and b.constant >= 0
    return True if always else None


def _zero(n: RNode) -> bool:
    return n.op == R.CONST and n.arg == 0 or (n.op == R.UNARY and n.arg == "cast" and _zero(n.src[0]))


def fold(lets: Lets, top: RNode, n_ax: str, lo: int, hi: int) -> RNode:
    """top with every Select whose guard is decided on columns [lo, hi) replaced by its branch, and ``x + 0`` by x
    (a piece's own guards, over its cone: region synthesis guards every value of a piece by its column range)."""
    def f(n: RNode) -> "RNode | None":
        if n.op == R.SELECT and lets(n.src[0]).op == R.PRED:
            got = _decided(lets, n.src[0], n_ax, lo, hi)
            if got is not None:
                return rebuild(n.src[1] if got else n.src[2], lets, f)
        if n.op == R.BINARY and n.arg == "add":
            a, b = (rebuild(s, lets, f) for s in n.src)
            if _zero(b) and a.dtype == n.dtype:
                return a
            if _zero(a) and b.dtype == n.dtype:
                return b
            return dataclasses.replace(n, src=(a, b))
        return None
    return rebuild(top, lets, f)


def uses_axis(lets: Lets, n: RNode, ax: str) -> bool:
    """Whether the value n depends on axis ax: a read or a guard below it uses ax (a broadcast along ax does not)."""
    for x in walk(lets, n):
        if x.op == R.READ and any(ax in Expr.of(e).variables() for e in x.arg[1]):
            return True
        if x.op == R.PRED and any(ax in Expr.of(e).variables() for e in x.arg):
            return True
    return False


def one_matrix(r: Region) -> "tuple[Lets, object, int] | None":
    """(lets, the yield, its static column count) when r yields one let as one [m, n] matrix; None otherwise."""
    if len(r.yields) != 1 or len(r.outputs) != 1:
        return None
    lets = Lets(r)
    y = r.yields[0]
    if y.src not in lets.map or len(y.axes) != 2 or not isinstance(r.axis_sizes[y.axes[-1]], int):
        return None
    return lets, y, r.axis_sizes[y.axes[-1]]


def merged(r: Region) -> "tuple[Region, tuple] | None":
    """(the region as one contraction over a virtual B, ((B tensor, width), ..)) when r yields a
    concatenation along its last axis of sibling contractions; None otherwise."""
    got = one_matrix(r)
    if got is None:
        return None
    lets, y, width = got
    n_ax = y.axes[-1]
    terms = _terms(lets, lets.map[y.src])
    if len(terms) < 2:
        return None
    pieces = [_piece(lets, t, n_ax, width, y.cast) for t in terms]
    if any(p is None for p in pieces):
        return None
    pieces = [dataclasses.replace(p, acc=fold(lets, p.acc, n_ax, p.lo, p.hi)) for p in pieces]
    pieces.sort(key=lambda p: p.lo)
    if pieces[0].lo != 0 or pieces[-1].hi != width or any(a.hi != b.lo for a, b in zip(pieces, pieces[1:])):
        return None
    reads = [_operand_reads(lets, p.acc) for p in pieces]
    if any(rd is None for rd in reads):
        return None
    (k0,), out = pieces[0].acc.arg[1], []
    a0 = reads[0][0]
    for p, (a, b) in zip(pieces, reads):
        if p.acc.arg[0] != "sum" or len(p.acc.arg[1]) != 1 or p.acc.dtype != DType.fp32:
            return None
        ren = {p.acc.arg[1][0]: Expr.var(k0)}
        if not same_a(lets, a, a0, p.acc.arg[1][0], k0) or b.dtype != a_dtype(lets, a0):
            return None  # every piece reads the same A, the same way, in one input type
        t, index = b.arg
        ix = tuple(Expr.of(e).subs(ren).subs({n_ax: Expr.var(n_ax) + p.lo}) for e in index)
        if sorted(str(e) for e in ix) != sorted((k0, n_ax)):
            return None  # B_j must read [k, n - lo] (or [n - lo, k]) exactly
        buf = next((x for x in r.inputs if x.name == t), None)
        want = tuple(p.hi - p.lo if str(e) == n_ax else r.axis_sizes[k0] for e in ix)
        if buf is None or tuple(buf.memref.shape) != want or buf.memref.layout.kind != "row_major":
            return None  # ... and be that whole packed [K, width] (or [width, K]) tensor
        out.append((t, p.hi - p.lo, tuple(str(e) for e in ix)))
    if len({ix for _, _, ix in out}) != 1 or len({t for t, _, _ in out}) != len(out):
        return None  # one layout for every piece; each piece its own tensor
    ix = out[0][2]
    virtual = "|".join(t for t, _, _ in out)
    k_size = r.axis_sizes[k0]
    shape = tuple(width if e == n_ax else k_size for e in ix)
    b0 = reads[0][1]

    def swap(n: RNode) -> "RNode | None":
        return RNode(R.READ, (), (virtual, tuple(Expr.var(e) for e in ix)), b0.dtype, n.axes) if n == b0 else None
    acc = rebuild(pieces[0].acc, lets, swap)
    used = {t for t, _, _ in out}
    layout = next(b.memref.layout for b in r.inputs if b.name == b0.arg[0])
    inputs = tuple(b for b in r.inputs if b.name not in used) + (
        Buffer(virtual, MemRef(shape, b0.dtype, 128, True, layout), None, False),)
    one = dataclasses.replace(r, reduce_axes=kept_axes(r, k0, [p.acc for p in pieces]), inputs=inputs,
                              lets=(Let(y.src, acc),))
    return one, tuple((t, w) for t, w, _ in out)


def _operand_reads(lets: Lets, acc: RNode) -> "tuple | None":
    """(A, the B read) of a contraction: B is the widened read of the operand that reads the last output axis; A is
    the other operand's read, or, when it is not a read, the whole factor (an A prologue, backend/gemm/prologue.py,
    which the binder then checks)."""
    body = lets(acc.src[0])
    if not (body.op == R.BINARY and body.arg == "mul"):
        return None
    n_ax = acc.axes[-1]
    reads, others = [], []
    for s in body.src:
        s = lets(s)
        f = lets(s.src[0]) if s.op == R.UNARY and s.arg == "cast" else s
        (reads if f.op == R.READ else others).append(f if f.op == R.READ else s)
    b = [x for x in reads if n_ax in x.axes]
    a = [x for x in reads if n_ax not in x.axes] + [x for x in others if not uses_axis(lets, x, n_ax)]
    return (a[0], b[0]) if len(a) == 1 and len(b) == 1 else None


def same_a(lets: Lets, a: RNode, a0: RNode, k: str, k0: str) -> bool:
    """Whether piece A a (contracted over k) is piece A a0 (over k0): the same read, or the same prologue value."""
    if a.op == R.READ:
        return a0.op == R.READ and _renamed(a, {k: Expr.var(k0)}).arg == a0.arg and a.dtype == a0.dtype
    return a0.op != R.READ and same_value(lets, a, a0, {k: k0} if k != k0 else None)


def a_dtype(lets: Lets, a: RNode) -> DType:
    """The input type of A: its read's, or the 16-bit value a prologue widens."""
    return a.dtype if a.op == R.READ else lets(a.src[0]).dtype


def kept_axes(r: Region, k0: str, accs: list) -> tuple:
    """r's reduce axes once the contractions accs are one over k0: k0 and those no other of them binds (an A
    prologue's statistic)."""
    drop = {a.arg[1][0] for a in accs} - {k0}
    return tuple(a for a in r.reduce_axes if a[0] not in drop)


def _renamed(n: RNode, ren: dict) -> RNode:
    """A READ with its reduce axis renamed per ren (each piece binds its own k)."""
    t, index = n.arg
    return RNode(R.READ, (), (t, tuple(Expr.of(e).subs(ren) for e in index)), n.dtype,
                 tuple(str(ren.get(a, a)) for a in n.axes))
