"""A soft mixture of experts is cut into its identical experts side by side (search/branches.py): one expert is
saturated and searched, its partition stitched in for every expert, each expert reading its own block of the
dispatched slots; the stitched program keeps the program's values and is priced as the whole program's search."""
from __future__ import annotations

import onnx
import pytest

from polysat.bench.corpora.scale_models import soft_moe
from polysat.egraph.region_synth import synthesize
from polysat.frontend import program_from_doc
from polysat.frontend.onnx import import_onnx
from polysat.ir.evaluate import evaluate
from polysat.ir.playback import playback
from polysat.ir.tiny import Ops
from polysat.pipeline import Compilation
from polysat.pricing.kernels import canonical, price_kernels
from polysat.search import branches
from polysat.search.branches import MIN_BRANCHES, parts
from polysat.search.stitch import SegmentedState
from polysat.tests.numeric import bind_env, close, max_error, random_inputs

EXPERTS = MIN_BRANCHES  # the fewest cut


def _moe(experts: int, d: int = 32, slots: int = 2, hidden=64):
    """A soft mixture of ``experts`` experts, 16 tokens, width d, hidden width(s) ``hidden``: (ONNX model, imported
    doc, Tiny IR)."""
    model = soft_moe(experts, tokens=16, d=d, hidden=hidden, slots=slots)
    doc = import_onnx(onnx.load_from_string(model.SerializeToString()), origin="moe.onnx")
    return model, doc, program_from_doc(doc, "model")


@pytest.fixture(scope="module")
def moe():
    return _moe(EXPERTS)


def test_the_experts_are_parallel_segments(moe):
    _, _, p = moe
    segs = parts(p)
    assert len(segs) == EXPERTS + 2  # the router before, the experts, the combination after
    experts = segs[1:-1]
    assert len({s.key for s in experts}) == 1 and len({s.key for s in segs}) == 3
    # each expert reads its own block (a SHRINK) of the one dispatched value the router writes
    blocks = [p[w] for s in experts for _, w in s.entries]
    assert all(b.op == Ops.SHRINK for b in blocks) and len({b.src[0] for b in blocks}) == 1
    assert len({b.arg["lo"] for b in blocks}) == EXPERTS and blocks[0].src[0] in segs[0].exits
    assert all(len(s.exits) == 1 and s.exits[0] in {w for _, w in segs[-1].entries} for s in experts)
    assert len(parts(_moe(1)[2])) == 1  # one expert: nothing side by side, searched whole
    assert len(parts(_moe(MIN_BRANCHES - 1)[2])) == 1  # too few to pay for the parts: searched whole


