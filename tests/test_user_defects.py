"""Defects a new user and external suites found, each pinned by the smallest model that showed it.

Every expected value comes from an independent oracle (numpy in float64), never from polysat itself:
rank-0 outputs of playback, a reduce-over-everything read again after being output, MaxPool2D windows
that overlap padding but not only padding, unknown attributes and node fields, bool arithmetic, huge
symbolic sizes in the cost model and Poly Core, and names with newlines.
"""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

from polysat.ir.evaluate import evaluate
from polysat.ir.playback import playback
from polysat.pipeline import Compilation

_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)
model, node = oracle.model, oracle.node


def f32(*shape):
    return ("fp32", list(shape))


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ---- 1. rank-0 outputs keep rank 0 on every target --------------------------------------------------

RANK0 = [
    ("reduce-over-all-axes", model({"X": f32(3, 4)}, [node("Reduce", ["X"], "S", op="sum", axes=[0, 1])], ["S"]),
     {"X": _rand(3, 4)}, lambda i: i["X"].astype(np.float64).sum()),
    ("gemm-1d-by-1d", model({"A": f32(5), "B": f32(5)}, [node("GEMM", ["A", "B"], "S")], ["S"]),
     {"A": _rand(5), "B": _rand(5, seed=1)}, lambda i: i["A"].astype(np.float64) @ i["B"].astype(np.float64)),
]


@pytest.mark.parametrize("target", ["reference", "playback"])
@pytest.mark.parametrize("case", RANK0, ids=[c[0] for c in RANK0])
def test_rank0_output_has_shape_empty_on_every_target(case, target):
    _, doc, ins, want = case
    rc, outs, diags, err = oracle.run_model(doc, ins, ["--target", target])
    assert rc == 0, (diags, err)
    assert outs["S"].shape == (), f"{target} gives shape {outs['S'].shape} for a rank-0 output"
    oracle.assert_close(outs["S"], np.asarray(want(ins)), "fp32", what=target)


# ---- 2. a reduce over all axes that is an output and read by a later op -------------------------------

def test_full_reduce_that_is_output_and_read_again_plays_back():
    doc = model({"X": f32(3, 4)}, [node("Reduce", ["X"], "S", op="sum", axes=[0, 1]),
                                   node("Elementwise", ["S", "X"], "Y", fn="add")], ["S", "Y"])
    ins = {"X": _rand(3, 4)}
    x = ins["X"].astype(np.float64)
    for target in ("reference", "playback"):
        rc, outs, diags, err = oracle.run_model(doc, ins, ["--target", target])
        assert rc == 0, (target, diags, err)
        oracle.assert_close(outs["S"], np.asarray(x.sum()), "fp32", what=f"{target} S")
        oracle.assert_close(outs["Y"], x.sum() + x, "fp32", what=f"{target} Y")


# ---- 3. MaxPool2D: a window is rejected only when it can see nothing but padding ----------------------

def _maxpool64(x: np.ndarray, k: int, s: int, p: int, d: int = 1) -> np.ndarray:
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (p, p), (p, p)), constant_values=-np.inf)
    ho = (xp.shape[2] - d * (k - 1) - 1) // s + 1
    wo = (xp.shape[3] - d * (k - 1) - 1) // s + 1
    out = np.full(x.shape[:2] + (ho, wo), -np.inf)
    for a in range(k):
        for b in range(k):
            out = np.maximum(out, xp[:, :, a * d:a * d + s * (ho - 1) + 1:s, b * d:b * d + s * (wo - 1) + 1:s])
    return out


@pytest.mark.parametrize("k,s,p,d", [(3, 1, 2, 1), (2, 1, 1, 1), (3, 2, 2, 1), (2, 1, 2, 2), (3, 1, 4, 2)])
def test_maxpool_pad_below_the_window_extent_is_accepted_and_correct(k, s, p, d):
    doc = model({"X": f32(1, 2, 5, 6)}, [node("MaxPool2D", ["X"], "Y", kernel=[k, k], stride=[s, s], pad=p,
                                              dilation=[d, d])], ["Y"])
    ins = {"X": _rand(1, 2, 5, 6)}
    want = _maxpool64(ins["X"], k, s, p, d)
    assert np.isfinite(want).all()  # the oracle agrees: no window sees only padding
    for target in ("reference", "playback"):
        rc, outs, diags, err = oracle.run_model(doc, ins, ["--target", target])
        assert rc == 0, (target, diags, err)
        oracle.assert_close(outs["Y"], want, "fp32", what=target)


