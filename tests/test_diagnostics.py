"""Each model diagnostic, provoked by a malformed model: exit status 1, the right code, no traceback.

A diagnostic is a value with code, kind, at, why, suggestion (docs/DESIGN.md §Diagnostics); the CLI prints it (as
JSON with ``--json``) and exits 1. Cases run ``polysat compile`` (or ``run`` when the problem is in
the inputs) in-process; a few go through a real process to see the exit status and stderr a user sees.
"""
from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)
model, node = oracle.model, oracle.node


def f32(*shape):
    return ("fp32", list(shape))


def tiny(*uops, outputs=None) -> dict:
    doc = {"uops": list(uops)}
    if outputs is not None:
        doc["outputs"] = outputs
    return doc


def inp(nid, shape, dtype="fp32") -> dict:
    return {"id": nid, "uop": "INPUT", "arg": {"tensor_id": nid, "dtype": dtype, "shape": shape}}


GEMM_SYM = model({"A": f32("M", "K"), "B": f32("K", "N")}, [node("GEMM", ["A", "B"], "C")], ["C"])
ONE_RELU = model({"X": f32(3, 4)}, [node("Elementwise", ["X"], "Y", fn="relu")], ["Y"])

# (case id, model document or raw file text, expected code, expected `at` or None)
COMPILE_CASES = [
    # E1001 BroadcastMismatch
    ("add-3x4-with-5", model({"A": f32(3, 4), "B": f32(5)}, [node("Elementwise", ["A", "B"], "C", fn="add")], ["C"]),
     "E1001", "C"),
    ("gemm-batch-dims-2-vs-3", model({"A": f32(2, 3, 4), "B": f32(3, 4, 5)}, [node("GEMM", ["A", "B"], "C")], ["C"]),
     "E1001", "C"),
    ("layernorm-gamma-shape", model({"X": f32(2, 6), "G": f32(5)}, [node("LayerNorm", ["X", "G"], "Y")], ["Y"]),
     "E1001", "Y"),
    ("conv-bias-shape", model({"X": f32(1, 2, 4, 4), "W": f32(3, 2, 3, 3), "b": f32(4)},
                              [node("Conv2D", ["X", "W", "b"], "Y")], ["Y"]), "E1001", "Y"),
    ("tiny-add-3x4-with-5x4", tiny(inp("a", [3, 4]), inp("b", [5, 4]), {"id": "s", "uop": "ADD", "src": ["a", "b"]}),
     "E1001", "s"),
    # E1002 AxisSizeMismatch
    ("reshape-12-to-10", model({"X": f32(3, 4)}, [node("Reshape", ["X"], "Y", shape=[5, 2])], ["Y"]), "E1002", "Y"),
    ("gemm-k-3-vs-4", model({"A": f32(2, 3), "B": f32(4, 5)}, [node("GEMM", ["A", "B"], "C")], ["C"]), "E1002", "C"),
    ("declared-output-shape", model({"X": f32(3, 4)}, [node("Elementwise", ["X"], "Y", fn="relu")], ["Y"],
                                    {"Y": {"shape": [3, 5]}}), "E1002", "Y"),
    ("attention-k-v-lengths", model({"Q": f32(1, 1, 4, 8), "K": f32(1, 1, 5, 8), "V": f32(1, 1, 6, 8)},
                                    [node("Attention", ["Q", "K", "V"], "O")], ["O"]), "E1002", "O"),
    # E1003 InvalidPermutation
    ("transpose-repeats-axis", model({"X": f32(3, 4)}, [node("Transpose", ["X"], "Y", perm=[0, 0])], ["Y"]),
     "E1003", "Y"),
    ("transpose-wrong-rank", model({"X": f32(3, 4)}, [node("Transpose", ["X"], "Y", perm=[0, 1, 2])], ["Y"]),
     "E1003", "Y"),
    ("tiny-permute", tiny(inp("x", [3, 4]), {"id": "p", "uop": "PERMUTE", "src": ["x"], "arg": {"perm": [1, 1]}}),
     "E1003", "p"),
    # E1004 AccDtypeMissing
    ("tiny-reduce-without-dtype", tiny(inp("x", [3, 4]), {"id": "r", "uop": "REDUCE", "src": ["x"],
                                                         "arg": {"op": "SUM", "axes": [1]}}), "E1004", "r"),
    ("tiny-contract-without-dtype", tiny(inp("a", [3, 4]), inp("b", [4, 5]), {
        "id": "c", "uop": "CONTRACT", "src": ["a", "b"],
        "arg": {"lhs_idx": ["m", "k"], "rhs_idx": ["k", "n"], "out_idx": ["m", "n"]}}), "E1004", "c"),
    ("gemm-acc-dtype-null", model({"A": f32(2, 3), "B": f32(3, 4)}, [node("GEMM", ["A", "B"], "C", acc_dtype=None)],
                                  ["C"]), "E1004", "C"),
    ("reduce-acc-dtype-null", model({"X": f32(2, 3)}, [node("Reduce", ["X"], "Y", op="sum", axes=[0], acc_dtype=None)],
                                    ["Y"]), "E1004", "Y"),
    # E1304 AxisAlignmentMismatch (one symbol, two sizes)
    ("declared-symbol-bound-twice", model({"X": f32(1, 1, 8, 8)},
                                          [node("MaxPool2D", ["X"], "P", kernel=[2, 2]),
                                           node("MaxPool2D", ["X"], "Q", kernel=[4, 4])], ["P", "Q"],
                                          {"P": {"shape": [1, 1, "Ho", "Wo"]}, "Q": {"shape": [1, 1, "Ho", "Wo"]}}),
     "E1304", "Q"),
    ("declared-output-uses-K-for-N", model({"A": f32("M", "K"), "B": f32("K", "N")}, [node("GEMM", ["A", "B"], "C")],
                                           ["C"], {"C": {"shape": ["M", "K"]}}), "E1304", "C"),
    # E1101 UnknownOp
    ("unknown-op", model({"X": f32(1, 2, 3, 3, 3)}, [node("Conv4D", ["X"], "Y")], ["Y"]), "E1101", "Y"),
    ("unknown-elementwise-fn", model({"X": f32(3)}, [node("Elementwise", ["X"], "Y", fn="softplus")], ["Y"]),
     "E1101", "Y"),
    ("tiny-unknown-uop", tiny(inp("x", [3]), {"id": "y", "uop": "FROBNICATE", "src": ["x"]}), "E1101", "y"),
    # E1103 UnknownDtype
    ("tensor-dtype-fp8", model({"X": ("fp8", [3])}, [node("Elementwise", ["X"], "Y", fn="relu")], ["Y"]),
     "E1103", "X"),
    ("cast-to-int4", model({"X": f32(3)}, [node("Elementwise", ["X"], "Y", fn="cast", to="int4")], ["Y"]),
     "E1103", "Y"),
    ("gemm-acc-dtype-fp64", model({"A": f32(2, 3), "B": f32(3, 4)}, [node("GEMM", ["A", "B"], "C", acc_dtype="fp64")],
                                  ["C"]), "E1103", "C"),
    ("tiny-input-dtype", tiny(inp("x", [3], dtype="complex64"), {"id": "y", "uop": "NEG", "src": ["x"]}),
     "E1103", "x"),
    # E1104 UnknownTensor
    ("input-never-defined", model({"X": f32(3)}, [node("Elementwise", ["X", "Z"], "Y", fn="add")], ["Y"]),
     "E1104", "Y"),
    ("signature-input-not-in-tensors", {"signature": {"inputs": [{"tensor": "X"}], "outputs": [{"tensor": "Y"}]},
                                        "tensors": {}, "graph": [node("Elementwise", ["X"], "Y", fn="relu")]},
     "E1104", "X"),
    # E1105 DanglingSrc
    ("tiny-dangling-src", tiny(inp("x", [3]), {"id": "y", "uop": "NEG", "src": ["nowhere"]}), "E1105", "y"),
    # E1106 Cycle
    ("two-node-cycle", model({"X": f32(3)}, [node("Elementwise", ["X", "Z"], "Y", fn="add"),
                                             node("Elementwise", ["Y"], "Z", fn="relu")], ["Y"]), "E1106", None),
    ("self-loop", model({"X": f32(3)}, [node("Elementwise", ["X", "Y"], "Y", fn="add")], ["Y"]), "E1106", None),
    ("tiny-cycle", tiny({"id": "a", "uop": "NEG", "src": ["b"]}, {"id": "b", "uop": "NEG", "src": ["a"]}),
     "E1106", None),
    # E1107 OutputNeverProduced
    ("output-never-produced", model({"X": f32(3)}, [node("Elementwise", ["X"], "Y", fn="relu")], ["W"]),
     "E1107", "W"),
    ("no-outputs", model({"X": f32(3)}, [node("Elementwise", ["X"], "Y", fn="relu")], []), "E1107", None),
    ("tiny-output-names-no-node", tiny(inp("x", [3]), {"id": "y", "uop": "NEG", "src": ["x"]}, outputs={"Y": "z"}),
     "E1107", "Y"),
    # E1108 MalformedJSON
    ("truncated-json", '{"signature": {"inputs": [', "E1108", None),
    ("empty-file", "", "E1108", None),
    ("not-utf8", b"\xff\xfe{\x00}", "E1108", None),
    # E1109 MalformedStructure
    ("top-level-list", "[1, 2, 3]", "E1109", None),
    ("top-level-string-is-not-a-path", json.dumps(str(pathlib.Path(__file__).resolve().parent.parent / "examples"
                                                      / "gemm_bias_relu.json")), "E1109", None),
    ("graph-not-a-list", {"signature": {"inputs": [], "outputs": [{"tensor": "Y"}]}, "tensors": {}, "graph": {}},
     "E1109", None),
    ("node-without-op", {**ONE_RELU, "graph": [{"name": "n", "inputs": ["X"], "outputs": ["Y"]}]}, "E1109", None),
    ("inputs-not-strings", {**ONE_RELU, "graph": [{"op": "Elementwise", "fn": "relu", "inputs": [1], "outputs": ["Y"]}]},
     "E1109", None),
    ("tensors-not-an-object", {**ONE_RELU, "tensors": [1]}, "E1109", None),
    ("signature-not-an-object", {**ONE_RELU, "signature": "X -> Y"}, "E1109", None),
    ("tiny-uop-not-an-object", tiny(inp("x", [3]), "NEG"), "E1109", None),
    # E1005 AxisOutOfRange
    ("reduce-axis-2-of-rank-2", model({"X": f32(3, 4)}, [node("Reduce", ["X"], "Y", op="sum", axes=[2])], ["Y"]),
     "E1005", "Y"),
    ("reduce-repeats-an-axis", model({"X": f32(3, 4)}, [node("Reduce", ["X"], "Y", op="max", axes=[0, -2])], ["Y"]),
     "E1005", "Y"),
    ("softmax-axis-3", model({"X": f32(4)}, [node("Softmax", ["X"], "Y", axis=3)], ["Y"]), "E1005", "Y"),
    ("flip-axis-minus-3", model({"X": f32(3, 4)}, [node("Flip", ["X"], "Y", axes=[-3])], ["Y"]), "E1005", "Y"),
    ("slice-axis-5", model({"X": f32(3, 4)}, [node("Slice", ["X"], "Y", starts=[0], ends=[1], axes=[5])], ["Y"]),
     "E1005", "Y"),
    ("layernorm-axis-2-of-rank-2", model({"X": f32(3, 4)}, [node("LayerNorm", ["X"], "Y", axis=2)], ["Y"]),
     "E1005", "Y"),
    # E1006 ConvChannelMismatch
    ("conv-c3-with-w-c2", model({"X": f32(1, 3, 5, 5), "W": f32(4, 2, 3, 3)}, [node("Conv2D", ["X", "W"], "Y")], ["Y"]),
     "E1006", "Y"),
    ("conv-groups-do-not-divide-c", model({"X": f32(1, 3, 5, 5), "W": f32(4, 1, 3, 3)},
                                          [node("Conv2D", ["X", "W"], "Y", groups=2)], ["Y"]), "E1006", "Y"),
    ("conv-groups-do-not-divide-co", model({"X": f32(1, 4, 5, 5), "W": f32(3, 2, 3, 3)},
                                           [node("Conv2D", ["X", "W"], "Y", groups=2)], ["Y"]), "E1006", "Y"),
    ("conv-groups-0", model({"X": f32(1, 4, 5, 5), "W": f32(4, 4, 3, 3)}, [node("Conv2D", ["X", "W"], "Y", groups=0)],
                            ["Y"]), "E1006", "Y"),
    # E1007 UnaddressableShape
    ("kernel-larger-than-input", model({"X": f32(1, 3, 2, 2), "W": f32(4, 3, 3, 3)},
                                       [node("Conv2D", ["X", "W"], "Y")], ["Y"]), "E1007", "Y"),
    ("zero-size-axis", model({"X": f32(0, 3)}, [node("Elementwise", ["X"], "Y", fn="relu")], ["Y"]), "E1007", "X"),
    ("negative-pad", model({"X": f32(3, 4)}, [node("Pad", ["X"], "Y", pads=[[-1, 0], [0, 0]])], ["Y"]), "E1007", "Y"),
    ("negative-conv-pad", model({"X": f32(1, 1, 5, 5), "W": f32(1, 1, 3, 3)},
                                [node("Conv2D", ["X", "W"], "Y", pad=[-1, 0, 0, 0])], ["Y"]), "E1007", "Y"),
    ("empty-slice", model({"X": f32(4)}, [node("Slice", ["X"], "Y", starts=[3], ends=[1])], ["Y"]), "E1007", "Y"),
    ("pool-pad-over-half-kernel", model({"X": f32(1, 1, 5, 5)}, [node("MaxPool2D", ["X"], "Y", kernel=[2, 2],
                                                                      pad=[2, 2, 0, 0])], ["Y"]), "E1007", "Y"),
    ("expand-to-zero", model({"X": f32(3)}, [node("Expand", ["X"], "Y", shape=[0, 3])], ["Y"]), "E1007", "Y"),
]


