"""Every Frontend IR op, run by ``polysat run`` (reference target), against an independent numpy oracle.

docs/DESIGN.md §Frontend IR: odd sizes, 1-D GEMM operands, broadcast
batch dims, grouped / dilated / strided convolutions, causal attention with M != N (mask aligned
bottom-right), bf16 inputs, symbolic dims. Each case writes a model and an .npz and runs the CLI
in-process (``polysat.cli.main``); the oracle (tests/oracle.py) rounds inputs to their declared dtype
and computes in float64. Tolerance rtol = atol = 1e-3 (plus half an ulp for a 16-bit output).
"""
from __future__ import annotations

import importlib.util
import json
import math
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)
model, node, rounded = oracle.model, oracle.node, oracle.rounded

SAVED = {"fp16": np.float16, "bf16": np.float32, "fp32": np.float32, "i32": np.int32, "bool": np.bool_}  # npz has no bf16
FLOATS = ["fp32", "fp16", "bf16"]


def check(doc: dict, inputs: dict, expect: dict) -> dict:
    """Run doc on inputs; every output in expect {name: (oracle value, output dtype)} must match.
    The extracted regions' CPU playback (``--target playback``) must equal the reference too."""
    rc, outs, diags, err = oracle.run_model(doc, inputs)
    assert rc == 0, f"polysat run failed: {diags or err}"
    for name, (ref, dt) in expect.items():
        got = outs[name]
        assert got.dtype == SAVED[dt], f"{name}: dtype {got.dtype}, expected {dt}"
        oracle.assert_close(got, ref, dt, what=f"{name} of {json.dumps(doc['graph'])[:300]}")
    rc, played, diags, err = oracle.run_model(doc, inputs, ["--target", "playback"])
    assert rc == 0, f"polysat run --target playback failed: {diags or err}"
    for name, ref in outs.items():
        assert played[name].dtype == ref.dtype
        np.testing.assert_allclose(played[name].astype(np.float64), ref.astype(np.float64), rtol=1e-3, atol=1e-3,
                                   equal_nan=True, err_msg=f"playback vs reference, {name}")
    return outs


def normal(rng, shape, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


seeds = st.integers(0, 2**16)


# ---- GEMM ------------------------------------------------------------------------------------------

@st.composite
def gemm_cases(draw):
    """Operand shapes under tinygrad ``dot``: each side 1-D, 2-D, or batched with broadcast batch dims."""
    m, k, n = draw(st.integers(1, 9)), draw(st.integers(1, 9)), draw(st.integers(1, 9))
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))

    def side(core_2d: tuple):
        kind = draw(st.sampled_from(["1d", "2d", "batched"]))
        if kind == "1d":
            return (k,)  # the contracted axis alone
        if kind == "2d" or not batch:
            return core_2d
        b = list(batch[draw(st.integers(0, len(batch) - 1)):])
        return tuple(1 if draw(st.booleans()) else d for d in b) + core_2d

    a_shape, b_shape = side((m, k)), side((k, n))
    ta = len(a_shape) >= 2 and draw(st.booleans())
    tb = len(b_shape) >= 2 and draw(st.booleans())
    dt_a, dt_b = draw(st.sampled_from(FLOATS)), draw(st.sampled_from(FLOATS))
    return a_shape, b_shape, ta, tb, dt_a, dt_b


def _t(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, -1, -2)


@settings(max_examples=30)
@given(gemm_cases(), seeds)
def test_gemm_is_tinygrad_dot_with_1d_operands_and_broadcast_batch_dims(case, seed):
    a_shape, b_shape, ta, tb, dt_a, dt_b = case
    rng = np.random.default_rng(seed)
    a, b = normal(rng, a_shape), normal(rng, b_shape)
    # a transposed operand is stored transposed and carries trans_a / trans_b
    a_in, b_in = (_t(a) if ta else a), (_t(b) if tb else b)
    doc = model({"A": (dt_a, a_in.shape), "B": (dt_b, b_in.shape)},
                [node("GEMM", ["A", "B"], "C", trans_a=ta, trans_b=tb, acc_dtype="fp32")], ["C"])
    ref = oracle.dot(rounded(a, dt_a), rounded(b, dt_b))
    check(doc, {"A": a_in, "B": b_in}, {"C": (ref, "fp32")})


