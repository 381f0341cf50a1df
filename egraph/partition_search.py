"""Moves of the ``--cost model`` boundary search beyond "fuse one more site" (egraph/model_cost.py).

The search decides, per site (a materialized value with a fused alternative), cut or fuse. Two
things keep it from ending worse than the loaded default partition:

* ``default_fused`` names the decisions of that partition (boundaries.default_cuts, what
  ``--cost size`` keeps) in the one-kernel-per-op e-graph, so the search can start from it when Poly
  Core prices it lower than every site cut;
* ``moves`` lists the moves from a decision set: fuse one more cut site, or cut again one fused
  site (a descent that only fuses cannot undo an early fusion that a later one made a bad deal).
"""
from __future__ import annotations

from ..ir.tiny import GroupOp
from .boundaries import default_cuts
from .graph import EGraphView
from .state import EGraphState


def default_fused(state: EGraphState, view: EGraphView, sites: dict, streams: frozenset) -> frozenset:
    """The site classes the default partition fuses: every Mat site whose value is not one the
    default cuts materialize (stream decisions are left to the search)."""
    prog = state.program
    kept = set()
    for cid, pos in default_cuts(prog):
        q = prog[prog[cid].src[pos]]
        while q.op in GroupOp.Movement:
            q = prog[q.src[0]]
        if q.id in state.index and state.index[q.id] in view.by_index:
            kept.add(view.by_index[state.index[q.id]])
    fused = set()
    for m in sites:
        if m in streams:
            continue
        xs = [n.children[0] for n in view.classes[m] if n.op == "Mat"]
        if xs and xs[0] not in kept:
            fused.add(m)
    return frozenset(fused)


def masks(view: EGraphView, sites: dict, streams: frozenset, fused: frozenset) -> tuple:
    """(e-nodes a decision set rules out, those it rules out hard, value classes it materializes
    itself). A fused site rules out its cut reads; a cut site rules out the fused alternatives of
    the classes reading it, except where a reading class is the value's own class: an identity read
    of x (a one-to-one fused View composes to x, and the cut read Read(Mat(x)) lands in x's class)
    cannot be told from x by the extraction, so x is materialized by the partition instead
    (totiny.to_tiny's ``materialize``) and its consumers read it from memory."""
    excl, hard, kept = set(), set(), set()
    for c, (cut, other) in sites.items():
        if c in fused:
            (hard if c in streams else excl).update(cut)
            continue
        if c in streams:
            hard.update(other)
            continue
        own = {n.children[0] for n in view.classes[c] if n.op == "Mat"}
        excl.update(n for n in other if n.eclass not in own)
        kept.update(x for x in own if any(n.eclass == x for n in other))
    return frozenset(excl), frozenset(hard), frozenset(kept)


def site_values(view: EGraphView, sites: dict) -> dict:
    """Mat site class -> the class of the value it materializes (stream sites have none)."""
    return {m: n.children[0] for m in sites for n in view.classes[m] if n.op == "Mat"}


def moves(fused: frozenset, live: list, streams: frozenset, keep: frozenset = frozenset()) -> list:
    """The moves from decision set ``fused``: ("fuse", c) for each live (cut, used) site, ("cut", c)
    for each fused Mat site (a stream decision, once taken, stays; so does a fusion in ``keep``: the
    merge phase took it because it lowered the modelled time of the two kernels it joined)."""
    return [("fuse", c) for c in live] + [("cut", c) for c in sorted(fused) if c not in streams and c not in keep]


def apply(fused: frozenset, move: tuple) -> frozenset:
    kind, c = move
    return fused | {c} if kind == "fuse" else fused - {c}
