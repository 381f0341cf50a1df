"""Lowerings of Constant, Concat, Gather and GatherElements.

A concatenation is tinygrad's: each piece is PADded with zeros to the full extent of the axis and the
pieces are added (MAX for bool, where adding is not defined), so it stays a sum of affine views; the sum is
a balanced tree (depth log2 of the pieces, not a chain as long as their number: a walk from the
concatenation to a piece, as the fusion legality facts take, crosses that many adds). A
gather by constant indices is a concatenation of strided slices, one per arithmetic run of the
indices, reshaped to the indices' shape. A gather by indices given as a tensor (known only at run time:
an embedding lookup by token ids) is the Tiny IR GATHER, a non-affine read that is its own kernel.
"""
from __future__ import annotations

from ..ir.diagnostics import fail
from ..ir.dtypes import DType
from ..ir.expr import Expr
from ..ir.infer import as_dtype, as_shape
from ..ir.shapes import dim, fmt_shape
from ..ir.tiny import Ops, UOp
from .lower import REQUIRED, Attr, Ctx, lowering


@lowering("Constant", inputs=(0, 0), attrs={
    "value": Attr("number | bool", REQUIRED, "the value every element holds"),
    "dtype": Attr("dtype", "fp32", "the element type"),
    "shape": Attr("[dim]", [], "the tensor's shape (ints or symbols; [] is a scalar)")})
def constant(ctx: Ctx, ins: list) -> list:
    """A tensor of one repeated value: {"value": v, "dtype": "fp32", "shape": [...]}."""
    dt = as_dtype(ctx.at, ctx.attr("dtype", "fp32"))
    return [ctx.b.const(ctx.attr("value"), dt, as_shape(ctx.at, ctx.attr("shape", []), "shape"), at=ctx.at)]


def concat(ctx: Ctx, xs: list, axis: int) -> UOp:
    b, at = ctx.b, ctx.at
    x0 = xs[0]
    for x in xs[1:]:
        if x.ndim != x0.ndim or any(i != axis and d != e for i, (d, e) in enumerate(zip(x.shape, x0.shape))):
            fail("AxisSizeMismatch", at, f"Concat on axis {axis}: {fmt_shape(x.shape)} and {fmt_shape(x0.shape)} differ "
                 "off that axis")
    xs = b.promote(list(xs), at=at)
    if len(xs) == 1:
        return xs[0]
    total = Expr.const(0)
    for x in xs:
        total = total + Expr.of(x.shape[axis])
    pieces, before = [], Expr.const(0)
    for x in xs:
        after = total - before - Expr.of(x.shape[axis])
        pads = tuple((dim(before), dim(after)) if i == axis else (0, 0) for i in range(x.ndim))
        pieces.append(b.pad(x, pads, False if x.dtype == DType.bool else 0, at=at))
        before = before + Expr.of(x.shape[axis])
    op = Ops.MAX if xs[0].dtype == DType.bool else Ops.ADD
    while len(pieces) > 1:  # a balanced sum: each element is one piece's value plus zeros, in any order
        pairs = [b.alu(op, pieces[k], pieces[k + 1], at=at) for k in range(0, len(pieces) - 1, 2)]
        pieces = pairs + pieces[len(pieces) - len(pieces) % 2:]
    return pieces[0]


@lowering("Concat", inputs=(1, 1 << 16), attrs={
    "axis": Attr("int", REQUIRED, "the axis the inputs are joined along (negative counts from the end)")})
def concat_op(ctx: Ctx, ins: list) -> list:
    return [concat(ctx, ins, ctx.axis(ctx.attr("axis"), ins[0].ndim))]


def _runs(idx: list) -> list:
    """Split indices into maximal arithmetic runs with a positive step: [(start, step, count)]."""
    runs, k = [], 0
    while k < len(idx):
        if k + 1 < len(idx) and idx[k + 1] > idx[k]:
            step, n = idx[k + 1] - idx[k], 2
            while k + n < len(idx) and idx[k + n] - idx[k + n - 1] == step:
                n += 1
            runs.append((idx[k], step, n))
            k += n
        else:
            runs.append((idx[k], 1, 1))
            k += 1
    return runs


