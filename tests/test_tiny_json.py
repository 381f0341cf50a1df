"""Tiny IR JSON: dump -> load is the identity; the seed's Tiny IR examples load; bad programs get codes."""
import glob
import json
import re

import numpy as np
import pytest

from polysat.frontend import load_model
from polysat.ir.diagnostics import PolysatError
from polysat.ir.evaluate import evaluate
from polysat.ir.tiny_json import dump_tiny, load_tiny

EXAMPLES = sorted(glob.glob(str(__import__("pathlib").Path(__file__).parent.parent / "examples" / "*.json")))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.rsplit("/", 1)[-1])
def test_round_trip_of_every_example(path):
    prog = load_model(path)
    doc = dump_tiny(prog)
    again = load_tiny(json.loads(json.dumps(doc)))
    assert again == prog
    assert dump_tiny(again) == doc


SEED_GEMM = {
    "uops": [
        {"id": "n0", "uop": "INPUT", "arg": {"tensor_id": "A", "dtype": "fp16", "shape": ["M", "K"]}},
        {"id": "n1", "uop": "INPUT", "arg": {"tensor_id": "B", "dtype": "fp16", "shape": ["K", "N"]}},
        {"id": "n2", "uop": "RESHAPE", "src": ["n0"], "arg": {"result_shape": ["M", 1, "K"]}},
        {"id": "n3", "uop": "PERMUTE", "src": ["n1"], "arg": {"perm": [1, 0]}},
        {"id": "n4", "uop": "RESHAPE", "src": ["n3"], "arg": {"result_shape": [1, "N", "K"]}},
        {"id": "n5", "uop": "EXPAND", "src": ["n2"], "arg": {"result_shape": ["M", "N", "K"], "broadcast_dimensions": [0, 2]}},
        {"id": "n6", "uop": "EXPAND", "src": ["n4"], "arg": {"result_shape": ["M", "N", "K"], "broadcast_dimensions": [1, 2]}},
        {"id": "n7", "uop": "MUL", "src": ["n5", "n6"]},
        {"id": "n8", "uop": "REDUCE", "src": ["n7"], "arg": {"op": "SUM", "axes": ["K"], "dtype": "fp32"}},
        {"id": "n9", "uop": "CAST", "src": ["n8"], "arg": {"to": "fp16"}},
    ]
}


def test_seed_002_gemm_loads_and_computes_a_matmul():
    prog = load_tiny(SEED_GEMM)
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((5, 7)), rng.standard_normal((7, 3))
    out = evaluate(prog, {"A": a, "B": b})["n9"].astype(np.float64)
    ref = a.astype(np.float16).astype(np.float64) @ b.astype(np.float16).astype(np.float64)
    np.testing.assert_allclose(out, ref, rtol=1e-3, atol=2e-3)


def test_immediates_become_consts_and_broadcasts_become_expands():
    doc = {"uops": [
        {"id": "x", "uop": "INPUT", "arg": {"tensor_id": "X", "dtype": "fp32", "shape": [4, 3]}},
        {"id": "b", "uop": "INPUT", "arg": {"tensor_id": "B", "dtype": "fp32", "shape": [3]}},
        {"id": "y", "uop": "ADD", "src": ["x", "b"]},
        {"id": "z", "uop": "MUL", "src": ["y", 0.5]},
    ]}
    prog = load_tiny(doc)
    ops = [n.op.value for n in prog.nodes]
    assert "EXPAND" in ops and "CONST" in ops
    x, b = np.arange(12.0).reshape(4, 3), np.array([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(evaluate(prog, {"X": x, "B": b})["z"], ((x + b) * 0.5).astype(np.float32))


@pytest.mark.parametrize("mutate, code", [
    (lambda d: d["uops"][8]["arg"].pop("dtype"), "E1004"),
    (lambda d: d["uops"][3]["arg"].update(perm=[0, 0]), "E1003"),
    (lambda d: d["uops"][2]["arg"].update(result_shape=["M", 2, "K"]), "E1002"),
    (lambda d: d["uops"][7].update(src=["n5", "nope"]), "E1105"),
    (lambda d: d["uops"][2].update(src=["n9"]), "E1106"),
    (lambda d: d["uops"][7].update(uop="FROB"), "E1101"),
    (lambda d: d["uops"][0]["arg"].update(dtype="fp8"), "E1103"),
    (lambda d: d["uops"][8]["arg"].update(axes=[5]), "E1005"),
])
def test_malformed_tiny_ir_gets_its_code(mutate, code):
    doc = json.loads(json.dumps(SEED_GEMM))
    mutate(doc)
    with pytest.raises(PolysatError) as e:
        load_tiny(doc)
    assert e.value.diagnostics[0].code == code
