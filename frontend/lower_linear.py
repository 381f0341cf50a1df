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
from .lower import REQUIRED, Attr, Ctx, lowering
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


_ACC = Attr("fp16 | bf16 | fp32 | i32 | bool", "fp32", "the accumulation dtype (and the output's)")
_PAD = Attr("int | [ph, pw] | [top, bottom, left, right]", 0, "zero padding of H and W (>= 0)")
_DILATION = Attr("int | [dh, dw]", 1, "the spacing of the window's taps")


@lowering("GEMM", inputs=(2, 2), attrs={
    "trans_a": Attr("bool", False, "swap A's last two axes first"),
    "trans_b": Attr("bool", False, "swap B's last two axes first"),
    "acc_dtype": _ACC})
def gemm(ctx: Ctx, ins: list) -> list:
    """C = A @ B (numpy matmul: 1-D operands, broadcast batch dims), products exact, summed in
    acc_dtype; 16-bit operands with fp32 accumulation are widened exactly first."""
    a, w = ins
    if ctx.bool_attr("trans_a"):
        a = _swap_last2(ctx, a)
    if ctx.bool_attr("trans_b"):
        w = _swap_last2(ctx, w)
    return [dot(ctx, a, w, ctx.dtype_attr("acc_dtype"))]


def _pads4(ctx: Ctx, key: str) -> tuple:
    v = ctx.attr(key)
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


@lowering("Conv2D", inputs=(2, 3), attrs={
    "stride": Attr("int | [sh, sw]", 1, "the window's step"), "dilation": _DILATION, "pad": _PAD,
    "groups": Attr("int >= 1", 1, "channel groups: C = groups * W.shape[1], groups divides Co"),
    "acc_dtype": _ACC})
def conv2d(ctx: Ctx, ins: list) -> list:
    """Y (N, Co, Ho, Wo) = X (N, C, H, W) convolved with W (Co, C/groups, Kh, Kw) [+ bias (Co)], NCHW,
    summed in acc_dtype."""
    x, wt = ins[0], ins[1]
    _need_rank(ctx, x, 4, "X (N, C, H, W)")
    _need_rank(ctx, wt, 4, "W (Co, C/groups, Kh, Kw)")
    g = ctx.int_attr("groups")
    acc = ctx.dtype_attr("acc_dtype")
    co, cg, kh, kw = wt.shape
    c = x.shape[1]
    if not (isinstance(kh, int) and isinstance(kw, int)):
        fail("UnaddressableShape", ctx.at, f"kernel sizes must be integers, got {kh} x {kw}")
    if g < 1 or (isinstance(co, int) and co % g) or Expr.of(cg) * g != Expr.of(c):
        fail("ConvChannelMismatch", ctx.at, f"X has {c} channels, W is {fmt_shape(wt.shape)}, groups = {g}: "
             f"need C = groups * W.shape[1] and groups | Co")
    stride = ctx.ints_attr("stride", 2)
    dil = ctx.ints_attr("dilation", 2)
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


@lowering("MaxPool2D", attrs={
    "kernel": Attr("int | [kh, kw]", REQUIRED, "the window size"),
    "stride": Attr("int | [sh, sw]", default_text="the kernel", doc="the window's step"),
    "dilation": _DILATION,
    "pad": Attr("int | [ph, pw] | [top, bottom, left, right]", 0, "-inf padding of H and W; no window may see only "
                "padding")})
def maxpool2d(ctx: Ctx, ins: list) -> list:
    """Y (N, C, Ho, Wo) = the max of each window of X (N, C, H, W), -inf padding."""
    (x,) = ins
    _need_rank(ctx, x, 4, "X (N, C, H, W)")
    k = ctx.ints_attr("kernel", 2)
    s = ctx.ints_attr("stride", 2, k)
    d = ctx.ints_attr("dilation", 2)
    pads = _pads4(ctx, "pad")
    xv = sliding_window(ctx, x, k, s, d, pads, float("-inf"))
    for ax, (size, lo, hi) in enumerate(((x.shape[2], pads[0], pads[1]), (x.shape[3], pads[2], pads[3]))):
        w = _padding_only_window(size, lo, hi, k[ax], s[ax], d[ax], xv.shape[2 + ax])
        if w is not None:
            fail("UnaddressableShape", ctx.at, f"{'the last window' if w < 0 else f'window {w}'} along {'HW'[ax]} sees only padding (kernel {k[ax]}, "
                 f"dilation {d[ax]}, pad {lo}+{hi}, size {size}), so its max would be -inf",
                 "Keep each pad below the window's extent dilation*(kernel-1)+1.")
    return [ctx.b.reduce(xv, "MAX", (4, 5), x.dtype, at=ctx.at)]