def _ids(cases):
    return [c[0] for c in cases]


@pytest.mark.parametrize("case", COMPILE_CASES, ids=_ids(COMPILE_CASES))
def test_malformed_model_gives_its_coded_diagnostic_and_exit_status_1(case):
    _, doc, code, at = case
    rc, diags, text = oracle.compile_model(doc)
    assert rc == 1, f"exit status {rc}, expected 1: {text[-500:]}"
    assert "Traceback" not in text
    assert diags, f"no JSON diagnostics printed: {text[-500:]}"
    d = diags[0]
    assert d["code"] == code, f"got {d['code']} {d['kind']}: {d['why']}"
    assert d["why"] and d["suggestion"] and d["kind"]
    if at is not None:
        assert d["at"] == at, f"diagnostic at {d['at']!r}, expected the user's name {at!r}"


def test_every_code_of_issue_2_has_a_case():
    wanted = {"E1001", "E1002", "E1003", "E1004", "E1304", "E1101", "E1103", "E1104", "E1105", "E1106", "E1107",
              "E1108", "E1109", "E1005", "E1006", "E1007"}
    assert wanted <= {c[2] for c in COMPILE_CASES}


# (case id, model, inputs, expected code): problems that only the inputs reveal
RUN_CASES = [
    ("symbol-K-bound-to-3-and-4", GEMM_SYM, {"A": np.ones((2, 3)), "B": np.ones((4, 5))}, "E1304"),
    ("symbol-M-bound-by-two-inputs", model({"A": f32("M", 4), "B": f32("M", 5)},
                                           [node("Reduce", ["A"], "C", op="sum", axes=[1]),
                                            node("Reduce", ["B"], "D", op="sum", axes=[1]),
                                            node("Elementwise", ["C", "D"], "E", fn="add")], ["E"]),
     {"A": np.ones((3, 4)), "B": np.ones((6, 5))}, "E1304"),
    ("static-axis-size", ONE_RELU, {"X": np.ones((3, 5))}, "E1002"),
    ("input-rank", ONE_RELU, {"X": np.ones((3, 4, 1))}, "E1002"),
    ("missing-input", GEMM_SYM, {"A": np.ones((2, 3))}, "E1111"),
    ("pad-by-a-symbol-no-input-binds", model({"X": f32(3)}, [node("Pad", ["X"], "Y", pads=[["P", 0]])], ["Y"]),
     {"X": np.ones(3)}, "E1305"),
    ("complex-input", ONE_RELU, {"X": np.ones((3, 4)) * 1j}, "E1503"),
    ("expand-beyond-64-bit-addressing", model({"X": f32(1)}, [node("Expand", ["X"], "Y", shape=[2**40, 2**40])], ["Y"]),
     {"X": np.ones(1)}, "E1007"),
]


