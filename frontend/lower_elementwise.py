"""Lowerings of Elementwise, Reduce, Softmax and LayerNorm to Tiny IR (docs/DESIGN.md §Frontend IR).

Transcendentals are written with EXP2/LOG2 (exp(x) = 2^(x*log2 e), as tinygrad does). Composite
functions (exp, log, sigmoid, silu, tanh, gelu, erf, softmax, layernorm) compute in fp32 and cast back to
the input's dtype, so 16-bit inputs lose precision only once, at the end.
"""
from __future__ import annotations

import math

from ..ir.builder import Builder
from ..ir.diagnostics import fail
from ..ir.dtypes import DType
from ..ir.shapes import numel
from ..ir.tiny import Ops, UOp
from .lower import REQUIRED, Attr, Ctx, lowering

LOG2E = 1.0 / math.log(2.0)
LN2 = math.log(2.0)
_TWO_PI = (6.28125, 254.0 / 2 ** 17, 2.0 * math.pi - 6.28125 - 254.0 / 2 ** 17)  # Cody-Waite: 2 pi in three parts

_BINARY = {"add": Ops.ADD, "sub": Ops.SUB, "mul": Ops.MUL, "div": Ops.FDIV, "max": Ops.MAX, "min": Ops.MIN,
           "pow": Ops.POW}
_SIMPLE_UNARY = {"neg": Ops.NEG, "relu": Ops.RELU, "exp2": Ops.EXP2, "log2": Ops.LOG2, "sqrt": Ops.SQRT,
                 "rsqrt": Ops.RSQRT, "recip": Ops.RECIPROCAL}
_COMPARE = ("gt", "ge", "lt", "le", "eq", "ne")
_COMPOSITE = ("exp", "log", "sigmoid", "silu", "tanh", "gelu", "erf", "sin", "cos", "floor", "ceil", "round")
_MODULO = ("mod", "fmod")  # a - b * q, q rounded toward -inf / toward 0 (Math.modulo)
FNS = tuple(_BINARY) + _MODULO + tuple(_SIMPLE_UNARY) + _COMPARE + _COMPOSITE + ("where", "cast")


