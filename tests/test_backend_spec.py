"""GemmSpec: validation diagnostics, and its numpy meaning agrees with the Tiny IR reference evaluator."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from polysat.backend.common.spec import EpilogueOp

from polysat.backend.gemm.spec import GemmSpec
from polysat.backend.common.names import c_ident, unique_idents
from polysat.backend.gemm.reference import reference as gemm_reference, random_inputs
from polysat.ir.builder import Builder
from polysat.ir.diagnostics import PolysatError
from polysat.ir.dtypes import DType
from polysat.ir.evaluate import evaluate
from polysat.ir.tiny import Ops


def _code(fn):
    with pytest.raises(PolysatError) as e:
        fn()
    return e.value.diagnostics[0].code


def test_bad_specs_raise_coded_diagnostics():
    assert _code(lambda: GemmSpec("g", 0, 4, 4)) == "E1007"
    assert _code(lambda: GemmSpec("g", 4, 4, 4, a_layout="diag")) == "E1008"
    assert _code(lambda: GemmSpec("g", 4, 4, 4, in_dtype=DType.i32)) == "E1009"  # fp32 operands run 3xTF32
    assert _code(lambda: GemmSpec("g", 4, 4, 4, epilogue=(EpilogueOp("tanh"),))) == "E1008"
    assert _code(lambda: GemmSpec("g", 4, 4, 4, epilogue=(EpilogueOp("bias", "A", dtype=DType.fp16),))) == "E1110"
    assert _code(lambda: GemmSpec("g", "M x", 4, 4)) == "E1008"
    assert _code(lambda: GemmSpec("g", 4, 4, 4, a_broadcast=True)) == "E1008"
    assert _code(lambda: GemmSpec("g", 4, 4, 4, epilogue=(EpilogueOp("scale", value=float("nan")),))) == "E1008"
    assert _code(lambda: GemmSpec("g", "M", 4, 4).sizes({})) == "E1305"
    assert _code(lambda: GemmSpec.from_json({"name": "g"})) == "E1109"


def test_spec_json_round_trip():
    s = GemmSpec("mlp", "M", 256, 64, batch=(2, "B"), in_dtype=DType.bf16, out_dtype=DType.fp32, b_layout="col",
                 b_broadcast=True, epilogue=(EpilogueOp("bias", "b1", "m", DType.fp32), EpilogueOp("gelu_tanh"),
                                             EpilogueOp("scale", value=0.5), EpilogueOp("cast", dtype=DType.bf16),
                                             EpilogueOp("residual", "r", dtype=DType.bf16)))
    assert GemmSpec.from_json(s.to_json()) == s
    assert s.symbols == ("B", "M")
    assert s.shapes({"M": 3, "B": 5})["B"] == (256, 64)  # broadcast B: no batch dims


def test_names_are_sanitized_and_distinct():
    evil = 'x"); } __global__ void pwn() { //'
    ident = c_ident(evil, "t_")
    assert ident.replace("_", "").isalnum() and "__" not in ident
    assert c_ident("bias", "t_") == "t_bias"
    ids = unique_idents(["a-b", "a_b", "a b"], "t_")
    assert len(set(ids)) == 3


def _tiny_gemm(m, n, k, a_layout, b_layout, dt, epi):
    """X @ W (+ bias) (relu) written in Tiny IR the way the frontend lowers it (C-CON1)."""
    bld = Builder()
    a = bld.input("A", dt, (m, k) if a_layout == "row" else (k, m), at="A")
    b = bld.input("B", dt, (k, n) if b_layout == "row" else (n, k), at="B")
    a = a if a_layout == "row" else bld.permute(a, (1, 0), at="At")
    b = b if b_layout == "col" else bld.permute(b, (1, 0), at="Bt")  # now [N, K]
    a3 = bld.expand(bld.reshape(bld.cast(a, DType.fp32, at="ca"), (m, 1, k), at="ra"), (m, n, k), at="ea")
    b3 = bld.expand(bld.reshape(bld.cast(b, DType.fp32, at="cb"), (1, n, k), at="rb"), (m, n, k), at="eb")
    v = bld.reduce(bld.alu(Ops.MUL, a3, b3, at="mul"), "SUM", (2,), DType.fp32, at="sum")
    if "bias" in epi:
        bias = bld.cast(bld.input("bias", dt, (n,), at="bias"), DType.fp32, at="cbias")
        v = bld.alu(Ops.ADD, v, bias, at="add")
    if "relu" in epi:
        v = bld.alu(Ops.MAX, v, bld.const(0.0, DType.fp32, (), at="zero"), at="relu")
    return bld.program([("C", bld.cast(v, dt, at="out"))])


@given(m=st.integers(1, 9), n=st.integers(1, 9), k=st.integers(1, 12), a_layout=st.sampled_from(["row", "col"]),
       b_layout=st.sampled_from(["row", "col"]), dt=st.sampled_from([DType.fp16, DType.bf16]),
       epi=st.sampled_from([(), ("bias",), ("bias", "relu"), ("relu",)]))
def test_reference_matches_tiny_ir_evaluator(m, n, k, a_layout, b_layout, dt, epi):
    ops = tuple(EpilogueOp("bias", "bias", dtype=dt) if e == "bias" else EpilogueOp(e) for e in epi)
    spec = GemmSpec("g", m, n, k, in_dtype=dt, out_dtype=dt, a_layout=a_layout, b_layout=b_layout, epilogue=ops)
    inputs = random_inputs(spec, seed=m * 100 + n * 10 + k)
    want = evaluate(_tiny_gemm(m, n, k, a_layout, b_layout, dt, epi), inputs)["C"]
    got = gemm_reference(spec, inputs)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-3, atol=1e-3)


def test_reference_batched_broadcast_and_activations():
    spec = GemmSpec("g", 5, 7, 3, batch=(2,), out_dtype=DType.fp32, a_broadcast=True,
                    epilogue=(EpilogueOp("bias", "bm", "m", DType.fp32), EpilogueOp("silu"), EpilogueOp("scale", value=2.0),
                              EpilogueOp("residual", "r", dtype=DType.fp32), EpilogueOp("sigmoid")))
    x = random_inputs(spec, seed=3)
    a = x["A"].astype(np.float32)
    b = x["B"].astype(np.float32)
    v = np.einsum("mk,bkn->bmn", a, b) + x["bm"][None, :, None]
    v = v / (1 + np.exp(-v)) * 2.0 + x["r"]
    v = 1 / (1 + np.exp(-v))
    np.testing.assert_allclose(gemm_reference(spec, x), v, rtol=1e-5, atol=1e-5)
