"""The --dump=region JSON (docs/DESIGN.md §RB-SSA): its shape, exact round-trips, and coded load errors."""
from __future__ import annotations

import json
import pathlib

import pytest

from polysat.egraph.partition import Kernel, Partition
from polysat.frontend import load_model
from polysat.ir.diagnostics import PolysatError
from polysat.ir.region import regions_json
from polysat.ir.region_load import region_from_json, regions_from_json
from polysat.egraph.region_synth import default_partition, synthesize
from polysat.ir.tiny import Ops

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def program(name: str):
    return load_model(json.loads((EXAMPLES / f"{name}.json").read_text()))


def whole(p) -> Partition:
    nodes = frozenset(n.id for n in p.nodes if n.op != Ops.INPUT)
    return Partition((Kernel("whole", nodes, tuple(nid for _, nid in p.outputs), tuple(n.id for n in p.inputs)),))


@pytest.mark.parametrize("name", sorted(p.stem for p in EXAMPLES.glob("*.json")))
def test_region_json_round_trips_exactly(name):
    p = program(name)
    for part in (default_partition(p), whole(p)):
        regions = synthesize(p, part)
        text = json.dumps(regions_json(regions), allow_nan=False)  # strict JSON: infinities are strings
        again = regions_from_json(json.loads(text))
        assert again == regions
        assert json.dumps(regions_json(again), allow_nan=False) == text
        assert len({hash(r) for r in regions}) == len(regions)  # regions are hashable values


def test_gemm_region_json_has_the_shape_of_seed_6_8_1():
    (doc,) = regions_json(synthesize(program("gemm_bias_relu"), default_partition(program("gemm_bias_relu"))))["regions"]
    r = doc["region"]
    assert set(r) >= {"name", "iters", "inputs", "outputs", "lets", "yield"}
    assert r["iters"] == [{"name": "m", "size": "M"}, {"name": "n", "size": "N"}]
    a = r["inputs"][0]
    assert a["name"] == "A" and a["memref"] == {"shape": ["M", "K"], "dtype": "fp16", "alignment": 128,
                                                 "noalias": True, "layout": {"kind": "row_major"}}
    assert r["outputs"][0]["materialize"] == "gmem"
    acc = r["lets"][0]["expr"]["reduce"]
    assert (acc["op"], acc["axes"], acc["init"], acc["dtype"]) == ("sum", ["k"], 0.0, "fp32")
    reads = [x["cast"][0]["read"] for x in acc["body"]["mul"]]
    assert reads == [{"tensor": "A", "map": ["m", "k"]}, {"tensor": "B", "map": ["k", "n"]}]
    assert r["yield"] == [{"from": r["lets"][-1]["let"], "to": "C2", "cast": "fp16", "axes": ["m", "n"]}]


def test_softmax_max_reduce_init_is_minus_infinity_in_json():
    doc = regions_json(synthesize(program("softmax"), whole(program("softmax"))))
    text = json.dumps(doc)
    assert '"init": "-inf"' in text


@pytest.mark.parametrize("doc,kind", [
    ({"regions": 3}, "MalformedStructure"),
    ({"region": {"name": "r", "iters": [], "inputs": [], "outputs": [], "lets": [{"let": "a", "expr": "b"}],
                 "yield": []}}, "MalformedStructure"),
    ({"region": {"name": "r", "iters": [{"name": "i", "size": 4}], "inputs": [], "outputs": [],
                 "lets": [{"let": "a", "expr": {"read": {"tensor": "X", "map": ["i"]}}}], "yield": []}},
     "UnknownTensor"),
    ({"region": {"name": "r", "iters": [], "inputs": [], "outputs": [],
                 "lets": [{"let": "a", "expr": {"const": 1.0, "dtype": "fp8"}}], "yield": []}}, "UnknownDtype"),
    ({"region": {"name": "r", "iters": [], "inputs": [], "outputs": [],
                 "lets": [{"let": "a", "expr": {"frobnicate": [1]}}], "yield": []}}, "MalformedStructure"),
    ({"region": {"name": "r", "iters": [], "inputs": [], "outputs": [],
                 "lets": [{"let": "a", "expr": {"const": 1.0, "dtype": "fp32"}},
                          {"let": "b", "expr": {"add": ["a"], "dtype": "fp32"}}], "yield": []}}, "WrongArity"),
])
def test_malformed_region_json_is_a_coded_diagnostic(doc, kind):
    with pytest.raises(PolysatError) as e:
        regions_from_json(doc) if "regions" in doc else region_from_json(doc)
    assert e.value.diagnostics[0].kind == kind
