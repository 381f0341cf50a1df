"""Whether a read of the IndexBook stays inside its source's bounds (docs/DESIGN.md §IndexBook invariant 7), and
the isl map of a read.

The check is an interval test of each index over the reader's box, narrowed by the guard's constraints on one
variable alone (the in-bounds piece lies inside it), and where that cannot tell, isl's: the range of the read's
map on the box and the guard against the source's box (E1204 UnguardedAccess when it reaches outside). A read
of a form found inside before (its space, map, guard, source shape and params; not the names) is not checked
again.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..ir.diagnostics import Diagnostic, diag
from . import isl_util as iu
from .isl_util import bounds

if TYPE_CHECKING:
    from .indexbook import Access, IndexBook, ValueInfo


def access_map(book: IndexBook, info: ValueInfo, acc: Access, stmt: str, tensor: str):
    """The isl map of one read: statement space -> tensor, on the box and the in-bounds piece."""
    names = info.space_names
    cons = iu.box_constraints(names, [a.size for a in info.space]) + [iu.ge0(g) for g in acc.guard]
    return iu.parse_map(iu.map_text(book.params, stmt, names, tensor, acc.map, cons))


_INSIDE: set = set()  # the forms of reads found inside their source's bounds (``unguarded``)


def unguarded(book: IndexBook, info: ValueInfo, acc: Access) -> Diagnostic | None:
    """E1204 when the read can leave its source's bounds on its in-bounds piece (the module docstring)."""
    src = book.program[acc.value_id]
    form = (tuple((a.name, a.size) for a in info.space), acc.map, acc.guard, src.shape, book.params)
    if form in _INSIDE:
        return None
    err = _unguarded(book, info, acc, src)
    if err is None:
        if len(_INSIDE) > 200000:
            _INSIDE.clear()
        _INSIDE.add(form)
    return err


def _unguarded(book: IndexBook, info: ValueInfo, acc: Access, src) -> Diagnostic | None:
    box = _guarded_box(info.box, acc.guard)
    sizes = {a.name: a.size for a in info.space}
    ok = True
    for e, d in zip(acc.map, src.shape, strict=True):
        if not e.terms:  # a broadcast 0
            continue
        (m, c), *rest = e.terms
        if not rest and c == 1 and len(m) == 1 and isinstance(m[0], str) and sizes.get(m[0]) == d:
            continue  # an axis of the same (maybe symbolic) size
        lo, hi = bounds(e, box)
        if lo is None or lo < 0 or hi is None or not isinstance(d, int) or hi >= d:
            ok = False
            break
    if ok:
        return None
    m = access_map(book, info, acc, "S", "T")
    rng = m.range()
    target = iu.parse_set(iu.set_text(book.params, "T", [f"o{k}" for k in range(src.ndim)],
                                      iu.box_constraints([f"o{k}" for k in range(src.ndim)], src.shape)))
    if rng.is_subset(target):
        return None
    outside = rng.subtract(target).coalesce()
    return diag("UnguardedAccess", info.value_id,
                f"the read of {acc.value_id} reaches {outside} outside its bounds {list(map(str, src.shape))}")


def _guarded_box(box: dict, guard: tuple) -> dict:
    """box narrowed by the guard's constraints on one variable alone (``v - c >= 0``, ``c - v >= 0``): it holds the
    in-bounds piece, so a read whose index stays inside the source's bounds over it does so on the piece (the concat's
    padded reads of each expert); the other constraints are left to isl."""
    out = None
    for g in guard:
        var = [(m[0], c) for m, c in g.terms if m]
        if any(len(m) != 1 for m, _ in g.terms if m):
            continue
        if len(var) != 1 or abs(var[0][1]) != 1 or not isinstance(var[0][0], str) or var[0][0] not in box:
            continue
        (v, c), k = var[0], sum(c for m, c in g.terms if not m)
        out = dict(box) if out is None else out
        lo, hi = out[v]
        if c == 1:  # v >= -k
            out[v] = (-k if lo is None else max(lo, -k), hi)
        else:  # v <= k
            out[v] = (lo, k if hi is None else min(hi, k))
    return box if out is None else out
