"""The default kernel partition, placed as ``Mat`` boundary terms when a program is loaded.

Region synthesis (docs/DESIGN.md §RB-SSA) builds one region per reduction chain with its elementwise
epilogue and keeps a whole row softmax in one region. The default cuts a value q out into its own kernel (materializes
it) exactly when a consumer c reads q through a movement chain whose index map is not a *prefix
projection* of c's loop order, and q's cone holds a REDUCE (so recomputing q per use would repeat a
reduction: "one-to-many by recompute only if priced", docs/DESIGN.md §Fusion). c's loop order is its axes in
order; a REDUCE puts its reduced axes innermost. A prefix projection reads q at
``(L0, L1, .., Lp-1)`` (size-1 axes of q at 0): q is then computed once per outer iteration and
reused (compute-at), as a row max is inside a softmax. PAD in the chain counts as non-prefix.

Under ``--cost=size`` these boundaries are what extraction keeps; rules in ``rules/fusion.egg`` add
alternatives that a region-level cost can prefer. ``all_cuts`` cuts every compute edge instead (one
kernel per op): the load of a cost model that searches the boundaries (search/model.py) and of the rule
checker's fusion cases.
"""
from __future__ import annotations

from ..ir.expr import Expr
from ..ir.tiny import GroupOp, Ops, Program, UOp
from . import encode as E
from .ixfns import compose, view

_KIND = {Ops.RESHAPE: "reshape", Ops.PERMUTE: "permute", Ops.EXPAND: "expand", Ops.SHRINK: "shrink",
         Ops.FLIP: "flip", Ops.VIEW: "view"}


def movement_args(n: UOp) -> tuple:
    """(kind, a, b) of a movement node in the encodings ixfns.view expects."""
    a = n.arg
    if n.op in (Ops.RESHAPE, Ops.EXPAND):
        return _KIND[n.op], E.shape(a["result_shape"]), ""
    if n.op == Ops.PERMUTE:
        return "permute", E.tup(a["perm"]), ""
    if n.op == Ops.SHRINK:
        return "shrink", E.shrink(a["lo"], a["hi"], a["step"]), ""
    if n.op == Ops.FLIP:
        return "flip", E.tup(a["axes"]), ""
    if n.op == Ops.VIEW:
        return "view", E.shape(a["result_shape"]), E.tup(a["index_map"])
    return "pad", E.pads(a["pad"]), ""


def loop_order(n: UOp, src: UOp) -> list:
    """Axis indices of n's iteration space (src's space for a REDUCE), outer to inner."""
    if n.op == Ops.REDUCE:
        ax = set(n.arg["axes"])
        return [k for k in range(src.ndim) if k not in ax] + sorted(ax)
    return list(range(n.ndim))


def _has_reduce(p: Program) -> dict:
    out: dict = {}
    for n in p.nodes:
        out[n.id] = n.op in GroupOp.Reduce or any(out[s] for s in n.src)
    return out


def default_cuts(p: Program) -> set:
    """Edges (consumer id, src position) to cut: the src becomes Read(Mat(q)) (q materialized)."""
    has_red = _has_reduce(p)
    cuts: set = set()
    for c in p.nodes:
        if c.op in GroupOp.Movement or c.op in GroupOp.Leaf:
            continue
        for edge, node, m, space in operand_reads(p, c):
            if node.op in GroupOp.Leaf or not has_red[node.id]:
                continue
            while node.op == Ops.CAST and _widens(p[node.src[0]], node) and has_red[node.src[0]]:
                edge, node = (node.id, 0), p[node.src[0]]  # materialize the narrow value, widen on read
            order = [k for k in loop_order(c, p[c.src[0]]) if space[k] != 1]
            if m is None or not _prefix(m, node.shape, order, space):
                cuts.add(edge)
    return cuts


