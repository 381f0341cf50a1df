"""The ``--cost model`` search never returns a partition priced above one kernel per op or above the
``--cost size`` partition, whatever limit stops it (docs/DESIGN.md §Cost model)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polysat.bench.corpora.scale_models import WeightFree, _io
from polysat.checker.randprog import motif_programs, random_program
from polysat.frontend.onnx import import_onnx
from polysat.ir.tiny_json import dump_tiny
from polysat.pipeline import Compilation
from polysat.pricing.kernels import total_us
from polysat.search import model as search_model
from polysat.search.merge import SearchLimits

SLACK = 1e-9  # relative: the same kernels priced twice agree to rounding


def _prices(doc) -> tuple:
    """(chosen µs, one kernel per op µs, --cost size µs, the merge search's stop reason)."""
    s = Compilation(doc, cost="model").search
    size = total_us(Compilation(doc, cost="size").priced)
    return s.best.total, s.baseline.total, size, s.stop


def _not_above(chosen: float, *others: float) -> bool:
    return all(chosen <= o * (1 + SLACK) + SLACK for o in others)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(4, 12))
def test_random_programs_never_price_above_either_baseline(seed, size):
    p = random_program(np.random.default_rng(seed), size)
    chosen, unfused, sized, _ = _prices(dump_tiny(p))
    assert _not_above(chosen, unfused, sized), (seed, chosen, unfused, sized)


@pytest.mark.parametrize("graph", [("soft_moe", 4), ("gpt2", "small", 1)], ids=["soft_moe_e4", "gpt2_small_L1"])
def test_scale_graphs_never_price_above_either_baseline(graph):
    """Graphs of bench/scale.py (weight-free ONNX: a soft MoE, its experts concatenated, and a GPT-2 layer),
    compiled as a user would: the partition returned is at or below both baselines, and fuses something."""
    from polysat.bench.corpora.scale_models import build
    chosen, unfused, sized, stop = _prices(import_onnx(build(*graph)))
    assert _not_above(chosen, unfused, sized), (graph, chosen, unfused, sized, stop)
    assert chosen < unfused, (graph, chosen, unfused)


def _gemm_rmsnorm() -> dict:
    """A GEMM, a residual add and an RMSNorm of its rows (LLaMA's down-projection and the next norm): the
    default partition computes the norm's row reduction in the GEMM's kernel, priced far above one
    kernel per op at these sizes."""
    g = WeightFree()
    y = g.op("Add", ["r", g.matmul("x", 1024, 2048)])
    g.op("Identity", [g.rmsnorm(y, 2048)])
    g.nodes[-1].output[0] = "out"
    return import_onnx(g.built([_io("x", [1, 128, 1024]), _io("r", [1, 128, 2048])], "out", [1, 128, 2048], "gemm_rmsnorm"))


def _stopped_at_once(monkeypatch) -> None:
    monkeypatch.setattr(SearchLimits, "from_knobs", classmethod(lambda cls: cls(prices=0, seconds=0.0)))


@pytest.mark.parametrize("k", range(4))
def test_motifs_stopped_at_once_keep_the_cheaper_baseline(k, monkeypatch):
    """A merge search stopped before it prices anything beyond its first path still returns a partition
    at or below both complete partitions priced first, and says which limit stopped it."""
    _stopped_at_once(monkeypatch)
    p = motif_programs(np.random.default_rng(11))[k]
    chosen, unfused, sized, stop = _prices(dump_tiny(p))
    assert _not_above(chosen, unfused, sized), (k, chosen, unfused, sized)
    assert stop == "exhausted" or "limit" in stop


def test_a_default_partition_priced_above_one_kernel_per_op_is_not_returned(monkeypatch):
    """Whatever the merge search returns (here: one stopped on its first path, which keeps the default
    partition's decisions) and with no descent after it (as on a large program), the dearer baseline is
    never the answer."""
    real = search_model.merge_phase
    init = search_model.ModelCost.__init__
    monkeypatch.setattr(init, "__defaults__", init.__defaults__[:3] + (0,) + init.__defaults__[4:])  # exact_sites
    monkeypatch.setattr(search_model, "FUSE_ROUNDS", 0)

    def first_path_only(*args):
        fused, res, rejected = real(*args)
        return args[9], dataclasses.replace(res, stop="price limit (0 groups priced)"), rejected  # (the hint)
    monkeypatch.setattr(search_model, "merge_phase", first_path_only)
    chosen, unfused, sized, stop = _prices(_gemm_rmsnorm())
    assert sized > 1.5 * unfused  # the case: the default partition is the dearer baseline
    assert _not_above(chosen, unfused, sized) and "price limit" in stop, (chosen, unfused, sized, stop)


def test_a_search_out_of_time_says_so_and_keeps_the_best_partition_priced(monkeypatch):
    """POLYSAT_SEARCH_TOTAL_SECONDS spent (here: none given): the descent after the merge search stops at
    once, its stop reason says so, and the partition returned is still at or below both baselines."""
    monkeypatch.setenv("POLYSAT_SEARCH_TOTAL_SECONDS", "0")
    chosen, unfused, sized, stop = _prices(_gemm_rmsnorm())
    assert "the descent stopped at the time limit (0 s CPU)" in stop, stop
    assert _not_above(chosen, unfused, sized), (chosen, unfused, sized)


