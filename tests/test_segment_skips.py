"""With the second segmenting pass (POLYSAT_SEGMENT_LIVE, off by default, set here), a U-Net is cut into its levels where a
few values are live (the stream and the skip tensors the decoder reads later), its levels of one structure share a
search, and the stitched partition keeps the program's values and is priced as the whole program's search; the
pass cuts only where a contraction reads each live value by broadcast, and only runs with a boundary of two or more
live values, so a stack of levels without skips stays whole (search/segment.py, search/stitch.py)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from onnx import helper

from polysat.bench.corpora.scale_models import WeightFree, _io, unet
from polysat.egraph.region_synth import synthesize
from polysat.frontend import program_from_doc
from polysat.frontend.onnx import import_onnx
from polysat.ir.evaluate import evaluate
from polysat.ir.playback import playback
from polysat.pipeline import Compilation
from polysat.search.segment import _broadcast_read, segment
from polysat.search.stitch import SegmentedState
from polysat.tests.numeric import bind_env, close, max_error, random_inputs


LIVE = "8"  # POLYSAT_SEGMENT_LIVE: a cut of the stream and up to 7 skip tensors


@pytest.fixture(scope="module")
def net():
    """A two-level U-Net, 4 channels at 16x16: (ONNX model, imported doc, Tiny IR program)."""
    model = unet(2, 4, 16)
    doc = import_onnx(onnx.load_from_string(model.SerializeToString()), origin="unet.onnx")
    return model, doc, program_from_doc(doc, "model")


def test_the_levels_of_a_unet_are_segments(net):
    _, _, p = net
    assert len(segment(p, 0)) == 1 and len(segment(p)) == 1  # no second pass (the default): the U-Net searched whole
    segs = segment(p, int(LIVE))
    assert len(segs) > 3
    shared = [x for x in dict.fromkeys(s.structure for s in segs) if sum(s.structure == x for s in segs) >= 2]
    assert len(shared) >= 2  # the encoder levels (pool, conv, conv) and the decoder levels (up, concat, conv, conv)
    for x in shared:  # levels of one structure at other extents: distinct programs
        assert len({s.key for s in segs if s.structure == x}) == sum(s.structure == x for s in segs)
    # a decoder level reads the stream and a skip tensor written levels before, not by the segment before it
    reads = [{w for _, w in s.entries} for s in segs]
    writes = [set(s.exits) for s in segs]
    far = [j for j, r in enumerate(reads) if any(v not in writes[j - 1] and any(v in w for w in writes[:j - 1])
                                                   for v in r)]
    assert far and all(len(reads[j]) == 2 for j in far)


def _inputs(p, seed: int) -> dict:
    """Random inputs, positive (a batch norm's variance is one of them)."""
    rng = np.random.default_rng(seed)
    return {k: np.abs(v) + np.float32(0.1) for k, v in random_inputs(p, rng, bind_env(p, rng)).items()}


def test_a_segmented_unet_plays_back_equal_to_the_reference_and_onnxruntime(net, monkeypatch):
    import onnxruntime as ort
    model, doc, p = net
    monkeypatch.setenv("POLYSAT_SEGMENT_LIVE", LIVE)
    c = Compilation(doc, cost="model")
    x = c.extraction
    assert isinstance(c.saturated[0], SegmentedState) and len(c.saturated[0].segments) > 3
    ins = _inputs(c.program, 11)
    want = evaluate(c.program, ins)
    got = playback(synthesize(x.program, x.partition), ins)
    assert want.keys() == got.keys()
    for k in want:
        assert close(got[k], want[k]), (k, max_error(got[k], want[k]))
    names = {i.name for i in model.graph.input}
    feeds = {c.program[n.id].arg["tensor_id"]: ins[c.program[n.id].arg["tensor_id"]] for n in c.program.inputs}
    assert set(feeds) == names
    (ref,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    assert close(want["mask"], ref), max_error(want["mask"], ref)


def test_a_segmented_unet_is_priced_as_its_whole_search(net, monkeypatch):
    """The boundaries materialize the skip tensors, which every level-by-level partition writes anyway: the
    stitched partition has as many kernels as the whole program's search, priced within 0.5% of it (a skip tensor
    is written after its ReLU, where the whole search writes it before and applies the ReLU in both of its
    readers: 0.2 ns dearer of 30.4 µs at a price limit of 12 groups; at 16 the whole search finds a partition
    0.18% cheaper, 30.386 against the stitched 30.440 µs), and never above one kernel per op."""
    _, doc, _ = net
    monkeypatch.setenv("POLYSAT_SEGMENT_LIVE", LIVE)
    cut = Compilation(doc, cost="model").search
    monkeypatch.setenv("POLYSAT_SEGMENT_LIVE", "0")
    whole = Compilation(doc, cost="model")
    assert not isinstance(whole.saturated[0], SegmentedState)
    assert len(cut.best.priced) == len(whole.search.best.priced)
    assert cut.best.total <= whole.search.best.total * (1 + 5e-3)
    assert cut.best.total <= cut.baseline.total


def _program(g: WeightFree, out: str, shape: list, hw: int):
    g.nodes[-1].output[0] = out
    model = g.built([_io("image", [1, 3, hw, hw])], out, shape, "levels")
    return program_from_doc(import_onnx(onnx.load_from_string(model.SerializeToString()), origin="levels.onnx"), "m")


def _stack(levels: int, ch: int = 4, hw: int = 32):
    """Levels of one structure (conv-BN-ReLU, 2x2 max pool) at other extents, no skip tensor: every cut between
    them holds one live value."""
    g, x, cin = WeightFree(), "image", 3
    for lv in range(levels):
        x = g.op("MaxPool", [g.conv_bn(x, cin, ch * 2 ** lv, 3)], kernel_shape=[2, 2], strides=[2, 2])
        cin = ch * 2 ** lv
    g.nodes.append(helper.make_node("Conv", [x, g.weight(2, cin, 1, 1)], ["y"], kernel_shape=[1, 1]))
    side = hw // 2 ** levels
    return _program(g, "y", [1, 2, side, side], hw)


def test_a_value_read_by_a_pooling_or_an_unbroadcast_sum_is_no_boundary_of_the_second_pass():
    """A max pool (a window read), a global average of x * sigmoid(x) (a sum that reads its operand one-to-one)
    may be fused with the value's kernel by the whole search: no cut of the second pass; the pooled value, read
    by a convolution (a broadcast: many-to-many), is one."""
    g = WeightFree()
    x = g.conv_bn("image", 3, 4, 3)  # ReLU'd: read by the pool only
    pooled = g.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    z = g.conv_bn(pooled, 4, 8, 3, relu=False)  # read by the SiLU only
    silu = g.op("Mul", [z, g.op("Sigmoid", [z])])
    g.op("GlobalAveragePool", [silu])
    p = _program(g, "y", [1, 8, 1, 1], 16)
    users = p.consumers()
    relu = [n.id for n in p.nodes if n.op.name == "RELU"]
    pools = [n.id for n in p.nodes if n.op.name == "REDUCE" and str(n.arg["op"]).upper() == "MAX"]
    assert len(relu) == 1 and len(pools) == 1
    assert not _broadcast_read(p, relu[0], users)
    assert _broadcast_read(p, pools[0], users)
    # x * sigmoid(x) summed by the average: a MUL read by a REDUCE(SUM), its operand the conv's value unbroadcast
    (silu,) = [n for n in p.nodes if n.op.name == "MUL" and users.get(n.id) and p[n.src[0]].op.name == "ADD" and
               all(p[u].op.name == "REDUCE" for u in users[n.id])]
    assert not _broadcast_read(p, silu.src[0], users)


def test_a_residual_stream_read_by_its_layernorm_is_no_boundary_of_the_second_pass():
    """A residual stream (a sum, no reduction of its own) read by a LayerNorm's normalization before its GEMM, and
    by the next residual sum, may be recomputed in each reader and never written (MobileViT's whole search does
    so: 77 kernels at 159.45 µs, against 79 at 162.74 cut at its streams): no cut of the second pass. A skip
    tensor read through a concatenation by a convolution is one."""
    g, d = WeightFree(), 16
    stream = g.op("Add", ["x", g.matmul("x", d, d)])
    out = g.op("Add", [stream, g.matmul(g.layernorm(stream, d), d, d)])
    g.op("Identity", [out])
    g.nodes[-1].output[0] = "y"
    model = g.built([_io("x", [1, 8, d])], "y", [1, 8, d], "residual")
    p = program_from_doc(import_onnx(onnx.load_from_string(model.SerializeToString()), origin="r.onnx"), "m")
    users = p.consumers()
    first = [n.id for n in p.nodes if n.op.name == "ADD" and n.shape == (1, 8, d) and "x" in
             {p[s].arg.get("tensor_id") for s in n.src if p[s].op.name == "INPUT"}]
    assert len(first) == 1 and not _broadcast_read(p, first[0], users)
    q = program_from_doc(import_onnx(onnx.load_from_string(unet(2, 4, 16).SerializeToString()), origin="u.onnx"), "m")
    pads = [n.src[0] for n in q.nodes if n.op.name == "PAD" and q[n.src[0]].op.name == "RELU"]
    assert pads and all(_broadcast_read(q, s, q.consumers()) for s in pads)  # the skip tensors


def test_levels_without_skips_stay_whole():
    """Levels of one structure whose cuts each hold one live value are no run of the second pass: each would be
    searched on its own under the merge search's limits (SqueezeNet's fire modules: 21 kernels at 45.5 µs
    against 18 at 39.3 whole); the first pass's runs of identical blocks are the only cuts there."""
    p = _stack(3)
    assert len(segment(p, 0)) == 1
    assert len(segment(p, int(LIVE))) == 1