@pytest.mark.parametrize("k,p,d", [(3, 3, 1), (2, 2, 1), (2, 3, 2)])
def test_maxpool_window_of_only_padding_is_e1007(k, p, d):
    doc = model({"X": f32(1, 1, 5, 5)}, [node("MaxPool2D", ["X"], "Y", kernel=[k, k], stride=[1, 1], pad=p,
                                              dilation=[d, d])], ["Y"])
    assert not np.isfinite(_maxpool64(_rand(1, 1, 5, 5), k, 1, p, d)).all()  # the oracle sees an all-padding window
    rc, diags, text = oracle.compile_model(doc)
    assert rc == 1 and diags[0]["code"] == "E1007" and diags[0]["at"] == "Y", text[-400:]


# ---- 4. unknown attributes and node fields are diagnosed, never ignored --------------------------------

UNKNOWN = [
    ("gemm-transpose_b", model({"A": f32(2, 3), "B": f32(4, 3)}, [node("GEMM", ["A", "B"], "C", transpose_b=True)],
                               ["C"]), "E1008", "C", "transpose_b"),
    ("softmax-object-attribute", model({"X": f32(3)}, [node("Softmax", ["X"], "Y", axis=-1, extra={"a": 1})], ["Y"]),
     "E1008", "Y", "extra"),
    ("relu-with-gelu-attribute", model({"X": f32(3)}, [node("Elementwise", ["X"], "Y", fn="relu", approximate="tanh")],
                                       ["Y"]), "E1008", "Y", "approximate"),
    ("node-field-typo", {**model({"X": f32(3)}, [], ["Y"]),
                         "graph": [{"op": "Softmax", "name": "sm", "inputs": ["X"], "outputs": ["Y"],
                                    "atrs": {"axis": 0}}]}, "E1109", "sm", "atrs"),
]


@pytest.mark.parametrize("case", UNKNOWN, ids=[c[0] for c in UNKNOWN])
def test_unknown_attribute_or_field_is_a_coded_diagnostic(case):
    _, doc, code, at, word = case
    rc, diags, text = oracle.compile_model(doc)
    assert rc == 1, f"compiled with exit 0 although {word!r} is not a known attribute: {text[-300:]}"
    assert diags[0]["code"] == code and diags[0]["at"] == at and word in diags[0]["why"], diags[0]


# ---- 5. no internal error on user input -------------------------------------------------------------

def test_arithmetic_on_bool_is_a_dtype_diagnostic():
    b = ("bool", [3])
    for fn, ins in (("neg", ["P"]), ("sub", ["P", "Q"]), ("div", ["P", "Q"])):
        doc = model({"P": b, "Q": b}, [node("Elementwise", ins, "Y", fn=fn)], ["Y"])
        rc, diags, text = oracle.compile_model(doc)
        assert rc == 1 and diags[0]["code"] == "E1009" and diags[0]["at"] == "Y", (fn, text[-400:])


def test_tiny_ir_neg_of_bool_is_a_dtype_diagnostic():
    doc = {"uops": [{"id": "x", "uop": "INPUT", "arg": {"tensor_id": "x", "dtype": "bool", "shape": [3]}},
                    {"id": "y", "uop": "NEG", "src": ["x"]}]}
    rc, diags, text = oracle.compile_model(doc)
    assert rc == 1 and diags[0]["code"] == "E1009" and diags[0]["at"] == "y", text[-400:]


@pytest.mark.parametrize("dump", ["analysis", "egraph", "region"])
def test_symbolic_size_beyond_64_bit_under_the_cost_model_is_e1007(dump):
    doc = model({"A": ("fp16", ["M*4611686018427387904", "K"]), "B": ("fp16", ["K", "N"])},
                [node("GEMM", ["A", "B"], "C"), node("Elementwise", ["C"], "D", fn="relu")], ["D"])
    rc, diags, text = oracle.compile_model(doc, f"--dump={dump}", "--cost=model")
    assert rc == 1 and diags[0]["code"] == "E1007", text[-600:]


