"""ONNX op handlers, part 3: movement (Transpose, Reshape, Flatten, Squeeze, Unsqueeze, Expand,
Concat, Split, Slice, Pad (constant, reflect, edge, wrap), Tile, Gather with constant indices, DepthToSpace, SpaceToDepth).

Shape operands (Reshape's shape, Slice's starts, Pad's pads, ...) must fold to constants at import;
the resulting sizes are resolved here, so the Frontend IR nodes carry explicit shapes.
"""
from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

from ..ir.diagnostics import fail
from ..ir.dtypes import DType
from ..ir.expr import Expr
from ..ir.shapes import dim, is_static, numel
from .onnx_table import Emit, axis_in as _axis, handler

if TYPE_CHECKING:  # annotations only (frontend/onnx.py loads the handlers)
    from .onnx import Importer, OnnxNode


def _s(shape) -> list:
    """A shape as JSON-able Frontend IR sizes (symbolic sizes as their text)."""
    return [d if isinstance(d, int) else str(d) for d in shape]


def _ints(e: Emit, k: int, what: str) -> list:
    return [int(v) for v in np.asarray(e.const(k, what)).reshape(-1)]


def _reshape(e: Emit, x: str, shape) -> str:
    return e.op("Reshape", [x], {"shape": _s(shape)})