@pytest.mark.parametrize("out_dt", ["fp16", "bf16"])
def test_gemm_declared_16bit_output_is_the_rounded_fp32_accumulation(out_dt):
    rng = np.random.default_rng(1)
    a, b = normal(rng, (13, 37)), normal(rng, (37, 5))
    doc = model({"A": ("fp16", [13, 37]), "B": ("fp16", [37, 5])}, [node("GEMM", ["A", "B"], "C")], ["C"],
                {"C": {"dtype": out_dt}})
    check(doc, {"A": a, "B": b}, {"C": (rounded(a, "fp16") @ rounded(b, "fp16"), out_dt)})


@settings(max_examples=10)
@given(st.integers(1, 40), st.integers(1, 40), st.integers(1, 40), seeds)
def test_gemm_with_symbolic_dims_binds_them_from_the_inputs(m, k, n, seed):
    rng = np.random.default_rng(seed)
    a, b = normal(rng, (m, k)), normal(rng, (k, n))
    doc = model({"A": ("fp16", ["M", "K"]), "B": ("bf16", ["K", "N"])}, [node("GEMM", ["A", "B"], "C")], ["C"],
                {"C": {"dtype": "fp32", "shape": ["M", "N"]}})
    check(doc, {"A": a, "B": b}, {"C": (rounded(a, "fp16") @ rounded(b, "bf16"), "fp32")})


# ---- Elementwise -----------------------------------------------------------------------------------

UNARY_FNS = sorted(oracle.UNARY) + ["gelu_tanh"]


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("fn", UNARY_FNS)
def test_unary_elementwise_keeps_the_input_dtype(fn, dt):
    rng = np.random.default_rng(len(fn))
    x = normal(rng, (3, 17), 2.0)
    if fn in oracle.POSITIVE_DOMAIN:
        x = np.abs(x) + np.float32(0.1)
    attrs = {"fn": "gelu", "approximate": "tanh"} if fn == "gelu_tanh" else {"fn": fn}
    doc = model({"X": (dt, [3, 17])}, [node("Elementwise", ["X"], "Y", **attrs)], ["Y"])
    xr = rounded(x, dt)
    ref = oracle.gelu(xr, "tanh") if fn == "gelu_tanh" else oracle.UNARY[fn](xr)
    check(doc, {"X": x}, {"Y": (ref, dt)})


@st.composite
def broadcast_pair(draw):
    """Two shapes that broadcast right-aligned (different ranks, size-1 axes), odd sizes."""
    full = tuple(draw(st.lists(st.integers(1, 7), min_size=1, max_size=4)))

    def one():
        s = full[draw(st.integers(0, len(full) - 1)):]
        return tuple(1 if draw(st.booleans()) else d for d in s)
    return one(), one()


@settings(max_examples=30)
@given(broadcast_pair(), st.sampled_from(sorted(oracle.BINARY)), st.sampled_from(FLOATS),
       st.sampled_from(FLOATS), seeds)
def test_binary_elementwise_broadcasts_right_aligned_and_promotes(shapes, fn, dt_a, dt_b, seed):
    sa, sb = shapes
    rng = np.random.default_rng(seed)
    a, b = normal(rng, sa), normal(rng, sb)
    if fn == "pow":
        a, b = np.abs(a) + np.float32(0.5), np.clip(b, -2, 2)
    if fn == "div":
        b = np.where(np.abs(b) < 0.25, np.float32(0.5), b).astype(np.float32)
    out_dt = oracle.promote(dt_a, dt_b)
    doc = model({"A": (dt_a, sa), "B": (dt_b, sb)}, [node("Elementwise", ["A", "B"], "C", fn=fn)], ["C"])
    ref = oracle.BINARY[fn](rounded(a, dt_a), rounded(b, dt_b))
    check(doc, {"A": a, "B": b}, {"C": (ref, out_dt)})


