"""Regions without their size-1 axes (ir/region_squeeze.py): the same values over the same bytes, and what
the kernel kinds then bind (a GEMM with a batch of one is a GEMM; attention over one batch entry is
flash attention).

* squeezing keeps the meaning: CPU playback of the squeezed region, on the inputs reshaped, equals the
  original region's playback reshaped, for generated models with size-1 dims (hypothesis);
* models with size-1 batch dims bind to their kinds and run through the region runner (numpy device:
  each kernel is its kind's numpy meaning of the spec, on operands reshaped by the runner) to the values
  playback gives;
* a region with nothing to squeeze is left alone.
"""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from polysat.backend.common.region_match import NoBind
from polysat.backend import kinds, stages
from polysat.runtime import regions as device_run
from polysat.backend.common.gpu import cuda_available
from polysat.ir.playback import playback
from polysat.ir.region_squeeze import squeeze_units
from polysat.pipeline import Compilation

_oracle_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_oracle_spec)
_oracle_spec.loader.exec_module(oracle)
model, node = oracle.model, oracle.node


def gemm(a, b, bias=None, act=None, dt="fp16"):
    ins = {"A": (dt, a), "B": (dt, b)}
    g = [node("GEMM", ["A", "B"], "C0")]
    cur = "C0"
    if bias is not None:
        ins["bias"] = (dt, bias)
        g.append(node("Elementwise", [cur, "bias"], "C1", fn="add"))
        cur = "C1"
    if act:
        g.append(node("Elementwise", [cur], "C2", fn=act))
        cur = "C2"
    return model(ins, g, [cur], {cur: {"dtype": dt}})


def attention(b, h, m, n, d, causal, dt="fp16"):
    return model({"Q": (dt, [b, h, m, d]), "K": (dt, [b, h, n, d]), "V": (dt, [b, h, n, d])},
                 [node("Attention", ["Q", "K", "V"], "O", causal=causal)], ["O"], {"O": {"dtype": dt}})


def inputs_for(regions, seed=0):
    rng = np.random.default_rng(seed)
    made = {b.name for r in regions for b in r.outputs}
    out = {}
    for r in regions:
        for b in r.inputs:
            if b.name not in made and b.name not in out:
                out[b.name] = (rng.uniform(-1, 1, size=tuple(int(d) for d in b.memref.shape)) * 0.5).astype(np.float32)
    return out


def close(got, want):
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=1e-3, atol=1e-3)


@st.composite
def unit_models(draw):
    kind = draw(st.sampled_from(["gemm", "gemm_bias", "attention"]))
    if kind == "attention":
        b, h = draw(st.sampled_from([(1, 1), (1, 2), (2, 1)]))
        m, n = draw(st.integers(1, 20)), draw(st.integers(1, 20))
        doc = attention(b, h, m, n, draw(st.sampled_from([8, 16])), draw(st.booleans()))
        return doc, draw(st.sampled_from(["size", "model"]))
    lead = draw(st.sampled_from([[1], [1, 3], [2, 1], [1, 1]]))
    m, k, n = draw(st.integers(1, 12)), draw(st.integers(1, 12)), draw(st.integers(1, 12))
    b_lead = draw(st.sampled_from([lead, [1] * len(lead), []]))
    bias = [n] if kind == "gemm_bias" else None
    return gemm(lead + [m, k], b_lead + [k, n], bias=bias, act=draw(st.sampled_from([None, "relu"]))), \
        draw(st.sampled_from(["size", "model"]))


@settings(max_examples=25, deadline=None)
@given(unit_models(), st.integers(0, 100))
def test_squeezing_keeps_every_regions_values(case, seed):
    doc, cost = case
    regions = Compilation(doc, cost=cost).regions
    values = inputs_for(regions, seed)
    values |= playback(regions, values, keep_all=True)
    squeezed = [(r, squeeze_units(r)) for r in regions]
    assert any(q is not None for _, q in squeezed), "every drawn model has a size-1 dim"
    for r, q in squeezed:
        if q is None:
            continue
        assert not any(s == 1 for _, s in (*q.iters, *q.reduce_axes))
        want = playback([r], {b.name: values[b.name] for b in r.inputs}, keep_all=True)
        got = playback([q], {b.name: values[b.name].reshape(tuple(int(d) for d in b.memref.shape))
                             for b in q.inputs}, keep_all=True)
        for out in r.outputs:
            close(got[out.name].reshape(want[out.name].shape), want[out.name])


@pytest.mark.parametrize("doc, cost, kinds_", [
    (gemm([1, 37, 29], [1, 29, 45]), "size", ["gemm"]),
    (gemm([1, 3, 20, 16], [16, 24], bias=[24], act="relu"), "size", ["gemm"]),
    (gemm([2, 1, 20, 16], [2, 1, 16, 24]), "model", ["gemm"]),
    (attention(1, 2, 40, 56, 64, True), "model", ["attention"]),
    (attention(1, 1, 33, 33, 64, False), "model", ["attention"]),
    (attention(1, 2, 40, 56, 64, True), "size", ["softmax_scores", "gemm"]),
    (attention(1, 1, 33, 30, 64, False), "size", ["softmax_scores", "gemm"]),
])
def test_models_with_size_one_batches_bind_and_run_on_the_region_runner(doc, cost, kinds_):
    regions = Compilation(doc, cost=cost).regions
    assert [kinds.bind(r)[0].name for r in regions] == kinds_
    assert len(stages.kernel_sources(regions, "sm80")) == len(regions)
    ins = inputs_for(regions)
    hooks, launched = oracle.numpy_device()
    got = device_run.run_regions(regions, ins, **hooks)
    want = playback(regions, ins)
    assert len(launched) == len(regions) and set(got) == set(want)
    for k in want:
        assert got[k].shape == want[k].shape
        close(got[k], want[k])


def test_a_region_without_size_one_axes_is_left_alone():
    (r,) = Compilation(gemm([37, 29], [29, 45]), cost="size").regions
    assert squeeze_units(r) is None


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible")
@pytest.mark.parametrize("doc, cost", [(gemm([1, 37, 29], [1, 29, 45]), "size"),
                                       (gemm([1, 3, 20, 16], [16, 24], bias=[24], act="relu"), "size"),
                                       (attention(1, 2, 40, 56, 64, True), "model"),
                                       (attention(1, 2, 40, 56, 64, True), "size")])
def test_size_one_batches_on_the_gpu_equal_playback(doc, cost):
    regions = Compilation(doc, cost=cost).regions
    ins = inputs_for(regions)
    got, want = device_run.run_cuda(regions, ins), playback(regions, ins)
    for k in want:
        close(got[k], want[k])


def test_recomputed_row_statistics_must_recompute_the_same_scores():
    """The two-region scores of a batch of one reduce over fresh key axes that recompute the scores; a
    recomputation that differs (another scale inside the row max) is not a softmax and is refused."""
    import json

    from polysat.backend.scores.bind import bind as scores_binding
    from polysat.ir.region import region_json
    from polysat.ir.region_load import region_from_json

    k0 = squeeze_units(Compilation(attention(1, 2, 40, 56, 64, True), cost="size").regions[0])
    assert scores_binding(k0).spec.causal
    doc = region_json(k0)
    maxed = next(let for let in doc["region"]["lets"]
                 if "reduce" in let["expr"] and let["expr"]["reduce"]["op"] == "max")
    text = json.dumps(maxed["expr"])
    assert text.count("0.125") == 1
    maxed["expr"] = json.loads(text.replace("0.125", "0.25"))
    no = scores_binding(region_from_json(doc))
    assert isinstance(no, NoBind) and "not the max of the scores" in no.reason
