"""Lowerings of GEMM, Conv2D, MaxPool2D and Attention to the naive Tiny IR form (docs/DESIGN.md §Frontend IR).

Every contraction is movement -> MUL -> REDUCE(SUM) with tinygrad's ``dot`` order:
insert a size-1 axis, move K last, multiply with right-aligned broadcast, sum the last axis. A conv
is PAD + a sliding-window VIEW (affine index map) + the same contraction; a max-pool is PAD(-inf) +
VIEW + REDUCE(MAX).
"""
from __future__ import annotations

from ..ir.diagnostics import fail
from ..ir.dtypes import DType, promote
from ..ir.expr import Expr
from ..ir.shapes import Dim, dim, fmt_shape
from ..ir.tiny import Ops, UOp
from .lower import Ctx, lowering
from .lower_elementwise import Math, softmax_fp32


def widen(ctx: Ctx, x: UOp, w: UOp, acc: DType) -> tuple:
    """Operands of a contraction, cast to the accumulation dtype when it is wider.

    "FP16/BF16 in, FP32 accumulate" means exact products summed in fp32 (what mma.sync/wgmma do), so
    the naive form is MUL(movement(CAST(x)), movement(CAST(w))) -> REDUCE(SUM): a widening cast is
    exact, and Poly-View / the e-graph treat it as part of the operand's read."""
    x, w = ctx.b.promote([x, w], at=ctx.at)
    if acc.is_float and x.dtype.is_float and acc != x.dtype and promote(acc, x.dtype) == acc:
        x, w = ctx.b.cast(x, acc, at=ctx.at), ctx.b.cast(w, acc, at=ctx.at)
    return x, w


def dot(ctx: Ctx, x: UOp, w: UOp, acc: DType) -> UOp:
    """tinygrad ``x.dot(w)``: 1-D operands and broadcast batch dims included."""
    b, at = ctx.b, ctx.at
    n1, n2 = x.ndim, w.ndim
    if n1 == 0 or n2 == 0:
        fail("AxisSizeMismatch", at, "GEMM operands need at least one axis")
    kw = w.shape[-min(n2, 2)]
    if x.shape[-1] != kw:
        fail("AxisSizeMismatch", at, f"GEMM contracts axis of size {x.shape[-1]} (A {fmt_shape(x.shape)}) "
             f"with {kw} (B {fmt_shape(w.shape)})", "A's last axis must equal B's second-to-last (or only) axis.")
    x, w = widen(ctx, x, w, acc)
    one = (1,) * min(n1 - 1, n2 - 1, 1)
    x = b.reshape(x, x.shape[:-1] + one + x.shape[-1:], at=at)
    w = b.reshape(w, w.shape[:-2] + one + w.shape[-min(n2, 2):], at=at)
    perm = list(range(w.ndim))
    j = w.ndim - min(n2, 2)
    perm[-1], perm[j] = perm[j], perm[-1]
    w = b.permute(w, perm, at=at)
    prod = b.alu(Ops.MUL, x, w, at=at)
    return b.reduce(prod, "SUM", (prod.ndim - 1,), acc, at=at)


