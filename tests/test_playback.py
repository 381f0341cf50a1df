"""CPU playback of synthesized regions equals the reference evaluator (docs/DESIGN.md §Verification).

On every example and every Frontend IR op, the regions of the default
partition and of the whole program as one region play back to the reference evaluator's outputs
(rtol = atol = 1e-3, plus half an ulp of a 16-bit output), in the output's dtype. Symbols get odd
sizes so tails are exercised; bf16 inputs round through ml_dtypes as in the evaluator.
"""
from __future__ import annotations

import importlib.util
import json
import pathlib

import numpy as np
import pytest

from polysat.egraph.partition import Kernel, Partition
from polysat.frontend import load_model
from polysat.ir.diagnostics import PolysatError
from polysat.ir.evaluate import evaluate
from polysat.ir.playback import playback
from polysat.egraph.region_synth import default_partition, synthesize
from polysat.analyses.region_validate import validate_regions
from polysat.ir.tiny import Ops

_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)
model, node = oracle.model, oracle.node

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"
SIZES = {"M": 13, "N": 11, "K": 9, "B": 2, "H": 3, "D": 8, "T": 5, "R": 7, "C": 6, "S": 5, "E": 4, "F": 6}


def whole(program) -> Partition:
    nodes = frozenset(n.id for n in program.nodes if n.op != Ops.INPUT)
    outs = tuple(dict.fromkeys(nid for _, nid in program.outputs if program[nid].op != Ops.INPUT))
    return Partition((Kernel("whole", nodes, outs, tuple(n.id for n in program.inputs)),))