def test_a_saturation_stopped_before_the_legality_facts_keeps_a_partition_legal_by_construction(monkeypatch):
    """No fusion-facts/-conflicts ran (an iteration limit stopped the rewrites): no rule said which fusions
    are illegal, so the search returns the cheaper of one kernel per op and the default partition, and says so."""
    monkeypatch.setenv("POLYSAT_EGRAPH_ITERS", "2")
    chosen, unfused, sized, stop = _prices(_gemm_rmsnorm())
    assert stop == ("not searched: the saturation stopped at its iter limit before the fusion legality facts"), stop
    assert chosen == pytest.approx(unfused) and _not_above(chosen, unfused, sized)


def test_one_kernel_per_op_is_priced_only_where_the_default_partition_is_not_below_its_floor(monkeypatch):
    """A soft MoE of 4 experts: its one kernel per op partition's admissible floor (each kernel's launch and
    output bytes, search/merge.py ``partition_floor``) is already above the default partition's price, so the
    search never prices it (it is priced on demand, ``Search.baseline``) and still ends at or below both. Searched
    whole (its experts side by side are otherwise parallel segments, search/branches.py, each part searched so)."""
    from polysat.bench.corpora.scale_models import build
    from polysat.search import branches
    from polysat.search.merge import partition_floor
    from polysat.search.reprice import Repricer
    monkeypatch.setattr(branches, "parallel", lambda prog: None)
    sizes = []
    real, whole = search_model.price_kernels, Repricer.__call__

    def counting(prog, part, *args, **kw):  # a partition checked against a price it must beat
        sizes.append(len(part.kernels))
        return real(prog, part, *args, **kw)

    def counting_whole(self, prog, part, *bound):  # a candidate priced (search/reprice.py)
        sizes.append(len(part.kernels))
        return whole(self, prog, part, *bound)
    monkeypatch.setattr(search_model, "price_kernels", counting)
    monkeypatch.setattr(Repricer, "__call__", counting_whole)
    s = Compilation(import_onnx(build("soft_moe", 4)), cost="model").search
    searched = list(sizes)
    base = s.baseline
    floor = partition_floor(base.extraction.program, base.extraction.partition, {}, "sm90")
    assert len(base.priced) not in searched and sizes[len(searched):] == [len(base.priced)]
    assert s.best.total <= floor <= base.total, (s.best.total, floor, base.total)


def test_pricing_a_partition_stops_once_its_kernels_add_up_above_a_bound():
    """``price_kernels(above=...)``: the search asks whether one kernel per op beats a price it has (a carried
    segment's); None as soon as the kernels priced add up to more, the whole list when they never do."""
    from polysat.pricing.kernels import price_kernels
    x = Compilation(_gemm_rmsnorm(), cost="model").search.baseline.extraction
    full = price_kernels(x.program, x.partition, {}, "sm90")
    total = total_us(full)
    assert len(full) > 2
    assert price_kernels(x.program, x.partition, {}, "sm90", above=total) == full
    assert price_kernels(x.program, x.partition, {}, "sm90", above=total * (1 - 1e-6)) is None
    assert price_kernels(x.program, x.partition, {}, "sm90", above=full[0].cost.time_est_us / 2) is None


def test_pricing_a_partition_whose_floors_add_up_above_the_bound_prices_no_kernel(monkeypatch):
    """``price_kernels(above=...)`` first adds up each kernel's ``price_floor`` (at most its price): when they
    exceed the bound, no kernel is priced at all: the only prices asked are those deciding whether an fp32
    contraction runs 3xTF32 or on the FP32 pipes (pricing/kernels.py ``_cheaper``), made before the floors."""
    from polysat.analyses.price import price_floor
    from polysat.pricing import kernels
    x = Compilation(_gemm_rmsnorm(), cost="model").search.baseline.extraction
    full = kernels.price_kernels(x.program, x.partition, {}, "sm90")
    floors = [p.cost.time_est_us if p.region is None else price_floor(kernels.canonical(p.region), "sm90") for p in full]
    assert all(0 < f <= p.cost.time_est_us for f, p in zip(floors, full)), floors
    real, real_cheaper, calls, deciding = kernels.price, kernels._cheaper, [], [0]

    def cheaper(region, arch):
        deciding[0] += 1
        try:
            return real_cheaper(region, arch)
        finally:
            deciding[0] -= 1
    monkeypatch.setattr(kernels, "_cheaper", cheaper)
    monkeypatch.setattr(kernels, "price", lambda r, arch: calls.append(deciding[0]) or real(r, arch))
    assert kernels.price_kernels(x.program, x.partition, {}, "sm90", above=sum(floors) * 0.99) is None
    assert all(calls), calls  # a kind decision's prices, no kernel's
    assert kernels.price_kernels(x.program, x.partition, {}, "sm90", above=total_us(full)) == full and calls
