"""Poly Core prices the streamed attention region honestly (docs/DESIGN.md §Streaming): device bytes are Q, K,
V and O once (no P round trip), FLOPs cover both contractions, the exponentials and the recurrence's
rescaling, the on-chip values are one key block of the tile (so a long key axis never spills), a second walk
over the keys (two passes) costs more, and the search picks the stream because it is cheaper."""
from __future__ import annotations

import dataclasses
import pathlib

import pytest

from polysat.analyses.price import price, stream_tile
from polysat.analyses.footprint import card, extents, make_tile
from polysat.commands.extract import run_extract
from polysat.search.model import ModelCost, saturate_unfused
from polysat.frontend import load_model

EX = pathlib.Path(__file__).resolve().parent.parent / "examples"
B, H, D = 2, 8, 64
_CACHE: dict = {}


def streamed(n: int):
    """The one priced kernel of examples/attention.json with M = N = n."""
    if n not in _CACHE:
        r = run_extract(str(EX / "attention.json"), cost="model", bind={"B": B, "H": H, "M": n, "N": n})
        assert r["total"]["kernels"] == 1
        (_CACHE[n],) = r["_priced"]
    return _CACHE[n]


@pytest.mark.parametrize("n", [512, 4096])
def test_device_bytes_are_q_k_v_and_o_once(n):
    p = streamed(n)
    assert len(p.region.stream) == 3  # running max, running sum, weighted sum
    assert p.cost.bytes == 4 * B * H * n * D * 2  # fp16 Q, K, V in and O out; P never leaves the chip


@pytest.mark.parametrize("n", [512, 4096])
def test_flops_cover_both_contractions_the_exponentials_and_the_rescaling(n):
    p = streamed(n)
    mma = 2 * 2 * B * H * n * n * D
    rows, blocks = B * H * n, -(-n // p.region.stream_block)
    assert p.cost.flops >= mma + B * H * n * n + rows * blocks * D  # + exp2 per score + accumulator rescale
    assert p.cost.flops < 1.5 * mma  # the 5-D widening casts the contractions read through are not priced


def test_on_chip_values_are_one_key_block_so_long_rows_do_not_spill():
    p = streamed(4096)
    assert not p.cost.stops and p.cost.smem <= 227 * 1024
    naive = price(dataclasses.replace(p.region, stream=()), "sm90")  # the same statements, not streamed
    assert naive.bytes > 100 * p.cost.bytes  # whole score rows per tile no longer fit: they go through memory
    assert naive.time_est_us > 5 * p.cost.time_est_us


def test_stream_tile_cuts_every_statement_on_the_key_axis_to_one_block():
    p = streamed(512)
    b = p.region.bind()
    t = make_tile(b, dict(p.cost.tile))
    ts = stream_tile(b, t)
    for name in p.region.stream:
        s = b.stmt(name)
        (key,) = s.reduce_dims
        lo, hi = extents(ts.slices[name])[s.dims.index(key)]
        assert hi - lo + 1 == p.region.stream_block
        assert card(ts.slices[name]) * (512 // p.region.stream_block) == card(t.slices[name])
    assert ts.slices[b.driver.name] is t.slices[b.driver.name]


def test_a_second_walk_over_the_keys_costs_more():
    p = streamed(4096)
    again = tuple(s.name for s in p.region.statements if s.unit == "tensor" and s.name not in p.region.stream)
    two = price(dataclasses.replace(p.region, stream_recompute=again), "sm90")
    assert two.flops > p.cost.flops and two.time_est_us > p.cost.time_est_us


def test_the_search_streams_because_it_is_cheaper_than_the_two_kernel_form():
    prog = load_model(str(EX / "attention.json"))
    st, _ = saturate_unfused(prog)
    bind = {"B": B, "H": H, "M": 1024, "N": 1024}
    best = ModelCost(bind).search(st)
    two = ModelCost(bind).search(st, stream=False)
    assert [s.passes for s in best.streamed] == [1] and not two.streamed
    assert len(best.best.priced) == 1 and len(two.best.priced) == 2
    assert best.best.total < two.best.total
