"""bench/fusion.py's real-model rows: tinygrad's side (bench/tinygrad_onnx.py, tinygrad's own ONNX
runner) schedules the very ONNX graph polysat compiles. The schedule whose kernels are counted is run
on tinygrad's PYTHON device and its outputs compared with onnxruntime on the same inputs, an oracle
independent of both, so scheduling some other graph fails the test."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tinygrad")
ort = pytest.importorskip("onnxruntime")

from polysat.bench.fusion import onnx_cases, tinygrad_onnx_row  # noqa: E402
from polysat.bench.tinygrad_onnx import scheduled  # noqa: E402
from polysat.examples.onnx_models import bert_encoder, gpt2_block  # noqa: E402


@pytest.mark.parametrize("build", [bert_encoder, gpt2_block])
def test_counted_schedule_computes_the_onnx_graph(build):
    # GPT-2's (1, S) constant position ids: tinygrad 0.14's Gather fast path fails on them unless the
    # bench gives them to its general path
    vocab = 11
    b = build(s=4, d=8, h=2, vocab=vocab).SerializeToString()  # token ids in: the int64 input path
    s = scheduled(b)
    assert s["kernels"] > 0
    ids = s["inputs"]["input_ids"]
    assert ids.dtype == np.int64 and ids.shape == (1, 4) and 0 <= ids.min() and ids.max() < vocab
    from tinygrad.engine.realize import run_linear
    run_linear(s["linear"])  # the counted schedule itself, nothing scheduled again
    got = [o.numpy() for o in s["outputs"]]
    want = ort.InferenceSession(b, providers=["CPUExecutionProvider"]).run(None, s["inputs"])
    assert len(got) == len(want) == 1
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-4)


def test_bench_cases_are_onnx_bytes_and_the_smallest_counts_kernels():
    cases = dict(onnx_cases())
    assert {"onnx_resnet_cnn", "onnx_bert_encoder", "onnx_gpt2_block", "onnx_mlp_mixer"} <= set(cases)
    assert all(isinstance(m, bytes) for m in cases.values())
    row = tinygrad_onnx_row(cases["onnx_mlp_mixer"], {})
    assert "error" not in row and row["kernels"] > 0 and row["schedule_s"] > 0


def test_an_op_the_runner_cannot_take_is_a_row_naming_the_node():
    from onnx import TensorProto, helper
    # Det (a standard op, opset 11) is not among tinygrad 0.14's ONNX ops
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Det", ["r"], ["y"], name="det")],
                          "g", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    row = tinygrad_onnx_row(m.SerializeToString(), {})
    assert "ONNX Det(r) -> y" in row["error"], row