def _padding_only_window(size: Dim, lo: int, hi: int, k: int, s: int, d: int, out: Dim) -> "int | None":
    """The first output position whose window's taps (s*w + d*t in padded coordinates) all fall in the
    padding [0, lo) or [lo + size, ...), or None. Static sizes check every window; a symbolic size
    checks the windows whose taps are certain: the first, and the last when the stride is 1."""
    if isinstance(size, int) and isinstance(out, int):
        for w in range(out):
            if not any(lo <= s * w + d * t < lo + size for t in range(k)):
                return w
        return None
    if lo > d * (k - 1):
        return 0
    if s == 1 and hi > d * (k - 1):
        return -1
    return None


def causal_mask(ctx: Ctx, m: Dim, n: Dim) -> UOp:
    """mask[i, j] = j <= i + (N - M) (bottom-right aligned), from movement alone:
    ones[N] padded with M-1 falses, viewed at t = j - i + M - 1 (in range; true iff t < N)."""
    b, at = ctx.b, ctx.at
    ones = b.const(True, DType.bool, (n,), at=at)
    padded = b.pad(ones, ((0, dim(Expr.of(m) - 1)),), False, at=at)
    return b.view(padded, (m, n), (f"i1 - i0 + {Expr.of(m) - 1}",), at=at)


@lowering("Attention", inputs=(3, 3), attrs={
    "scale": Attr("number", default_text="1/sqrt(D)", doc="multiplies Q K^T before the softmax"),
    "causal": Attr("bool", False, "mask key j > query i + (N - M) (bottom-right aligned)")})
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
    if ctx.bool_attr("causal"):
        mask = b.expand(b.reshape(causal_mask(ctx, m_, n_), (1, 1, m_, n_), at=at), s.shape, at=at)
        s = mth.op(Ops.WHERE, mask, s, float("-inf"))
    p = softmax_fp32(mth, s, 3)
    if v.dtype in (DType.fp16, DType.bf16):
        p = b.cast(p, v.dtype, at=at)
    return [dot(ctx, p, v, DType.fp32)]


@lowering("AvgPool2D", attrs={
    "kernel": Attr("int | [kh, kw]", REQUIRED, "the window size"),
    "stride": Attr("int | [sh, sw]", default_text="the kernel", doc="the window's step"),
    "dilation": _DILATION,
    "pad": Attr("int | [ph, pw] | [top, bottom, left, right]", 0, "zero padding of H and W"),
    "extra": Attr("[bottom, right]", 0, "extra zero padding at the ends (ceil-mode tails), never counted"),
    "count_include_pad": Attr("bool", False, "whether `pad` counts in a window's element count")})
