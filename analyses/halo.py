"""Halos: what one tile and its next neighbour along a tiled dim both load or recompute (docs/DESIGN.md §Poly Core),
from the footprints of analyses/footprint.py. Every overlap is isl's within an operation quota; past it, the overlap of
the footprints' bounding boxes, an upper bound (a windowed attention's reach composed with its inverse took isl a
minute on MaxViT at 224 px)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import prod

import islpy as isl

from .footprint import Tile, _placed, card, extents, reach, reached, tile_footprint
from .isl_util import val_int
from .poly_region import BoundRegion
from .settext import isl_quota


HALO_OPERATIONS = 20000  # isl operations one overlap of a tensor along a dim may take; past them, its boxes' overlap


@dataclass(frozen=True)
class Halo:
    per_axis: dict  # driver dim -> widest overlap (elements along the moved tensor axis)
    per_tensor: dict  # tensor -> {dim: overlap elements}
    bytes: int  # overlap bytes of one tile with its next neighbour, summed over dims and tensors
    boxed: tuple = ()  # (tensor, dim) whose overlap is its footprints' bounding boxes' (isl took too long): an upper bound


def halo(b: BoundRegion, tile: Tile, tensors) -> Halo:
    """The overlap between one tile's footprint and its next neighbour's, per tiled dim: what two
    tiles both load (or recompute). Tensors whose footprint does not move along a dim reuse it
    rather than overlap, and count 0 there. Each overlap is isl's, within ``HALO_OPERATIONS``; past them, the
    overlap of the two footprints' bounding boxes (listed in ``boxed``)."""
    sizes = dict(tile.sizes)
    per_axis = {d: 0 for d in b.driver.loop_order}
    per_tensor: dict = {}
    total, boxed = 0, []
    base = {t: tile_footprint(b, tile, t) for t in tensors}
    for d in sizes if base else ():
        placed = _placed(b, sizes, {d: 1})
        if placed is None:
            continue
        for t in tensors:
            f0 = base[t]
            if f0.is_empty():
                continue
            try:
                with isl_quota(f0.get_ctx(), HALO_OPERATIONS):
                    got = _overlap(b, d, t, f0, placed)
            except isl.Error:
                got = _box_overlap(f0, reached(b, placed[0], t))
                boxed.append((t, d))
            if got is None:
                continue
            width, n = got
            per_axis[d] = max(per_axis[d], width)
            per_tensor.setdefault(t, {})[d] = n
            total += n * b.region.tensor(t).dtype.itemsize
    return Halo(per_axis, per_tensor, total, tuple(boxed))


def _overlap(b: BoundRegion, d: str, t: str, f0: isl.Set, placed) -> "tuple | None":
    """(widest overlap along a moved axis of t, elements) of f0 with the next tile's footprint along d; None when
    the footprint does not move along d (reused, not overlapped)."""
    if d in apart(b.region, t):  # the next tile shares no element of t with this one
        return 0, 0
    f1 = reached(b, placed[0], t)
    if f0.is_equal(f1):
        return None
    ov = f0.intersect(f1)
    if ov.is_empty():
        return 0, 0
    return _widest(extents(f0), extents(f1), extents(ov)), card(ov)


def _widest(e0: tuple, e1: tuple, eo: tuple) -> int:
    """The widest extent of the overlap ``eo`` along an axis the next footprint ``e1`` moved from ``e0`` (0: none)."""
    return max((eo[k][1] - eo[k][0] + 1 for k in range(len(e0)) if e0[k][0] != e1[k][0]), default=0)


def _box_overlap(f0: isl.Set, f1: isl.Set) -> "tuple | None":
    """_overlap on the two footprints' bounding boxes: at least the exact overlap."""
    e0, e1 = extents(f0), extents(f1)
    if e0 == e1:
        return None
    box = [(max(a[0], c[0]), min(a[1], c[1])) for a, c in zip(e0, e1)]
    if any(lo > hi for lo, hi in box):
        return 0, 0
    return _widest(e0, e1, box), prod(hi - lo + 1 for lo, hi in box)


@lru_cache(maxsize=8192)
def apart(region, tensor: str) -> frozenset:
    """The driver's parallel dims along which two driver instances that touch one element of ``tensor`` never
    differ (every difference ``reach ∘ reach⁻¹`` relates has 0 there): tiles next to each other along such a
    dim share none of its elements, whatever their sizes, so the halo there is 0 with no next tile built.
    Empty when the region has no :func:`reach`, or when isl takes more than ``HALO_OPERATIONS`` to say (the
    composition of a windowed attention's reach with its inverse, MaxViT's: a minute)."""
    m = reach(region, tensor)
    if m is None:
        return frozenset()
    drv = region.bind().driver
    try:
        with isl_quota(m.get_ctx(), HALO_OPERATIONS):
            deltas = m.apply_range(m.reverse()).deltas()
            if deltas.is_empty():
                return frozenset(drv.parallel_dims)
            out = []
            for d in drv.parallel_dims:
                k = drv.dims.index(d)
                if (val_int(deltas.dim_min_val(k)), val_int(deltas.dim_max_val(k))) == (0, 0):
                    out.append(d)
            return frozenset(out)
    except isl.Error:
        return frozenset()