def inputs_for(program, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for n in program.inputs:
        shape = [d if isinstance(d, int) else int(d.evaluate(SIZES)) for d in n.shape]
        if n.dtype.value == "bool":
            out[n.arg["tensor_id"]] = rng.random(shape) < 0.5
        else:
            out[n.arg["tensor_id"]] = rng.standard_normal(shape).astype(np.float32)
    return out


def assert_matches_reference(program, partition, what: str):
    regions = synthesize(program, partition)
    assert validate_regions(regions) == [], what
    inputs = inputs_for(program)
    ref = evaluate(program, inputs)
    got = playback(regions, inputs)
    assert set(got) == set(ref), what
    for name, r in ref.items():
        g = got[name]
        assert g.shape == r.shape and g.dtype == r.dtype, (what, name, g.shape, r.shape, g.dtype, r.dtype)
        if r.dtype.kind == "b" or r.dtype.kind == "i":
            assert np.array_equal(g, r), (what, name)
            continue
        dt = {"float16": "fp16", "bfloat16": "bf16"}.get(r.dtype.name, "fp32")
        oracle.assert_close(g.astype(np.float64), r.astype(np.float64), dt, what=f"{what}: {name}")


@pytest.mark.parametrize("name", sorted(p.stem for p in EXAMPLES.glob("*.json")))
@pytest.mark.parametrize("partition", ["default", "whole"])
def test_example_playback_equals_reference(name, partition):
    program = load_model(json.loads((EXAMPLES / f"{name}.json").read_text()))
    part = default_partition(program) if partition == "default" else whole(program)
    assert_matches_reference(program, part, f"{name} ({partition})")


FRONTEND_OPS = {
    "gemm_trans": model({"A": ("fp16", [9, 13]), "B": ("bf16", [5, 9])},
                        [node("GEMM", ["A", "B"], "C", trans_a=True, trans_b=True, acc_dtype="fp32")], ["C"]),
    "gemm_1d_batched": model({"A": ("fp16", [7]), "B": ("fp16", [2, 7, 3])}, [node("GEMM", ["A", "B"], "C")], ["C"]),
    "elementwise_unary": model({"X": ("fp32", [3, 17])}, [node("Elementwise", ["X"], "E", fn="exp"),
                                                        node("Elementwise", ["E"], "Y", fn="sqrt")], ["Y"]),
    "elementwise_gelu_sigmoid": model({"X": ("bf16", [4, 6])}, [node("Elementwise", ["X"], "G", fn="gelu"),
                                                               node("Elementwise", ["G"], "Y", fn="sigmoid")], ["Y"]),
    "elementwise_broadcast": model({"A": ("fp16", [3, 1, 5]), "B": ("fp32", [4, 1])},
                                   [node("Elementwise", ["A", "B"], "C", fn="mul")], ["C"]),
    "where": model({"Cd": ("bool", [4, 5]), "X": ("fp32", [4, 5]), "Y": ("fp32", [5])},
                   [node("Elementwise", ["Cd", "X", "Y"], "Z", fn="where")], ["Z"]),
    "cast": model({"X": ("fp32", [4, 7])}, [node("Elementwise", ["X"], "Y", fn="cast", to="bf16")], ["Y"]),
    "reduce_mean_keepdim": model({"X": ("fp16", ["M", "N"])},
                                 [node("Reduce", ["X"], "Y", op="mean", axes=[1], keepdim=True)], ["Y"]),
    "reduce_max_min": model({"X": ("fp32", [3, 4, 5])}, [node("Reduce", ["X"], "A", op="max", axes=[0, 2]),
                                                         node("Reduce", ["X"], "B", op="min", axes=[1])], ["A", "B"]),
    "softmax": model({"X": ("fp16", [5, 11, 3])}, [node("Softmax", ["X"], "Y", axis=1)], ["Y"]),
    "layernorm_softmax": model({"X": ("fp32", ["R", "C"])}, [node("LayerNorm", ["X"], "L", eps=1e-5),
                                                             node("Softmax", ["L"], "Y", axis=-1)], ["Y", "L"]),
    "conv_grouped_dilated": model({"X": ("fp16", [1, 6, 9, 8]), "W": ("fp16", [6, 1, 3, 3])},
                                  [node("Conv2D", ["X", "W"], "Y", groups=6, pad=[1, 1, 1, 1], dilation=[2, 1])],
                                  ["Y"]),
    "conv_bias_strided": model({"X": ("fp16", [2, 3, 9, 7]), "W": ("fp16", [4, 3, 3, 2]), "bias": ("fp16", [4])},
                               [node("Conv2D", ["X", "W", "bias"], "Y", stride=[2, 1], pad=[0, 1, 1, 0])], ["Y"]),
    "maxpool": model({"X": ("fp16", [1, 2, 7, 9])},
                     [node("MaxPool2D", ["X"], "Y", kernel=[3, 2], stride=[2, 2], pad=[1, 1, 0, 0])], ["Y"]),
    "attention_causal": model({"Q": ("fp16", [1, 2, 5, 8]), "K": ("fp16", [1, 2, 7, 8]), "V": ("fp16", [1, 2, 7, 8])},
                              [node("Attention", ["Q", "K", "V"], "O", causal=True)], ["O"]),
    "movement": model({"X": ("fp32", [6, 5])},
                      [node("Reshape", ["X"], "R", shape=[5, -1]), node("Transpose", ["R"], "T", perm=[-1, 0]),
                       node("Expand", ["T"], "E", shape=[4, 6, 5]), node("Transpose", ["E"], "D")], ["E", "D", "R"]),
    "slice": model({"X": ("fp32", [9, 8])}, [node("Slice", ["X"], "Y", starts=[1, 0], ends=[8, 7], steps=[3, 2])],
                   ["Y"]),
    "pad_flip": model({"X": ("fp16", [3, 4])}, [node("Pad", ["X"], "P", pads=[[1, 0], [2, 3]], value=-2.5),
                                                node("Flip", ["P"], "F", axes=[0, -1])], ["F", "P"]),
    "cnn": model({"X": ("fp16", [2, 3, 8, 8]), "W": ("fp16", [4, 3, 3, 3]), "FC": ("fp16", [64, 10])},
                 [node("Conv2D", ["X", "W"], "C", pad=[1, 1, 1, 1]), node("Elementwise", ["C"], "Rl", fn="relu"),
                  node("MaxPool2D", ["Rl"], "P", kernel=[2, 2]), node("Reshape", ["P"], "F", shape=[2, -1]),
                  node("GEMM", ["F", "FC"], "L"), node("Softmax", ["L"], "Y", axis=-1)], ["Y"]),
}


@pytest.mark.parametrize("name", sorted(FRONTEND_OPS))
@pytest.mark.parametrize("partition", ["default", "whole"])
def test_frontend_op_playback_equals_reference(name, partition):
    program = load_model(FRONTEND_OPS[name])
    part = default_partition(program) if partition == "default" else whole(program)
    assert_matches_reference(program, part, f"{name} ({partition})")


def test_keep_all_returns_intermediate_tensors():
    program = load_model(json.loads((EXAMPLES / "softmax.json").read_text()))
    regions = synthesize(program, default_partition(program))
    inputs = inputs_for(program)
    every = playback(regions, inputs, keep_all=True)
    outs = playback(regions, inputs)
    assert set(outs) < set(every) and set(outs) == {name for name, _ in program.outputs}


def test_missing_input_and_conflicting_symbols_are_coded_diagnostics():
    program = load_model(json.loads((EXAMPLES / "gemm_bias_relu.json").read_text()))
    regions = synthesize(program, default_partition(program))
    inputs = inputs_for(program)
    with pytest.raises(PolysatError) as e:
        playback(regions, {k: v for k, v in inputs.items() if k != "bias"})
    assert e.value.diagnostics[0].kind == "MissingInput"
    bad = dict(inputs, bias=np.zeros(inputs["bias"].shape[0] + 1, np.float32))
    with pytest.raises(PolysatError) as e:
        playback(regions, bad)
    assert e.value.diagnostics[0].kind == "AxisAlignmentMismatch"


def test_integer_and_boolean_reductions_play_back_exactly():
    from polysat.ir.builder import Builder
    from polysat.ir.dtypes import DType
    b = Builder()
    x = b.input("X", DType.fp32, (3, 4), at="X", nid="X")
    xi = b.cast(x, DType.i32, at="c")
    neg = b.add(Ops.CMPLT, [x, b.const_like(0.0, x, at="z")], at="lt")
    p = b.program([("imax", b.reduce(xi, "MAX", (1,), DType.i32, at="r1")),
                   ("isum", b.reduce(xi, "SUM", (0,), DType.i32, at="r2")),
                   ("any", b.reduce(neg, "MAX", (1,), DType.bool, at="r3")),
                   ("all", b.reduce(neg, "MIN", (0,), DType.bool, at="r4"))])
    assert_matches_reference(p, default_partition(p), "int/bool reduce (default)")
    assert_matches_reference(p, whole(p), "int/bool reduce (whole)")


def test_a_region_holds_only_the_lets_still_read():
    """Each let's intermediates are dropped once it is made and each let once the last let reading it is (GLPN's
    fused decoder head, 1,800 lets, held every value it made: a MemoryError at 10 GB): the skip net's whole-program
    region (a chain of convolutions, one value kept for the end) ends holding its yield and what no later let reads."""
    from polysat.frontend import program_from_doc
    from polysat.ir.playback import _RegionRun, bind_region_symbols
    from polysat.ir.region import R, walk
    from polysat.tests.test_size_cut import skip_net
    p = program_from_doc(skip_net(layers=4), "model")
    (r,) = synthesize(p, whole(p))
    feeds = inputs_for(p)
    run = _RegionRun(r, {k: np.asarray(v) for k, v in feeds.items()}, bind_region_symbols([r], feeds))
    out = run.run()
    read = {n.arg for let in r.lets for n in walk(let.expr) if n.op == R.REF}
    assert len(r.lets) > 4 and set(run.lets) == {y.src for y in r.yields} | ({x.name for x in r.lets} - read)
    assert not run.memo
    assert np.allclose(out[r.yields[0].dst], evaluate(p, feeds)[p.outputs[0][0]], rtol=1e-3, atol=1e-3)