def avgpool2d(ctx: Ctx, ins: list) -> list:
    """Window sums of the zero-padded input divided by the window's element count. ``pad`` pads
    [top, bottom, left, right] count as elements when ``count_include_pad``; ``extra`` [bottom, right]
    (ceil-mode tails) never do. The counts are the same window sums over a padded tensor of ones."""
    (x,) = ins
    _need_rank(ctx, x, 4, "X (N, C, H, W)")
    k = ctx.ints_attr("kernel", 2)
    s = ctx.ints_attr("stride", 2, k)
    d = ctx.ints_attr("dilation", 2, 1)
    pads = _pads4(ctx, "pad")
    extra = ctx.ints_attr("extra", 2, 0)
    include = ctx.bool_attr("count_include_pad", False)
    b, at = ctx.b, ctx.at
    allp = (pads[0], pads[1] + extra[0], pads[2], pads[3] + extra[1])
    xf = b.cast(x, DType.fp32, at=at)
    total = b.reduce(sliding_window(ctx, xf, k, s, d, allp, 0.0), "SUM", (4, 5), DType.fp32, at=at)
    ones = b.const(1.0, DType.fp32, (1, 1) + x.shape[2:], at=at)
    if include:
        ones = b.pad(ones, ((0, 0), (0, 0), (pads[0], pads[1]), (pads[2], pads[3])), 1.0, at=at)
        cnt_pads = (0, extra[0], 0, extra[1])
    else:
        cnt_pads = allp
    cnt = b.reduce(sliding_window(ctx, ones, k, s, d, cnt_pads, 0.0), "SUM", (4, 5), DType.fp32, at=at)
    y = b.alu(Ops.FDIV, total, cnt, at=at)
    return [b.cast(y, x.dtype if x.dtype.is_float else DType.fp32, at=at)]


def _einsum_terms(ctx: Ctx, eq: str, n: int) -> tuple:
    if not isinstance(eq, str) or "..." in eq:
        fail("InvalidAttribute", ctx.at, f"equation {eq!r}: polysat's Einsum takes explicit letters (no ellipsis)")
    eq = eq.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != n or not all(t.isalpha() for t in terms) or (arrow and not (out.isalpha() or out == "")):
        fail("InvalidAttribute", ctx.at, f"equation {eq!r} does not name {n} operand(s) with letters")
    if not arrow:  # implicit output: the letters used once, alphabetically
        letters = "".join(terms)
        out = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    if any(len(set(t)) != len(t) for t in terms) or len(set(out)) != len(out) or set(out) - set("".join(terms)):
        fail("InvalidAttribute", ctx.at, f"equation {eq!r}: a repeated letter within one operand (a diagonal) "
             "or an output letter no operand has is not supported")
    return terms, out


@lowering("Einsum", inputs=(1, 2), attrs={
    "equation": Attr("str", REQUIRED, "explicit letters, e.g. \"bij,bjk->bik\" (no ellipsis, no diagonals)"),
    "acc_dtype": Attr("dtype", default_text="fp32 (i32 for integer inputs)", doc="the dtype of the products and sums")})
def einsum(ctx: Ctx, ins: list) -> list:
    """Operands permuted to (output letters, summed letters), broadcast, multiplied, summed (fp32)."""
    terms, out = _einsum_terms(ctx, ctx.attr("equation"), len(ins))
    b, at = ctx.b, ctx.at
    acc = ctx.dtype_attr("acc_dtype", "fp32" if ins[0].dtype.is_float else "i32")
    ins = list(widen(ctx, ins[0], ins[1], acc)) if len(ins) == 2 else [b.cast(ins[0], acc, at=at)]
    summed = "".join(c for c in dict.fromkeys("".join(terms)) if c not in out)
    order = out + summed
    sizes: dict = {}
    for t, x in zip(terms, ins, strict=True):
        if len(t) != x.ndim:
            fail("AxisSizeMismatch", at, f"operand {t!r} of the equation has {len(t)} letters, the tensor is {fmt_shape(x.shape)}")
        for c, s in zip(t, x.shape, strict=True):
            if s != 1 and sizes.get(c, 1) not in (1, s):
                fail("AxisSizeMismatch", at, f"letter {c!r} names sizes {sizes[c]} and {s}")
            if s != 1 or c not in sizes:
                sizes[c] = s
    full = tuple(sizes[c] for c in order)
    xs = []
    for t, x in zip(terms, ins, strict=True):
        mine = [c for c in order if c in t]
        x = b.permute(x, [t.index(c) for c in mine], at=at)
        x = b.reshape(x, tuple(x.shape[mine.index(c)] if c in t else 1 for c in order), at=at)
        xs.append(b.expand(x, full, at=at))
    y = xs[0] if len(xs) == 1 else b.alu(Ops.MUL, *xs, at=at)
    if summed:
        y = b.reduce(y, "SUM", tuple(range(len(out), len(order))), acc, at=at)
    return [y]