def _flat(v) -> tuple:
    """A nested list of ints -> (flat list, shape)."""
    if isinstance(v, (list, tuple)):
        parts = [_flat(x) for x in v]
        if not parts:
            return [], (0,)
        if any(p[1] != parts[0][1] for p in parts):
            fail("InvalidAttribute", "Gather", "indices are a rectangular nested list of ints")
        return [i for p in parts for i in p[0]], (len(parts),) + parts[0][1]
    if not isinstance(v, int) or isinstance(v, bool):
        fail("InvalidAttribute", "Gather", f"an index must be an integer, got {v!r}")
    return [v], ()


def _index(ctx: Ctx, idx: UOp) -> UOp:
    if idx.dtype != DType.i32:
        fail("DtypeMismatch", ctx.at, f"{ctx.node.op} indices have dtype {idx.dtype.value}, need i32",
             "Give the indices as an i32 tensor (an importer narrows int64 indices to i32).")
    return idx


@lowering("Gather", inputs=(1, 2), attrs={
    "indices": Attr("int | nested [int]", None, "constant indices (negative count from the end of a static "
                    "axis); their shape replaces the axis", default_text="the second input"),
    "axis": Attr("int", 0, "the axis indexed")})
def gather(ctx: Ctx, ins: list) -> list:
    """x.take(indices, axis) (ONNX Gather, numpy take). Constant indices (the attribute) are affine
    pieces; indices given as a second, i32 input are read at run time (negative count from the end of
    the axis, out of range gives 0): a non-affine read, its own kernel."""
    x = ins[0]
    axis = ctx.axis(ctx.attr("axis", 0), x.ndim)
    if len(ins) == 2:
        if ctx.attr("indices") is not None:
            fail("InvalidAttribute", ctx.at, "Gather takes its indices as an attribute or as a second input, not both")
        return [ctx.b.gather(x, _index(ctx, ins[1]), axis, at=ctx.at)]
    if ctx.attr("indices") is None:
        fail("InvalidAttribute", ctx.at, "Gather needs its indices: the attribute or a second input")
    flat, ishape = _flat(ctx.attr("indices"))
    size = x.shape[axis]
    if not flat:
        fail("UnaddressableShape", ctx.at, "Gather with no indices has an empty result")
    if not isinstance(size, int) and any(i < 0 for i in flat):
        fail("UnaddressableShape", ctx.at, f"negative indices need a static axis {axis}, got size {size}")
    norm = []
    for i in flat:
        j = i + size if i < 0 else i
        if j < 0 or (isinstance(size, int) and j >= size):
            fail("OutOfBoundsView", ctx.at, f"index {i} is outside axis {axis} of size {size}")
        norm.append(j)
    b, at = ctx.b, ctx.at
    pieces = []
    for start, step, n in _runs(norm):
        lo = [0] * x.ndim
        hi = list(x.shape)
        st = [1] * x.ndim
        lo[axis], hi[axis], st[axis] = start, start + step * (n - 1) + 1, step
        pieces.append(b.shrink(x, lo, hi, st, at=at))
    y = concat(ctx, pieces, axis)
    return [b.reshape(y, x.shape[:axis] + tuple(ishape) + x.shape[axis + 1:], at=at)]


@lowering("GatherElements", inputs=(2, 2), attrs={"axis": Attr("int", 0, "the axis indexed")})
def gather_elements(ctx: Ctx, ins: list) -> list:
    """take_along_axis(x, indices, axis) (ONNX GatherElements): indices (i32, x's rank, no larger than x
    off the axis) give the result's shape; out[i] = x[i with indices[i] on the axis], negative counting
    from the end, out of range giving 0. A non-affine read, its own kernel."""
    x, idx = ins
    return [ctx.b.gather(x, _index(ctx, idx), ctx.axis(ctx.attr("axis", 0), x.ndim), True, at=ctx.at)]
