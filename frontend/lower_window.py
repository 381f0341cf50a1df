"""Lowerings of the window ops — Conv2D/Conv3D, MaxPool2D/MaxPool3D, AvgPool2D/AvgPool3D — to the naive
Tiny IR form (docs/DESIGN.md §Frontend IR), one N-d lowering per kind for 2 or 3 spatial axes.

A window reads its input through PAD + a sliding-window VIEW (an affine index map, no copy):
X (N, C, S1..Sn) -> (N, C, O1..On, K1..Kn). A convolution is that view times the weights, summed over
the input channels of its group and the taps (the GEMM contraction's MUL -> REDUCE(SUM)); a max-pool is
PAD(-inf) + VIEW + REDUCE(MAX); an average pool the window sums divided by the window's element count.
Padding lists (lo, hi) per spatial axis in axis order: [top, bottom, left, right] in 2-D, [front, back,
top, bottom, left, right] in 3-D.
"""
from __future__ import annotations

from ..ir.diagnostics import fail
from ..ir.dtypes import DType
from ..ir.expr import Expr
from ..ir.shapes import Dim, dim, fmt_shape
from ..ir.tiny import Ops, UOp
from .lower import REQUIRED, Attr, Ctx, lowering
from .lower_linear import ACC, need_rank, widen

_AXES = {2: "HW", 3: "DHW"}
_NAMES = {2: "H and W", 3: "D, H and W"}
_SIZES = {2: ("[sh, sw]", "[kh, kw]", "[dh, dw]", "[ph, pw] | [top, bottom, left, right]", "[bottom, right]",
              "(N, C, H, W)", "(Co, C/groups, Kh, Kw)"),
          3: ("[sd, sh, sw]", "[kd, kh, kw]", "[dd, dh, dw]", "[pd, ph, pw] | [front, back, top, bottom, left, right]",
              "[back, bottom, right]", "(N, C, D, H, W)", "(Co, C/groups, Kd, Kh, Kw)")}


def _pads(ctx: Ctx, key: str, nsp: int) -> tuple:
    """(lo, hi) per spatial axis, flattened: an int, one per axis, or a (lo, hi) pair per axis."""
    v = ctx.attr(key)
    if isinstance(v, int) and not isinstance(v, bool):
        v = [v] * 2 * nsp
    if isinstance(v, (list, tuple)) and len(v) == nsp:
        v = [p for x in v for p in (x, x)]
    if not isinstance(v, (list, tuple)) or len(v) != 2 * nsp or \
            not all(isinstance(p, int) and not isinstance(p, bool) for p in v):
        fail("InvalidAttribute", ctx.at, f"{key} is an int, {_SIZES[nsp][3].replace(' |', ' or')}, got {v!r}")
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
    """X (N, C, S1..Sn) -> (N, C, O1..On, K1..Kn) as PAD + VIEW (no copy)."""
    b, at = ctx.b, ctx.at
    nsp = x.ndim - 2
    outs = tuple(_window_out(ctx, x.shape[2 + j], pads[2 * j], pads[2 * j + 1], k[j], s[j], d[j], _AXES[nsp][j])
                 for j in range(nsp))
    xp = b.pad(x, ((0, 0), (0, 0)) + tuple((pads[2 * j], pads[2 * j + 1]) for j in range(nsp)), value, at=at)
    imap = ("i0", "i1") + tuple(f"{s[j]}*i{2 + j} + {d[j]}*i{2 + nsp + j}" for j in range(nsp))
    return b.view(xp, x.shape[:2] + outs + tuple(k), imap, at=at)


def _conv_attrs(nsp: int) -> dict:
    st, _, dl, pd, _, _, _ = _SIZES[nsp]
    return {"stride": Attr(f"int | {st}", 1, "the window's step"),
            "dilation": Attr(f"int | {dl}", 1, "the spacing of the window's taps"),
            "pad": Attr(f"int | {pd}", 0, f"zero padding of {_NAMES[nsp]} (>= 0)"),
            "groups": Attr("int >= 1", 1, "channel groups: C = groups * W.shape[1], groups divides Co"),
            "acc_dtype": ACC}


