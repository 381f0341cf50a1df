"""Slices of one tensor at other base offsets share one pricing exactly where the price cannot tell them apart
(analyses/origin.py): the shared price equals the unshared one field for field, and a misaligned offset that
changes the sectors read keeps its own."""
from __future__ import annotations

import dataclasses

import islpy as isl
import pytest

from polysat.analyses import price as P
from polysat.analyses.devices import device
from polysat.analyses.origin import at_origin, shifts
from polysat.analyses.poly_region import Access, PolyRegion
from tests.poly_examples import F16, F32, T, stmt

DEV = device("sm90")


def printed(region: PolyRegion) -> PolyRegion:
    """region with its accesses in isl's own text, as the pipeline's regions (Poly-View) are written."""
    def acc(a: Access) -> Access:
        return Access(a.tensor, str(isl.Map(a.relation)))
    return dataclasses.replace(region, statements=tuple(
        dataclasses.replace(s, reads=tuple(acc(a) for a in s.reads), write=acc(s.write)) for s in region.statements))


def expert(row: int, col: int = 0, rows: int = 2, width: int = 64, dtype=F32) -> PolyRegion:
    """An expert's kernel: a [rows, 256] GEMM of its slice X[row + i, col + k] (width k's) of a shared
    activation by its weight, bias and ReLU after, as a mixture-of-experts layer runs each expert."""
    return printed(PolyRegion("expert", [T("X", (16, 256), dtype), T("W", (width, 256), dtype), T("b", (256,), dtype),
                                 T("acc", (rows, 256), F32, "internal"), T("Y", (rows, 256), F32, "output")],
                      [stmt("mm", {"i": rows, "n": 256, "k": width}, [f"X[{row} + i, {col} + k]", "W[k, n]"],
                            "acc[i, n]", flops=2, combine="sum"),
                       stmt("relu", {"i": rows, "n": 256}, ["acc[i, n]", "b[n]"], "Y[i, n]", flops=2)]))


def unshared(region: PolyRegion) -> dict:
    """The region's price computed on the region itself (no move, no entry another region made)."""
    return P._best.__wrapped__(region, DEV).to_json()


def test_experts_at_other_rows_share_one_pricing():
    regions = [expert(row) for row in (0, 2, 6, 14)]
    assert len({at_origin(r) for r in regions}) == 1
    P._best.cache_clear()
    prices = [P.price(r, DEV).to_json() for r in regions]
    info = P._best.cache_info()
    assert (info.misses, info.hits) == (1, 3)  # one pricing serves the four
    for r, p in zip(regions, prices, strict=True):
        assert p == unshared(r)


@pytest.mark.parametrize("dtype, per", [(F32, 8), (F16, 16)])
def test_a_misaligned_column_keeps_its_remainder(dtype, per):
    """Columns move by whole sectors only: an offset of half a sector stays, and is priced on its own, since it
    reads one sector more per row than the aligned slice; offsets equal modulo a sector share."""
    def at(col: int) -> PolyRegion:
        return expert(0, col, width=64, dtype=dtype)
    half = per // 2
    assert shifts(at(per)) == {"X": (0, per)} and shifts(at(half)) == {}
    assert shifts(at(per + half)) == {"X": (0, per)}
    assert at_origin(at(per)) == at_origin(at(0)) == at(0)
    assert at_origin(at(per + half)) == at_origin(at(half)) != at_origin(at(0))
    aligned, misaligned = unshared(at(0)), unshared(at(half))
    assert misaligned["bytes"] > aligned["bytes"]  # the price does depend on this offset: not shared
    assert P.price(at(half), DEV).to_json() == misaligned
    assert P.price(at(per + half), DEV).to_json() == unshared(at(per + half)) == misaligned
    assert P.price(at(per), DEV).to_json() == unshared(at(per)) == aligned


def test_outer_offsets_move_by_the_rows_sector_share():
    """A row of 4 fp16 (8 bytes) is a quarter sector: rows move four at a time, and every offset's price
    equals its unshared price."""
    def at(row: int) -> PolyRegion:
        return printed(PolyRegion("rows", [T("X", (32, 4), F16), T("Y", (2, 4), F32, "output")],
                                  [stmt("cast", {"i": 2, "j": 4}, [f"X[{row} + i, j]"], "Y[i, j]")]))
    for row in range(12):
        assert shifts(at(row)).get("X", (0, 0)) == (row - row % 4, 0)
        assert P.price(at(row), DEV).to_json() == unshared(at(row))


def test_internal_tensors_and_whole_reads_never_move():
    r = expert(0)
    assert shifts(r) == {} and at_origin(r) == r
