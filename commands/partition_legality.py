"""Fusion legality of a partition that is not the e-graph's (Tiny IR): ``--explain`` judges the partitions
``--cost=size`` keeps and the hand-style partition with it, and the tests use it as an independent
cross-check of the rules (the search's legality is the rules': rules/fusion.egg, search/legality.py).

One-to-one and window reads (compute-at with halo) are legal; a read at a prefix of the consumer's
loop order, or a projection whose skipped axes a loop order of the consumer can own ("owned": a
softmax over any axis), is legal; a broadcast of a reduction along an axis no tile can own
(GEMM -> GEMM) is many-to-many, never legal.
"""
from __future__ import annotations

import re

from ..egraph import encode as E
from ..egraph.boundaries import loop_order, movement_map, operand_reads
from ..egraph.ixfns import compose, read_kind
from ..egraph.stream import group_of
from ..ir.expr import Expr
from ..ir.tiny import GroupOp, Ops, Program


def _kind(p: Program, c, m: "tuple | None", space: tuple, reducer=None) -> str:
    """read_kind of map m (over c's iteration space `space`) in c's loop order; "opaque" when the
    map is not affine (a PAD on the way). An "owned" read (a projection) stays "owned" when a loop
    order exists that computes the value once per tile and owns the rest: the axes it uses are all
    parallel or include every parallel axis of c, or of the REDUCE ``reducer`` that c feeds
    elementwise in the kernel (its loop order is that reduce's); else it is "broadcast"."""
    if m is None:
        return "opaque"
    order = loop_order(c, p[c.src[0]])
    perm = {k: j for j, k in enumerate(order)}  # rename axes to loop order positions
    shape = tuple(space[k] for k in order)
    mm = tuple(e.subs({f"i{k}": Expr.var(f"i{perm[k]}") for k in range(len(space))}) for e in m)
    kind = read_kind(E.shape(shape), E.tup(mm)) or "opaque"
    if kind != "owned":
        return kind
    r = reducer if reducer is not None else c if c.op == Ops.REDUCE else None
    red = set(r.arg["axes"]) if r is not None and len(space) == len(p[r.src[0]].shape) else set()
    used = {int(v[1:]) for e in m for v in e.variables() if re.fullmatch(r"i\d+", v)}
    par = {k for k in range(len(space)) if k not in red and space[k] != 1}
    return "owned" if used <= par or par <= used else "broadcast"


def _reducers(p: Program, inside: frozenset) -> dict:
    """node id -> the REDUCE inside the kernel it feeds through same-shape elementwise ops (its loop
    order is that reduce's)."""
    out: dict = {}
    for n in p.nodes:
        if n.id in inside and n.op == Ops.REDUCE:
            stack = [n.src[0]]
            while stack:
                i = stack.pop()
                q = p[i]
                if i in out or i not in inside or q.op in GroupOp.Movement or q.op in GroupOp.Leaf or \
                        q.op in GroupOp.Reduce or q.shape != p[n.src[0]].shape:
                    continue
                out[i] = n
                stack.extend(q.src)
    return out


def _reached_reduces(p: Program, q, m: "tuple | None", inside: frozenset) -> list:
    """(reduce node, composed map) for each REDUCE in q's cone inside the kernel, with the map from
    the consumer's space to the reduce's output (elementwise ops keep the index, views compose)."""
    out, stack, seen = [], [(q, m)], set()
    while stack:
        n, mp = stack.pop()
        key = (n.id, mp)
        if key in seen or n.id not in inside:
            continue
        seen.add(key)
        if n.op in GroupOp.Reduce:
            out.append((n, mp))
            continue
        if n.op in GroupOp.Movement:
            src = p[n.src[0]]
            f = movement_map(n, src, pads_as_shifts=True)
            stack.append((src, None if f is None or mp is None else compose(f, mp)))
            continue
        stack.extend((p[s], mp) for s in n.src)
    return out


def illegal_fusions(p: Program, part) -> list:
    """(kernel name, consumer id, reduce id, why) for every reduction computed inside a kernel that
    some consumer in the same kernel reads (through elementwise ops and views) by broadcast: its
    element feeds many consumer points along an axis the block does not own; together with the
    reduction that is many-to-many, never legal (GEMM -> GEMM). Reads one-to-one, by a window
    (compute-at with halo) or at a prefix of the consumer's loop order (a block owns the reduced
    extent: softmax, layernorm, attention's row sum) are legal, as are projections on any axis whose
    consumer's loop order can own the axes they skip ("owned", _kind: a softmax over a middle axis). A streamed softmax-weighted sum
    (egraph/stream.py) whose nodes all sit in the kernel is one consumer of its scores and values: its
    running max and sums are read at each key block as they are updated, not broadcast."""
    bad = []
    member = group_of(p)
    for k in part.kernels:
        inside = frozenset(i for i in k.nodes if i not in k.inputs)
        feeds = _reducers(p, inside)
        for c in (p[i] for i in sorted(inside)):
            if c.op in GroupOp.Movement or c.op in GroupOp.Leaf:
                continue
            g = member.get(c.id)
            for _, q, m, space in operand_reads(p, c, pads_as_shifts=True):
                if g is not None and q.id in g.nodes and g.nodes <= inside:
                    continue  # inside a streamed softmax-weighted sum: its max and sums run along (stream.py)
                for r, mr in _reached_reduces(p, q, m, inside):
                    kind = _kind(p, c, mr, space, feeds.get(c.id))
                    if kind in ("broadcast", "opaque"):
                        bad.append((k.name, c.id, r.id, f"{c.id} reads the reduction {r.id} by {kind} inside one "
                                    f"kernel: many-to-many fusion is never legal"))
    return bad
