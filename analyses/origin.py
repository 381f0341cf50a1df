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

from .footprint import extents, full_footprint
from .poly_region import Access, PolyRegion

SECTOR = 32  # bytes: the unit of device-memory transactions (analyses/price.py SECTOR)


def shifts(region: PolyRegion) -> dict:
    """tensor -> its per-dim shift (subtracted from every access), for the tensors that move."""
    b = region.bind()
    out = {}
    for t in region.tensors:
        size = t.dtype.itemsize
        if t.role == "internal" or not t.shape or SECTOR % size:
            continue
        fa = full_footprint(b, t.name)
        if fa.is_empty():
            continue
        shape, per = b.shapes[t.name], SECTOR // size
        delta = tuple(lo - lo % (per // gcd(per, prod(shape[d + 1:]))) for d, (lo, _) in enumerate(extents(fa)))
        if any(delta):
            out[t.name] = delta
    return out


def at_origin(region: PolyRegion) -> PolyRegion:
    """region with each input and output tensor's accesses moved by :func:`shifts` (the module docstring)."""
    return _at_origin(region)


@lru_cache(maxsize=8192)
def _at_origin(region: PolyRegion) -> PolyRegion:
    moves = shifts(region)
    return shifted(region, moves) if moves else region


def shifted(region: PolyRegion, moves: dict) -> PolyRegion:
    """region with every access of each tensor in ``moves`` (tensor -> per-dim delta) moved by minus its delta."""
    def moved(a: Access) -> Access:
        delta = moves.get(a.tensor)
        if delta is None:
            return a
        m = isl.Map(a.relation)
        xs = [f"x{k}" for k in range(len(delta))]
        to = ", ".join(f"{x} - {d}" if d > 0 else f"{x} + {-d}" if d else x for x, d in zip(xs, delta, strict=True))
        shift = isl.Map(f"{{ {a.tensor}[{', '.join(xs)}] -> {a.tensor}[{to}] }}").align_params(m.get_space())
        return Access(a.tensor, str(m.apply_range(shift)))
    stmts = tuple(replace(s, reads=tuple(moved(a) for a in s.reads), write=moved(s.write)) for s in region.statements)
    return replace(region, statements=stmts)


def sector_aligned(delta: tuple, shape: tuple, itemsize: int) -> bool:
    """Whether moving a tensor's accesses by ``delta`` moves each dim by a whole number of sectors of its linear
    address (the module docstring: then the price cannot tell the two apart)."""
    return all(d * prod(shape[k + 1:]) * itemsize % SECTOR == 0 for k, d in enumerate(delta))