@handler("Transpose")
def transpose(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = e.input(0)
    perm = node.attr("perm")
    attrs = {"perm": list(perm)} if perm is not None else {}
    return [e.op("Transpose", [x], attrs)]


@handler("Reshape")
def reshape(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = e.input(0)
    want = _ints(e, 1, "shape")
    allowzero = node.attr("allowzero", 0)
    xs = e.shape(x)
    out: list = []
    for k, v in enumerate(want):
        if v == 0 and not allowzero:
            if k >= len(xs):
                node.unsupported(f"shape entry {k} copies a dimension the input does not have")
            out.append(xs[k])
        elif v == 0:
            node.unsupported("allowzero with a 0 in the shape makes an empty tensor", "allowzero")
        else:
            out.append(v)
    if out.count(-1) > 1:
        node.unsupported(f"shape {want} has more than one -1")
    if -1 in out:
        known = Expr.const(1)
        for v in out:
            if v != -1:
                known = known * Expr.of(v)
        total = Expr.of(numel(xs))
        if known.is_const and total.is_const:
            if known.constant == 0 or total.constant % known.constant:
                node.unsupported(f"cannot infer -1 in {want} from {[str(d) for d in xs]}")
            out[out.index(-1)] = total.constant // known.constant
        elif known.is_const:
            out[out.index(-1)] = dim(total.floordiv(known.constant))
        else:
            node.unsupported(f"cannot infer -1 in {want} from the symbolic shape {[str(d) for d in xs]}")
    return [_reshape(e, x, out)]


@handler("Flatten")
def flatten(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = e.input(0)
    xs = e.shape(x)
    a = node.attr("axis", 1)
    a = a + len(xs) if a < 0 else a
    if not 0 <= a <= len(xs):
        node.unsupported(f"axis {node.attr('axis')} is out of range for rank {len(xs)}", "axis")
    return [_reshape(e, x, [numel(xs[:a]), numel(xs[a:])])]


def _axes_input_or_attr(e: Emit) -> list | None:
    if e.node.has(1):
        return _ints(e, 1, "axes")
    a = e.node.attr("axes")
    return None if a is None else list(a)


@handler("Squeeze")
def squeeze(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = e.input(0)
    xs = e.shape(x)
    axes = _axes_input_or_attr(e)
    drop = {k for k, d in enumerate(xs) if d == 1} if axes is None else {_axis(node, a, len(xs)) for a in axes}
    if any(xs[k] != 1 for k in drop):
        node.unsupported(f"squeezing axes {sorted(drop)} of shape {[str(d) for d in xs]}: not all have size 1")
    return [_reshape(e, x, [d for k, d in enumerate(xs) if k not in drop])]


@handler("Unsqueeze")
def unsqueeze(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = e.input(0)
    xs = list(e.shape(x))
    axes = _axes_input_or_attr(e) or []
    rank = len(xs) + len(axes)
    norm = sorted(_axis(node, a, rank) for a in axes)
    for a in norm:
        xs.insert(a, 1)
    return [_reshape(e, x, xs)]


@handler("Expand")
def expand(imp: Importer, node: OnnxNode) -> list:
    """Bidirectional broadcast: the result is broadcast(x.shape, shape)."""
    e = Emit(imp, node)
    x = e.input(0)
    want = _ints(e, 1, "shape")
    xs = list(e.shape(x))
    rank = max(len(xs), len(want))
    xs = [1] * (rank - len(xs)) + xs
    want = [1] * (rank - len(want)) + want
    out = []
    for a, b in zip(xs, want):
        if a != 1 and b != 1 and a != b:
            node.unsupported(f"shape {want} does not broadcast with the input's {[str(d) for d in xs]}")
        out.append(a if b == 1 else b)
    return [e.op("Expand", [x], {"shape": _s(out)})]


@handler("Concat")
def concat(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    given = [k for k in range(len(node.inputs)) if node.has(k)]
    empty = [k for k in given if imp.is_const(node.inputs[k]) and np.asarray(imp.const(node.inputs[k])).size == 0]
    keep = [k for k in given if k not in empty] or given[:1]  # an empty piece (an empty KV cache) adds nothing
    xs = [e.input(k) for k in keep]
    rank = len(e.shape(xs[0]))
    axis = _axis(node, node.attr("axis"), rank)
    return [e.op("Concat", xs, {"axis": axis}) if len(xs) > 1 else e.op("Reshape", [xs[0]], {"shape": [str(d) for d in e.shape(xs[0])]})]


def _slice_axis(e: Emit, x: str, axis: int, start: int, end: int, step: int) -> str:
    """x[start:end:step] on one axis (Python slice semantics, which ONNX Slice shares)."""
    size = e.shape(x)[axis]
    if not isinstance(size, int):
        if step != 1 or start < 0 or end < 0:
            e.node.unsupported(f"a negative or stepped slice of the symbolic axis {axis}")
        return e.op("Slice", [x], {"starts": [start], "ends": [end if end < 2**62 else str(size)], "axes": [axis]})
    idx = range(*slice(start, end, step).indices(size))
    if len(idx) == 0:
        e.node.unsupported(f"the slice [{start}:{end}:{step}] of axis {axis} (size {size}) is empty")
    if step < 0:
        x = e.op("Flip", [x], {"axes": [axis]})
        lo, hi = size - 1 - idx[0], size - 1 - idx[-1] + 1
    else:
        lo, hi = idx[0], idx[-1] + 1
    if lo == 0 and hi == size and abs(step) == 1:
        return x
    return e.op("Slice", [x], {"starts": [lo], "ends": [hi], "axes": [axis], "steps": [abs(step)]})


@handler("Slice")
def slice_(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = e.input(0)
    rank = len(e.shape(x))
    starts, ends = _ints(e, 1, "starts"), _ints(e, 2, "ends")
    axes = _ints(e, 3, "axes") if node.has(3) else list(range(len(starts)))
    steps = _ints(e, 4, "steps") if node.has(4) else [1] * len(starts)
    if any(s == 0 for s in steps):
        node.unsupported("a step of 0")
    shape = list(e.shape(x))
    for a, s0, e0, st in zip(axes, starts, ends, steps):
        k = _axis(node, a, rank)
        shape[k] = len(range(*slice(s0, e0, st).indices(shape[k]))) if isinstance(shape[k], int) else shape[k]
    if 0 in shape and all(isinstance(d, int) for d in shape):  # Phi-3's q[..., rotary_dim:] with the whole head
        name = imp.fresh(node.name)  # rotated: an empty constant, which Concat drops
        imp.consts[name] = np.zeros(shape, dtype=e.dtype(x).np)
        return [name]
    y = x
    for a, s0, e0, st in zip(axes, starts, ends, steps):
        y = _slice_axis(e, y, _axis(node, a, rank), s0, e0, st)
    if y == x:
        y = _reshape(e, x, e.shape(x))
    return [y]


@handler("Split")
def split(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = e.input(0)
    xs = e.shape(x)
    axis = _axis(node, node.attr("axis", 0), len(xs))
    size = xs[axis]
    n = len(node.outputs)
    if node.has(1):
        parts = _ints(e, 1, "split")
    elif node.attr("split") is not None:
        parts = list(node.attr("split"))
    else:
        if not isinstance(size, int):
            node.unsupported(f"an even split of the symbolic axis {axis}")
        node.attr("num_outputs")
        chunk = -(-size // n)
        parts = [min(chunk, size - k * chunk) for k in range(n)]
    if len(parts) != n or (isinstance(size, int) and sum(parts) != size):
        node.unsupported(f"split sizes {parts} do not cover axis {axis} (size {size}) in {n} outputs")
    outs, at = [], 0
    for p in parts:
        outs.append(_slice_axis(e, x, axis, at, at + p, 1) if p != size else _reshape(e, x, xs))
        at += p
    return outs


def _edge_pieces(e: Emit, y: str, a: int, lo: int, hi: int, mode: str) -> str:
    """y padded on axis a by lo/hi elements in mode reflect, edge or wrap (a concatenation of slices)."""
    n = e.shape(y)[a]
    if not isinstance(n, int) or (mode == "reflect" and max(lo, hi) >= n) or (mode == "wrap" and max(lo, hi) > n):
        e.node.unsupported(f"{mode} padding of {lo}/{hi} on axis {a} of size {n}")
    pieces = []
    if lo:
        if mode == "reflect":
            pieces.append(e.op("Flip", [_slice_axis(e, y, a, 1, lo + 1, 1)], {"axes": [a]}))
        elif mode == "edge":
            one = _slice_axis(e, y, a, 0, 1, 1)
            pieces.append(e.op("Expand", [one], {"shape": _s([lo if k == a else d for k, d in enumerate(e.shape(one))])}))
        else:
            pieces.append(_slice_axis(e, y, a, n - lo, n, 1))
    pieces.append(y)
    if hi:
        if mode == "reflect":
            pieces.append(e.op("Flip", [_slice_axis(e, y, a, n - 1 - hi, n - 1, 1)], {"axes": [a]}))
        elif mode == "edge":
            one = _slice_axis(e, y, a, n - 1, n, 1)
            pieces.append(e.op("Expand", [one], {"shape": _s([hi if k == a else d for k, d in enumerate(e.shape(one))])}))
        else:
            pieces.append(_slice_axis(e, y, a, 0, hi, 1))
    return e.op("Concat", pieces, {"axis": a})


@handler("Pad")
def pad(imp: Importer, node: OnnxNode) -> list:
    """Constant (a constant value, or one given at run time: pad with 0 and select by a padded mask),
    reflect, edge and wrap modes; negative pads crop."""
    e = Emit(imp, node)
    x = e.input(0)
    rank = len(e.shape(x))
    mode = node.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        node.unsupported(f"mode {mode!r}", "mode")
    pads = _ints(e, 1, "pads")
    axes = [_axis(node, a, rank) for a in _ints(e, 3, "axes")] if node.has(3) else list(range(rank))
    if len(pads) != 2 * len(axes):
        node.unsupported(f"pads {pads} needs {2 * len(axes)} entries")
    value, runtime_value = 0.0, None
    if node.has(2) and mode == "constant":
        if imp.is_const(node.inputs[2]):
            value = np.asarray(imp.const(node.inputs[2])).reshape(-1)[0].item()
        else:
            runtime_value = e.input(2)
    per = [[0, 0] for _ in range(rank)]
    for k, a in enumerate(axes):
        per[a] = [pads[k], pads[k + len(axes)]]
    y = x
    for a, (lo, hi) in enumerate(per):  # negative pads crop
        if lo < 0 or hi < 0:
            size = e.shape(y)[a]
            y = _slice_axis(e, y, a, max(0, -lo), (size if isinstance(size, int) else 2**63) - max(0, -hi), 1)
    pos = [[max(0, lo), max(0, hi)] for lo, hi in per]
    if mode != "constant":
        for a, (lo, hi) in enumerate(pos):
            if lo or hi:
                y = _edge_pieces(e, y, a, lo, hi, mode)
    elif any(lo or hi for lo, hi in pos):
        if isinstance(value, float) and not np.isfinite(value):
            value = "nan" if np.isnan(value) else ("inf" if value > 0 else "-inf")
        inner = y
        y = e.op("Pad", [inner], {"pads": pos, "value": value})
        if runtime_value is not None:
            inside = e.op("Constant", [], {"value": True, "dtype": "bool", "shape": _s(e.shape(inner))})
            inside = e.op("Pad", [inside], {"pads": pos, "value": False})
            y = e.ew("where", inside, y, e.cast(runtime_value, e.dtype(y)))
    if y == x:
        y = _reshape(e, x, e.shape(x))
    return [y]


@handler("Tile")
def tile(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = e.input(0)
    xs = e.shape(x)
    reps = _ints(e, 1, "repeats")
    if len(reps) != len(xs) or any(r < 1 for r in reps):
        node.unsupported(f"repeats {reps} for rank {len(xs)}")
    inter = [v for d in xs for v in (1, d)]
    y = _reshape(e, x, inter)
    y = e.op("Expand", [y], {"shape": _s([v for r, d in zip(reps, xs) for v in (r, d)])})
    return [_reshape(e, y, [dim(Expr.of(d) * r) for r, d in zip(reps, xs)])]


@handler("Gather")
def gather(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = e.input(0)
    axis = _axis(node, node.attr("axis", 0), len(e.shape(x)))
    if not imp.is_const(node.inputs[1]):  # indices known at run time (an embedding lookup): a non-affine read
        return [e.op("Gather", [x, _run_time_index(e, node)], {"axis": axis})]
    idx = np.asarray(imp.const(node.inputs[1]))
    if idx.ndim == 0:
        size = e.shape(x)[axis]
        i = int(idx)
        y = _slice_axis(e, x, axis, i, i + 1 if i != -1 else (size if isinstance(size, int) else 2**63), 1)
        return [_reshape(e, y, [d for k, d in enumerate(e.shape(y)) if k != axis])]
    return [e.op("Gather", [x], {"axis": axis, "indices": idx.astype(np.int64).tolist()})]


def _run_time_index(e: Emit, node: OnnxNode) -> str:
    idx = e.input(1)
    if e.dtype(idx) != DType.i32:
        fail("UnsupportedDtype", node.name, f"{node.op} indices {node.inputs[1]!r} are {e.dtype(idx).value}; polysat "
             "reads indices as i32 (an int64 graph input read only as indices is narrowed to i32)")
    return idx


@handler("GatherElements")
def gather_elements(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = e.input(0)
    axis = _axis(node, node.attr("axis", 0), len(e.shape(x)))
    if imp.is_const(node.inputs[1]):  # constant indices become a parameter: the read is the same non-affine one
        idx = imp.materialize(np.asarray(imp.const(node.inputs[1])), node.inputs[1], node.name)
    else:
        idx = _run_time_index(e, node)
    return [e.op("GatherElements", [x, idx], {"axis": axis})]


def _blocks(e: Emit, x: str, what: str) -> tuple:
    xs = e.shape(x)
    if len(xs) != 4 or not is_static(xs):
        e.node.unsupported(f"{what} needs a static (N, C, H, W) input")
    return xs


@handler("DepthToSpace")
def depth_to_space(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = e.input(0)
    n, c, h, w = _blocks(e, x, "DepthToSpace")
    b = node.attr("blocksize")
    mode = node.attr("mode", "DCR")
    if mode == "DCR":
        y = _reshape(e, x, [n, b, b, c // (b * b), h, w])
        y = e.op("Transpose", [y], {"perm": [0, 3, 4, 1, 5, 2]})
    elif mode == "CRD":
        y = _reshape(e, x, [n, c // (b * b), b, b, h, w])
        y = e.op("Transpose", [y], {"perm": [0, 1, 4, 2, 5, 3]})
    else:
        node.unsupported(f"mode {mode!r}", "mode")
    return [_reshape(e, y, [n, c // (b * b), h * b, w * b])]


@handler("SpaceToDepth")
def space_to_depth(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = e.input(0)
    n, c, h, w = _blocks(e, x, "SpaceToDepth")
    b = node.attr("blocksize")
    mode = node.attr("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        node.unsupported(f"mode {mode!r}", "mode")
    y = _reshape(e, x, [n, c, h // b, b, w // b, b])
    y = e.op("Transpose", [y], {"perm": [0, 3, 5, 1, 2, 4] if mode == "DCR" else [0, 1, 3, 5, 2, 4]})
    return [_reshape(e, y, [n, c * b * b, h // b, w // b])]


_RESIZE_COORDS = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn")


def resize_coord(mode: str, n_in: int, n_out: int, scale: Fraction) -> tuple:
    """(A, B, C): the input coordinate x(o) = (A*o + B) / C that ONNX's coordinate transformation ``mode`` gives
    result index o of an axis resized from n_in to n_out elements at ``scale`` (p/q)."""
    p, q = scale.numerator, scale.denominator
    if mode == "align_corners" or (mode == "pytorch_half_pixel" and n_out == 1):
        return (n_in - 1, 0, n_out - 1) if n_out > 1 else (0, 0, 1)
    if mode in ("half_pixel", "pytorch_half_pixel"):  # (o + 1/2) / s - 1/2
        return 2 * q, q - p, 2 * p
    if mode == "tf_half_pixel_for_nn":  # (o + 1/2) / s
        return 2 * q, q, 2 * p
    return q, 0, p  # asymmetric: o / s


def nearest_coord(a: int, b: int, c: int, mode: str) -> tuple:
    """(A, B, C) whose floor is the ONNX ``nearest_mode`` rounding of (a*o + b) / c."""
    if mode == "floor":
        return a, b, c
    if mode == "ceil":
        return a, b + c - 1, c
    if mode == "round_prefer_ceil":  # floor(x + 1/2)
        return 2 * a, 2 * b + c, 2 * c
    return 2 * a, 2 * b + c - 1, 2 * c  # round_prefer_floor: ceil(x - 1/2)


@handler("Resize")
def resize(imp: Importer, node: OnnxNode) -> list:
    """nearest (every nearest_mode) and linear over any axes, the coordinate modes half_pixel,
    pytorch_half_pixel, align_corners, asymmetric and tf_half_pixel_for_nn, static sizes: one Frontend Resize per
    axis resized (linear is separable: bilinear is linear on H, then on W)."""
    e = Emit(imp, node)
    x = e.input(0)
    xs = e.shape(x)
    mode = node.attr("mode", "nearest")
    ct = node.attr("coordinate_transformation_mode", "half_pixel")
    near = node.attr("nearest_mode", "round_prefer_floor")
    if mode not in ("nearest", "linear"):
        node.unsupported(f"mode {mode!r} (polysat resizes nearest and linear)", "mode")
    if ct not in _RESIZE_COORDS:
        node.unsupported(f"coordinate_transformation_mode {ct!r}", "coordinate_transformation_mode")
    if node.attr("antialias", 0) and mode == "linear":
        node.unsupported("antialias = 1", "antialias")
    if node.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
        node.unsupported(f"keep_aspect_ratio_policy {node.attr('keep_aspect_ratio_policy')!r}", "keep_aspect_ratio_policy")
    for unused in ("cubic_coeff_a", "exclude_outside", "extrapolation_value"):  # cubic and tf_crop_and_resize only
        node.attr(unused)
    axes = [_axis(node, a, len(xs)) for a in node.attr("axes", list(range(len(xs))))]
    if not is_static(xs):
        node.unsupported(f"a symbolic input shape {[str(d) for d in xs]}")
    if node.has(3):
        sizes = _ints(e, 3, "sizes")
        scales = [Fraction(s, xs[a]) for a, s in zip(axes, sizes, strict=True)]
    elif node.has(2):
        got = [float(v) for v in np.asarray(e.const(2, "scales")).reshape(-1)]
        scales = [Fraction(v).limit_denominator(1 << 20) for v in got]
        sizes = [int(np.floor(xs[a] * v)) for a, v in zip(axes, got, strict=True)]
    else:
        node.unsupported("neither scales nor sizes")
    y = x
    for a, n_out, s in zip(axes, sizes, scales, strict=True):
        n_in = xs[a]
        if n_out < 1 or s <= 0:
            node.unsupported(f"axis {a} resized to {n_out} elements (scale {float(s)})")
        coord = resize_coord(ct, n_in, n_out, s)
        if n_out == n_in and all((coord[0] * o + coord[1]) == o * coord[2] for o in range(min(n_out, 2))):
            continue  # the identity (an axis of one element too: its one coordinate is 0 in every mode)
        if mode == "nearest":
            y = e.op("Resize", [y], {"axis": a, "size": n_out, "coord": list(nearest_coord(*coord, near))})
        else:
            av, bv, cv = coord
            w = np.asarray([((av * o + bv) % cv) / cv for o in range(n_out)], dtype=np.float32)
            y = e.op("Resize", [y, imp.materialize(w, f"{node.name}/w{a}", node.name)],
                     {"axis": a, "size": n_out, "coord": list(coord), "mode": "linear"})
    return [y if y != x else _reshape(e, x, xs)]
