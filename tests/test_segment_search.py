"""Repeated blocks are found, saturated, searched and priced once, and the stitched partition keeps
the program's values (search/segment.py, search/stitch.py)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polysat.bench.models import mlp_stack, transformer
from polysat.search.reprice import Repricer
from polysat.tests.numeric import bind_env, close, max_error, partition_plays_back, random_inputs, same_outputs
from polysat.egraph.region_synth import synthesize
from polysat.search.segment import segment
from polysat.search.stitch import SegmentedState
from polysat.frontend import program_from_doc
from polysat.ir.evaluate import evaluate
from polysat.ir.playback import playback
from polysat.ir.tiny import Ops
from polysat.pipeline import Compilation


def _program(doc: dict):
    return program_from_doc(doc, "model")


def test_segmenter_finds_the_three_blocks_of_a_transformer():
    p = _program(transformer(3, d_model=64, heads=4, d_ff=128))
    segs = segment(p)
    assert len(segs) == 3 and len({s.key for s in segs}) == 1
    # each block reads the residual stream and its own weights, and writes the next residual stream
    one = _program(transformer(1, d_model=64, heads=4, d_ff=128))
    assert len(segs[0].program.nodes) == len(one.nodes)
    weights = [{p[o].arg["tensor_id"] for i, o in s.origin.items() if i.startswith("i") and p[o].op == Ops.INPUT}
               for s in segs]
    assert [{t[:2] for t in w - {"X"}} for w in weights] == [{"b0"}, {"b1"}, {"b2"}]
    assert segs[1].origin["i0"] == segs[0].origin[segs[0].program.outputs[0][1]]


def test_a_program_without_repeats_is_one_segment():
    p = _program(transformer(1, d_model=64, heads=4, d_ff=128))
    assert len(segment(p)) == 1


def test_elementwise_repeats_are_not_cut():
    layers = {"signature": {"inputs": [{"tensor": "X"}], "outputs": [{"tensor": "Y3"}]},
              "tensors": {"X": {"dtype": "fp32", "shape": [8, 8]}, **{f"Y{i}": {"dtype": "fp32"} for i in range(4)}},
              "graph": [{"op": "Elementwise", "name": f"r{i}", "fn": "relu", "inputs": ["X" if i == 0 else f"Y{i - 1}"],
                         "outputs": [f"Y{i}"]} for i in range(4)]}
    assert len(segment(_program(layers))) == 1


def _searched(doc: dict) -> tuple:
    """(doc, Compilation, Search, [nodes of each program a partition of was priced whole]) under --cost model."""
    calls = []
    real = Repricer.__call__

    def counting(self, prog, part, *bound):  # partitions priced (search/reprice.py; not price_kernels' checks)
        calls.append(len(prog.nodes))
        return real(self, prog, part, *bound)
    Repricer.__call__ = counting
    try:
        c = Compilation(doc, cost="model")
        s = c.search
    finally:
        Repricer.__call__ = real
    return doc, c, s, calls


@pytest.fixture(scope="module")
def stack():
    return _searched(mlp_stack(3, width=32, tokens=16, dtype="fp32"))


@pytest.fixture(scope="module")
def blocks():
    return _searched(transformer(3, d_model=32, heads=2, d_ff=64, seq=8, dtype="fp32"))


def test_a_three_block_transformer_is_searched_and_priced_as_one_block(blocks):
    _, c, s, calls = blocks
    st = c.saturated[0]
    assert isinstance(st, SegmentedState) and len(st.segments) == 3 and len(st.states) == 1
    # every partition priced is one block's (never the whole program), at most one per candidate one block's
    # search evaluates (a candidate the legality rules refuse is not priced)
    assert 0 < len(calls) <= s.evaluations and max(calls) < len(c.program.nodes) / 2
    assert len(s.best.priced) % 3 == 0 and len(s.best.extraction.partition.kernels) == len(s.best.priced)
    per = len(s.best.priced) // 3
    costs = [p.cost.time_est_us for p in s.best.priced]
    assert costs[:per] == costs[per:2 * per] == costs[2 * per:]


def test_stitched_transformer_plays_back_equal_to_the_reference(blocks):
    _, c, _, _ = blocks
    assert partition_plays_back(c, 7)


def test_each_distinct_block_is_searched_and_priced_once(stack):
    doc, c, s, calls = stack
    st = c.saturated[0]
    assert isinstance(st, SegmentedState) and len(st.segments) == 3 and len(st.states) == 1
    one = Compilation(mlp_stack(1, width=32, tokens=16, dtype="fp32"), cost="model").search
    # every partition priced is one block's; the block is polished as the whole program would be (three blocks'
    # sites together take the large program's descent, not the exact one a block alone takes): no more candidates
    assert len(calls) == s.evaluations < one.evaluations
    assert len(s.best.priced) == 3 * len(one.best.priced)
    assert s.best.total == pytest.approx(3 * one.best.total)


def test_stitched_partition_plays_back_equal_to_the_reference(stack):
    doc, c, s, _ = stack
    x = c.extraction
    p = c.program
    rng = np.random.default_rng(5)
    inputs = random_inputs(p, rng, bind_env(p, rng))
    ok, _, err = same_outputs(p, x.program, inputs)
    assert ok, err
    ref = evaluate(p, inputs)
    got = playback(synthesize(x.program, x.partition), inputs)
    assert all(close(ref[k], got[k]) for k in ref)


def test_stitched_view_and_terms_cover_every_block(stack):
    from polysat.egraph.api import dump
    _, c, s, _ = stack
    doc = dump(*c.saturated, c.extraction)
    assert doc["partition"]["kernels"] and doc["terms"]
    view = c.saturated[0].export()
    assert all(cl in view.classes for cl in c.extraction.chosen)
    assert all(any(n is e for e in view.classes[cl]) for cl, n in c.extraction.chosen.items())  # the same e-nodes
    assert {r.mat for r in s.rejected} <= set(view.classes)


def test_explain_names_each_blocks_own_ops_and_whole_program_prices(blocks):
    import re
    from polysat.commands.explain import explain_model
    from polysat.commands.extract import extract_result
    _, c, s, _ = blocks
    entries = explain_model(extract_result(c))
    assert {e["value"][:2] for e in entries} == {"b0", "b1", "b2"}
    for e in entries:
        assert {m for m in re.findall(r"\bb([0-9])_", e["why"])} <= {e["value"][1]}, e
        if e["scope"] == "the whole partition" and e["verdict"] == "streamed":  # taken: the streamed side is the partition
            assert e["fused_us"] == pytest.approx(s.best.total, rel=1e-3) and e["kernels"][1] == len(s.best.priced)
        elif e["scope"] == "the whole partition":  # both sides priced over all three blocks
            assert e["separate_us"] == pytest.approx(s.best.total, rel=1e-3) and e["kernels"][0] == len(s.best.priced)
    assert [e["verdict"] for e in entries].count("segment boundary") == 2


def test_random_programs_load_under_the_model_cost():
    """A program whose outputs include a program input or a view of one (hypothesis-style random
    programs) is one segment, loaded as it is (the segmenter once failed on it with a KeyError)."""
    from polysat.search.model import saturate_unfused
    from polysat.checker.randprog import random_program
    for seed in range(40):
        p = random_program(np.random.default_rng(seed))
        segs = segment(p)
        assert len(segs) == 1 and segs[0].program is p
        saturate_unfused(p)


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_the_model_search_partition_of_a_random_program_plays_back_equal_to_the_reference(seed):
    """Whatever partition ``--cost model`` returns for a random program, playback of its regions equals
    the reference evaluator (rtol = atol = 1e-3)."""
    from polysat.checker.randprog import random_program
    from polysat.ir.tiny_json import dump_tiny
    rng = np.random.default_rng(seed)
    p = random_program(rng)
    c = Compilation(dump_tiny(p), cost="model")
    ins = random_inputs(c.program, rng, bind_env(c.program, rng))
    want, got = evaluate(c.program, ins), playback(c.regions, ins)
    for name, w in want.items():
        assert close(got[name], w), (name, max_error(got[name], w))


def _two_stages():
    """Three residual blocks of width 32, a projection to 64, three blocks of width 64 (ResNet-like stages:
    blocks identical within a stage, of another shape in the next)."""
    from polysat.bench.corpora.scale_models import WeightFree, _io
    from polysat.frontend.onnx import import_onnx
    g = WeightFree()
    x = "x"
    for d in (32, 64):
        if d == 64:
            x = g.matmul(x, 32, 64)
        for _ in range(3):
            x = g.op("Add", [x, g.matmul(g.op("Relu", [g.matmul(g.layernorm(x, d), d, 3 * d)]), 3 * d, d)])
    g.op("Identity", [g.layernorm(x, 64)])
    g.nodes[-1].output[0] = "y"
    return _program(import_onnx(g.built([_io("x", [8, 32])], "y", [8, 64], "stages")))


def test_each_stage_of_blocks_of_another_shape_is_its_own_run():
    segs = segment(_two_stages())
    keys = [s.key for s in segs]
    runs = [k for k in dict.fromkeys(keys) if keys.count(k) >= 2]
    assert len(runs) == 2, [len(s.program.nodes) for s in segs]  # one block of each width, each met 3 times
    assert all(keys.count(k) == 3 for k in runs)
    widths = {s.key: {d for n in s.program.nodes for d in n.shape} for s in segs}
    assert 96 in widths[runs[0]] and 192 not in widths[runs[0]] and 192 in widths[runs[1]]


def test_a_stage_of_the_same_structure_takes_the_decisions_searched_in_the_first():
    """The blocks of the second stage are the first stage's at other extents (Segment.structure): their search
    prices the first stage's decisions, carried through the program nodes they name (search/transfer.py),
    keeps them (legal, priced at or below both baselines), and they are what a full search there finds."""
    from polysat.ir.tiny_json import dump_tiny
    from polysat.search.model import CARRIED, ModelCost
    from polysat.search.transfer import carried
    from polysat.egraph.graph import export
    from polysat.search.sites import sites, stream_sites
    prog = _two_stages()
    segs = segment(prog)
    keys = [s.key for s in segs]
    a, b = (s for s in dict((s.key, s) for s in segs).values() if keys.count(s.key) == 3)
    assert a.structure == b.structure and a.key != b.key
    c = Compilation(dump_tiny(prog), cost="model")
    state, s = c.saturated[0], c.search
    m = ModelCost().for_program(state.program, {})
    first = m.search(state.states[a.key])
    view = export(state.states[b.key])
    given = carried((state.states[a.key], first.best.fused), view, state.states[b.key], sites(view),
                    frozenset(stream_sites(view)))
    assert given and len(given) == len(first.best.fused)
    took = m.search(state.states[b.key], like=(state.states[a.key], first.best.fused))
    full = m.search(state.states[b.key])
    assert took.stop == CARRIED and full.stop != CARRIED and took.groups_priced == 0 < full.groups_priced
    assert took.best.fused == given and took.best.total == pytest.approx(full.best.total)
    assert took.best.total <= took.baseline.total
    assert took.rejected and all(r.why.startswith(("illegal", "priced higher", "no fused term", "not tried"))
                                 for r in took.rejected), [r.why for r in took.rejected]  # --explain's reasons
    rng = np.random.default_rng(3)
    inputs = random_inputs(c.program, rng, bind_env(c.program, rng))
    ok, _, err = same_outputs(c.program, c.extraction.program, inputs)
    assert ok, err


def test_the_search_maps_only_the_e_nodes_it_chose_into_the_stitched_view():
    """The stitch makes the stitched e-node of each chosen term (and site) on demand; the whole stitched view
    (every instance's e-nodes) is built only when asked (``export``: --dump, extract's JSON)."""
    c = Compilation(mlp_stack(3, width=32, tokens=16, dtype="fp32"), cost="model")
    _ = c.search
    st = c.saturated[0]
    assert isinstance(st, SegmentedState) and st._view is None
    made = sum(len(st.instance(j).made) for j in range(len(st.segments)))
    assert 0 < made < sum(len(ns) for ns in st.export().classes.values())