def test_names_with_newlines_are_diagnosed():
    doc = model({"X\nA": f32(3)}, [node("Elementwise", ["X\nA"], "Y", fn="relu")], ["Y"])
    rc, diags, text = oracle.compile_model(doc)
    assert rc == 1 and diags[0]["code"] == "E1109" and "X\\nA" in diags[0]["why"], text[-400:]


# ---- 6. streamed attention on large inputs: both evaluators against a float64 oracle --------------------

def _attention64(ins: dict, dt: str, causal: bool, scale: float) -> tuple:
    """(O, sum_j P|V|, sum_j |V|) in float64 from the dt-rounded inputs: no rounding inside."""
    q, k, v = (oracle.rounded(ins[n], dt).astype(np.float64) for n in "QKV")
    s = q @ k.swapaxes(-1, -2) * scale
    if causal:
        m, n = s.shape[-2:]
        s = np.where(np.arange(n)[None, :] <= np.arange(m)[:, None] + (n - m), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return p @ v, p @ np.abs(v), np.abs(v).sum(-2, keepdims=True)


@pytest.mark.parametrize("dt", ["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("gain,seed", [(3.0, 0), (4.0, 1), (4.0, 2)])
def test_streamed_attention_on_scaled_inputs_is_as_close_to_float64_as_the_reference(dt, causal, gain, seed):
    """P is rounded to V's dtype before P V (the reference's rounding point), so an element of O may be
    off by sum_j err(P_j)|V_j|, err(P) <= eps(dt) * P or half the smallest subnormal spacing (eps: the
    spacing of dt at 1), plus one ulp of its own rounding; the streamed region rounds P at the running
    max instead, and is held to the same bound."""
    doc = model({"Q": (dt, [1, 2, 40, 64]), "K": (dt, [1, 2, 70, 64]), "V": (dt, [1, 2, 70, 64])},
                [node("Attention", ["Q", "K", "V"], "O", causal=causal)], ["O"], {"O": {"dtype": dt}})
    c = Compilation(doc, cost="model")
    rng = np.random.default_rng(seed)
    ins = {n: (gain * rng.standard_normal((1, 2, 40 if n == "Q" else 70, 64))).astype(np.float32) for n in "QKV"}
    want, mag, vsum = _attention64(ins, dt, causal, 64 ** -0.5)
    eps = oracle.ulp_at_one(dt)
    for what, got in (("reference", evaluate(c.program, ins)["O"]), ("playback", playback(c.regions, ins)["O"])):
        err = np.abs(got.astype(np.float64) - want)
        allowed = eps * mag + oracle.half_ulp(np.zeros(1), dt) * vsum + 2 * oracle.half_ulp(want, dt)
        assert (err <= allowed).all(), f"{what}: worst error {float((err / allowed).max()):.3g} x the bound"


def test_an_op_registered_without_an_attribute_table_rejects_attributes_its_lowering_never_reads(monkeypatch):
    """Lowerings added without ``attrs=`` (an importer's extra ops) are checked after lowering."""
    from polysat.frontend import lower as L
    from polysat.ir.tiny import Ops

    def scale(ctx, ins):
        (x,) = ins
        k = ctx.attr("k", 2.0)
        return [ctx.b.alu(Ops.MUL, x, ctx.b.const_like(float(k), x, at=ctx.at), at=ctx.at)]

    L.op_table()
    monkeypatch.setitem(L.LOWERINGS, "TestScale", (scale, (1, 1), None))
    ok = model({"X": f32(3)}, [node("TestScale", ["X"], "Y", k=3.0)], ["Y"])
    rc, outs, diags, err = oracle.run_model(ok, {"X": np.arange(3, dtype=np.float32)})
    assert rc == 0 and np.array_equal(outs["Y"], [0.0, 3.0, 6.0]), (diags, err)
    bad = model({"X": f32(3)}, [node("TestScale", ["X"], "Y", k=3.0, kk=1)], ["Y"])
    rc, diags, text = oracle.compile_model(bad)
    assert rc == 1 and diags[0]["code"] == "E1008" and "'kk'" in diags[0]["why"], text[-300:]