def test_a_cut_mixture_plays_back_equal_to_the_reference_and_onnxruntime(moe):
    import numpy as np
    import onnxruntime as ort
    model, doc, _ = moe
    c = Compilation(doc, cost="model")
    x = c.extraction
    assert isinstance(c.saturated[0], SegmentedState) and len(c.saturated[0].states) == 3
    rng = np.random.default_rng(5)
    ins = random_inputs(c.program, rng, bind_env(c.program, rng))
    want = evaluate(c.program, ins)
    got = playback(synthesize(x.program, x.partition), ins)
    assert want.keys() == got.keys() == {"out"}
    assert close(got["out"], want["out"]), max_error(got["out"], want["out"])
    feeds = {c.program[n.id].arg["tensor_id"]: ins[c.program[n.id].arg["tensor_id"]] for n in c.program.inputs}
    assert set(feeds) == {i.name for i in model.graph.input}
    (ref,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    assert close(want["out"], ref), max_error(want["out"], ref)


def test_a_cut_mixture_is_priced_as_its_whole_search(moe, monkeypatch):
    """The same number of kernels at the same price as the whole program's search (the experts' second GEMMs write
    straight into the concatenation, as there), every kernel priced as the stitched program's own, and never
    above one kernel per op."""
    _, doc, _ = moe
    c = Compilation(doc, cost="model")
    cut = c.search
    monkeypatch.setattr(branches, "parallel", lambda *a: None)
    whole = Compilation(doc, cost="model")
    assert not isinstance(whole.saturated[0], SegmentedState)
    assert len(cut.best.priced) == len(whole.search.best.priced)
    assert cut.best.total <= whole.search.best.total * (1 + 1e-9)
    assert cut.best.total <= cut.baseline.total
    # each kernel's region and price are the stitched program's own: those of its kernels priced one by one (the
    # experts after the first: the first's region moved to their blocks, at its price, search/stitch.py _in_place)
    _own_prices(c)


def _own_prices(c) -> None:
    x = c.search.best.extraction
    again = price_kernels(x.program, x.partition, c.params, c.arch, by_kernel=True)
    assert [p.kernel.name for p in again] == [p.kernel.name for p in c.search.best.priced]
    for p, q in zip(c.search.best.priced, again):
        assert p.cost.time_est_us == q.cost.time_est_us, p.kernel.name
        assert p.region is q.region is None or canonical(p.region) == canonical(q.region), p.kernel.name


def test_experts_whose_blocks_start_mid_sector_are_each_priced_where_they_read():
    """Blocks of one 12-float row each (48 bytes: the second starts mid-sector) are not moved by whole sectors, so
    every expert's kernel is priced where it reads its block; the prices are still the stitched program's own."""
    _, doc, p = _moe(MIN_BRANCHES, d=12, slots=1)
    assert len(parts(p)) == MIN_BRANCHES + 2
    c = Compilation(doc, cost="model")
    assert isinstance(c.saturated[0], SegmentedState)
    _own_prices(c)


def test_experts_of_two_widths_are_two_groups_priced_no_worse_than_the_whole_search(monkeypatch):
    """Experts of hidden width 64 and 96, half of each: two groups of identical branches (one structure: the second
    takes the first's decisions where they hold, search/transfer.py), each searched once; the stitched partition
    has as many kernels as the whole program's search, priced no higher."""
    half = MIN_BRANCHES // 2
    _, doc, p = _moe(2 * half, hidden=(64,) * half + (96,) * half)
    segs = parts(p)
    assert len(segs) == 2 * half + 2 and len({s.key for s in segs}) == 4 and len({s.structure for s in segs[1:-1]}) == 1
    cut = Compilation(doc, cost="model").search
    monkeypatch.setattr(branches, "parallel", lambda prog: None)
    whole = Compilation(doc, cost="model").search
    assert len(cut.best.priced) == len(whole.best.priced)
    assert cut.best.total <= whole.best.total * (1 + 1e-9), (cut.best.total, whole.best.total)


def test_a_stack_of_mixtures_is_cut_in_depth_and_width_and_priced_as_its_whole_search(monkeypatch):
    """Two mixture layers of MIN_BRANCHES experts: cut in depth into its layers (search/segment.py) and each layer's
    experts side by side (``nested``): three distinct parts (router, expert, combination) for 2 x (MIN_BRANCHES + 2)
    instances; played back equal to the reference and onnxruntime, as many kernels as the whole program's search, at
    its price, each kernel priced as the stitched program's own."""
    import numpy as np
    import onnxruntime as ort
    model = soft_moe(EXPERTS, tokens=16, d=32, hidden=64, slots=2, layers=2)
    doc = import_onnx(onnx.load_from_string(model.SerializeToString()), origin="moe.onnx")
    p = program_from_doc(doc, "model")
    segs = parts(p)
    assert len(segs) == 2 * (EXPERTS + 2) and len({s.key for s in segs}) == 3
    assert segs[EXPERTS + 1].exits[0] in {w for _, w in segs[EXPERTS + 2].entries}  # layer 2 reads layer 1's output
    c = Compilation(doc, cost="model")
    assert isinstance(c.saturated[0], SegmentedState) and len(c.saturated[0].states) == 3
    x = c.extraction
    rng = np.random.default_rng(7)
    ins = random_inputs(c.program, rng, bind_env(c.program, rng))
    want = evaluate(c.program, ins)
    got = playback(synthesize(x.program, x.partition), ins)
    assert close(got["out"], want["out"]), max_error(got["out"], want["out"])
    feeds = {c.program[n.id].arg["tensor_id"]: ins[c.program[n.id].arg["tensor_id"]] for n in c.program.inputs}
    (ref,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    assert close(want["out"], ref), max_error(want["out"], ref)
    _own_prices(c)
    cut = c.search
    monkeypatch.setattr("polysat.search.model.parts", lambda prog: [prog])  # one part: searched whole
    whole = Compilation(doc, cost="model").search
    assert len(cut.best.priced) == len(whole.best.priced)
    assert cut.best.total <= whole.best.total * (1 + 1e-9), (cut.best.total, whole.best.total)
    assert cut.best.total <= cut.baseline.total
