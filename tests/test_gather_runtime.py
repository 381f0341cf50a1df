"""Gathers by indices known only at run time (Tiny IR GATHER, ir/gather_split.py): a non-affine read that is
a kernel of its own. Oracle: numpy's take / take_along_axis written here from the meaning (negative
indices count from the end of the axis, out of range reads 0); onnxruntime for imported models."""
from __future__ import annotations

import numpy as np
import pytest

from polysat.cli import TARGETS
from polysat.ir.diagnostics import PolysatError
from polysat.ir.region import regions_json
from polysat.ir.region_load import regions_from_json
from polysat.pipeline import Compilation


def _take(x, idx, axis):
    i = np.where(idx < 0, idx + x.shape[axis], idx)
    ok = (i >= 0) & (i < x.shape[axis])
    out = np.take(x, np.where(ok, i, 0), axis=axis)
    return np.where(ok.reshape((1,) * axis + ok.shape + (1,) * (x.ndim - axis - 1)), out, 0)


def _doc(graph, tensors, inputs, outputs):
    return {"signature": {"inputs": [{"tensor": t} for t in inputs], "outputs": [{"tensor": t} for t in outputs]},
            "tensors": tensors, "graph": graph}


def _run_both(doc, feeds, cost="model"):
    c = Compilation(doc, cost=cost)
    return c, [TARGETS[t](c, feeds) for t in ("reference", "playback")]


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_gather_by_input_indices_any_axis(axis):
    rng = np.random.default_rng(axis)
    x = rng.standard_normal((5, 6, 7)).astype(np.float32)
    idx = rng.integers(-9, 9, (2, 3)).astype(np.int32)  # some out of range on every axis
    doc = _doc([{"op": "Gather", "name": "g", "inputs": ["X", "I"], "outputs": ["G"], "attrs": {"axis": axis}},
                {"op": "Elementwise", "name": "sq", "fn": "mul", "inputs": ["G", "G"], "outputs": ["Y"]}],
               {"X": {"dtype": "fp32", "shape": [5, 6, 7]}, "I": {"dtype": "i32", "shape": [2, 3]}}, ["X", "I"], ["Y"])
    want = _take(x, idx, axis) ** 2
    c, outs = _run_both(doc, {"X": x, "I": idx})
    for got in outs:
        np.testing.assert_allclose(got["Y"], want, rtol=1e-6)
    assert [r.name for r in c.regions][0].startswith("gather_")  # its own kernel, before the square's
    assert len(c.regions) == 2


def test_gather_elements_and_scalar_index():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    idx = rng.integers(-5, 5, (3, 5)).astype(np.int32)
    doc = _doc([{"op": "GatherElements", "name": "ge", "inputs": ["X", "I"], "outputs": ["Y"], "attrs": {"axis": 0}},
                {"op": "Gather", "name": "row", "inputs": ["X", "J"], "outputs": ["R"], "attrs": {"axis": 0}}],
               {"X": {"dtype": "fp32", "shape": [4, 5]}, "I": {"dtype": "i32", "shape": [3, 5]},
                "J": {"dtype": "i32", "shape": []}}, ["X", "I", "J"], ["Y", "R"])
    i = np.where(idx < 0, idx + 4, idx)
    ok = (i >= 0) & (i < 4)
    want = np.where(ok, np.take_along_axis(x[:, :5], np.where(ok, i, 0), 0), 0)
    assert not ok.all()
    for got in _run_both(doc, {"X": x, "I": idx, "J": np.asarray(-1, np.int32)})[1]:
        np.testing.assert_allclose(got["Y"], want)
        np.testing.assert_allclose(got["R"], x[-1])