def conv(ctx: Ctx, ins: list, nsp: int) -> list:
    x, wt = ins[0], ins[1]
    need_rank(ctx, x, 2 + nsp, f"X {_SIZES[nsp][5]}")
    need_rank(ctx, wt, 2 + nsp, f"W {_SIZES[nsp][6]}")
    g = ctx.int_attr("groups")
    acc = ctx.dtype_attr("acc_dtype")
    co, cg, ks = wt.shape[0], wt.shape[1], wt.shape[2:]
    c = x.shape[1]
    if not all(isinstance(k, int) for k in ks):
        fail("UnaddressableShape", ctx.at, f"kernel sizes must be integers, got {' x '.join(map(str, ks))}")
    if g < 1 or (isinstance(co, int) and co % g) or Expr.of(cg) * g != Expr.of(c):
        fail("ConvChannelMismatch", ctx.at, f"X has {c} channels, W is {fmt_shape(wt.shape)}, groups = {g}: "
             f"need C = groups * W.shape[1] and groups | Co")
    stride = ctx.ints_attr("stride", nsp)
    dil = ctx.ints_attr("dilation", nsp)
    pads = _pads(ctx, "pad", nsp)
    b, at = ctx.b, ctx.at
    x, wt = widen(ctx, x, wt, acc)
    xv = sliding_window(ctx, x, ks, stride, dil, pads, 0.0)  # (N, C, O.., K..)
    n, outs = xv.shape[0], xv.shape[2:2 + nsp]
    cog = dim(Expr.of(co).floordiv(g)) if g > 1 else co
    # x: (N, G, Cg, 1, O.., K..) -> (N, G, 1, O.., Cg, K..) -> expand Cog
    xg = b.reshape(xv, (n, g, cg, 1) + outs + ks, at=at)
    xg = b.permute(xg, (0, 1, 3) + tuple(range(4, 4 + nsp)) + (2,) + tuple(range(4 + nsp, 4 + 2 * nsp)), at=at)
    full = (n, g, cog) + outs + (cg,) + ks
    xg = b.expand(xg, full, at=at)
    # w: (Co, Cg, K..) -> (1, G, Cog, 1.., Cg, K..) -> expand N, O..
    wg = b.expand(b.reshape(wt, (1, g, cog) + (1,) * nsp + (cg,) + ks, at=at), full, at=at)
    y = b.reduce(b.alu(Ops.MUL, xg, wg, at=at), "SUM", tuple(range(3 + nsp, 4 + 2 * nsp)), acc, at=at)
    y = b.reshape(y, (n, co) + outs, at=at)  # (N, G, Cog, O..) -> (N, Co, O..)
    if len(ins) == 3:
        bias = ins[2]
        if bias.shape != (co,):
            fail("BroadcastMismatch", at, f"bias has shape {fmt_shape(bias.shape)}, needs [{co}]")
        y = b.alu(Ops.ADD, y, b.reshape(b.cast(bias, y.dtype, at=at), (co,) + (1,) * nsp, at=at), at=at)
    return [y]


@lowering("Conv2D", inputs=(2, 3), attrs=_conv_attrs(2))
def conv2d(ctx: Ctx, ins: list) -> list:
    """Y (N, Co, Ho, Wo) = X (N, C, H, W) convolved with W (Co, C/groups, Kh, Kw) [+ bias (Co)], NCHW,
    summed in acc_dtype."""
    return conv(ctx, ins, 2)


@lowering("Conv3D", inputs=(2, 3), attrs=_conv_attrs(3))
def conv3d(ctx: Ctx, ins: list) -> list:
    """Y (N, Co, Do, Ho, Wo) = X (N, C, D, H, W) convolved with W (Co, C/groups, Kd, Kh, Kw) [+ bias (Co)],
    NCDHW, summed in acc_dtype."""
    return conv(ctx, ins, 3)


def _pool_attrs(nsp: int, pad_doc: str) -> dict:
    st, kn, dl, pd, _, _, _ = _SIZES[nsp]
    return {"kernel": Attr(f"int | {kn}", REQUIRED, "the window size"),
            "stride": Attr(f"int | {st}", default_text="the kernel", doc="the window's step"),
            "dilation": Attr(f"int | {dl}", 1, "the spacing of the window's taps"),
            "pad": Attr(f"int | {pd}", 0, pad_doc.format(axes=_NAMES[nsp]))}


def maxpool(ctx: Ctx, ins: list, nsp: int) -> list:
    (x,) = ins
    need_rank(ctx, x, 2 + nsp, f"X {_SIZES[nsp][5]}")
    k = ctx.ints_attr("kernel", nsp)
    s = ctx.ints_attr("stride", nsp, k)
    d = ctx.ints_attr("dilation", nsp)
    pads = _pads(ctx, "pad", nsp)
    xv = sliding_window(ctx, x, k, s, d, pads, float("-inf"))
    for ax in range(nsp):
        size, lo, hi = x.shape[2 + ax], pads[2 * ax], pads[2 * ax + 1]
        w = _padding_only_window(size, lo, hi, k[ax], s[ax], d[ax], xv.shape[2 + ax])
        if w is not None:
            fail("UnaddressableShape", ctx.at, f"{'the last window' if w < 0 else f'window {w}'} along "
                 f"{_AXES[nsp][ax]} sees only padding (kernel {k[ax]}, dilation {d[ax]}, pad {lo}+{hi}, size {size}), "
                 "so its max would be -inf", "Keep each pad below the window's extent dilation*(kernel-1)+1.")
    return [ctx.b.reduce(xv, "MAX", tuple(range(2 + nsp, 2 + 2 * nsp)), x.dtype, at=ctx.at)]


_MAX_PAD = "-inf padding of {axes}; no window may see only padding"


@lowering("MaxPool2D", attrs=_pool_attrs(2, _MAX_PAD))
def maxpool2d(ctx: Ctx, ins: list) -> list:
    """Y (N, C, Ho, Wo) = the max of each window of X (N, C, H, W), -inf padding."""
    return maxpool(ctx, ins, 2)