@settings(max_examples=20)
@given(broadcast_pair(), st.sampled_from(sorted(oracle.COMPARE)), st.sampled_from(FLOATS),
       st.sampled_from(FLOATS), seeds)
def test_comparisons_give_bool_after_promotion(shapes, fn, dt_a, dt_b, seed):
    sa, sb = shapes
    rng = np.random.default_rng(seed)
    a, b = (rng.integers(-2, 3, s).astype(np.float32) for s in (sa, sb))  # equal values are common
    doc = model({"A": (dt_a, sa), "B": (dt_b, sb)}, [node("Elementwise", ["A", "B"], "C", fn=fn)], ["C"])
    check(doc, {"A": a, "B": b}, {"C": (oracle.COMPARE[fn](rounded(a, dt_a), rounded(b, dt_b)), "bool")})


@pytest.mark.parametrize("cond_dt", ["bool", "fp32"])
def test_where_selects_with_broadcast_condition(cond_dt):
    rng = np.random.default_rng(7)
    c = rng.integers(0, 2, (5, 1)).astype(np.bool_ if cond_dt == "bool" else np.float32)
    x, y = normal(rng, (3, 5, 6)), normal(rng, (6,))
    doc = model({"Cd": (cond_dt, [5, 1]), "X": ("fp16", [3, 5, 6]), "Y": ("fp32", [6])},
                [node("Elementwise", ["Cd", "X", "Y"], "Z", fn="where")], ["Z"])
    ref = np.where(c != 0, rounded(x, "fp16"), rounded(y, "fp32"))
    check(doc, {"Cd": c, "X": x, "Y": y}, {"Z": (ref, "fp32")})


@pytest.mark.parametrize("src,to", [("fp32", "fp16"), ("fp32", "bf16"), ("fp16", "fp32"), ("fp32", "i32"),
                                    ("bf16", "i32"), ("fp32", "bool"), ("i32", "fp32")])
def test_cast_rounds_truncates_or_tests_nonzero(src, to):
    rng = np.random.default_rng(3)
    x = (rng.integers(-9, 10, (4, 7)) if src == "i32" else normal(rng, (4, 7), 5.0)).astype(
        np.int32 if src == "i32" else np.float32)
    x.flat[:3] = 0
    doc = model({"X": (src, [4, 7])}, [node("Elementwise", ["X"], "Y", fn="cast", to=to)], ["Y"])
    xr = rounded(x, src)
    ref = {"i32": np.trunc(xr), "bool": xr != 0}.get(to, xr)
    check(doc, {"X": x}, {"Y": (ref, to)})


# ---- Reduce, Softmax, LayerNorm ---------------------------------------------------------------------

@st.composite
def reduce_cases(draw):
    shape = tuple(draw(st.lists(st.integers(1, 7), min_size=1, max_size=4)))
    r = len(shape)
    axes = sorted(draw(st.sets(st.integers(0, r - 1), min_size=1)))
    axes = [a - r if draw(st.booleans()) else a for a in axes]  # negative axes count from the end
    return shape, axes, draw(st.sampled_from(["sum", "max", "min", "mean"])), draw(st.booleans()), \
        draw(st.sampled_from(FLOATS))


@settings(max_examples=30)
@given(reduce_cases(), seeds)
def test_reduce_ops_axes_and_keepdim_accumulate_in_fp32(case, seed):
    shape, axes, op, keepdim, dt = case
    x = normal(np.random.default_rng(seed), shape)
    doc = model({"X": (dt, shape)}, [node("Reduce", ["X"], "Y", op=op, axes=axes, keepdim=keepdim)], ["Y"])
    ref = oracle.reduce(rounded(x, dt), op, [a % len(shape) for a in axes], keepdim)
    check(doc, {"X": x}, {"Y": (ref, "fp32")})


