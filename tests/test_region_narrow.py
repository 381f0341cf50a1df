"""Intermediates stored as their readers round them (ir/region_narrow.py).

* the narrowed regions compute exactly what the synthesized ones do (CPU playback, bit for bit: rounding
  at the store or at each load of the same element is the same rounding), for generated GEMM -> act ->
  GEMM models under --cost=model, fp16 and bf16;
* the MLP example's boundary is stored in fp16 and both of its regions bind to the GEMM kind (its
  second GEMM reads an fp16 operand, as the MMA template loads it);
* a value some reader uses unrounded, and every program output, keep their dtype.
"""
from __future__ import annotations

import importlib.util
import os
import pathlib

import numpy as np
from hypothesis import given, settings, strategies as st

from polysat.backend import kinds
from polysat.ir.dtypes import DType
from polysat.ir.playback import playback
from polysat.ir.region_narrow import narrow_boundaries
from polysat.egraph.region_synth import synthesize
from polysat.pipeline import Compilation

_oracle_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_oracle_spec)
_oracle_spec.loader.exec_module(oracle)
model, node = oracle.model, oracle.node
EX = os.path.join(os.path.dirname(__file__), "..", "examples")


def synthesized(doc, cost="model"):
    c = Compilation(doc, cost=cost)
    x = c.extraction
    return synthesize(x.program, x.partition), c.regions


def inputs_for(regions, seed):
    rng = np.random.default_rng(seed)
    made = {b.name for r in regions for b in r.outputs}
    return {b.name: rng.uniform(-1, 1, size=tuple(int(d) for d in b.memref.shape)).astype(np.float32)
            for r in regions for b in r.inputs if b.name not in made}


@st.composite
def two_gemm_models(draw):
    dt = draw(st.sampled_from(["fp16", "bf16"]))
    t, d, h = draw(st.integers(1, 24)), draw(st.sampled_from([8, 16, 24])), draw(st.sampled_from([16, 32]))
    act = draw(st.sampled_from(["relu", "gelu", "silu", "sigmoid"]))
    g = [node("GEMM", ["X", "W1"], "H0"), node("Elementwise", ["H0", "b1"], "H1", fn="add"),
         node("Elementwise", ["H1"], "H", fn=act), node("GEMM", ["H", "W2"], "Y0")]
    ins = {"X": (dt, [t, d]), "W1": (dt, [d, h]), "b1": (dt, [h]), "W2": (dt, [h, d])}
    if draw(st.booleans()):
        g.append(node("Elementwise", ["Y0", "X"], "Y", fn="add"))
        out = "Y"
    else:
        out = "Y0"
    return model(ins, g, [out], {"H": {"dtype": dt}, out: {"dtype": dt}})


@settings(max_examples=12, deadline=None)
@given(two_gemm_models(), st.integers(0, 100))
def test_narrowed_regions_compute_exactly_what_the_synthesized_ones_do(doc, seed):
    before, after = synthesized(doc)
    ins = inputs_for(before, seed)
    want, got = playback(before, ins), playback(after, ins)
    assert set(want) == set(got)
    for k in want:
        assert got[k].dtype == want[k].dtype
        np.testing.assert_array_equal(got[k], want[k])


def test_the_mlp_boundary_is_stored_in_fp16_and_both_regions_are_gemms():
    before, after = synthesized(os.path.join(EX, "mlp.json"))
    (b0,) = [b for b in before[0].outputs]
    (a0,) = [b for b in after[0].outputs]
    # the search already stores the narrow value (it is priced below the fp32 one); narrowing keeps it
    assert b0.memref.dtype == DType.fp16 and a0.memref.dtype == DType.fp16
    assert [kinds.bind(r)[0].name for r in after] == ["gemm", "gemm"]


def _two_regions(unrounded_read: bool):
    """k0: B = relu(A) in fp32 (an intermediate); k1: C = cast(B, fp16) [+ B unrounded], a program output."""
    from polysat.ir.expr import Expr
    from polysat.ir.region import Buffer, Let, MemRef, Region, Yield, binary, read, unary
    ax, names = ("i0", "i1"), ("i0", "i1")
    idx = tuple(Expr.var(a) for a in ax)
    iters = (("i0", 4), ("i1", 8))
    f32, f16 = DType.fp32, DType.fp16
    k0 = Region("k0", iters, (), (Buffer("A", MemRef((4, 8), f32)),), (Buffer("B", MemRef((4, 8), f32), "gmem"),),
                (Let("b", unary("relu", read("A", idx, f32, names), f32)),), (Yield("b", "B", f32, ax),))
    c = unary("cast", unary("cast", read("B", idx, f32, names), f16), f32)
    if unrounded_read:
        c = binary("add", c, read("B", idx, f32, names), f32)
    k1 = Region("k1", iters, (), (Buffer("B", MemRef((4, 8), f32)),),
                (Buffer("C", MemRef((4, 8), f16), "gmem", program_output=True),), (Let("c", c),),
                (Yield("c", "C", f16, ax),))
    return [k0, k1]


def test_values_read_unrounded_and_program_outputs_keep_their_dtype():
    ins = {"A": np.random.default_rng(0).uniform(-1, 1, (4, 8)).astype(np.float32)}
    rounded = narrow_boundaries(_two_regions(False))
    assert rounded[0].outputs[0].memref.dtype == DType.fp16 and rounded[1].inputs[0].memref.dtype == DType.fp16
    assert rounded[1].outputs[0].memref.dtype == DType.fp16  # the program output as declared
    np.testing.assert_array_equal(playback(rounded, ins)["C"], playback(_two_regions(False), ins)["C"])
    mixed = _two_regions(True)  # B is also added unrounded: it stays fp32
    assert narrow_boundaries(mixed) is mixed
