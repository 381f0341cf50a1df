"""match_gemm: whole Tiny IR programs that are one GEMM-family kernel become GemmSpecs whose numpy
meaning equals the reference evaluator's; everything else is refused (None)."""
import os

import numpy as np
import pytest

from polysat.backend.from_tiny import match_gemm
from polysat.backend.reference import gemm_reference, random_inputs
from polysat.frontend import load_model
from polysat.ir.builder import Builder
from polysat.ir.dtypes import DType
from polysat.ir.evaluate import evaluate
from polysat.ir.tiny import Ops

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


def _model(ops, tensors, inputs, output):
    return {"signature": {"inputs": [{"tensor": t} for t in inputs], "outputs": [{"tensor": output}]},
            "tensors": tensors, "graph": ops}


def _check(program, spec, env):
    x = random_inputs(spec, env, seed=3)
    want = evaluate(program, x, env)[spec.c]
    got = gemm_reference(spec, x, env)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-3, atol=1e-3)


def test_example_gemm_bias_relu():
    p = load_model(os.path.join(EXAMPLES, "gemm_bias_relu.json"))
    spec = match_gemm(p, "gemm_bias_relu")
    assert spec is not None
    assert (spec.m, spec.n, spec.k, spec.a_layout, spec.b_layout) == ("M", "N", "K", "row", "row")
    assert [op.kind for op in spec.epilogue] == ["bias", "relu"] and spec.epilogue[0].axis == "n"
    _check(p, spec, {"M": 33, "N": 20, "K": 17})


@pytest.mark.parametrize("trans_a,trans_b", [(False, True), (True, False), (True, True)])
def test_transposes_become_layouts_and_silu_is_recognised(trans_a, trans_b):
    a_shape = ["K", "M"] if trans_a else ["M", "K"]
    b_shape = ["N", "K"] if trans_b else ["K", "N"]
    doc = _model([
        {"op": "GEMM", "name": "g", "inputs": ["A", "W"], "outputs": ["Y"],
         "attrs": {"acc_dtype": "fp32", "trans_a": trans_a, "trans_b": trans_b}},
        {"op": "Elementwise", "name": "act", "fn": "silu", "inputs": ["Y"], "outputs": ["Z"]}],
        {"A": {"dtype": "bf16", "shape": a_shape}, "W": {"dtype": "bf16", "shape": b_shape},
         "Y": {"dtype": "bf16", "shape": ["M", "N"]}, "Z": {"dtype": "bf16", "shape": ["M", "N"]}}, ["A", "W"], "Z")
    p = load_model(doc)
    spec = match_gemm(p)
    assert spec is not None
    assert (spec.a_layout, spec.b_layout) == ("col" if trans_a else "row", "col" if trans_b else "row")
    assert [op.kind for op in spec.epilogue] == ["cast", "silu"]  # the frontend rounds Y to bf16 first
    _check(p, spec, {"M": 9, "N": 12, "K": 20})


def test_batched_with_broadcast_weight_scale_and_residual():
    b = Builder()
    x = b.input("X", DType.fp16, (3, 5, 8), at="X")
    w = b.input("W", DType.fp16, (8, 6), at="W")
    r = b.input("R", DType.fp32, (3, 5, 6), at="R")
    xe = b.expand(b.reshape(b.cast(x, DType.fp32, at="c"), (3, 5, 1, 8), at="r"), (3, 5, 6, 8), at="e")
    wt = b.permute(b.reshape(b.cast(w, DType.fp32, at="c"), (1, 1, 8, 6), at="r"), (0, 1, 3, 2), at="p")
    we = b.expand(wt, (3, 5, 6, 8), at="e")
    acc = b.reduce(b.alu(Ops.MUL, xe, we, at="mul"), "SUM", (3,), DType.fp32, at="sum")
    v = b.alu(Ops.MUL, acc, b.const(0.5, DType.fp32, (), at="half"), at="scale")
    v = b.alu(Ops.ADD, v, r, at="res")
    v = b.alu(Ops.MAX, v, b.const(0.0, DType.fp32, (), at="zero"), at="relu")
    p = b.program([("Y", b.cast(v, DType.bf16, at="out"))])
    spec = match_gemm(p)
    assert spec is not None and spec.batch == (3,) and spec.b_broadcast and not spec.a_broadcast
    assert [op.kind for op in spec.epilogue] == ["scale", "residual", "relu"] and spec.out_dtype == DType.bf16
    _check(p, spec, {})


def test_non_gemm_programs_are_refused():
    assert match_gemm(load_model(os.path.join(EXAMPLES, "attention.json"))) is None
    assert match_gemm(load_model(os.path.join(EXAMPLES, "conv3x3_s2_silu.json"))) is None
    b = Builder()
    x = b.input("X", DType.fp16, (4, 8), at="X")
    p = b.program([("Y", b.reduce(b.cast(x, DType.fp32, at="c"), "SUM", (1,), DType.fp32, at="s"))])
    assert match_gemm(p) is None
