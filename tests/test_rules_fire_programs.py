"""Each algebra and movement rule that no shipped example reaches fires on a small real program here,
and the rewritten program still computes the reference's values (saturate, extract, synthesize the
regions, play them back; docs/DESIGN.md §E-graph).

The programs are what importers emit: ONNX Elu with its default alpha (alpha * (exp(x) - 1) with
alpha = 1: mul-one), ONNX Shrink's function body with its default bias 0 (x + 0: add-zero), ONNX
Einsum transposing a bf16 tensor (widened to fp32 and rounded back: cast-roundtrip), a Flip before an
activation (read-flip), an explicit zero Pad before a padded Conv2D (a pad of a padded read:
select-pad), and an Expand broadcast again by an elementwise op (expand-compose). The ONNX example
architectures (examples/onnx_models.py) exercise the movement rules the JSON examples do not reach
(heads split by Slice: read-shrink; K transposed after the head permute: permute-compose).
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from polysat.egraph.api import extract
from polysat.egraph.region_synth import synthesize
from polysat.egraph.saturate import saturate
from polysat.frontend import program_from_doc
from polysat.frontend.onnx import import_onnx
from polysat.ir.evaluate import evaluate
from polysat.ir.playback import playback

F = TensorProto.FLOAT


def _onnx(nodes, ins, outs, inits=()):
    vi = helper.make_tensor_value_info
    g = helper.make_graph(nodes, "g", [vi(*i) for i in ins], [vi(*o) for o in outs], initializer=list(inits))
    return import_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]))


def _const(name: str, v: float):
    return numpy_helper.from_array(np.array(v, np.float32), name)


def _frontend(graph: list, tensors: dict, out: str) -> dict:
    return {"signature": {"inputs": [{"tensor": t} for t in tensors], "outputs": [{"tensor": out}]},
            "tensors": tensors, "graph": graph}


def elu():
    return _onnx([helper.make_node("Elu", ["x"], ["y"])], [("x", F, [3, 4])], [("y", F, [3, 4])])


def shrink():
    n = helper.make_node
    return _onnx([n("Neg", ["lambd"], ["nl"]), n("Less", ["x", "nl"], ["lo"]), n("Greater", ["x", "lambd"], ["hi"]),
                  n("Add", ["x", "bias"], ["xa"]), n("Sub", ["x", "bias"], ["xs"]),
                  n("Where", ["hi", "xs", "zero"], ["w"]), n("Where", ["lo", "xa", "w"], ["y"])],
                 [("x", F, [3, 4])], [("y", F, [3, 4])], [_const("lambd", 0.5), _const("bias", 0.0), _const("zero", 0.0)])


def einsum_bf16():
    bf = TensorProto.BFLOAT16
    return _onnx([helper.make_node("Einsum", ["x"], ["y"], equation="ij->ji")], [("x", bf, [3, 4])], [("y", bf, [4, 3])])


def flip():
    return _frontend([{"op": "Flip", "name": "reverse", "inputs": ["X"], "outputs": ["F"], "attrs": {"axes": [1]}},
                      {"op": "Elementwise", "name": "act", "fn": "relu", "inputs": ["F"], "outputs": ["Y"]}],
                     {"X": {"dtype": "fp32", "shape": [4, 6]}}, "Y")


def pad_conv():
    return _frontend([{"op": "Pad", "name": "zpad", "inputs": ["X"], "outputs": ["P"],
                       "attrs": {"pads": [[0, 0], [0, 0], [1, 1], [1, 1]]}},
                      {"op": "Conv2D", "name": "conv", "inputs": ["P", "W"], "outputs": ["Y"], "attrs": {"pad": 1}}],
                     {"X": {"dtype": "fp16", "shape": [1, 4, 6, 6]}, "W": {"dtype": "fp16", "shape": [8, 4, 3, 3]}}, "Y")


def expand_twice():
    return _frontend([{"op": "Expand", "name": "rows", "inputs": ["S"], "outputs": ["E"], "attrs": {"shape": [4, 1]}},
                      {"op": "Elementwise", "name": "scale", "fn": "mul", "inputs": ["X", "E"], "outputs": ["Y"]}],
                     {"X": {"dtype": "fp32", "shape": [4, 6]}, "S": {"dtype": "fp32", "shape": [1, 1]}}, "Y")


CASES = [("mul-one", elu), ("add-zero", shrink), ("cast-roundtrip", einsum_bf16), ("read-flip", flip),
         ("select-pad", pad_conv), ("expand-compose", expand_twice)]


@pytest.mark.parametrize("rule,build", CASES, ids=[c[0] for c in CASES])
def test_rule_fires_on_a_real_program_and_keeps_its_values(rule, build):
    p = program_from_doc(build())
    st, rep = saturate(p)
    assert rep.rules[rule].matches > 0, rep.rules[rule]
    q, part, _ = extract(st)
    rng = np.random.default_rng(5)
    inputs = {n.arg["tensor_id"]: rng.standard_normal(tuple(n.shape)).astype(n.dtype.np) for n in p.inputs}
    want = evaluate(p, inputs)
    got = playback(synthesize(q, part), inputs)
    for name, _ in p.outputs:
        np.testing.assert_allclose(np.asarray(got[name], np.float32), np.asarray(want[name], np.float32),
                                   rtol=1e-2, atol=1e-2)


ARCHITECTURES = {"resnet_cnn": ("reshape-noop", "const-expand", "const-reshape"),
                 "bert_encoder": ("permute-compose",), "gpt2_block": ("read-shrink", "permute-compose")}


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_the_onnx_example_architectures_exercise_the_movement_rules_the_json_examples_do_not(name):
    from polysat.examples.onnx_models import build
    from polysat.ir.gather_split import split_gathers
    _, rep = saturate(split_gathers(program_from_doc(import_onnx(build(name)))).program)
    assert {r: rep.rules[r].matches > 0 for r in ARCHITECTURES[name]} == dict.fromkeys(ARCHITECTURES[name], True)
