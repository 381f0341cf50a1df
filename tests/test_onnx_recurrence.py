"""ONNX RNN, GRU and LSTM (frontend/onnx_ops_nn.py ``recurrence``: unrolled over the static sequence), against
onnxruntime on the reference evaluator and on playback: every direction, layout, optional input and the
attributes that change the equations (clip, input_forget, linear_before_reset, peepholes); torch's nn.LSTM/GRU as
exported; what is declined says so."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from polysat.cli import TARGETS
from polysat.frontend import program_from_doc, with_parameters
from polysat.frontend.onnx import import_onnx
from polysat.ir.diagnostics import PolysatError
from polysat.ir.evaluate import evaluate
from polysat.pipeline import Compilation

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
SEQ, BATCH, IN, HID = 5, 3, 6, 4


def _case(op, direction="forward", layout=0, bias=True, init=True, peep=False, lens=False, **attrs):
    """A model of one recurrence with every optional input given as a graph input or an initializer."""
    rng = np.random.default_rng([len(op), len(direction), bias, init, peep])  # the same weights at either layout
    nd, g = (2 if direction == "bidirectional" else 1), GATES[op]
    x_shape = [BATCH, SEQ, IN] if layout else [SEQ, BATCH, IN]
    st_shape = [BATCH, nd, HID] if layout else [nd, BATCH, HID]
    inits = {"W": rng.standard_normal((nd, g * HID, IN)) * 0.5, "R": rng.standard_normal((nd, g * HID, HID)) * 0.5}
    if bias:
        inits["B"] = rng.standard_normal((nd, 2 * g * HID)) * 0.3
    names = ["x", "W", "R", "B" if bias else "", "", "h0" if init else "", "c0" if init and op == "LSTM" else ""]
    if lens:
        inits["lens"] = np.full(BATCH, SEQ, np.int32)
        names[4] = "lens"
    if peep:
        inits["P"] = rng.standard_normal((nd, 3 * HID)) * 0.3
        names.append("P")
    while names and names[-1] == "":
        names.pop()
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, names, outs, hidden_size=HID, direction=direction, layout=layout, **attrs)
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)]
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32)}
    for k in ("h0", "c0"):
        if k in names:
            ins.append(helper.make_tensor_value_info(k, TensorProto.FLOAT, st_shape))
            feeds[k] = rng.standard_normal(st_shape).astype(np.float32)
    graph = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
                              initializer=[numpy_helper.from_array(np.asarray(v, np.int32 if k == "lens" else np.float32), k)
                                           for k, v in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 8
    return m, feeds


def _check(m, feeds, playback=True):
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    doc = import_onnx(m)
    names = [o["tensor"] for o in doc["signature"]["outputs"]]
    got = evaluate(program_from_doc(doc), with_parameters(doc, feeds))
    for n, w in zip(names, want):
        np.testing.assert_allclose(got[n], w, rtol=2e-5, atol=2e-5)
    if playback:
        pb = TARGETS["playback"](Compilation(doc, cost="model"), with_parameters(doc, feeds))
        for n, w in zip(names, want):
            np.testing.assert_allclose(pb[n], w, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_each_direction_matches_onnxruntime(op, direction):
    _check(*_case(op, direction), playback=direction == "bidirectional")


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_layout_1_no_bias_no_initial_state_full_sequence_lens(op):
    """Batch-first (layout 1), which onnxruntime declines: against its layout-0 run on the transposed input."""
    m, _ = _case(op, "bidirectional", layout=1, bias=False, init=False, lens=True)
    m0, feeds = _case(op, "bidirectional", layout=0, bias=False, init=False, lens=True)
    want = ort.InferenceSession(m0.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    want = [want[0].transpose(2, 0, 1, 3)] + [w.transpose(1, 0, 2) for w in want[1:]]
    doc = import_onnx(m)
    got = evaluate(program_from_doc(doc), with_parameters(doc, {"x": feeds["x"].transpose(1, 0, 2)}))
    for o, w in zip(doc["signature"]["outputs"], want):
        np.testing.assert_allclose(got[o["tensor"]], w, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("attrs", [dict(clip=0.7), dict(input_forget=1), dict(peep=True)])
def test_lstm_clip_input_forget_and_peepholes(attrs):
    _check(*_case("LSTM", "bidirectional", **attrs), playback=False)


@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_reset_before_or_after_the_linear_map(lbr):
    _check(*_case("GRU", "forward", linear_before_reset=lbr), playback=False)


def test_torch_lstm_and_gru_as_exported(tmp_path):
    """Two stacked bidirectional LSTM layers and a GRU (linear_before_reset=1), batch-first, as torch exports them."""
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(6, 8, num_layers=2, bidirectional=True, batch_first=True)
            self.gru = torch.nn.GRU(16, 5, batch_first=True)

        def forward(self, x):
            y, _ = self.lstm(x)
            z, h = self.gru(y)
            return z, h
    torch.manual_seed(0)
    x = torch.randn(2, 4, 6)
    path = str(tmp_path / "rnn.onnx")
    torch.onnx.export(Net().eval(), (x,), path, dynamo=False, opset_version=17, input_names=["x"])
    import onnx
    m = onnx.load(path)
    assert {n.op_type for n in m.graph.node} >= {"LSTM", "GRU"}
    _check(m, {"x": x.numpy()})


def test_what_is_declined_says_so():
    for attrs, said in ((dict(activations=["Relu", "Tanh", "Tanh"]), "activations"),
                        (dict(direction="sideways"), "direction")):
        m, _ = _case("LSTM", **attrs)
        with pytest.raises(PolysatError) as e:
            import_onnx(m)
        d = e.value.diagnostics[0]
        assert d.code == "E1102" and said in d.why, d