class Math:
    """Small numeric helpers over a Builder: scalars become CONSTs shaped like their partner."""

    def __init__(self, b: Builder, at: str):
        self.b, self.at = b, at

    def c(self, v: float, like: UOp) -> UOp:
        return self.b.const_like(v, like, at=self.at)

    def op(self, op: Ops, *xs) -> UOp:
        like = next(x for x in (xs[1:] if op == Ops.WHERE else xs) if isinstance(x, UOp))
        return self.b.alu(op, *[x if isinstance(x, UOp) else self.c(x, like) for x in xs], at=self.at)

    def abs(self, x: UOp) -> UOp:
        return self.op(Ops.MAX, x, self.op(Ops.NEG, x))

    def exp(self, x: UOp) -> UOp:
        return self.op(Ops.EXP2, self.op(Ops.MUL, x, LOG2E))

    def sigmoid(self, x: UOp) -> UOp:
        return self.op(Ops.RECIPROCAL, self.op(Ops.ADD, self.op(Ops.EXP2, self.op(Ops.MUL, x, -LOG2E)), 1.0))

    def tanh(self, x: UOp) -> UOp:
        return self.op(Ops.SUB, self.op(Ops.MUL, self.sigmoid(self.op(Ops.MUL, x, 2.0)), 2.0), 1.0)

    def erf(self, x: UOp) -> UOp:
        """Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7): sign(x) * (1 - poly(t) * exp(-x^2))."""
        ax = self.abs(x)
        t = self.op(Ops.RECIPROCAL, self.op(Ops.ADD, self.op(Ops.MUL, ax, 0.3275911), 1.0))
        poly = self.c(1.061405429, x)
        for a in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
            poly = self.op(Ops.ADD, self.op(Ops.MUL, poly, t), a)
        poly = self.op(Ops.MUL, poly, t)
        y = self.op(Ops.SUB, 1.0, self.op(Ops.MUL, poly, self.exp(self.op(Ops.NEG, self.op(Ops.MUL, x, x)))))
        neg = self.op(Ops.CMPLT, x, 0.0)
        return self.op(Ops.WHERE, neg, self.op(Ops.NEG, y), y)

    def floor(self, x: UOp) -> UOp:
        """The largest integer not above x: its truncation (a cast through i32) less 1 where that passed x; x itself
        from 2^23 on (every such float is an integer) and where it is NaN or infinite."""
        t = self.b.cast(self.b.cast(x, DType.i32, at=self.at), DType.fp32, at=self.at)
        fl = self.op(Ops.SUB, t, self.b.cast(self.op(Ops.CMPLT, x, t), DType.fp32, at=self.at))
        return self.op(Ops.WHERE, self.op(Ops.CMPLT, self.abs(x), 2.0 ** 23), fl, x)

    def trunc(self, x: UOp) -> UOp:
        """x rounded toward zero (a float: floor of |x| with x's sign)."""
        return self.op(Ops.WHERE, self.op(Ops.CMPLT, x, 0.0), self.op(Ops.NEG, self.floor(self.op(Ops.NEG, x))),
                       self.floor(x))

    def modulo(self, a: UOp, b: UOp, toward_zero: bool) -> UOp:
        """a - b * q: q the quotient a / b rounded toward -inf (``mod``: the sign of b, Python's %, torch.remainder) or
        toward 0 (``fmod``: the sign of a, C's fmod, ONNX Mod fmod=1). Floats in fp32 from their fp32 quotient. i32
        exactly: q from the fp32 quotient, whose roundings may put it off by up to |a| / 2^23 / |b| + 1; the rest
        a - q b (exact in i32) divided again the same way (|rest / b| now below 2^9, so at most one off); then one
        step of b where the rest still lies outside [0, b) ((b, 0] for a negative b); fmod is that less b where
        it is not 0 and a's sign is not b's. Exact for |a| < 2^30 (past 2^31 - 64 the fp32 quotient by 1 rounds to 2^31,
        which no i32 holds)."""
        if a.dtype.is_float:  # by an infinite divisor a finite a is its own rest (or, for mod of the other sign, b)
            q = self.op(Ops.FDIV, a, b)
            r = self.op(Ops.SUB, a, self.op(Ops.MUL, b, self.trunc(q) if toward_zero else self.floor(q)))
            b_inf = self.op(Ops.CMPEQ, self.abs(b), math.inf)
            at_inf = self.op(Ops.WHERE, b_inf, self.op(Ops.CMPLT, self.abs(a), math.inf), b_inf)
            keep = a if toward_zero else self.op(Ops.WHERE, self.op(Ops.CMPEQ, self.op(Ops.CMPLT, a, 0.0),
                                                                     self.op(Ops.CMPLT, b, 0.0)), a,
                                                   self.op(Ops.WHERE, self.op(Ops.CMPEQ, a, 0.0), a, b))
            return self.op(Ops.WHERE, at_inf, keep, r)
        f32 = lambda x: self.b.cast(x, DType.fp32, at=self.at)  # noqa: E731
        fb = f32(b)

        def less_floor(r: UOp) -> UOp:  # r - b * floor(r / b), by the fp32 quotient
            q = self.b.cast(self.floor(self.op(Ops.FDIV, f32(r), fb)), DType.i32, at=self.at)
            return self.op(Ops.SUB, r, self.op(Ops.MUL, q, b))
        r = less_floor(less_floor(a))
        pos = self.op(Ops.CMPLT, 0, b)
        low = self.op(Ops.WHERE, pos, self.op(Ops.CMPLT, r, 0), self.op(Ops.CMPLT, 0, r))
        high = self.op(Ops.WHERE, pos, self.op(Ops.CMPLT, self.op(Ops.SUB, b, 1), r),
                       self.op(Ops.CMPLT, r, self.op(Ops.ADD, b, 1)))
        r = self.op(Ops.WHERE, low, self.op(Ops.ADD, r, b), self.op(Ops.WHERE, high, self.op(Ops.SUB, r, b), r))
        if toward_zero:
            other = self.op(Ops.CMPNE, self.op(Ops.CMPLT, a, 0), self.op(Ops.CMPLT, b, 0))
            r = self.op(Ops.WHERE, self.op(Ops.WHERE, other, self.op(Ops.CMPNE, r, 0), other), self.op(Ops.SUB, r, b), r)
        return r

    def round_even(self, x: UOp) -> UOp:
        """x to the nearest integer, a tie to the even one (ONNX Round, torch.round): floor(x), plus 1 where the rest
        (exact) is above 1/2, or is 1/2 and the floor odd."""
        f = self.floor(x)
        d = self.op(Ops.SUB, x, f)
        odd = self.op(Ops.CMPNE, self.op(Ops.SUB, f, self.op(Ops.MUL, self.floor(self.op(Ops.MUL, f, 0.5)), 2.0)), 0.0)
        tie_up = self.op(Ops.WHERE, self.op(Ops.CMPEQ, d, 0.5), odd, self.op(Ops.CMPLT, 0.5, d))
        return self.op(Ops.ADD, f, self.b.cast(tie_up, DType.fp32, at=self.at))

    def sin(self, x: UOp, cosine: bool = False) -> UOp:
        """sin(x), or cos(x): x less its nearest multiple k of 2 pi (k by a truncating cast to i32, 2 pi in three parts,
        the first two of 8 significant bits, so their products with k below 2^16 are exact: Cody-Waite; |x| up to
        ~4e5), folded into [-pi/2, pi/2] (sin r = sin(+-pi - r), cos r = sin(pi/2 - |r|)), then the odd Taylor
        polynomial to r^15 (its remainder there below 1e-9)."""
        k = self.op(Ops.MUL, x, 1.0 / (2.0 * math.pi))
        k = self.op(Ops.ADD, k, self.op(Ops.WHERE, self.op(Ops.CMPLT, k, 0.0), self.c(-0.5, k), self.c(0.5, k)))
        k = self.b.cast(self.b.cast(k, DType.i32, at=self.at), DType.fp32, at=self.at)
        r = x
        for part in _TWO_PI:  # each product with k exact but the last's, each difference exact but the last's
            r = self.op(Ops.SUB, r, self.op(Ops.MUL, k, part))
        if cosine:
            r = self.op(Ops.SUB, math.pi / 2, self.abs(r))
        else:
            r = self.op(Ops.WHERE, self.op(Ops.CMPLT, math.pi / 2, r), self.op(Ops.SUB, math.pi, r),
                        self.op(Ops.WHERE, self.op(Ops.CMPLT, r, -math.pi / 2), self.op(Ops.SUB, -math.pi, r), r))
        s = self.op(Ops.MUL, r, r)
        poly = self.c(-1.0 / math.factorial(15), r)
        for n in (13, 11, 9, 7, 5, 3):
            poly = self.op(Ops.ADD, self.op(Ops.MUL, poly, s), (-1.0) ** ((n - 1) // 2) / math.factorial(n))
        return self.op(Ops.MUL, r, self.op(Ops.ADD, self.op(Ops.MUL, poly, s), 1.0))

    def gelu(self, x: UOp, approximate: str) -> UOp:
        if approximate == "tanh":
            inner = self.op(Ops.MUL, self.op(Ops.ADD, x, self.op(Ops.MUL, self.op(Ops.MUL, self.op(Ops.MUL, x, x), x),
                                                                  0.044715)), math.sqrt(2.0 / math.pi))
            return self.op(Ops.MUL, self.op(Ops.MUL, x, 0.5), self.op(Ops.ADD, self.tanh(inner), 1.0))
        return self.op(Ops.MUL, self.op(Ops.MUL, x, 0.5),
                       self.op(Ops.ADD, self.erf(self.op(Ops.MUL, x, 1.0 / math.sqrt(2.0))), 1.0))

    def logical_not(self, x: UOp) -> UOp:
        return self.op(Ops.CMPNE, x, self.b.const_like(True, x, at=self.at))

    def keepdim(self, x: UOp, reduced: UOp, axes: tuple) -> UOp:
        """Reduced value reshaped with 1s in place of axes and expanded back to x's shape."""
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
        return self.b.expand(self.b.reshape(reduced, shape, at=self.at), x.shape, at=self.at)

    def count(self, x: UOp, axes: tuple, dtype: DType) -> UOp:
        """Number of elements reduced over axes, as a tensor shaped like the reduce's output.

        Static extents give a CONST; a symbolic extent is counted with a REDUCE(SUM) of ones."""
        n = numel(tuple(x.shape[a] for a in axes))
        out_shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
        if isinstance(n, int):
            return self.b.const(float(n), dtype, out_shape, at=self.at)
        ones = self.b.const(1.0, dtype, x.shape, at=self.at)
        return self.b.reduce(ones, "SUM", axes, dtype, at=self.at)


def _to_fp32(ctx: Ctx, x: UOp) -> UOp:
    return ctx.b.cast(x, DType.fp32, at=ctx.at) if x.dtype != DType.fp32 else x


@lowering("Elementwise", inputs=(1, 3), attrs={
    "fn": Attr(" | ".join(FNS), REQUIRED, "the function; binary fns broadcast right-aligned and promote dtypes; "
               "where(cond, a, b) takes three inputs (a non-bool cond means cond != 0)"),
    "to": Attr("fp16 | bf16 | fp32 | i32 | bool", "fp32", "the dtype cast converts to (float -> i32 truncates)", fns=("cast",)),
    "approximate": Attr("\"none\" | \"tanh\"", "none", "gelu's form: erf, or the tanh approximation",
                        fns=("gelu",))})
def elementwise(ctx: Ctx, ins: list) -> list:
    """Y = fn(inputs): 1 input (unary fns, cast), 2 (binary fns, mod and fmod (a - b q, q = a / b rounded toward
    -inf / toward 0; exact on i32, floats in fp32) and comparisons, numpy right-aligned
    broadcasting, dtypes promoted: bool < i32 < fp16/bf16 < fp32, fp16 with bf16 gives fp32) or 3
    (where(cond, a, b)). Comparisons give bool; composites (exp, log, sigmoid, silu, tanh, gelu, erf, sin, cos,
    floor, ceil, round) compute in fp32 and return the input's float dtype (fp32 for i32/bool inputs). Arithmetic without
    a meaning on bool (neg, sub, div, pow, exp2, log2, sqrt, rsqrt, recip) is E1009."""
    fn = ctx.attr("fn")
    if fn not in FNS:
        fail("UnknownOp", ctx.at, f"unknown Elementwise fn {fn!r}", "Use one of: " + ", ".join(FNS) + ".")
    m, b = Math(ctx.b, ctx.at), ctx.b
    n_in = 3 if fn == "where" else 2 if fn in _BINARY or fn in _COMPARE or fn in _MODULO else 1
    if len(ins) != n_in:
        fail("WrongArity", ctx.at, f"Elementwise {fn} takes {n_in} input(s), got {len(ins)}")
    if fn in _MODULO:
        x, y = b.promote(ins, at=ctx.at)
        if x.dtype == DType.bool:
            fail("DtypeMismatch", ctx.at, f"{fn} of bool values", "Cast the operands to i32 or a float type first.")
        if x.dtype.is_float:
            return [b.cast(m.modulo(_to_fp32(ctx, x), _to_fp32(ctx, y), fn == "fmod"), x.dtype, at=ctx.at)]
        return [m.modulo(x, y, fn == "fmod")]
    if fn in _BINARY:
        return [b.alu(_BINARY[fn], *b.promote(ins, at=ctx.at), at=ctx.at)]
    if fn in _COMPARE:
        x, y = b.promote(ins, at=ctx.at)
        if fn in ("gt", "le"):
            x, y = y, x
        if fn in ("lt", "gt"):
            return [b.alu(Ops.CMPLT, x, y, at=ctx.at)]
        if fn in ("ge", "le"):
            return [m.logical_not(b.alu(Ops.CMPLT, x, y, at=ctx.at))]
        return [b.alu(Ops.CMPEQ if fn == "eq" else Ops.CMPNE, x, y, at=ctx.at)]
    if fn == "where":
        c, x, y = ins
        if c.dtype != DType.bool:
            c = b.alu(Ops.CMPNE, c, b.const_like(0, c, at=ctx.at), at=ctx.at)
        x, y = b.promote([x, y], at=ctx.at)
        return [b.alu(Ops.WHERE, c, x, y, at=ctx.at)]
    (x,) = ins
    if fn == "cast":
        return [b.cast(x, ctx.dtype_attr("to"), at=ctx.at)]
    if fn in _SIMPLE_UNARY:
        if not x.dtype.is_float and fn not in ("neg", "relu"):
            x = _to_fp32(ctx, x)
        return [b.alu(_SIMPLE_UNARY[fn], x, at=ctx.at)]
    # composites: compute in fp32, cast back to a float input's dtype
    out_dt = x.dtype if x.dtype.is_float else DType.fp32
    xf = _to_fp32(ctx, x)
    if fn == "exp":
        y = m.exp(xf)
    elif fn == "log":
        y = m.op(Ops.MUL, m.op(Ops.LOG2, xf), LN2)
    elif fn == "sigmoid":
        y = m.sigmoid(xf)
    elif fn == "silu":
        y = m.op(Ops.MUL, xf, m.sigmoid(xf))
    elif fn == "tanh":
        y = m.tanh(xf)
    elif fn == "erf":
        y = m.erf(xf)
    elif fn in ("sin", "cos"):
        y = m.sin(xf, cosine=fn == "cos")
    elif fn == "floor":
        y = m.floor(xf)
    elif fn == "ceil":
        y = m.op(Ops.NEG, m.floor(m.op(Ops.NEG, xf)))
    elif fn == "round":
        y = m.round_even(xf)
    else:
        approx = ctx.attr("approximate")
        if approx not in ("none", "tanh"):
            fail("InvalidAttribute", ctx.at, f"gelu approximate must be \"none\" or \"tanh\", got {approx!r}")
        y = m.gelu(xf, approx)
    return [b.cast(y, out_dt, at=ctx.at)]


def _axes(ctx: Ctx, x: UOp, key: str = "axes") -> tuple:
    raw = ctx.attr(key)
    if isinstance(raw, int) and not isinstance(raw, bool):
        raw = (raw,)
    if not isinstance(raw, (list, tuple)) or not raw:
        fail("AxisOutOfRange", ctx.at, f"{key} must be a non-empty list of axes, got {raw!r}")
    axes = tuple(sorted(ctx.axis(a, x.ndim, key) for a in raw))
    if len(set(axes)) != len(axes):
        fail("AxisOutOfRange", ctx.at, f"{key} {list(raw)} repeat an axis")
    return axes


@lowering("Reduce", attrs={
    "op": Attr("sum | max | min | mean", "sum", "the reduction"),
    "axes": Attr("int | [int]", REQUIRED, "the axes reduced (negative counts from the end), each once"),
    "acc_dtype": Attr("fp16 | bf16 | fp32 | i32 | bool", "fp32", "the accumulation dtype (and the output's)"),
    "keepdim": Attr("bool", False, "keep the reduced axes with size 1")})
def reduce(ctx: Ctx, ins: list) -> list:
    """Y = op over axes of X, accumulated in acc_dtype (the output's dtype); mean divides the sum by
    the number of elements reduced."""
    (x,) = ins
    op = ctx.attr("op")
    if op not in ("sum", "max", "min", "mean"):
        fail("InvalidAttribute", ctx.at, f"Reduce op must be sum, max, min or mean, got {op!r}")
    axes = _axes(ctx, x)
    acc = ctx.dtype_attr("acc_dtype")
    b, m = ctx.b, Math(ctx.b, ctx.at)
    r = b.reduce(x, "SUM" if op == "mean" else op.upper(), axes, acc, at=ctx.at)
    if op == "mean":
        r = b.alu(Ops.FDIV, r, m.count(x, axes, acc), at=ctx.at)
    if ctx.bool_attr("keepdim"):
        r = b.reshape(r, tuple(1 if i in axes else d for i, d in enumerate(x.shape)), at=ctx.at)
    return [r]


def softmax_fp32(m: Math, x: UOp, axis: int) -> UOp:
    """Row softmax of an fp32 tensor: max-subtracted EXP2, then divide by the sum."""
    b, at = m.b, m.at
    mx = b.reduce(x, "MAX", (axis,), DType.fp32, at=at)
    e = m.exp(m.op(Ops.SUB, x, m.keepdim(x, mx, (axis,))))
    z = b.reduce(e, "SUM", (axis,), DType.fp32, at=at)
    return m.op(Ops.FDIV, e, m.keepdim(e, z, (axis,)))


@lowering("Softmax", attrs={"axis": Attr("int", -1, "the axis normalized")})
def softmax(ctx: Ctx, ins: list) -> list:
    """Y = softmax(X) along axis, computed in fp32 (max-subtracted), returned in X's float dtype."""
    (x,) = ins
    axis = ctx.axis(ctx.attr("axis"), x.ndim)
    out_dt = x.dtype if x.dtype.is_float else DType.fp32
    return [ctx.b.cast(softmax_fp32(Math(ctx.b, ctx.at), _to_fp32(ctx, x), axis), out_dt, at=ctx.at)]


@lowering("LayerNorm", inputs=(1, 3), attrs={
    "axis": Attr("int", -1, "normalize over axis..rank-1 (inputs 2 and 3, gamma and beta, have that shape)"),
    "eps": Attr("number >= 0", 1e-5, "added to the variance")})
def layernorm(ctx: Ctx, ins: list) -> list:
    """y = (x - mean) * rsqrt(var + eps) [* gamma] [+ beta], over axis..rank-1 (ONNX convention)."""
    x = ins[0]
    axis = ctx.axis(ctx.attr("axis"), x.ndim)
    eps = ctx.attr("eps")
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or eps < 0:
        fail("InvalidAttribute", ctx.at, f"eps must be a non-negative number, got {eps!r}")
    axes = tuple(range(axis, x.ndim))
    b, m = ctx.b, Math(ctx.b, ctx.at)
    xf = _to_fp32(ctx, x)
    cnt = m.count(xf, axes, DType.fp32)
    mean = m.op(Ops.FDIV, b.reduce(xf, "SUM", axes, DType.fp32, at=ctx.at), cnt)
    d = m.op(Ops.SUB, xf, m.keepdim(xf, mean, axes))
    var = m.op(Ops.FDIV, b.reduce(m.op(Ops.MUL, d, d), "SUM", axes, DType.fp32, at=ctx.at), cnt)
    y = m.op(Ops.MUL, d, m.keepdim(d, m.op(Ops.RSQRT, m.op(Ops.ADD, var, float(eps))), axes))
    norm_shape = x.shape[axis:]
    for p, what in zip(ins[1:], ("gamma", "beta")):
        if p.shape != norm_shape:
            fail("BroadcastMismatch", ctx.at, f"LayerNorm {what} has shape {list(map(str, p.shape))}, "
                 f"needs the normalized shape {list(map(str, norm_shape))}")
        y = m.op(Ops.MUL if what == "gamma" else Ops.ADD, y, _to_fp32(ctx, p))
    out_dt = x.dtype if x.dtype.is_float else DType.fp32
    return [b.cast(y, out_dt, at=ctx.at)]
