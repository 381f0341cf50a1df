"""The decisions of the ``--cost model`` boundary search (search/model.py): its sites, the masks that
realize a decision set, and its moves beyond "fuse one more site".

The search decides, per site (a materialized value with a fused alternative), cut or fuse. Two
things keep it from ending worse than the loaded default partition:

* ``default_fused`` names the decisions of that partition (boundaries.default_cuts, what
  ``--cost size`` keeps) in the one-kernel-per-op e-graph, so the search can start from it when Poly
  Core prices it lower than every site cut;
* ``moves`` lists the moves from a decision set: fuse one more cut site, or cut again one fused
  site (a descent that only fuses cannot undo an early fusion that a later one made a bad deal).
"""
from __future__ import annotations

from ..egraph.boundaries import default_cuts
from ..egraph.cost import SizeCost
from ..egraph.graph import EGraphView
from ..egraph.state import EGraphState
from ..ir.tiny import GroupOp


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
    (totiny.to_tiny's ``materialize``) and its consumers read it from memory. A cut materialization that
    holds several values (``alternatives``: the sibling concatenation) also rules out every fused read of
    what it computes from outside it (``_reads_into``): its values are read from it, never recomputed (a
    rotary half read as a view of the fp32 projection kept Q and K GEMMs of their own)."""
    excl, hard, kept = set(), set(), set()
    alts = _alternatives(view, sites)
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
        if c in alts:
            excl.update(_reads_into(view, c))
    return frozenset(excl), frozenset(hard), frozenset(kept)


def _cone(view: EGraphView, c) -> frozenset:
    """The classes a materialization c computes in its own kernel: from the value it writes down through
    every spelling, never past a cut read or into a reduction's body (a piece of the sibling concatenation
    is its GEMM, computed there); kept per view."""
    memo = view.__dict__.setdefault("_cones", {})
    if c not in memo:
        out, stack = set(), [n.children[0] for n in view.classes[c] if n.op == "Mat"]
        while stack:
            x = stack.pop()
            if x in out:
                continue
            out.add(x)
            stack.extend(ch for n in view.classes[x] if n.op != "Reduce" and not _is_cut(n, view) for ch in n.children)
        memo[c] = frozenset(out)
    return memo[c]


def _reads_into(view: EGraphView, c) -> frozenset:
    """The fused reads (View) of a class of the cone of materialization c from a class outside it: with c
    kept cut, the values it holds are read from it (its slices) and computed nowhere else; kept per view."""
    memo = view.__dict__.setdefault("_reads_into", {})
    if c not in memo:
        cone = _cone(view, c)
        memo[c] = frozenset(n for x, ns in view.classes.items() if x not in cone for n in ns
                            if n.op == "View" and n.children and n.children[0] in cone)
    return memo[c]


def _alternatives(view: EGraphView, sites: dict) -> dict:
    """``alternatives``, kept per view (masks asks it for every decision set)."""
    kept = view.__dict__.get("_alternatives")
    if kept is None or kept[0] is not sites:
        kept = view.__dict__["_alternatives"] = (sites, alternatives(view, sites))
    return kept[1]


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


AVOID = 1e6  # size price of an e-node a site decision rules out (finite: a cycle may leave no other term)
AVOID_STREAM = 1e12  # ... and of one a stream decision rules out: above any chain of AVOIDs, so the other
# spelling wins even where the loaded term itself leans on a ruled-out node (a cycle through a cut)


class Masked(SizeCost):
    """Size, with the e-nodes a site decision rules out priced far above any term."""
    name = "masked"

    def __init__(self, excluded: frozenset, hard: frozenset = frozenset()):
        self.excluded, self.hard = excluded, hard

    def enode_cost(self, node, view) -> float:
        if node in self.hard:
            return AVOID_STREAM
        return AVOID if node in self.excluded else super().enode_cost(node, view)

    def enode_costs(self, view) -> dict:
        """The size prices of the view (built once per view), the ruled-out e-nodes raised: the same prices as
        ``enode_cost``, without asking per e-node for every candidate."""
        base = view.__dict__.get("_size_prices")
        if base is None:
            base = view.__dict__["_size_prices"] = SizeCost().enode_costs(view)
        out = dict(base)
        for n in self.excluded:
            if n in out:
                out[n] = AVOID
        for n in self.hard:
            if n in out:
                out[n] = AVOID_STREAM
        return out


def alternatives(view: EGraphView, sites: dict) -> dict:
    """Mat site c -> the Mat sites whose values it holds: every class that reads c (cut) also reads another
    materialization, and those are at least two (the sibling GEMMs' concatenation of rules/siblings.egg,
    read in column slices where each GEMM's own output would be read). Taking c is the decision set that
    fuses those sites (their reads ruled out) and keeps c cut (its readers' other spellings ruled out)."""
    out: dict = {}
    for c, (cut, _) in sites.items():
        if not any(n.op == "Mat" for n in view.classes[c]):
            continue  # a stream decision
        others: set = set()
        for r in {n.eclass for n in cut}:
            alt = {n.children[0] for n in view.classes[r] if _is_cut(n, view) and n.children[0] != c}
            if not alt:
                others = set()
                break
            others |= alt
        if len(others) >= 2 and others <= sites.keys():
            cone = _cone(view, c)  # and the materializations of the values it computes itself (each GEMM's own)
            out[c] = frozenset(others | {m for m in sites if m != c for n in view.classes[m]
                                         if n.op == "Mat" and n.children[0] in cone})
    return out


def computes_reduction(view: EGraphView, chosen: dict, value) -> bool:
    """Whether the chosen term of class ``value`` computes a reduction in its own kernel (a Reduce or a
    streamed SoftmaxSum reached before any cut read): such a value is no cheap value to recompute."""
    stack, seen = [value], set()
    while stack:
        c = stack.pop()
        if c is None or c in seen or c not in chosen:
            continue
        seen.add(c)
        n = chosen[c]
        if n.op in ("Reduce", "SoftmaxSum"):
            return True
        if not _is_cut(n, view):
            stack.extend(n.children)
    return False


def _is_cut(n, view: EGraphView) -> bool:
    return n.op == "Read" and any(m.op == "Mat" for m in view.classes[n.children[0]])


def stream_sites(view: EGraphView) -> dict:
    """class -> (its other e-nodes, its SoftmaxSum e-nodes) for each value rules/streaming.egg can
    stream: the decision unit is "is this softmax-weighted sum streamed" (taking it rules the other
    spellings of the value out, as fusing a site rules its cut reads out)."""
    out: dict = {}
    for c, ns in view.classes.items():
        ss = tuple(n for n in ns if n.op == "SoftmaxSum")
        # one pass (online) is the same work as two passes minus the second walk over the scores:
        # where the rules allow it, streaming takes it
        keep = tuple(n for n in ss if n.args[1] == "1") or ss
        rest = tuple(n for n in ns if n not in keep)
        if ss and any(n.op != "SoftmaxSum" for n in ns):
            out[c] = (rest, ss)
    return out


def streamed_terms(view: EGraphView, chosen: dict, roots: list) -> dict:
    """chosen with every softmax-weighted sum rules/streaming.egg can stream taken streamed (its
    SoftmaxSum e-node), restricted to the classes the roots then reach."""
    ch = dict(chosen)
    for c, (_, ss) in stream_sites(view).items():
        if c in ch:
            ch[c] = next((n for n in ss if n.args[1] == "1"), ss[0])
    out, stack = {}, [r for r in roots if r in ch]
    while stack:
        x = stack.pop()
        if x in out or x not in ch:
            continue
        out[x] = ch[x]
        stack.extend(ch[x].children)
    return out


def chosen_terms(best: dict, roots: list) -> dict:
    """class -> the e-node an extraction ``best`` (class -> choice) takes, for the classes the roots reach."""
    chosen, stack = {}, list(roots)
    while stack:
        c = stack.pop()
        if c not in chosen:
            chosen[c] = best[c].node
            stack.extend(best[c].node.children)
    return chosen


def sites(view: EGraphView) -> dict:
    """Mat class -> (cut e-nodes reading it, their classes' other e-nodes), for each Mat some read of
    which has a fused alternative: the decision unit is "is this value materialized"; and the stream
    decisions (stream_sites), in the same form."""
    out: dict = {}
    for c, ns in view.classes.items():
        cut = [n for n in ns if _is_cut(n, view)]
        other = [n for n in ns if not _is_cut(n, view)]
        if cut and other:
            for n in cut:
                cs, os_, seen = out.setdefault(n.children[0], ([], [], set()))
                cs.append(n)
                for o in other:
                    if o not in seen:
                        seen.add(o)
                        os_.append(o)
    return {m: (tuple(a), tuple(b)) for m, (a, b, _) in out.items()} | stream_sites(view)