@settings(max_examples=8)
@given(st.integers(1, 9), st.integers(1, 30), seeds)
def test_reduce_mean_over_a_symbolic_axis(m, n, seed):
    x = normal(np.random.default_rng(seed), (m, n))
    doc = model({"X": ("fp16", ["M", "N"])}, [node("Reduce", ["X"], "Y", op="mean", axes=[1])], ["Y"])
    check(doc, {"X": x}, {"Y": (rounded(x, "fp16").mean(axis=1), "fp32")})


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_along_any_axis(axis, dt):
    x = normal(np.random.default_rng(axis + 5), (5, 11, 3), 3.0)
    doc = model({"X": (dt, [5, 11, 3])}, [node("Softmax", ["X"], "Y", axis=axis)], ["Y"])
    check(doc, {"X": x}, {"Y": (oracle.softmax(rounded(x, dt), axis), dt)})


@pytest.mark.parametrize("dt,axis,params,eps", [("fp32", -1, 2, 1e-5), ("fp16", -1, 1, 1e-3), ("bf16", -1, 0, 1e-5),
                                                ("fp32", 1, 2, 1e-6), ("fp16", 2, 0, 1e-5)])
def test_layernorm_with_and_without_gamma_beta(dt, axis, params, eps):
    rng = np.random.default_rng(params)
    shape = (2, 3, 13)
    x = normal(rng, shape, 2.0) + np.float32(1.5)
    norm = shape[axis % 3:]
    g, b = normal(rng, norm), normal(rng, norm)
    names = ["X", "G", "Bt"][:1 + params]
    ins = {"X": (dt, shape), "G": (dt, norm), "Bt": (dt, norm)}
    feed = {"X": x, "G": g, "Bt": b}
    doc = model({k: ins[k] for k in names}, [node("LayerNorm", names, "Y", axis=axis, eps=eps)], ["Y"])
    ref = oracle.layernorm(rounded(x, dt), axis, eps, rounded(g, dt) if params >= 1 else None,
                           rounded(b, dt) if params >= 2 else None)
    check(doc, {k: feed[k] for k in names}, {"Y": (ref, dt)})


def test_layernorm_and_softmax_over_symbolic_rows():
    rng = np.random.default_rng(11)
    x = normal(rng, (7, 23))
    doc = model({"X": ("fp32", ["R", "C"])}, [node("LayerNorm", ["X"], "L", eps=1e-5),
                                               node("Softmax", ["L"], "Y", axis=-1)], ["Y", "L"])
    ln = oracle.layernorm(rounded(x, "fp32"), -1, 1e-5)
    check(doc, {"X": x}, {"L": (ln, "fp32"), "Y": (oracle.softmax(ln, -1), "fp32")})


# ---- Conv2D and MaxPool2D ---------------------------------------------------------------------------

@st.composite
def conv_cases(draw):
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    cg, cog = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dil = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pad = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h = draw(st.integers(max(1, dil[0] * (kh - 1) + 1 - pad[0] - pad[1]), 9))
    w = draw(st.integers(max(1, dil[1] * (kw - 1) + 1 - pad[2] - pad[3]), 9))
    n = draw(st.integers(1, 2))
    return (n, groups * cg, h, w), (groups * cog, cg, kh, kw), stride, pad, dil, groups, draw(st.booleans()), \
        draw(st.sampled_from(FLOATS))


