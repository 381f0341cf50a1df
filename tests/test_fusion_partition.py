"""Partitions the ``--cost model`` search returns on the shapes that broke it: every one extracts,
keeps the values (the rewritten program and the played-back regions against the reference
evaluator of the loaded model, rtol = atol = 1e-3) and has the kernel count the legality classes
allow."""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

from polysat.bench.models import conv_relu_conv, sibling_gemms, softmax_axis
from polysat.commands.extract import run_extract
from polysat.tests.numeric import bind_env, random_inputs
from polysat.frontend import load_model
from polysat.ir.evaluate import evaluate
from polysat.ir.playback import playback
from polysat.egraph.region_synth import synthesize


_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)


def extract_and_play(model: dict, bind=None, seed: int = 5) -> dict:
    """The model's --cost model extraction: its rewritten program and its played-back regions against
    the reference evaluator of the loaded model (rtol = atol = 1e-3, plus half an ulp of a 16-bit
    output: a rewrite that reassociates fp32 work may move a value across the final rounding)."""
    r = run_extract(model, cost="model", bind=bind)
    x = r["_extraction"]
    p = load_model(model)
    rng = np.random.default_rng(seed)
    inputs = random_inputs(p, rng, bind_env(p, rng))
    ref = evaluate(p, inputs)
    dts = {name: p[nid].dtype.value for name, nid in p.outputs}
    for what, got in (("rewritten", evaluate(x.program, inputs)),
                      ("playback", playback(synthesize(x.program, x.partition), inputs))):
        for k in ref:
            oracle.assert_close(got[k], ref[k], dts[k], f"{what} {k}")
    return r


@pytest.mark.parametrize("residual", [False, True], ids=["conv_relu_conv", "resnet_block"])
def test_conv_relu_conv_extracts_with_the_relu_recomputed_in_the_second_conv(residual):
    # a padded read of a fused value is Select(g, View(x), Const): it must become PAD + VIEW of x
    r = extract_and_play(conv_relu_conv(channels=4, size=8, residual=residual))
    assert r["total"]["kernels"] == 2, [(k["name"], k["outputs"]) for k in r["regions"]]


@pytest.mark.parametrize("shape,axis", [([2, 6, 3], 1), ([5, 3, 4], 0), ([2, 3, 4, 5], 2), ([4, 7], 0), ([3, 4], 1)])
def test_softmax_on_any_axis_is_one_kernel(shape, axis):
    r = extract_and_play(softmax_axis(shape, axis))
    assert r["total"]["kernels"] == 1, [(k["name"], k["outputs"]) for k in r["regions"]]


EX = sorted((pathlib.Path(__file__).resolve().parent.parent / "examples").glob("*.json"))


@pytest.mark.parametrize("path", EX, ids=[p.stem for p in EX])
def test_model_cost_is_never_worse_than_size_by_its_own_prices(path):
    m = run_extract(str(path), cost="model")["total"]["time_est_us"]
    s = run_extract(str(path), cost="size")["total"]["time_est_us"]
    assert m <= s * (1 + 1e-9), (m, s)


def test_sibling_gemms_recompute_the_widened_input_instead_of_writing_it():
    # Ya = X @ Wa; Yb = X @ Wb: the fp32 cast of broadcast X is cheap; each GEMM recomputes it
    r = extract_and_play(sibling_gemms(width=64), bind={"T": 32})
    assert r["total"]["kernels"] == 2
    r = run_extract(sibling_gemms(), cost="model", bind={"T": 256})
    io = 2 * (256 * 768 + 2 * 768 * 768 + 2 * 256 * 768)  # fp16 X, Wa, Wb, Ya, Yb
    assert r["total"]["bytes"] <= 1.5 * io, (r["total"]["bytes"], io)


def test_a_small_transformer_block_plays_back_in_the_hand_partition_kernel_count(monkeypatch):
    # LayerNorm, Q, K, V, attention, projection + residual, LayerNorm, FFN1 + bias + GELU, FFN2 + residual.
    # Streaming is off: the one-pass softmax-weighted sum rounds P before dividing by the row sum, and
    # through the projection and the FFN that moves a block's fp16 output by more than 1e-3
    from polysat.bench.models import transformer
    monkeypatch.setenv("POLYSAT_STREAMING", "0")
    r = extract_and_play(transformer(1, d_model=32, heads=2, d_ff=64), bind={"S": 16})
    assert r["total"]["kernels"] <= 9, [(k["name"], k["outputs"]) for k in r["regions"]]