def _swap_last2(ctx: Ctx, x: UOp) -> UOp:
    if x.ndim < 2:
        return x
    perm = list(range(x.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return ctx.b.permute(x, perm, at=ctx.at)


@lowering("GEMM", inputs=(2, 2))
def gemm(ctx: Ctx, ins: list) -> list:
    a, w = ins
    if ctx.bool_attr("trans_a", False):
        a = _swap_last2(ctx, a)
    if ctx.bool_attr("trans_b", False):
        w = _swap_last2(ctx, w)
    return [dot(ctx, a, w, ctx.dtype_attr("acc_dtype", "fp32"))]


def _pads4(ctx: Ctx, key: str) -> tuple:
    v = ctx.attr(key, 0)
    if isinstance(v, int) and not isinstance(v, bool):
        v = [v] * 4
    if isinstance(v, (list, tuple)) and len(v) == 2:
        v = [v[0], v[0], v[1], v[1]]
    if not isinstance(v, (list, tuple)) or len(v) != 4 or not all(isinstance(p, int) and not isinstance(p, bool) for p in v):
        fail("InvalidAttribute", ctx.at, f"{key} is an int, [ph, pw] or [top, bottom, left, right], got {v!r}")
    if any(p < 0 for p in v):
        fail("UnaddressableShape", ctx.at, f"{key} {list(v)} has a negative entry")
    return tuple(v)


def _window_out(ctx: Ctx, size: Dim, lo: int, hi: int, k: int, s: int, d: int, axis: str) -> Dim:
    """(size + lo + hi - d*(k-1) - 1) // s + 1, checked positive when static."""
    if s < 1 or d < 1:
        fail("InvalidAttribute", ctx.at, f"stride and dilation are >= 1 (axis {axis})")
    out = dim((Expr.of(size) + lo + hi - d * (k - 1) - 1).floordiv(s) + 1)
    if isinstance(out, int) and out < 1:
        fail("UnaddressableShape", ctx.at, f"the {k}-wide window (dilation {d}) does not fit axis {axis} of size "
             f"{size} padded by {lo}+{hi}", "Pad more or use a smaller kernel.")
    return out


def sliding_window(ctx: Ctx, x: UOp, k: tuple, s: tuple, d: tuple, pads: tuple, value: float) -> UOp:
    """X (N, C, H, W) -> (N, C, Ho, Wo, Kh, Kw) as PAD + VIEW (no copy)."""
    b, at = ctx.b, ctx.at
    n, c, h, w = x.shape
    ho = _window_out(ctx, h, pads[0], pads[1], k[0], s[0], d[0], "H")
    wo = _window_out(ctx, w, pads[2], pads[3], k[1], s[1], d[1], "W")
    xp = b.pad(x, ((0, 0), (0, 0), (pads[0], pads[1]), (pads[2], pads[3])), value, at=at)
    imap = ("i0", "i1", f"{s[0]}*i2 + {d[0]}*i4", f"{s[1]}*i3 + {d[1]}*i5")
    return b.view(xp, (n, c, ho, wo, k[0], k[1]), imap, at=at)


def _need_rank(ctx: Ctx, x: UOp, rank: int, what: str) -> None:
    if x.ndim != rank:
        fail("AxisSizeMismatch", ctx.at, f"{what} must have rank {rank}, got {fmt_shape(x.shape)}")


@lowering("Conv2D", inputs=(2, 3))
def conv2d(ctx: Ctx, ins: list) -> list:
    x, wt = ins[0], ins[1]
    _need_rank(ctx, x, 4, "X (N, C, H, W)")
    _need_rank(ctx, wt, 4, "W (Co, C/groups, Kh, Kw)")
    g = ctx.int_attr("groups", 1)
    acc = ctx.dtype_attr("acc_dtype", "fp32")
    co, cg, kh, kw = wt.shape
    c = x.shape[1]
    if not (isinstance(kh, int) and isinstance(kw, int)):
        fail("UnaddressableShape", ctx.at, f"kernel sizes must be integers, got {kh} x {kw}")
    if g < 1 or (isinstance(co, int) and co % g) or Expr.of(cg) * g != Expr.of(c):
        fail("ConvChannelMismatch", ctx.at, f"X has {c} channels, W is {fmt_shape(wt.shape)}, groups = {g}: "
             f"need C = groups * W.shape[1] and groups | Co")
    stride = ctx.ints_attr("stride", 2, 1)
    dil = ctx.ints_attr("dilation", 2, 1)
    pads = _pads4(ctx, "pad")
    b, at = ctx.b, ctx.at
    x, wt = widen(ctx, x, wt, acc)
    xv = sliding_window(ctx, x, (kh, kw), stride, dil, pads, 0.0)  # (N, C, Ho, Wo, Kh, Kw)
    n, _, ho, wo, _, _ = xv.shape
    cog = dim(Expr.of(co).floordiv(g)) if g > 1 else co
    # x: (N, G, Cg, Ho, Wo, Kh, Kw) -> (N, G, 1, Ho, Wo, Cg, Kh, Kw) -> expand Cog
    xg = b.reshape(xv, (n, g, cg, 1, ho, wo, kh, kw), at=at)
    xg = b.permute(xg, (0, 1, 3, 4, 5, 2, 6, 7), at=at)
    full = (n, g, cog, ho, wo, cg, kh, kw)
    xg = b.expand(xg, full, at=at)
    # w: (Co, Cg, Kh, Kw) -> (1, G, Cog, 1, 1, Cg, Kh, Kw) -> expand N, Ho, Wo
    wg = b.expand(b.reshape(wt, (1, g, cog, 1, 1, cg, kh, kw), at=at), full, at=at)
    y = b.reduce(b.alu(Ops.MUL, xg, wg, at=at), "SUM", (5, 6, 7), acc, at=at)  # (N, G, Cog, Ho, Wo)
    y = b.reshape(y, (n, co, ho, wo), at=at)
    if len(ins) == 3:
        bias = ins[2]
        if bias.shape != (co,):
            fail("BroadcastMismatch", at, f"bias has shape {fmt_shape(bias.shape)}, needs [{co}]")
        bias = b.reshape(b.cast(bias, y.dtype, at=at), (co, 1, 1), at=at)
        y = b.alu(Ops.ADD, y, bias, at=at)
    return [y]


@lowering("MaxPool2D")
def maxpool2d(ctx: Ctx, ins: list) -> list:
    (x,) = ins
    _need_rank(ctx, x, 4, "X (N, C, H, W)")
    k = ctx.ints_attr("kernel", 2)
    s = ctx.ints_attr("stride", 2, k)
    d = ctx.ints_attr("dilation", 2, 1)
    pads = _pads4(ctx, "pad")
    if any(p > kk // 2 for p, kk in zip(pads, (k[0], k[0], k[1], k[1]))):
        fail("UnaddressableShape", ctx.at, f"pad {list(pads)} exceeds half the kernel {list(k)}: a window could see only padding")
    xv = sliding_window(ctx, x, k, s, d, pads, float("-inf"))
    return [ctx.b.reduce(xv, "MAX", (4, 5), x.dtype, at=ctx.at)]


def causal_mask(ctx: Ctx, m: Dim, n: Dim) -> UOp:
    """mask[i, j] = j <= i + (N - M) (bottom-right aligned), from movement alone:
    ones[N] padded with M-1 falses, viewed at t = j - i + M - 1 (in range; true iff t < N)."""
    b, at = ctx.b, ctx.at
    ones = b.const(True, DType.bool, (n,), at=at)
    padded = b.pad(ones, ((0, dim(Expr.of(m) - 1)),), False, at=at)
    return b.view(padded, (m, n), (f"i1 - i0 + {Expr.of(m) - 1}",), at=at)


@lowering("Attention", inputs=(3, 3))
def attention(ctx: Ctx, ins: list) -> list:
    """softmax(scale * Q K^T [causal mask]) V; P is cast to V's dtype before P V, as flash kernels do."""
    q, k, v = ins
    for t, name in ((q, "Q (B, H, M, D)"), (k, "K (B, H, N, D)"), (v, "V (B, H, N, Dv)")):
        _need_rank(ctx, t, 4, name)
    bsz, h, m_, d = q.shape
    n_ = k.shape[2]
    if k.shape[:2] != (bsz, h) or v.shape[:2] != (bsz, h) or k.shape[3] != d or v.shape[2] != n_:
        fail("AxisSizeMismatch", ctx.at, f"Q {fmt_shape(q.shape)}, K {fmt_shape(k.shape)}, V {fmt_shape(v.shape)} "
             "do not agree on B, H, N or D")
    scale = ctx.attr("scale", None)
    if scale is None:
        if not isinstance(d, int):
            fail("InvalidAttribute", ctx.at, "scale defaults to 1/sqrt(D), which needs a static D; give \"scale\"")
        scale = d ** -0.5
    if not isinstance(scale, (int, float)) or isinstance(scale, bool):
        fail("InvalidAttribute", ctx.at, f"scale must be a number, got {scale!r}")
    b, at, mth = ctx.b, ctx.at, Math(ctx.b, ctx.at)
    s = dot(ctx, q, b.permute(k, (0, 1, 3, 2), at=at), DType.fp32)  # (B, H, M, N)
    s = mth.op(Ops.MUL, s, float(scale))
    if ctx.bool_attr("causal", False):
        mask = b.expand(b.reshape(causal_mask(ctx, m_, n_), (1, 1, m_, n_), at=at), s.shape, at=at)
        s = mth.op(Ops.WHERE, mask, s, float("-inf"))
    p = softmax_fp32(mth, s, 3)
    if v.dtype in (DType.fp16, DType.bf16):
        p = b.cast(p, v.dtype, at=at)
    return [dot(ctx, p, v, DType.fp32)]