@settings(max_examples=30)
@given(conv_cases(), seeds)
def test_conv2d_grouped_dilated_strided_padded(case, seed):
    xs, ws, stride, pad, dil, groups, with_bias, dt = case
    rng = np.random.default_rng(seed)
    x, w, bias = normal(rng, xs), normal(rng, ws), normal(rng, (ws[0],))
    names = ["X", "W", "bias"] if with_bias else ["X", "W"]
    ins = {"X": (dt, xs), "W": (dt, ws), "bias": (dt, [ws[0]])}
    doc = model({k: ins[k] for k in names}, [node("Conv2D", names, "Y", stride=list(stride), pad=list(pad),
                                                  dilation=list(dil), groups=groups, acc_dtype="fp32")], ["Y"])
    ref = oracle.conv2d(rounded(x, dt), rounded(w, dt), rounded(bias, dt) if with_bias else None,
                        stride, pad, dil, groups)
    check(doc, {"X": x, "W": w, "bias": bias}, {"Y": (ref, "fp32")})


@pytest.mark.parametrize("h,w", [(9, 9), (16, 11), (5, 32)])
def test_conv2d_with_symbolic_spatial_dims_and_declared_output_symbols(h, w):
    """X [N, 4, H, W] (symbols), stride 2, pad 1, then SiLU; the output declares new symbols Ho, Wo."""
    rng = np.random.default_rng(h * w)
    x, wt, bias = normal(rng, (2, 4, h, w)), normal(rng, (6, 4, 3, 3), 0.3), normal(rng, (6,))
    doc = model({"X": ("fp16", ["N", 4, "H", "W"]), "W": ("fp16", [6, 4, 3, 3]), "bias": ("fp16", [6])},
                [node("Conv2D", ["X", "W", "bias"], "Yc", stride=[2, 2], pad=[1, 1, 1, 1]),
                 node("Elementwise", ["Yc"], "Y", fn="silu")], ["Y"],
                {"Y": {"dtype": "fp16", "shape": ["N", 6, "Ho", "Wo"]}})
    conv = oracle.conv2d(rounded(x, "fp16"), rounded(wt, "fp16"), rounded(bias, "fp16"), (2, 2), (1, 1, 1, 1))
    check(doc, {"X": x, "W": wt, "bias": bias}, {"Y": (oracle.UNARY["silu"](conv), "fp16")})


def test_depthwise_conv_groups_equal_channels():
    rng = np.random.default_rng(5)
    x, w = normal(rng, (1, 6, 7, 8)), normal(rng, (12, 1, 3, 3))
    doc = model({"X": ("bf16", [1, 6, 7, 8]), "W": ("bf16", [12, 1, 3, 3])},
                [node("Conv2D", ["X", "W"], "Y", groups=6, pad=[1, 1, 1, 1], dilation=[2, 1])], ["Y"])
    ref = oracle.conv2d(rounded(x, "bf16"), rounded(w, "bf16"), None, (1, 1), (1, 1, 1, 1), (2, 1), 6)
    check(doc, {"X": x, "W": w}, {"Y": (ref, "fp32")})


