"""A region with its device-memory tensors' accesses moved as near the tensors' origins as the price cannot
tell apart (docs/DESIGN.md §Cost model, "Offsets"): the key of the price caches.

The experts of a mixture-of-experts layer (or any slices of one tensor) are the same kernel reading
its tensors at other constant base offsets: ``T0[6 + i1, r]`` for one, ``T0[4 + i1, r]`` for the next.
Their prices are equal, because every term of ``analyses/price.py`` is invariant under a translation
``delta`` of all the accesses of one input or output tensor when each dim's shift is a whole number of
sectors in the linear address (``delta_d * stride_d * itemsize ≡ 0 (mod SECTOR)``, ``stride_d`` the row-major
stride of dim d) and keeps the accesses inside the tensor:

- FLOPs, recompute, occupancy, edges and halos are counted on statement instances and internal tensors,
  which are not moved; footprint sizes (``card``) and overlaps are translation invariant.
- Sectors (``footprint.sectors``): the outer dims of a footprint count as points; the run (the innermost
  dim, or the first dim whose trailing dims are covered whole, ``merged``) counts
  ``floor(hi·s/per) − floor(lo·s/per)``, per = SECTOR / itemsize elements, which a shift by a multiple of
  per elements of the linear address leaves unchanged. Whether a trailing dim is covered whole does not
  change: a dim is moved only when its lowest index is above 0, so it is not whole before the move, and
  its highest index drops below the tensor's last after it.
- The vector width (``_vector_width``) reads the byte offset of the innermost dim modulo at most 16 bytes,
  which divides SECTOR.

So a misaligned offset (a slice starting mid-sector) keeps its remainder: ``T[4 + i]`` of an fp32 row moves
to ``T[4 + i]`` (4 floats = 16 bytes, not a whole sector), ``T[8 + i]`` to ``T[i]``. Internal tensors never
move. The region is otherwise unchanged (names, statements, shapes), so ``price(at_origin(r)) == price(r)``
field for field; ``tests/test_price_origin.py`` checks that against the unmoved region.
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from math import gcd, prod

import islpy as isl

from ..ir.expr import Expr
from .footprint import extents, full_footprint
from .isl_util import val_int
from .poly_region import Access, PolyRegion

SECTOR = 32  # bytes: the unit of device-memory transactions (analyses/price.py SECTOR)


def shifts(region: PolyRegion) -> dict:
    """tensor -> its per-dim shift (subtracted from every access), for the tensors that move."""
    out = {}
    for t in region.tensors:
        size = t.dtype.itemsize
        if t.role == "internal" or not t.shape or SECTOR % size:
            continue
        got = _lowest(region, t.name)
        if got is None:
            b = region.bind()
            fa = full_footprint(b, t.name)
            got = (b.shapes[t.name], None if fa.is_empty() else tuple(lo for lo, _ in extents(fa)))
        shape, lows = got
        if lows is None:
            continue
        per = SECTOR // size
        delta = tuple(lo - lo % (per // gcd(per, prod(shape[d + 1:]))) for d, lo in enumerate(lows))
        if any(delta):
            out[t.name] = delta
    return out


def _lowest(region: PolyRegion, tensor: str) -> "tuple | None":
    """(shape, the lowest index per dim of the elements of ``tensor`` the region touches, None if none) read off
    each access's image of its statement's domain, without binding the region (the experts of an MoE layer are
    one region form at 32 offsets: the bind of each is most of its price's cost); None where that needs the bind
    (a symbolic size, a parameter, an unbounded image: the bind names the fault)."""
    if region.params:
        return None
    try:
        shape = tuple(int(Expr.of(d).evaluate({})) for d in region.tensor(tensor).shape)
    except (KeyError, TypeError, ValueError):
        return None
    lows = None
    for st in region.statements:
        for a in (*st.reads, st.write):
            if a.tensor != tensor:
                continue
            lo = _access_lows(st.domain, a.relation)
            if lo is None:
                return None
            if lo:
                lows = lo if lows is None else tuple(map(min, lows, lo))
    return shape, lows


@lru_cache(maxsize=8192)
def _access_lows(domain: str, relation: str) -> "tuple | None":
    """The lowest index per dim of the image of ``domain`` under ``relation``; () when it is empty; None when a
    dim has no constant lowest index."""
    try:
        im = isl.Set(domain).apply(isl.Map(relation))
    except isl.Error:  # malformed texts: the bind names the fault
        return None
    if im.is_empty():
        return ()
    out = tuple(val_int(im.dim_min_val(k)) for k in range(im.dim(isl.dim_type.set)))
    return None if None in out or not out else out


def at_origin(region: PolyRegion) -> PolyRegion:
    """region with each input and output tensor's accesses moved by :func:`shifts` (the module docstring)."""
    return _at_origin(region)


@lru_cache(maxsize=8192)
def _at_origin(region: PolyRegion) -> PolyRegion:
    moves = shifts(region)
    if not moves:
        return region

    def moved(a: Access) -> Access:
        delta = moves.get(a.tensor)
        if delta is None:
            return a
        m = isl.Map(a.relation)
        xs = [f"x{k}" for k in range(len(delta))]
        to = ", ".join(f"{x} - {d}" if d else x for x, d in zip(xs, delta, strict=True))
        shift = isl.Map(f"{{ {a.tensor}[{', '.join(xs)}] -> {a.tensor}[{to}] }}").align_params(m.get_space())
        return Access(a.tensor, str(m.apply_range(shift)))
    stmts = tuple(replace(s, reads=tuple(moved(a) for a in s.reads), write=moved(s.write)) for s in region.statements)
    return replace(region, statements=stmts)