@pytest.mark.parametrize("case", RUN_CASES, ids=_ids(RUN_CASES))
def test_bad_inputs_give_coded_diagnostics(case):
    _, doc, inputs, code = case
    rc, _, diags, stderr = oracle.run_model(doc, inputs)
    assert rc == 1 and diags, f"exit status {rc}: {stderr[-500:]}"
    assert diags[0]["code"] == code, f"got {diags[0]['code']} {diags[0]['kind']}: {diags[0]['why']}"


def test_unreadable_npz_and_missing_files(tmp_path):
    (tmp_path / "m.json").write_text(json.dumps(ONE_RELU))
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    rc, out, _ = oracle.cli(["run", str(tmp_path / "m.json"), "--inputs", str(tmp_path / "bad.npz"), "--out",
                             str(tmp_path / "o.npz"), "--json"])
    assert rc == 1 and oracle.diagnostics(out)[0]["code"] == "E1503"
    rc, out, _ = oracle.cli(["run", str(tmp_path / "m.json"), "--inputs", str(tmp_path / "none.npz"), "--out",
                             str(tmp_path / "o.npz"), "--json"])
    assert rc == 1 and oracle.diagnostics(out)[0]["code"] == "E1112"
    rc, out, _ = oracle.cli(["compile", str(tmp_path / "none.json"), "--json"])
    assert rc == 1 and oracle.diagnostics(out)[0]["code"] == "E1112"


@pytest.mark.parametrize("text,code", [('{"uops": [{"id": "x", "uop": "INPUT"', "E1108"),
                                       (json.dumps(model({"X": f32(3, 4), "Y2": f32(5)}, [
                                           node("Elementwise", ["X", "Y2"], "Y", fn="mul")], ["Y"])), "E1001")])
def test_a_real_process_exits_1_and_prints_the_diagnostic_without_traceback(tmp_path, text, code):
    (tmp_path / "m.json").write_text(text)
    r = subprocess.run([sys.executable, "-m", "polysat", "compile", str(tmp_path / "m.json")], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 1
    assert code in r.stderr and "suggestion" in r.stderr
    assert "Traceback" not in r.stderr + r.stdout