@st.composite
def pool_cases(draw):
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    stride = [draw(st.integers(1, 3)), draw(st.integers(1, 3))] if draw(st.booleans()) else None
    pad = [draw(st.integers(0, kh // 2)), draw(st.integers(0, kh // 2)), draw(st.integers(0, kw // 2)),
           draw(st.integers(0, kw // 2))]
    h = draw(st.integers(max(1, kh - pad[0] - pad[1]), 9))
    w = draw(st.integers(max(1, kw - pad[2] - pad[3]), 9))
    return (draw(st.integers(1, 2)), draw(st.integers(1, 3)), h, w), (kh, kw), stride, pad, draw(st.sampled_from(FLOATS))


@settings(max_examples=25)
@given(pool_cases(), seeds)
def test_maxpool2d_padding_never_wins(case, seed):
    xs, k, stride, pad, dt = case
    x = normal(np.random.default_rng(seed), xs) - np.float32(10)  # all negative: a zero pad would win
    attrs = {"kernel": list(k), "pad": pad} | ({"stride": stride} if stride else {})
    doc = model({"X": (dt, xs)}, [node("MaxPool2D", ["X"], "Y", **attrs)], ["Y"])
    check(doc, {"X": x}, {"Y": (oracle.maxpool2d(rounded(x, dt), k, stride, pad), dt)})


# ---- Attention -------------------------------------------------------------------------------------

@st.composite
def attention_cases(draw):
    b, h = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    m, n = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    d, dv = draw(st.integers(1, 8)), draw(st.integers(1, 8))
    scale = draw(st.sampled_from([None, 0.5]))
    return (b, h, m, n, d, dv), draw(st.booleans()), scale, draw(st.sampled_from(FLOATS))


@settings(max_examples=30)
@given(attention_cases(), seeds)
def test_attention_causal_mask_is_aligned_bottom_right(case, seed):
    (b, h, m, n, d, dv), causal, scale, dt = case
    rng = np.random.default_rng(seed)
    q, k, v = normal(rng, (b, h, m, d)), normal(rng, (b, h, n, d)), normal(rng, (b, h, n, dv), 0.5)
    attrs = {"causal": causal} | ({"scale": scale} if scale is not None else {})
    doc = model({"Q": (dt, [b, h, m, d]), "K": (dt, [b, h, n, d]), "V": (dt, [b, h, n, dv])},
                [node("Attention", ["Q", "K", "V"], "O", **attrs)], ["O"])
    ref = oracle.attention(rounded(q, dt), rounded(k, dt), rounded(v, dt), causal, scale,
                           p_dtype=dt if dt != "fp32" else None)
    check(doc, {"Q": q, "K": k, "V": v}, {"O": (ref, "fp32")})


@pytest.mark.parametrize("m,n", [(3, 8), (8, 3), (1, 1), (5, 5)])
def test_causal_attention_with_symbolic_sequence_lengths(m, n):
    """M and N are symbols; rows of a query that sees no key (M > N, top rows) are 0/0 = NaN, as in
    the unfused softmax definition."""
    rng = np.random.default_rng(m * 10 + n)
    q, k, v = normal(rng, (1, 2, m, 16)), normal(rng, (1, 2, n, 16)), normal(rng, (1, 2, n, 16), 0.5)
    doc = model({"Q": ("fp16", [1, 2, "M", 16]), "K": ("fp16", [1, 2, "N", 16]), "V": ("fp16", [1, 2, "N", 16])},
                [node("Attention", ["Q", "K", "V"], "O", causal=True)], ["O"], {"O": {"dtype": "fp32"}})
    ref = oracle.attention(*(rounded(t, "fp16") for t in (q, k, v)), causal=True, p_dtype="fp16")
    check(doc, {"Q": q, "K": k, "V": v}, {"O": (ref, "fp32")})


# ---- movement ----------------------------------------------------------------------------------------

def test_reshape_with_an_inferred_axis_then_transpose_and_expand():
    x = np.arange(2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5)
    doc = model({"X": ("fp32", [2, 3, 5])},
                [node("Reshape", ["X"], "R", shape=[5, -1]), node("Transpose", ["R"], "T", perm=[-1, 0]),
                 node("Expand", ["T"], "E", shape=[4, 6, 5]), node("Transpose", ["E"], "D")], ["E", "D", "R"])
    r = x.reshape(5, 6)
    e = np.broadcast_to(r.T, (4, 6, 5))
    check(doc, {"X": x}, {"R": (r, "fp32"), "E": (e, "fp32"), "D": (e.transpose(2, 1, 0), "fp32")})


@settings(max_examples=25)
@given(st.lists(st.integers(1, 7), min_size=1, max_size=3), st.data())
def test_slice_with_negative_indices_steps_and_axes(shape, data):
    r = len(shape)
    axes = data.draw(st.lists(st.integers(-r, r - 1), min_size=1, max_size=r, unique_by=lambda a: a % r))
    starts, ends, steps = [], [], []
    for a in axes:
        size = shape[a % r]
        s = data.draw(st.integers(-size, size - 1))
        lo = s % size
        e = data.draw(st.integers(lo + 1, size + 2))  # an end past the size is clamped
        ends.append(e - size if data.draw(st.booleans()) and e < size else e)
        starts.append(s)
        steps.append(data.draw(st.integers(1, 3)))
    x = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    doc = model({"X": ("fp32", shape)}, [node("Slice", ["X"], "Y", starts=starts, ends=ends, steps=steps, axes=axes)],
                ["Y"])
    ref = oracle.slice_(x, starts, ends, steps, [a % r for a in axes])
    check(doc, {"X": x}, {"Y": (ref, "fp32")})


def test_pad_with_value_and_flip():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    doc = model({"X": ("fp16", [3, 4])}, [node("Pad", ["X"], "P", pads=[[1, 0], [2, 3]], value=-2.5),
                                          node("Flip", ["P"], "F", axes=[0, -1])], ["F", "P"])
    p = np.pad(x, ((1, 0), (2, 3)), constant_values=-2.5)
    check(doc, {"X": x}, {"P": (p, "fp16"), "F": (p[::-1, ::-1], "fp16")})


# ---- composition and the real command -----------------------------------------------------------------

def test_conv_relu_pool_flatten_gemm_softmax_pipeline():
    rng = np.random.default_rng(21)
    x, w, fc = normal(rng, (2, 3, 10, 9)), normal(rng, (4, 3, 3, 3), 0.5), normal(rng, (4 * 5 * 4, 7), 0.2)
    doc = model({"X": ("fp16", [2, 3, 10, 9]), "W": ("fp16", [4, 3, 3, 3]), "FC": ("bf16", [80, 7])},
                [node("Conv2D", ["X", "W"], "C", pad=[1, 1, 1, 1]), node("Elementwise", ["C"], "R", fn="relu"),
                 node("MaxPool2D", ["R"], "P", kernel=[2, 2]), node("Reshape", ["P"], "F", shape=[2, -1]),
                 node("GEMM", ["F", "FC"], "L"), node("Softmax", ["L"], "Y", axis=-1)], ["Y"])
    c = np.maximum(oracle.conv2d(rounded(x, "fp16"), rounded(w, "fp16"), pad=(1, 1, 1, 1)), 0)
    f = oracle.maxpool2d(c, (2, 2)).reshape(2, -1)
    check(doc, {"X": x, "W": w, "FC": fc}, {"Y": (oracle.softmax(f @ rounded(fc, "bf16"), -1), "fp32")})


def test_polysat_run_command_end_to_end_with_bf16_and_symbols(tmp_path):
    """The installed command (a real process): bf16 inputs, symbolic dims, outputs in an .npz."""
    rng = np.random.default_rng(8)
    a, b, bias = normal(rng, (6, 33)), normal(rng, (33, 5)), normal(rng, (5,))
    doc = model({"A": ("bf16", ["M", "K"]), "B": ("bf16", ["K", "N"]), "bias": ("bf16", ["N"])},
                [node("GEMM", ["A", "B"], "C0"), node("Elementwise", ["C0", "bias"], "C1", fn="add"),
                 node("Elementwise", ["C1"], "Y", fn="gelu")], ["Y"])
    (tmp_path / "m.json").write_text(json.dumps(doc))
    np.savez(tmp_path / "in.npz", A=a, B=b, bias=bias)
    r = subprocess.run([sys.executable, "-m", "polysat", "run", str(tmp_path / "m.json"), "--inputs",
                        str(tmp_path / "in.npz"), "--out", str(tmp_path / "out.npz"), "--target", "reference"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    ref = oracle.gelu(rounded(a, "bf16") @ rounded(b, "bf16") + rounded(bias, "bf16"))
    oracle.assert_close(np.load(tmp_path / "out.npz")["Y"], ref, "fp32", "Y")
