"""The reference evaluator against tinygrad 0.14 (a test oracle only) on hypothesis-generated shapes.

Tiny IR borrows tinygrad's vocabulary (docs/DESIGN.md §Tiny IR), so its movement, broadcast and reduce semantics
must be tinygrad's: every program here is built twice, once with :class:`polysat.ir.builder.Builder`
and run by :func:`polysat.ir.evaluate.evaluate`, once as tinygrad Tensor ops, and the values must
agree (movement exactly). tinygrad runs on its ``PYTHON`` device, the emulator that needs no C
compiler, so the tests run on a fresh machine; shapes stay small because the emulator is slow.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from polysat.ir.builder import Builder
from polysat.ir.diagnostics import PolysatError
from polysat.ir.dtypes import DType
from polysat.ir.evaluate import evaluate
from polysat.ir.expr import Expr
from polysat.ir.shapes import dim
from polysat.ir.tiny import Ops

from tinygrad import Tensor, dtypes
from tinygrad.helpers import Context

AT = "test"


@pytest.fixture(autouse=True)
def _python_device():
    """Every tinygrad tensor (constants included) lives on the PYTHON device."""
    with Context(DEV="PYTHON"):
        yield


def tg(x: np.ndarray) -> Tensor:
    return Tensor(np.ascontiguousarray(x), device="PYTHON")


def distinct(shape: tuple, dtype=np.float32) -> np.ndarray:
    """Pairwise distinct values, exact in fp16 too, so any index error shows."""
    n = math.prod(shape)
    return (np.arange(n, dtype=np.float32) - n // 2).astype(dtype).reshape(shape)


def run1(b: Builder, y, inputs: dict, env: dict | None = None) -> np.ndarray:
    return evaluate(b.program([("y", y)]), inputs, env)["y"]


# ---- strategies ------------------------------------------------------------------------------------

def shapes(min_rank: int = 1, max_rank: int = 4, max_size: int = 5):
    return st.lists(st.integers(1, max_size), min_size=min_rank, max_size=max_rank).map(tuple)


@st.composite
def factorisation(draw, n: int) -> tuple:
    """A shape with n elements: split off divisors one by one, size-1 axes allowed."""
    out = []
    for _ in range(draw(st.integers(0, 3))):
        d = draw(st.sampled_from([k for k in range(1, n + 1) if n % k == 0]))
        out.append(d)
        n //= d
    out.append(n)
    return tuple(draw(st.permutations(out)))


@st.composite
def movement(draw, shape: tuple) -> tuple:
    """One movement op applicable to shape, as (kind, args)."""
    kinds = ["reshape", "permute", "pad", "shrink", "flip"] + (["expand"] if 1 in shape else [])
    kind = draw(st.sampled_from(kinds))
    r = len(shape)
    if kind == "reshape":
        return kind, draw(factorisation(math.prod(shape)))
    if kind == "permute":
        return kind, tuple(draw(st.permutations(range(r))))
    if kind == "expand":
        return kind, tuple(draw(st.integers(1, 4)) if d == 1 else d for d in shape)
    if kind == "pad":
        pads = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape)
        return kind, (pads, draw(st.sampled_from([0.0, -1.5, 7.0, float("-inf")])))
    if kind == "shrink":
        spans = []
        for d in shape:
            lo = draw(st.integers(0, d - 1))
            spans.append((lo, draw(st.integers(lo + 1, d)), draw(st.integers(1, 3))))
        return kind, tuple(spans)
    return kind, tuple(sorted(draw(st.sets(st.integers(0, r - 1), min_size=1))))


@st.composite
def movement_chain(draw) -> tuple:
    shape = draw(shapes())
    ops, cur = [], shape
    for _ in range(draw(st.integers(1, 4))):
        op = draw(movement(cur))
        ops.append(op)
        cur = _tiny_apply(cur, op)
    return shape, ops


def _tiny_apply(shape: tuple, op: tuple) -> tuple:
    """The shape after op (tinygrad's rules), used only to draw the next op of a chain."""
    kind, a = op
    if kind in ("reshape", "expand"):
        return a
    if kind == "permute":
        return tuple(shape[p] for p in a)
    if kind == "pad":
        return tuple(d + lo + hi for d, (lo, hi) in zip(shape, a[0]))
    if kind == "shrink":
        return tuple(-(-(hi - lo) // s) for lo, hi, s in a)
    return shape


def apply_polysat(b: Builder, x, op: tuple):
    kind, a = op
    if kind == "reshape":
        return b.reshape(x, a, at=AT)
    if kind == "permute":
        return b.permute(x, a, at=AT)
    if kind == "expand":
        return b.expand(x, a, at=AT)
    if kind == "pad":
        return b.pad(x, a[0], a[1], at=AT)
    if kind == "shrink":
        return b.shrink(x, [s[0] for s in a], [s[1] for s in a], [s[2] for s in a], at=AT)
    return b.flip(x, a, at=AT)


def apply_tinygrad(t: Tensor, op: tuple) -> Tensor:
    kind, a = op
    if kind == "reshape":
        return t.reshape(a)
    if kind == "permute":
        return t.permute(a)
    if kind == "expand":
        return t.expand(a)
    if kind == "pad":
        return t.pad(a[0], value=a[1])
    if kind == "shrink":
        return t[tuple(slice(lo, hi, s) for lo, hi, s in a)]
    return t.flip(a)


# ---- movement --------------------------------------------------------------------------------------

@settings(max_examples=30)
@given(movement_chain())
def test_movement_chains_match_tinygrad_exactly(case):
    shape, ops = case
    x = distinct(shape)
    b = Builder()
    y, t = b.input("x", DType.fp32, shape, at=AT), tg(x)
    for op in ops:
        y, t = apply_polysat(b, y, op), apply_tinygrad(t, op)
    got = run1(b, y, {"x": x})
    want = t.numpy()
    assert got.shape == want.shape, (ops, got.shape, want.shape)
    np.testing.assert_array_equal(got, want, err_msg=str(ops))


@st.composite
def affine_views(draw) -> tuple:
    """A VIEW whose index map is a permutation of strided windows plus broadcast axes:
    out[i...] = x[lo_p + st_p * i_{k(p)}, ...], and axes no input index uses (an expand)."""
    shape = draw(shapes(max_size=6))
    spans = []
    for d in shape:
        lo = draw(st.integers(0, d - 1))
        step = draw(st.integers(1, 3))
        spans.append((lo, step, draw(st.integers(1, (d - 1 - lo) // step + 1))))
    perm = tuple(draw(st.permutations(range(len(shape)))))
    extra_at = draw(st.integers(0, len(shape)))
    extra = draw(st.sampled_from([0, 2, 3]))
    return shape, spans, perm, extra_at, extra


@settings(max_examples=25)
@given(affine_views())
def test_affine_view_matches_tinygrad_slice_permute_expand(case):
    shape, spans, perm, extra_at, extra = case
    x = distinct(shape)
    # output axes: the permuted windows, with a broadcast axis of size `extra` inserted at extra_at
    out_axes = list(perm)
    if extra:
        out_axes.insert(extra_at, None)
    pos = {p: k for k, p in enumerate(out_axes) if p is not None}
    out_shape = tuple(extra if p is None else spans[p][2] for p in out_axes)
    index_map = tuple(f"{lo} + {step}*i{pos[p]}" for p, (lo, step, _) in enumerate(spans))
    b = Builder()
    got = run1(b, b.view(b.input("x", DType.fp32, shape, at=AT), out_shape, index_map, at=AT), {"x": x})
    t = tg(x)[tuple(slice(lo, lo + step * (n - 1) + 1, step) for lo, step, n in spans)].permute(perm)
    if extra:
        t = t.unsqueeze(extra_at).expand(out_shape)
    np.testing.assert_array_equal(got, t.numpy(), err_msg=f"{index_map} -> {out_shape}")


@settings(max_examples=15)
@given(st.integers(1, 2), st.integers(1, 3), st.integers(2, 7), st.integers(2, 7), st.integers(1, 3),
       st.integers(1, 3), st.integers(1, 2), st.integers(1, 2), st.integers(1, 2))
def test_sliding_window_view_matches_tinygrad_pool(n, c, h, w, kh, kw, s, dh, dw):
    ho, wo = (h - dh * (kh - 1) - 1) // s + 1, (w - dw * (kw - 1) - 1) // s + 1
    assume(ho >= 1 and wo >= 1)
    x = distinct((n, c, h, w))
    b = Builder()
    imap = ("i0", "i1", f"{s}*i2 + {dh}*i4", f"{s}*i3 + {dw}*i5")
    got = run1(b, b.view(b.input("x", DType.fp32, x.shape, at=AT), (n, c, ho, wo, kh, kw), imap, at=AT), {"x": x})
    want = tg(x)._pool((kh, kw), s, (dh, dw)).numpy()
    np.testing.assert_array_equal(got, want)


@settings(max_examples=15)
@given(st.integers(1, 6), st.integers(1, 6))
def test_symbolic_pad_and_view_give_tinygrads_bottom_right_causal_mask(m, n):
    """ones[N] padded with M-1 zeros, viewed at j - i + M - 1, is tril(N - M) of an M x N matrix; the
    sizes are symbols bound only at evaluation."""
    M, N = Expr.var("M"), Expr.var("N")
    b = Builder()
    ones = b.const(1.0, DType.fp32, (dim(N),), at=AT)
    padded = b.pad(ones, ((0, dim(M - 1)),), 0.0, at=AT)
    mask = b.view(padded, (dim(M), dim(N)), ("i1 - i0 + M - 1",), at=AT)
    got = run1(b, mask, {}, {"M": m, "N": n})
    np.testing.assert_array_equal(got, Tensor.ones(m, n).tril(n - m).numpy())


@settings(max_examples=10)
@given(st.integers(1, 6), st.integers(1, 6))
def test_symbolic_movement_chain_binds_sizes_at_evaluation(m, k):
    """x[M, K] -> PAD -> FLIP -> SHRINK(step 2) with symbolic bounds -> RESHAPE [(M+2)//2 * (K+1)] -> sum,
    against the same ops on the concrete tensor."""
    M, K = Expr.var("M"), Expr.var("K")
    b = Builder()
    x = b.input("x", DType.fp32, (dim(M), dim(K)), at=AT)
    y = b.flip(b.pad(x, ((1, 2), (0, 1)), -1.0, at=AT), (0,), at=AT)
    y = b.shrink(y, (1, 0), (dim(M + 3), dim(K + 1)), (2, 1), at=AT)
    y = b.reduce(b.reshape(y, (dim(y.shape[0] * y.shape[1]),), at=AT), "SUM", (0,), DType.fp32, at=AT)
    arr = distinct((m, k))
    got = run1(b, y, {"x": arr})
    t = tg(arr).pad(((1, 2), (0, 1)), value=-1.0).flip(0)[1:m + 3:2, 0:k + 1]
    np.testing.assert_allclose(got, t.reshape(-1).sum().numpy(), rtol=1e-6)


# ---- broadcast and elementwise ----------------------------------------------------------------------

@st.composite
def broadcast_operands(draw, count: int) -> tuple:
    """count operand shapes right-aligned against one result shape: leading axes dropped, some axes
    set to 1, and (sometimes) one axis given a clashing size."""
    full = draw(shapes(max_size=4))
    out = []
    for _ in range(count):
        s = list(full[draw(st.integers(0, len(full) - 1)):])
        for k in range(len(s)):
            if draw(st.booleans()):
                s[k] = 1
        out.append(tuple(s))
    if draw(st.integers(0, 3)) == 0:
        k = draw(st.integers(0, count - 1))
        if out[k]:
            s = list(out[k])
            a = draw(st.integers(0, len(s) - 1))
            s[a] = s[a] + draw(st.integers(1, 2))
            out[k] = tuple(s)
    return tuple(out)


BINARY = {
    Ops.ADD: lambda a, b: a + b, Ops.SUB: lambda a, b: a - b, Ops.MUL: lambda a, b: a * b,
    Ops.FDIV: lambda a, b: a / b, Ops.MAX: lambda a, b: a.maximum(b), Ops.MIN: lambda a, b: a.minimum(b),
    Ops.POW: lambda a, b: a.pow(b),
    Ops.CMPLT: lambda a, b: a < b, Ops.CMPEQ: lambda a, b: a == b, Ops.CMPNE: lambda a, b: a != b,
}


def operand(rng, shape, op: Ops) -> np.ndarray:
    """Values where op is defined and equality happens (small integers), exact in fp32."""
    if op == Ops.POW:
        return rng.uniform(0.5, 2.0, shape).astype(np.float32)
    v = rng.integers(-3, 4, shape).astype(np.float32)
    return np.where(v == 0, 5.0, v).astype(np.float32) if op == Ops.FDIV else v


@settings(max_examples=40)
@given(broadcast_operands(2), st.sampled_from(sorted(BINARY, key=lambda o: o.name)), st.integers(0, 2**16))
def test_right_aligned_broadcast_matches_tinygrad_or_both_refuse(shapes_, op, seed):
    sa, sb = shapes_
    rng = np.random.default_rng(seed)
    a, c = operand(rng, sa, op), operand(rng, sb, op)
    try:
        want = BINARY[op](tg(a), tg(c)).numpy()
    except (IndexError, ValueError, RuntimeError, AssertionError):
        want = None
    b = Builder()
    xa, xc = b.input("a", DType.fp32, sa, at=AT), b.input("c", DType.fp32, sb, at=AT)
    if want is None:
        with pytest.raises(PolysatError) as e:
            b.alu(op, xa, xc, at=AT)
        assert e.value.diagnostics[0].code == "E1001"
        return
    got = run1(b, b.alu(op, xa, xc, at=AT), {"a": a, "c": c})
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape, got.dtype, want.dtype)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@settings(max_examples=25)
@given(broadcast_operands(3), st.integers(0, 2**16))
def test_where_broadcasts_its_three_operands_like_tinygrad(shapes_, seed):
    sc, sa, sb = shapes_
    rng = np.random.default_rng(seed)
    cond, a, c = rng.random(sc) < 0.5, rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
    try:
        want = tg(cond).where(tg(a), tg(c)).numpy()
    except (IndexError, ValueError, RuntimeError, AssertionError):
        want = None
    b = Builder()
    xs = [b.input("k", DType.bool, sc, at=AT), b.input("a", DType.fp32, sa, at=AT), b.input("c", DType.fp32, sb, at=AT)]
    if want is None:
        with pytest.raises(PolysatError) as e:
            b.alu(Ops.WHERE, *xs, at=AT)
        assert e.value.diagnostics[0].code == "E1001"
        return
    np.testing.assert_array_equal(run1(b, b.alu(Ops.WHERE, *xs, at=AT), {"k": cond, "a": a, "c": c}), want)


UNARY = {
    Ops.NEG: lambda t: -t, Ops.RELU: Tensor.relu, Ops.EXP2: Tensor.exp2, Ops.LOG2: Tensor.log2,
    Ops.SQRT: Tensor.sqrt, Ops.RSQRT: Tensor.rsqrt, Ops.RECIPROCAL: Tensor.reciprocal,
}


@settings(max_examples=20)
@given(shapes(max_rank=3), st.sampled_from(sorted(UNARY, key=lambda o: o.name)),
       st.sampled_from([DType.fp32, DType.fp16]), st.integers(0, 2**16))
def test_unary_ops_match_tinygrad(shape, op, dt, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-4, 4, shape).astype(dt.np)
    if op in (Ops.LOG2, Ops.SQRT, Ops.RSQRT, Ops.RECIPROCAL):
        x = (np.abs(x) + np.float32(0.25)).astype(dt.np)
    b = Builder()
    got = run1(b, b.alu(op, b.input("x", dt, shape, at=AT), at=AT), {"x": x})
    want = UNARY[op](tg(x)).numpy()
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-3, atol=1e-3)


# ---- reductions ------------------------------------------------------------------------------------

@st.composite
def reduce_cases(draw) -> tuple:
    shape = draw(shapes())
    axes = tuple(sorted(draw(st.sets(st.integers(0, len(shape) - 1), min_size=1))))
    op = draw(st.sampled_from(["SUM", "MAX", "MIN"]))
    dt, acc = draw(st.sampled_from([(DType.fp32, DType.fp32), (DType.fp16, DType.fp32), (DType.fp16, DType.fp16),
                                    (DType.i32, DType.i32)]))
    return shape, axes, op, dt, acc


TG_DTYPE = {DType.fp32: dtypes.float32, DType.fp16: dtypes.float16, DType.i32: dtypes.int32}


@settings(max_examples=35)
@given(reduce_cases(), st.integers(0, 2**16))
def test_reduce_removes_its_axes_and_matches_tinygrad(case, seed):
    shape, axes, op, dt, acc = case
    rng = np.random.default_rng(seed)
    x = (rng.integers(-50, 50, shape) if dt == DType.i32 else rng.standard_normal(shape)).astype(dt.np)
    b = Builder()
    got = run1(b, b.reduce(b.input("x", dt, shape, at=AT), op, axes, acc, at=AT), {"x": x})
    # tinygrad computes in fp32 and rounds once to a 16-bit accumulation dtype, as the evaluator does
    # (and its PYTHON device fails to verify a MAX over every axis of a half tensor)
    t = tg(x).cast(dtypes.int32 if acc == DType.i32 else dtypes.float32)
    want = {"SUM": t.sum, "MAX": t.max, "MIN": t.min}[op](axis=axes).cast(TG_DTYPE[acc]).numpy()
    assert got.shape == want.shape == tuple(d for k, d in enumerate(shape) if k not in axes)
    assert got.dtype == acc.np
    tol = 1e-2 if acc == DType.fp16 else 1e-5
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


@settings(max_examples=20)
@given(movement_chain(), st.sampled_from(["SUM", "MAX", "MIN"]), st.data())
def test_reduce_after_movement_sees_padding_values_like_tinygrad(case, op, data):
    """Reductions over padded/flipped/expanded views: the pad value takes part (also -inf)."""
    shape, ops = case
    x = distinct(shape)
    b = Builder()
    y, t = b.input("x", DType.fp32, shape, at=AT), tg(x)
    for mv in ops:
        y, t = apply_polysat(b, y, mv), apply_tinygrad(t, mv)
    axes = tuple(sorted(data.draw(st.sets(st.integers(0, y.ndim - 1), min_size=1))))
    got = run1(b, b.reduce(y, op, axes, DType.fp32, at=AT), {"x": x})
    want = {"SUM": t.sum, "MAX": t.max, "MIN": t.min}[op](axis=axes).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"{ops} {op}{axes}")