def pad_shift(n: UOp) -> tuple:
    """The index map of a PAD inside its source: source index i_k - lo_k along each axis. Points in the
    padding read the pad value, not the source, so this map covers every source element a point can
    read: enough to classify a read (one-to-one, window, broadcast), not to compute one."""
    return tuple(Expr.var(f"i{k}") - lo for k, (lo, _) in enumerate(n.arg["pad"]))


def operand_reads(p: Program, c: UOp, pads_as_shifts: bool = False) -> list:
    """(edge to cut, producer node, composed map or None, read space) per operand of compute node c:
    the producer is found through c's chain of movement nodes, the edge is the deepest one. A PAD on
    the way makes the map None (not affine), or, with pads_as_shifts, contributes pad_shift."""
    out = []
    for pos, sid in enumerate(c.src):
        space = p[sid].shape if c.op != Ops.REDUCE else p[c.src[0]].shape
        m: "tuple | None" = tuple(Expr.var(f"i{k}") for k in range(len(space)))
        edge, node = (c.id, pos), p[sid]
        while node.op in GroupOp.Movement:
            edge = (node.id, 0)
            src = p[node.src[0]]
            f = movement_map(node, src, pads_as_shifts)
            m = None if f is None or m is None else compose(f, m)
            node = src
        out.append((edge, node, m, space))
    return out


def movement_map(n: UOp, src: UOp, pads_as_shifts: bool = False) -> "tuple | None":
    """n's index map into src (ixfns.view), None where it is not affine; a PAD is None unless
    pads_as_shifts (then pad_shift)."""
    kind, a, b = movement_args(n)
    if kind == "pad":
        return pad_shift(n) if pads_as_shifts else None
    v = view(kind, E.shape(src.shape), a, b)
    return None if v is None else v[1]


def _prefix(m: tuple, q_shape: tuple, order: list, space: tuple) -> bool:
    want = iter(order)
    for e, d in zip(m, q_shape, strict=True):
        if d == 1:
            continue
        if len(e.terms) != 1 or e.terms[0][1] != 1 or len(e.terms[0][0]) != 1 or not isinstance(e.terms[0][0][0], str):
            return False
        name = e.terms[0][0][0]
        if not name.startswith("i") or not name[1:].isdigit() or int(name[1:]) >= len(space):
            return False
        if space[int(name[1:])] == 1:
            continue
        if next(want, None) != int(name[1:]):
            return False
    return True


def _widens(src: UOp, cast: UOp) -> bool:
    return src.dtype.is_float and cast.dtype.is_float and src.dtype.itemsize < cast.dtype.itemsize


# ---- one kernel per op (the --cost model load) ----------------------------------------------------

def _contraction_muls(p: Program) -> set:
    """MUL nodes that a REDUCE(SUM) reads: with the REDUCE (and widening casts of their operands)
    they are one contraction (CONTRACT = MUL -> REDUCE(SUM), docs/DESIGN.md §Tiny IR; one Poly-View block)."""
    out = set()
    for c in p.nodes:
        if c.op == Ops.REDUCE and str(c.arg["op"]).upper() == "SUM":
            q = operand_reads(p, c)[0][1]
            if q.op == Ops.MUL:
                out.add(q.id)
    return out


def all_cuts(p: Program) -> set:
    """Every edge from a compute producer to a compute consumer, except inside a contraction (its
    MUL, and the widening casts of its operands, stay with the REDUCE): one kernel per op."""
    cuts, muls = set(), _contraction_muls(p)
    for c in p.nodes:
        if c.op in GroupOp.Movement or c.op in GroupOp.Leaf:
            continue
        for edge, node, _, _ in operand_reads(p, c):
            if node.op in GroupOp.Leaf or node.op in GroupOp.Movement:
                continue
            if node.id in muls and c.op == Ops.REDUCE or c.id in muls and node.op == Ops.CAST and _widens(p[node.src[0]], node):
                continue
            cuts.add(edge)
    return cuts

