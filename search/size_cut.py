"""Cuts by size: a segment too large to saturate within the e-graph's limits is halved, and each half saturated
and searched on its own (docs/DESIGN.md §Fusion, "Segments").

Without them such a program is not searched at all: its saturation stops at a limit before the fusion legality
facts and it is left one kernel per op (torchvision's DenseNet-161 at 32 px: 5,839 nodes, 18,498 e-nodes at the
20,000-node limit after 12 iterations, 1,806 kernels). ``halve`` cuts the program once, in the middle half of its
computed nodes, at the cut whose live values (computed values read after it: ``segment._cut_points``) are the
fewest bytes, each one a value that can be written (``segment.cuttable``: no view, nothing inside a
contraction); nearest the middle among equals; a live view is written as its bases and viewed again after the
cut. Those values are written by the partition, as at any segment boundary; a DenseNet layer's output is written anyway (every later layer of its block reads it, through its
concatenation, into a convolution). The caller (search/model.py ``saturate_unfused``) halves a half again while
it still stops at a limit, down to ``MIN_WEIGHT`` computed non-view nodes.
"""
from __future__ import annotations

import math

from ..ir.tiny import GroupOp, Program
from ..knobs import price_symbol_size
from .segment import SEGMENT_OUT, Segment, _canonical, _cut_points, _free, cuttable

MIN_WEIGHT = 16  # computed non-view nodes: a part this small is never halved (it saturates, or it never will)
MIDDLE = (0.25, 0.75)  # where a cut may fall, as fractions of the part's computed non-view nodes


def halve(prog: Program) -> "list | None":
    """[first half, second half] of ``prog`` (standalone canonical Segments, ``prog``'s ids in their origins), or
    None: too small, an output that is not computed, or no cut in the middle half whose live values can all be
    written. A view live at a cut is not written: its bases (the computed values it views) are, and the second half
    views them again (GLPN's decoder reads each encoder stage through a reshape)."""
    free = _free(prog)
    comp = [n.id for n in prog.nodes if n.id not in free]
    if any(nid not in comp for _, nid in prog.outputs):
        return None
    heavy = [0]  # computed non-view nodes before each position
    for i in comp:
        heavy.append(heavy[-1] + (prog[i].op not in GroupOp.Movement))
    total = heavy[-1]
    if total < MIN_WEIGHT:
        return None
    lo, hi = (total * f for f in MIDDLE)
    users = prog.consumers()
    cuts = {k: live for k, live in _cut_points(prog, free, len(comp), lambda p, v, u: True).items()
            if lo <= heavy[k] <= hi}
    scored = []
    for k, live in cuts.items():
        written = _written(prog, live, free)
        if all(cuttable(prog, v, users) for v in written):
            scored.append((sum(_bytes(prog[v]) for v in written), abs(2 * heavy[k] - total), k, written))
    if not scored:
        return None
    _, _, k, written = min(scored, key=lambda s: s[:3])
    pos = {i: j for j, i in enumerate(comp)}
    sunk = sorted(_views_of(prog, cuts[k], free), key=pos.__getitem__)  # viewed again after the cut
    firsts = [i for i in comp[:k] if i not in sunk or any(pos.get(u, k) < k for u in users.get(i, ()))]
    texts: dict = {}
    first = _canonical(prog, free, firsts, frozenset(),
                       tuple((SEGMENT_OUT, v) for v in sorted(written, key=pos.__getitem__)), texts)
    second = _canonical(prog, free, sunk + comp[k:], frozenset(written),
                        tuple((n, v) for n, v in prog.outputs if pos[v] >= k or v in sunk), texts)
    return [first, second]


def _views_of(prog: Program, live, free: set) -> set:
    """The computed views among ``live`` and the computed views they read, back to their bases."""
    out, stack = set(), [v for v in live if prog[v].op in GroupOp.Movement]
    while stack:
        v = stack.pop()
        if v in out or v in free:
            continue
        out.add(v)
        stack.extend(s for s in prog[v].src if prog[s].op in GroupOp.Movement)
    return out


def _written(prog: Program, live, free: set) -> frozenset:
    """What a cut with these live values writes: each computed value, a view by its bases."""
    views = _views_of(prog, live, free)
    return frozenset(v for v in live if v not in views) | frozenset(
        s for v in views for s in prog[v].src if s not in free and prog[s].op not in GroupOp.Movement)


def _bytes(n) -> int:
    """The bytes of value n (a symbolic extent counted at the pricing's symbol size)."""
    return math.prod(d if isinstance(d, int) else price_symbol_size() for d in n.shape) * n.dtype.itemsize


__all__ = ["MIN_WEIGHT", "halve"]
