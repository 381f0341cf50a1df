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
    pairs = B * H * n * (n + 1) // 2  # the (query, key) pairs the causal mask keeps
    mma = 2 * 2 * pairs * D
    rows, blocks = B * H * n, -(-n // p.region.stream_block)
    assert p.cost.flops >= mma + pairs + rows * blocks * D // 2  # + exp2 per score + accumulator rescale
    assert p.cost.flops < 1.5 * mma  # the 5-D widening casts the contractions read through are not priced


def _attention(n: int, causal: bool, dtype: str = "fp16"):
    from polysat.bench.gpu_estimates import attention_doc
    from polysat.pipeline import Compilation
    c = Compilation(attention_doc({"batch": B, "heads": H, "seq": n, "d": D, "causal": causal, "dtype": dtype}),
                    arch="sm90", cost="model")
    if dtype == "fp16":
        (p,) = c.priced
        return p
    return next(p for p in c.priced if p.region.stream)  # fp32: the streamed kernel (Q K^T may run 3xTF32 apart)


@pytest.mark.parametrize("n", [1024, 4096])
def test_the_keys_a_causal_mask_hides_are_not_priced(n):
    """The attention kind skips the key blocks its causal mask hides; Poly Core counts the kept pairs only:
    half the work and the time (the H200 measured the causal kernel at 0.56x the other at seq 4096)."""
    full, causal = _attention(n, False), _attention(n, True)
    ratio = causal.cost.flops / full.cost.flops
    assert (n + 1) / (2 * n) - 0.01 <= ratio <= (n + 1) / (2 * n) + 0.05
    assert 0.45 <= causal.cost.time_est_us / full.cost.time_est_us <= 0.65  # the launch and O are not halved
    assert causal.cost.bytes == full.cost.bytes  # every query row still reads its keys once, O written once


def test_a_mask_the_kind_does_not_skip_hides_nothing():
    """An fp32 streamed attention runs on the SIMT kind, which walks every key: its causal pairs are all priced
    (its scores Q K^T may be a 3xTF32 GEMM of their own, where the prices say so)."""
    full, causal = _attention(512, False, "fp32"), _attention(512, True, "fp32")
    assert not any(st.unit == "tensor" for st in causal.region.statements)
    assert causal.cost.flops >= full.cost.flops


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
        # causal: each row keeps the keys up to its own, so the first block is the tile's fullest
        assert card(t.slices[name]) <= card(ts.slices[name]) * (512 // p.region.stream_block)
        assert card(ts.slices[name]) < card(t.slices[name])
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
