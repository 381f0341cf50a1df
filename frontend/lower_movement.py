"""Lowerings of the movement ops: logical views, no copy (docs/DESIGN.md §Tiny IR)."""
from __future__ import annotations

from ..ir.diagnostics import fail
from ..ir.shapes import fmt_shape, numel
from ..ir.infer import as_shape
from .lower import Ctx, lowering


@lowering("Reshape")
def reshape(ctx: Ctx, ins: list) -> list:
    (x,) = ins
    raw = list(ctx.attr("shape")) if isinstance(ctx.attr("shape"), (list, tuple)) else ctx.attr("shape")
    if isinstance(raw, list) and raw.count(-1) == 1:  # one inferred axis, for static sizes
        known = numel(as_shape(ctx.at, [d for d in raw if d != -1], "shape"))
        total = numel(x.shape)
        if not isinstance(known, int) or not isinstance(total, int) or known == 0 or total % known:
            fail("AxisSizeMismatch", ctx.at, f"cannot infer -1 in {raw} from {fmt_shape(x.shape)}")
        raw[raw.index(-1)] = total // known
    return [ctx.b.reshape(x, as_shape(ctx.at, raw, "shape"), at=ctx.at)]


@lowering("Transpose")
def transpose(ctx: Ctx, ins: list) -> list:
    (x,) = ins
    perm = ctx.attr("perm", tuple(reversed(range(x.ndim))))
    if not isinstance(perm, (list, tuple)) or sorted(p % x.ndim if isinstance(p, int) and -x.ndim <= p < x.ndim
                                                        else -1 for p in perm) != list(range(x.ndim)):
        fail("InvalidPermutation", ctx.at, f"perm {perm!r} is not a permutation of 0..{x.ndim - 1}")
    return [ctx.b.permute(x, tuple(p % x.ndim for p in perm), at=ctx.at)]


@lowering("Expand")
def expand(ctx: Ctx, ins: list) -> list:
    """numpy broadcast_to: right-aligned, may add leading axes."""
    (x,) = ins
    shape = as_shape(ctx.at, ctx.attr("shape"), "shape")
    if len(shape) < x.ndim:
        fail("AxisSizeMismatch", ctx.at, f"Expand to {fmt_shape(shape)} has fewer axes than {fmt_shape(x.shape)}")
    xr = ctx.b.reshape(x, (1,) * (len(shape) - x.ndim) + x.shape, at=ctx.at)
    return [ctx.b.expand(xr, shape, at=ctx.at)]


@lowering("Pad")
def pad(ctx: Ctx, ins: list) -> list:
    (x,) = ins
    pads = ctx.attr("pads")
    if not isinstance(pads, (list, tuple)) or len(pads) != x.ndim or not all(
            isinstance(p, (list, tuple)) and len(p) == 2 for p in pads):
        fail("InvalidAttribute", ctx.at, f"pads is [[lo, hi]] for each of the {x.ndim} axes, got {pads!r}")
    value = ctx.attr("value", 0.0)
    return [ctx.b.pad(x, tuple(tuple(p) for p in pads), value, at=ctx.at)]


def _clamp(v: int, size: int) -> int:
    v = v + size if v < 0 else v
    return max(0, min(v, size))


@lowering("Slice")
def slice_(ctx: Ctx, ins: list) -> list:
    """x[starts:ends:steps] on the given axes (default: the leading ones); negative indices count
    from the end on static axes; steps >= 1 (FLIP reverses)."""
    (x,) = ins
    starts, ends = ctx.attr("starts"), ctx.attr("ends")
    if not isinstance(starts, (list, tuple)) or not isinstance(ends, (list, tuple)) or len(starts) != len(ends):
        fail("InvalidAttribute", ctx.at, "starts and ends are lists of equal length")
    axes = ctx.attr("axes", tuple(range(len(starts))))
    steps = ctx.attr("steps", (1,) * len(starts))
    if not isinstance(axes, (list, tuple)) or not isinstance(steps, (list, tuple)) or not len(axes) == len(steps) == len(starts):
        fail("InvalidAttribute", ctx.at, "axes and steps, when given, match starts in length")
    lo, hi, st = [0] * x.ndim, list(x.shape), [1] * x.ndim
    for a, s0, e0, sp in zip(axes, starts, ends, steps, strict=True):
        a = ctx.axis(a, x.ndim, "axis")
        if not isinstance(sp, int) or isinstance(sp, bool) or sp < 1:
            fail("InvalidAttribute", ctx.at, f"steps are integers >= 1 (use Flip to reverse), got {sp!r}")
        size = x.shape[a]
        if isinstance(size, int) and isinstance(s0, int) and isinstance(e0, int):
            s1, e1 = _clamp(s0, size), _clamp(e0, size)
            if s1 >= e1:
                fail("UnaddressableShape", ctx.at, f"slice [{s0}:{e0}] of axis {a} (size {size}) is empty")
            lo[a], hi[a] = s1, e1
        else:
            lo[a], hi[a] = as_shape(ctx.at, [s0, e0], "starts/ends")
        st[a] = sp
    return [ctx.b.shrink(x, lo, hi, st, at=ctx.at)]


@lowering("Flip")
def flip(ctx: Ctx, ins: list) -> list:
    (x,) = ins
    raw = ctx.attr("axes")
    if not isinstance(raw, (list, tuple)):
        fail("InvalidAttribute", ctx.at, f"axes is a list, got {raw!r}")
    axes = sorted({ctx.axis(a, x.ndim) for a in raw})
    return [ctx.b.flip(x, axes, at=ctx.at)]


