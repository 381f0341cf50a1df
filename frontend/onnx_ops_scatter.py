"""ONNX op handlers, part 8: scatters. ScatterND with constant indices (what torch.onnx writes for an in-place slice
assignment, ``y[:, 0] = x[:, 1]``: RWKV): the indices address rows of data (its first k axes, k the indices' last
extent); the result is, row by row, the update written there (the last one where indices repeat, as
``reduction='none'`` leaves it to the implementation) or data's own row: a Where of a constant mask between data and a
Gather of the updates at constant rows, every row a static choice. ScatterElements with indices of any origin,
GatherND (its rows at their flat indices) and GridSample (gathers at the grid's corners): below.
"""
from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING

import numpy as np
from onnx import TensorProto

from ..ir.diagnostics import fail
from ..ir.dtypes import DType
from .onnx_table import Emit, handler, i64 as _i64

if TYPE_CHECKING:  # annotations only (frontend/onnx.py loads the handlers)
    from .onnx import Importer, OnnxNode


@handler("ScatterND")
def scatter_nd(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    at = node.name
    if node.attr("reduction", "none") not in ("none", b"none"):
        node.unsupported(f"reduction {node.attr('reduction')!r} (polysat takes 'none')", "reduction")
    data, upd = e.input(0), e.input(2)
    idx = np.asarray(e.const(1, "indices")).astype(np.int64)
    shape = list(e.shape(data))
    if not all(isinstance(d, int) for d in shape) or idx.ndim < 1 or not 1 <= idx.shape[-1] <= len(shape):
        node.unsupported("ScatterND needs static shapes and indices of last extent 1 to data's rank")
    k = idx.shape[-1]
    lead, tail = shape[:k], shape[k:]
    rows = idx.reshape(-1, k)
    rows = np.where(rows < 0, rows + np.asarray(lead), rows)
    if rows.size and ((rows < 0).any() or (rows >= np.asarray(lead)).any()):
        fail("InvalidAttribute", at, f"ONNX ScatterND node {at!r}: an index lies outside data's axes {lead}")
    n, width = len(rows), prod(tail)
    if list(e.shape(upd)) != list(idx.shape[:-1]) + tail:
        fail("InvalidAttribute", at, f"ONNX ScatterND node {at!r}: updates of shape {list(e.shape(upd))}, the indices "
             f"and data ask {list(idx.shape[:-1]) + tail}")
    src = np.full(prod(lead), -1, dtype=np.int64)
    src[np.ravel_multi_index(rows.T, lead)] = np.arange(n)  # numpy keeps the last of repeats
    flat = imp.call("Reshape", f"{at}/data", [data, _i64([len(src), width])])[0]
    picked = imp.call("Gather", f"{at}/updates", [imp.call("Reshape", f"{at}/updates", [upd, _i64([n, width])])[0],
                                                  np.maximum(src, 0)], {"axis": 0})[0]
    y = imp.call("Where", at, [(src >= 0).reshape(-1, 1), picked, flat])[0]
    return imp.call("Reshape", f"{at}/out", [y, _i64(shape)])


@handler("ScatterElements", "Scatter")
def scatter_elements(imp: Importer, node: OnnxNode) -> list:
    """ScatterElements (and opset 9's Scatter; torch's ``scatter``, ``scatter_add``, ``scatter_reduce``: MoE routers'
    one-hot masks) with indices computed at run time, written without a run-time address: along the axis, output
    element j takes update k where index k is j (``eq``, of data's extent by the indices' along the axis), the last
    such k where indices repeat (``reduction='none'`` leaves it to the implementation; torch writes the last), or
    their sum, max or min; data where none is. Indices shorter than data along the other axes are padded with -1,
    which no position equals."""
    at = node.name
    red = node.attr("reduction", "none")
    red = red.decode() if isinstance(red, bytes) else red
    if red not in ("none", "add", "max", "min"):
        node.unsupported(f"reduction {red!r} (polysat takes none, add, max and min)", "reduction")
    data, upd = imp.value(node.inputs[0], at), imp.value(node.inputs[2], at)
    idx = imp.value(node.inputs[1], at)
    ds, ins = list(imp.shape(data)), list(imp.shape(idx))
    rank = len(ds)
    axis = int(node.attr("axis", 0))
    axis = axis + rank if axis < 0 else axis
    if not all(isinstance(d, int) for d in ds + ins) or len(ins) != rank or list(imp.shape(upd)) != ins or \
            not 0 <= axis < rank or any(i > d for k, (i, d) in enumerate(zip(ins, ds)) if k != axis):
        node.unsupported("ScatterElements needs static shapes, indices of data's rank no longer than data off the "
                         "axis, and updates of the indices' shape")
    dt = imp.dtype(data)
    if dt == DType.bool:  # as 0 and 1
        data, upd = (imp.call("Cast", f"{at}/int", [v], {"to": TensorProto.INT32})[0] for v in (data, upd))
    n, k = ds[axis], ins[axis]
    idx = imp.call("Cast", f"{at}/index", [idx], {"to": TensorProto.INT64})[0]
    idx = imp.call("Where", f"{at}/index", [imp.call("Less", f"{at}/index", [idx, np.asarray(0, np.int64)])[0],
                                            imp.call("Add", f"{at}/index", [idx, np.asarray(n, np.int64)])[0], idx])[0]
    short = [0 if a == axis else d - i for a, (i, d) in enumerate(zip(ins, ds))]
    if any(short):  # to data's extent off the axis: no position is -1
        pads = _i64([0] * rank + short)
        idx = imp.call("Pad", f"{at}/index", [idx, pads, np.asarray(-1, np.int64)])[0]
        upd = imp.call("Pad", f"{at}/updates", [upd, pads])[0]
    lane = _i64([axis])
    idx, upd = (imp.call("Unsqueeze", f"{at}/lane", [v, lane])[0] for v in (idx, upd))  # [.., 1, k, ..]
    pos = np.arange(n, dtype=np.int64).reshape([1] * axis + [n, 1] + [1] * (rank - axis - 1))
    eq = imp.call("Equal", f"{at}/eq", [idx, pos])[0]  # [.., n, k, ..]: index k is position j
    over = _i64([axis + 1])
    if red == "none":
        ks = np.arange(k, dtype=np.int64).reshape([1] * (axis + 1) + [k] + [1] * (rank - axis - 1))
        ranked = imp.call("Where", f"{at}/last", [eq, ks, np.asarray(-1, np.int64)])[0]
        last = imp.call("ReduceMax", f"{at}/last", [ranked, over], {"keepdims": 1})[0]
        eq = imp.call("Equal", f"{at}/last", [last, ks])[0]
        hit = imp.call("Squeeze", f"{at}/hit", [imp.call("Less", f"{at}/hit", [np.asarray(-1, np.int64), last])[0],
                                               over])[0]
        zero = imp.call("Sub", f"{at}/zero", [upd, upd])[0]
        got = imp.call("ReduceSum", f"{at}/pick", [imp.call("Where", f"{at}/pick", [eq, upd, zero])[0], over],
                       {"keepdims": 0})[0]
        y = imp.call("Where", at, [hit, got, data])[0]
    elif red == "add":
        zero = imp.call("Sub", f"{at}/zero", [upd, upd])[0]
        got = imp.call("ReduceSum", f"{at}/sum", [imp.call("Where", f"{at}/sum", [eq, upd, zero])[0], over],
                       {"keepdims": 0})[0]
        y = imp.call("Add", at, [data, got])[0]
    else:
        far = np.asarray(-np.inf if red == "max" else np.inf, dt.np) if dt.is_float else \
            np.asarray(np.iinfo(np.int32).min if red == "max" else np.iinfo(np.int32).max, np.int32)
        op = "ReduceMax" if red == "max" else "ReduceMin"
        got = imp.call(op, f"{at}/{red}", [imp.call("Where", f"{at}/{red}", [eq, upd, far])[0], over],
                       {"keepdims": 0})[0]
        y = imp.call("Max" if red == "max" else "Min", at, [data, got])[0]
    return [imp.call("Cast", f"{at}/bool", [y], {"to": TensorProto.BOOL})[0] if dt == DType.bool else y]


@handler("GatherND")
def gather_nd(imp: Importer, node: OnnxNode) -> list:
    """GatherND (torch.onnx's ``x[mask]``: XMOD's adapters): each index tuple (the indices' last axis, k long) picks a
    row of data's axes b .. b + k - 1 (b = batch_dims) within its batch position (the first b axes, shared by data
    and indices), read as one Gather of data with its first b + k axes merged, at the tuple's row-major flat index
    plus its batch position's (negative indices count from the end)."""
    at = node.name
    b = int(node.attr("batch_dims", 0))
    data, idx = imp.value(node.inputs[0], at), node.inputs[1]
    ds = list(imp.shape(data))
    ins = list(np.shape(imp.const(idx))) if imp.is_const(idx) else list(imp.shape(imp.value(idx, at)))
    if not all(isinstance(d, int) for d in ds + ins) or not ins or not 1 <= ins[-1] <= len(ds) - b:
        node.unsupported("GatherND needs static shapes and indices of last extent 1 to data's rank less batch_dims")
    if b < 0 or b >= len(ins) or ins[:b] != ds[:b]:
        fail("InvalidAttribute", at, f"ONNX GatherND node {at!r}: batch_dims {b} must name leading axes that data "
             f"{ds} and indices {ins} share (and leave the indices' last axis)")
    k = ins[-1]
    lead = np.asarray(ds[b:b + k], np.int64)
    strides = np.asarray([prod(ds[j + 1:b + k]) for j in range(b, b + k)], np.int64)
    # each index tuple's batch position, as a flat row offset: [*batch, 1, ..] over the indices' other axes
    base = (np.arange(prod(ins[:b]), dtype=np.int64) * prod(ds[b:b + k])).reshape(ins[:b] + [1] * (len(ins) - 1 - b))
    if imp.is_const(idx):
        tuples = np.asarray(imp.const(idx)).astype(np.int64)
        flat = (np.where(tuples < 0, tuples + lead, tuples) * strides).sum(-1) + base
    else:
        t = imp.call("Cast", f"{at}/index", [idx], {"to": TensorProto.INT64})[0]
        t = imp.call("Where", f"{at}/index", [imp.call("Less", f"{at}/index", [t, np.asarray(0, np.int64)])[0],
                                              imp.call("Add", f"{at}/index", [t, lead])[0], t])[0]
        flat = imp.call("ReduceSum", f"{at}/index", [imp.call("Mul", f"{at}/index", [t, strides])[0], _i64([-1])],
                        {"keepdims": 0})[0]
        if b:
            flat = imp.call("Add", f"{at}/index", [flat, base])[0]
    rows = imp.call("Reshape", f"{at}/rows", [data, _i64([prod(ds[:b + k])] + ds[b + k:])])[0]
    return imp.call("Gather", at, [rows, flat], {"axis": 0})


@handler("GridSample")
def grid_sample(imp: Importer, node: OnnxNode) -> list:
    """GridSample of a 4-D or 5-D input (RT-DETR's deformable attention, RAFT's correlation lookup): each output point
    reads the input at the grid's point (x along the last axis, then y, then z, in [-1, 1], unnormalized as
    align_corners says) through the taps around it (1 nearest, 2 per axis linear, 4 x 4 bicubic: the cubic
    convolution of A = -0.75, 4-D only as ONNX defines it), each a run-time gather of the input's flattened volume
    (GatherElements at its row-major offset), weighted. Off the input, a tap weighs 0 (zeros), or reads the input
    clamped (border) or reflected (reflection: about the outer pixels' centres with align_corners, about their edges
    without), as onnxruntime does: nearest and linear move the point so first, bicubic only its taps."""
    at = node.name
    mode = node.attr("mode", "bilinear")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    mode = {"linear": "bilinear", "cubic": "bicubic"}.get(mode, mode)  # opset 20's names
    pad = node.attr("padding_mode", "zeros")
    pad = pad.decode() if isinstance(pad, bytes) else pad
    align = int(node.attr("align_corners", 0))
    x, grid = imp.value(node.inputs[0], at), imp.value(node.inputs[1], at)
    xs, gs = list(imp.shape(x)), list(imp.shape(grid))
    if mode not in ("bilinear", "nearest", "bicubic") or pad not in ("zeros", "border", "reflection"):
        node.unsupported(f"mode {mode!r} with padding_mode {pad!r} (polysat takes linear, nearest or cubic, "
                         "zeros, border or reflection)", "mode" if mode not in ("bilinear", "nearest", "bicubic")
                         else "padding_mode")
    if len(xs) not in (4, 5) or len(gs) != len(xs) or gs[-1] != len(xs) - 2 or gs[0] != xs[0] or \
            not all(isinstance(d, int) for d in xs + gs) or (mode == "bicubic" and len(xs) != 4):
        node.unsupported("GridSample needs a static 4-D or 5-D input and a grid [N, *out, 2 or 3] (cubic: 4-D)")
    n, c, space, out = xs[0], xs[1], xs[2:], gs[1:-1]
    nd, pts = len(space), prod(out)
    sizes = space[::-1]  # along the grid's coordinates: x the last axis
    strides = [prod(sizes[:k]) for k in range(nd)]
    dt = imp.dtype(x)
    call = lambda op, ins, **a: imp.call(op, f"{at}/{op.lower()}", ins, a)[0]  # noqa: E731
    f32 = lambda v: np.asarray(v, np.float32)  # noqa: E731
    g = call("Reshape", [call("Cast", [grid], to=TensorProto.FLOAT), _i64([n, 1, pts, nd])])

    def clamp(v: str, size: int) -> str:
        return call("Max", [call("Min", [v, f32(size - 1)]), f32(0.0)])

    def reflect(v: str, size: int) -> str:  # v folded into [lo, hi] as a triangle wave of period 2 (hi - lo)
        lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        if hi == lo:
            return call("Mul", [v, f32(0.0)])
        t = call("Mod", [call("Abs", [call("Sub", [v, f32(lo)])]), f32(2 * (hi - lo))], fmod=1)
        return call("Sub", [f32(hi), call("Abs", [call("Sub", [t, f32(hi - lo)])])])

    def coord(k: int, size: int) -> str:  # the grid's k-th coordinate in input pixels, [N, 1, points]
        v = call("Gather", [g, np.asarray(k, np.int64)], axis=3)
        v = call("Mul", [call("Add", [v, f32(1.0)]), f32((size - 1) / 2 if align else size / 2)])
        v = v if align else call("Sub", [v, f32(0.5)])
        if mode == "bicubic" or pad == "zeros":
            return v
        return clamp(v, size) if pad == "border" else clamp(reflect(v, size), size)
    p = [coord(k, size) for k, size in enumerate(sizes)]
    volume = call("Reshape", [call("Cast", [x], to=TensorProto.FLOAT), _i64([n, c, prod(space)])])

    def corner(cs: list) -> tuple:  # (the input at integer point cs, whether it counts: None, always)
        inside = None
        if pad == "zeros":
            for v, size in zip(cs, sizes):
                ok = call("And", [call("GreaterOrEqual", [v, f32(0.0)]), call("LessOrEqual", [v, f32(size - 1)])])
                inside = ok if inside is None else call("And", [inside, ok])
        elif pad == "reflection":
            cs = [reflect(v, size) for v, size in zip(cs, sizes)]
        flat = None
        for v, size, stride in zip(cs, sizes, strides):
            v = clamp(v, size) if stride == 1 else call("Mul", [clamp(v, size), f32(stride)])
            flat = v if flat is None else call("Add", [flat, v])
        idx = call("Expand", [call("Cast", [flat], to=TensorProto.INT32), _i64([n, c, pts])])
        return call("GatherElements", [volume, idx], axis=2), inside

    def tap(v: str, inside, weight: "str | None") -> str:
        if weight is None:
            return v if inside is None else call("Where", [inside, v, f32(0.0)])
        return call("Mul", [v, weight if inside is None else call("Where", [inside, weight, f32(0.0)])])

    def sum_of(terms: list) -> str:
        y = terms[0]
        for t in terms[1:]:
            y = call("Add", [y, t])
        return y
    if mode == "nearest":  # ties to even, as ONNX's reference rounds
        y = tap(*corner([call("Round", [v]) for v in p]), None)
    else:
        lo = [call("Floor", [v]) for v in p]
        frac = [call("Sub", [v, f]) for v, f in zip(p, lo)]
        if mode == "bilinear":  # taps at offsets 0, 1 on each axis, weighted 1 - t and t
            offsets = (0, 1)
            weights = [[call("Sub", [f32(1.0), t]), t] for t in frac]
        else:
            offsets = (-1, 0, 1, 2)
            weights = [_cubic_weights(call, f32, t) for t in frac]
        terms = []
        for at_k in np.ndindex(*[len(offsets)] * nd):
            cs = [f if offsets[j] == 0 else call("Add", [f, f32(float(offsets[j]))]) for f, j in zip(lo, at_k)]
            w = None
            for k, j in enumerate(at_k):
                w = weights[k][j] if w is None else call("Mul", [w, weights[k][j]])
            terms.append(tap(*corner(cs), w))
        y = sum_of(terms)
    y = call("Reshape", [y, _i64([n, c, *out])])
    return [Emit(imp, node).cast(y, dt)]


def _cubic_weights(call, f32, t: str) -> list:
    """The 4 weights of the taps at -1, 0, 1, 2 around a point t past the floor (0 <= t < 1): cubic convolution,
    A = -0.75, as onnxruntime (and torch) sample bicubically."""
    a = -0.75

    def near(d: str) -> str:  # |d| <= 1: ((A + 2) d - (A + 3)) d^2 + 1
        return call("Add", [call("Mul", [call("Sub", [call("Mul", [d, f32(a + 2)]), f32(a + 3)]), call("Mul", [d, d])]),
                            f32(1.0)])

    def far(d: str) -> str:  # 1 < |d| < 2: ((A d - 5A) d + 8A) d - 4A
        return call("Sub", [call("Mul", [call("Add", [call("Mul", [call("Sub", [call("Mul", [d, f32(a)]), f32(5 * a)]), d]),
                                                       f32(8 * a)]), d]), f32(4 * a)])
    one_minus = call("Sub", [f32(1.0), t])
    return [far(call("Add", [t, f32(1.0)])), near(t), near(one_minus), far(call("Add", [one_minus, f32(1.0)]))]