@pytest.mark.parametrize("name", ["gpt2_block", "bert_encoder"])
def test_no_cheap_value_left_cut_would_lower_the_price_of_a_large_program(name):
    """A large program (more sites than the exact descent takes) is polished by a fuse-only descent after
    the merge search: a value that computes no reduction and whose readers end in different kernels
    (one-to-many, outside the merge search's space) is recomputed in each where that prices lower. So
    --explain finds no site the partition keeps cut whose fusion is legal, priced lower and not reached
    (the embedding sum of the ONNX GPT-2 block, read by the first LayerNorm and the residual, had a kernel
    of its own before: 7 kernels, 14.7 µs, and --explain called its 12.7 µs fusion "priced higher").
    tests/test_onnx_models.py plays these partitions back against onnxruntime."""
    from polysat.search.model import EXACT_SITES
    from polysat.examples.onnx_models import build
    from polysat.frontend.onnx import import_onnx
    from polysat.pipeline import Compilation
    s = Compilation(import_onnx(build(name)), cost="model").search
    assert len(s.sites) > EXACT_SITES  # else the exact descent ran and this case proves nothing
    # a cheaper legal fusion left cut would be "not reached" (the descent ran out of rounds) or "not tried"
    # (a reduction's value, which the descent leaves to the merge search)
    assert not [r for r in s.rejected if r.why.startswith(("not reached", "not tried"))]
    assert len(s.best.priced) <= {"gpt2_block": 6, "bert_encoder": 9}[name]


def _dense_block(layers: int, grow: int = 8, c0: int = 16, hw: int = 16) -> dict:
    """A DenseNet block as torchvision exports it: each layer concatenates the block input and every earlier
    layer's output, then BatchNorm, ReLU, a 1x1 conv with its BatchNorm and ReLU, and a 3x3 conv; the
    concatenation's BatchNorm as a freshly built torchvision model exports it (scale 1, shift 0, mean 0, variance
    1, as the zoo's DenseNet-121 has them)."""
    from polysat.examples.onnx_models import G, _io
    from polysat.frontend.onnx import import_onnx
    g = G(0)
    feats, c = ["x"], c0
    for _ in range(layers):
        cat = g.op("Concat", feats, axis=1) if len(feats) > 1 else feats[0]
        bn = [g.init(np.ones(c, np.float32), "bn_g"), g.init(np.zeros(c, np.float32), "bn_b"),
              g.init(np.zeros(c, np.float32), "bn_mean"), g.init(np.ones(c, np.float32), "bn_var")]
        h = g.conv_bn(g.op("Relu", [g.op("BatchNormalization", [cat] + bn, epsilon=1e-5)]), c, 4 * grow, 1)
        feats.append(g.op("Conv", [h, g.weight(grow, 4 * grow, 3, 3)], kernel_shape=[3, 3], pads=[1] * 4))
        c += grow
    g.op("Concat", feats, axis=1)
    g.nodes[-1].output[0] = "out"
    return import_onnx(g.model([_io("x", [1, c0, hw, hw])], [_io("out", [1, c, hw, hw])], "dense_block"))


def test_a_descent_whose_moves_all_improve_takes_them_in_batches(monkeypatch):
    """The fuse-only descent of a large program prices its moves in batches that grow while taken: on a dense
    block, where the same move improves every layer, it reaches the partition that one move at a time reaches,
    pricing fewer partitions whole."""
    from polysat.pipeline import Compilation
    from polysat.search import model
    doc = _dense_block(12)
    batched = Compilation(doc, cost="model").search
    assert len(batched.sites) > model.EXACT_SITES  # the fuse-only descent ran
    monkeypatch.setattr(model, "GROWTH", 1)
    single = Compilation(doc, cost="model").search
    assert batched.best.total == pytest.approx(single.best.total, rel=1e-9)
    assert len(batched.best.priced) == len(single.best.priced)
    assert batched.evaluations < single.evaluations - 4, (batched.evaluations, single.evaluations)