@lowering("MaxPool3D", attrs=_pool_attrs(3, _MAX_PAD))
def maxpool3d(ctx: Ctx, ins: list) -> list:
    """Y (N, C, Do, Ho, Wo) = the max of each window of X (N, C, D, H, W), -inf padding."""
    return maxpool(ctx, ins, 3)


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


def _avg_attrs(nsp: int) -> dict:
    return _pool_attrs(nsp, "zero padding of {axes}") | {
        "extra": Attr(_SIZES[nsp][4], 0, "extra zero padding at the ends (ceil-mode tails), never counted"),
        "count_include_pad": Attr("bool", False, "whether `pad` counts in a window's element count")}


def avgpool(ctx: Ctx, ins: list, nsp: int) -> list:
    (x,) = ins
    need_rank(ctx, x, 2 + nsp, f"X {_SIZES[nsp][5]}")
    k = ctx.ints_attr("kernel", nsp)
    s = ctx.ints_attr("stride", nsp, k)
    d = ctx.ints_attr("dilation", nsp, 1)
    pads = _pads(ctx, "pad", nsp)
    extra = ctx.ints_attr("extra", nsp, 0)
    include = ctx.bool_attr("count_include_pad", False)
    b, at = ctx.b, ctx.at
    allp = tuple(p for j in range(nsp) for p in (pads[2 * j], pads[2 * j + 1] + extra[j]))
    xf = b.cast(x, DType.fp32, at=at)
    window = tuple(range(2 + nsp, 2 + 2 * nsp))
    total = b.reduce(sliding_window(ctx, xf, k, s, d, allp, 0.0), "SUM", window, DType.fp32, at=at)
    ones = b.const(1.0, DType.fp32, (1, 1) + x.shape[2:], at=at)
    if include:
        ones = b.pad(ones, ((0, 0), (0, 0)) + tuple((pads[2 * j], pads[2 * j + 1]) for j in range(nsp)), 1.0, at=at)
        cnt_pads = tuple(p for j in range(nsp) for p in (0, extra[j]))
    else:
        cnt_pads = allp
    cnt = b.reduce(sliding_window(ctx, ones, k, s, d, cnt_pads, 0.0), "SUM", window, DType.fp32, at=at)
    y = b.alu(Ops.FDIV, total, cnt, at=at)
    return [b.cast(y, x.dtype if x.dtype.is_float else DType.fp32, at=at)]


@lowering("AvgPool2D", attrs=_avg_attrs(2))
def avgpool2d(ctx: Ctx, ins: list) -> list:
    """Window sums of the zero-padded input divided by the window's element count. ``pad`` pads
    [top, bottom, left, right] count as elements when ``count_include_pad``; ``extra`` [bottom, right]
    (ceil-mode tails) never do. The counts are the same window sums over a padded tensor of ones."""
    return avgpool(ctx, ins, 2)


@lowering("AvgPool3D", attrs=_avg_attrs(3))
def avgpool3d(ctx: Ctx, ins: list) -> list:
    """AvgPool2D over (N, C, D, H, W): ``pad`` [front, back, top, bottom, left, right] counts when
    ``count_include_pad``, ``extra`` [back, bottom, right] never does."""
    return avgpool(ctx, ins, 3)


@lowering("CumSum", attrs={"axis": Attr("int", REQUIRED, "the axis summed along (negative counts from the end)"),
                           "exclusive": Attr("bool", False, "leave each element out of its own sum"),
                           "reverse": Attr("bool", False, "sum from the end of the axis")})
def cumsum(ctx: Ctx, ins: list) -> list:
    """Y[.., i, ..] = the sum of X[.., j, ..] over j <= i (j < i when exclusive; j >= i, j > i when reverse):
    a window as wide as the axis sliding over X zero-padded on one side (PAD + VIEW + REDUCE(SUM)), floats
    summed in fp32, integers in their own dtype. The axis must have a static size."""
    (x,) = ins
    ax = ctx.axis(ctx.int_attr("axis"), x.ndim)
    n = x.shape[ax]
    if not isinstance(n, int):
        fail("UnaddressableShape", ctx.at, f"CumSum along axis {ax} of symbolic size {n}: the window needs a static size")
    excl, rev = int(ctx.bool_attr("exclusive")), ctx.bool_attr("reverse")
    lo, hi, off = (0, n - 1 + excl, excl) if rev else (n - 1 + excl, 0, 0)
    b, at = ctx.b, ctx.at
    acc = DType.fp32 if x.dtype.is_float else x.dtype
    xp = b.pad(b.cast(x, acc, at=at) if acc != x.dtype else x,
               tuple((lo, hi) if d == ax else (0, 0) for d in range(x.ndim)), 0, at=at)
    imap = tuple(f"i{d} + i{x.ndim}" + (f" + {off}" if off else "") if d == ax else f"i{d}" for d in range(x.ndim))
    y = b.reduce(b.view(xp, x.shape + (n,), imap, at=at), "SUM", (x.ndim,), acc, at=at)
    return [b.cast(y, x.dtype, at=at) if acc != x.dtype else y]