def test_computed_indices_and_gather_of_gather():
    """Indices computed in the graph (a kernel writes them for the gathering kernel), and a gather reading a
    gather's result: the kernels are ordered by the buffers they read."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((10, 4)).astype(np.float32)
    ids = rng.integers(0, 6, (2, 3)).astype(np.int32)
    table = rng.integers(-10, 10, (8,)).astype(np.int32)
    doc = _doc([{"op": "Elementwise", "name": "shift", "fn": "add", "inputs": ["ids", "two"], "outputs": ["s"]},
                {"op": "Constant", "name": "two_c", "outputs": ["two"], "attrs": {"value": 2, "dtype": "i32"}},
                {"op": "Gather", "name": "remap", "inputs": ["table", "s"], "outputs": ["t"], "attrs": {}},
                {"op": "Gather", "name": "emb", "inputs": ["W", "t"], "outputs": ["E"], "attrs": {}},
                {"op": "Elementwise", "name": "act", "fn": "relu", "inputs": ["E"], "outputs": ["Y"]}],
               {"W": {"dtype": "fp32", "shape": [10, 4]}, "ids": {"dtype": "i32", "shape": [2, 3]},
                "table": {"dtype": "i32", "shape": [8]}}, ["W", "ids", "table"], ["Y"])
    doc["graph"].insert(0, doc["graph"].pop(1))
    want = np.maximum(_take(w, _take(table, ids + 2, 0), 0), 0)
    for cost in ("size", "model"):
        c, outs = _run_both(doc, {"W": w, "ids": ids, "table": table}, cost)
        for got in outs:
            np.testing.assert_allclose(got["Y"], want)
        names = [r.name for r in c.regions]
        assert len([n for n in names if n.startswith("gather_")]) == 2 and len(names) == 4, names
        assert regions_from_json(regions_json(c.regions)) == c.regions


def test_gathering_region_is_a_simt_kernel_in_the_model_runtime():
    """The gathering region binds to the SIMT kind (backend/simt: a read through run-time indices), so the model
    runtime launches it as a kernel like any other region: no step is played back on the host."""
    from polysat.backend.kinds import bind
    from polysat.runtime.host import host_runtime
    from polysat.runtime.model import steps_of
    doc = _doc([{"op": "Gather", "name": "g", "inputs": ["X", "I"], "outputs": ["G"], "attrs": {}},
                {"op": "Elementwise", "name": "neg", "fn": "neg", "inputs": ["G"], "outputs": ["Y"]}],
               {"X": {"dtype": "fp32", "shape": [6, 8]}, "I": {"dtype": "i32", "shape": [3]}}, ["X", "I"], ["Y"])
    c = Compilation(doc, cost="model")
    assert bind(c.regions[0])[0].name == "simt"
    assert not any(s.on_cpu for s in steps_of(c.regions))
    x, i = np.arange(48, dtype=np.float32).reshape(6, 8), np.array([5, -6, 2], np.int32)
    launched = []

    def launch(kind, spec, tensors, env, out):  # a kernel as its kind's numpy meaning, in the host arena
        launched.append(kind.name)
        out[...] = kind.reference(spec, tensors, env)
    got = host_runtime(c.regions, launch=launch).run({"X": x, "I": i})
    np.testing.assert_allclose(got["Y"], -x[[5, 0, 2]])
    assert launched == ["simt", "simt"]  # the gather, then the negation


def test_non_i32_indices_are_a_diagnostic():
    doc = _doc([{"op": "Gather", "name": "g", "inputs": ["X", "I"], "outputs": ["Y"], "attrs": {}}],
               {"X": {"dtype": "fp32", "shape": [6]}, "I": {"dtype": "fp32", "shape": [3]}}, ["X", "I"], ["Y"])
    with pytest.raises(PolysatError) as ei:
        Compilation(doc).program
    assert ei.value.diagnostics[0].code == "E1009" and "i32" in ei.value.diagnostics[0].why


def test_onnx_int64_ids_narrowed_and_checked():
    """An int64 graph input read only as Gather indices is computed as i32; values beyond int32 are E1011."""
    from onnx import TensorProto, helper, numpy_helper
    import onnxruntime as ort
    from polysat.frontend import with_parameters
    from polysat.frontend.onnx import import_onnx
    w = np.random.default_rng(0).standard_normal((20, 4)).astype(np.float32)
    g = helper.make_graph([helper.make_node("Gather", ["W", "ids"], ["E"], axis=0),
                           helper.make_node("Tanh", ["E"], ["Y"])], "emb",
                          [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 5])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 5, 4])],
                          [numpy_helper.from_array(w, "W")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    ids = np.array([[0, 19, -1, -20, 7], [3, 3, 1, 0, -5]], np.int64)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"ids": ids})[0]
    doc = import_onnx(m)
    assert doc["tensors"]["ids"]["dtype"] == "i32" and doc["narrowed_inputs"] == {"ids": "int64"}
    c = Compilation(doc, cost="model")
    for t in ("reference", "playback"):
        np.testing.assert_allclose(TARGETS[t](c, with_parameters(doc, {"ids": ids}))["Y"], want, rtol=1e-5, atol=1e-6)
    with pytest.raises(PolysatError) as ei:
        with_parameters(doc, {"ids": ids + 2**33})
    assert ei.value.diagnostics[0].code == "E1011"


def test_uniform_constant_indices_and_a_gather_that_is_a_program_output():
    """GatherElements by a constant index tensor (the kernel holds the value), its result both a program
    output and read by another kernel."""
    x = np.random.default_rng(9).standard_normal((4, 5)).astype(np.float32)
    doc = _doc([{"op": "Constant", "name": "c", "outputs": ["I"], "attrs": {"value": -1, "dtype": "i32", "shape": [3, 5]}},
                {"op": "GatherElements", "name": "ge", "inputs": ["X", "I"], "outputs": ["G"], "attrs": {"axis": 0}},
                {"op": "Elementwise", "name": "e", "fn": "exp", "inputs": ["G"], "outputs": ["Y"]}],
               {"X": {"dtype": "fp32", "shape": [4, 5]}}, ["X"], ["Y", "G"])
    c, outs = _run_both(doc, {"X": x})
    for got in outs:
        np.testing.assert_allclose(got["G"], x[[3, 3, 3]])
        np.testing.assert_allclose(got["Y"], np.exp(x[[3, 3, 3]]), rtol=1e-6)
    assert len(c.regions) == 2
