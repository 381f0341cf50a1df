"""Resize along one axis (ONNX Resize and torch's upsampling, nearest and linear): movement only, plus a
two-tap blend for linear. Result index o reads the input at the coordinate x(o) = (A·o + B) / C (the importer
writes the coordinate transformation and, for nearest, the rounding into A, B and C), the input edge-padded by one
element on each side so that a tap outside the axis reads the nearest edge, as the resize modes clamp."""
from __future__ import annotations

from ..ir.diagnostics import fail
from ..ir.dtypes import DType
from ..ir.tiny import Ops
from .lower import REQUIRED, Attr, Ctx, lowering
from .lower_gather import concat


@lowering("Resize", inputs=(1, 2), attrs={
    "axis": Attr("int", REQUIRED, "the axis resized (negative counts from the end)"),
    "size": Attr("int >= 1", REQUIRED, "its size in the result"),
    "coord": Attr("[int, int, int >= 1]", REQUIRED, "A, B, C: result index o reads the input at (A*o + B) / C"),
    "mode": Attr("nearest | linear", "nearest", "one tap, or two blended by the second input")})
def resize(ctx: Ctx, ins: list) -> list:
    """nearest: out[.., o, ..] = x[.., clamp(floor((A*o + B) / C), 0, n - 1), ..]; linear: with lo that index and
    hi = clamp(floor((A*o + B) / C) + 1, 0, n - 1), out = x[lo] + w[o] * (x[hi] - x[lo]) computed in fp32, w the
    second input (fp32, [size]: the importer's fractional parts of the coordinates). The floor must lie in
    [-1, n] for every o (a tap at most one element outside the axis, which reads its edge); the axis is static."""
    x = ins[0]
    b, at = ctx.b, ctx.at
    axis = ctx.axis(ctx.attr("axis"), x.ndim)
    size, coord, mode = ctx.attr("size"), ctx.attr("coord"), ctx.attr("mode", "nearest")
    n = x.shape[axis]
    if not isinstance(n, int):
        fail("InvalidAttribute", at, f"Resize needs a static axis {axis}, got size {n}")
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        fail("InvalidAttribute", at, f"size must be an integer >= 1, got {size!r}")
    if not (isinstance(coord, (list, tuple)) and len(coord) == 3 and all(isinstance(c, int) for c in coord)
            and coord[2] >= 1):
        fail("InvalidAttribute", at, f"coord must be three integers [A, B, C >= 1], got {coord!r}")
    if mode not in ("nearest", "linear"):
        fail("InvalidAttribute", at, f"mode must be nearest or linear, got {mode!r}")
    a, b0, c = coord
    taps = [(a * o + b0) // c for o in range(size)]
    if min(taps) < -1 or max(taps) > n or (mode == "linear" and max(taps) > n - 1):
        fail("InvalidAttribute", at, f"coord {list(coord)} reads taps {min(taps)}..{max(taps)} of an axis of {n}: "
             "more than one element outside it")
    if (mode == "linear") != (len(ins) == 2):
        fail("InvalidAttribute", at, "linear takes its weights as a second input; nearest takes none")
    lo, hi = [0] * x.ndim, list(x.shape)

    def edge(k: int):
        lo[axis], hi[axis] = k, k + 1
        return b.shrink(x, list(lo), list(hi), at=at)
    padded = concat(ctx, [edge(0), x, edge(n - 1)], axis)
    shape = tuple(size if k == axis else d for k, d in enumerate(x.shape))

    def tap(off: int):
        return b.view(padded, shape, tuple(f"({a}*i{k} + {b0})//{c} + {off}" if k == axis else f"i{k}"
                                           for k in range(x.ndim)), at=at)
    if mode == "nearest":
        return [tap(1)]
    w = ins[1]
    if w.shape != (size,) or w.dtype != DType.fp32:
        fail("InvalidAttribute", at, f"linear weights are fp32 [{size}], got {w.dtype.value} {list(w.shape)}")
    w = b.reshape(w, tuple(size if k == axis else 1 for k in range(x.ndim)), at=at)
    v0, v1 = (b.cast(tap(off), DType.fp32, at=at) for off in (1, 2))
    y = b.alu(Ops.ADD, v0, b.alu(Ops.MUL, w, b.alu(Ops.SUB, v1, v0, at=at), at=at), at=at)
    return [b.cast(y, x.dtype, at=at)]
