"""ONNX op handlers, part 6: selection along an axis (ArgMax, ArgMin, TopK), written with Reduce and Elementwise
nodes: the extreme value, then the first (or last) position holding it, the min (max) of an fp32 iota where the
value is (positions are exact in fp32 below 2^24). TopK takes k such rounds, each skipping the positions taken
before (a mixture-of-experts router's top-2 of its experts: Mixtral, Qwen2-MoE); its values come out sorted, as
``sorted=1`` asks and ``sorted=0`` allows, ties broken toward the lower index as ONNX specifies.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..ir.dtypes import DType
from .onnx_table import Emit, axis_in, handler

if TYPE_CHECKING:  # annotations only (frontend/onnx.py loads the handlers)
    from .onnx import Importer, OnnxNode

MAX_POSITIONS = 1 << 24  # fp32 counts positions exactly up to here


def _axis_size(e: Emit, x: str, axis: int) -> tuple:
    """(axis in [0, rank), its static size) of x, or the node's diagnostic."""
    shape = e.shape(x)
    a = axis_in(e.node, axis, len(shape))
    if not isinstance(shape[a], int):
        e.node.unsupported(f"{e.node.op} along the symbolic axis {a}")
    if shape[a] >= MAX_POSITIONS:
        e.node.unsupported(f"{e.node.op} along an axis of {shape[a]} positions (at most {MAX_POSITIONS - 1})")
    return a, shape[a]


def _iota(e: Emit, x: str, axis: int, size: int) -> str:
    """0, 1, ..., size - 1 along axis (fp32), 1 along the others: broadcast against x."""
    shape = [1] * len(e.shape(x))
    shape[axis] = size
    return e.imp.materialize(np.arange(size, dtype=np.float32).reshape(shape), f"{e.node.name}/positions", e.node.name)


def _position(e: Emit, hit: str, pos: str, axis: int, size: int, last: bool = False) -> str:
    """The first (last) position along axis where ``hit`` holds, fp32 with the axis kept (size or -1: none)."""
    cand = e.ew("where", hit, pos, e.scalar(-1.0 if last else float(size), pos))
    return e.op("Reduce", [cand], {"op": "max" if last else "min", "axes": [axis], "keepdim": True})


def _extreme(e: Emit, x: str, axis: int, largest: bool) -> str:
    return e.op("Reduce", [x], {"op": "max" if largest else "min", "axes": [axis], "keepdim": True,
                                "acc_dtype": "fp32" if e.dtype(x).is_float else "i32"})


def _dropped(e: Emit, y: str, axis: int) -> str:
    return e.op("Reshape", [y], {"shape": [str(d) for k, d in enumerate(e.shape(y)) if k != axis]})


@handler("ArgMax", "ArgMin")
def arg_extreme(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = e.input(0)
    if e.dtype(x) == DType.bool:
        x = e.cast(x, DType.i32)
    axis, size = _axis_size(e, x, node.attr("axis", 0))
    v = e.cast(_extreme(e, x, axis, node.op == "ArgMax"), e.dtype(x))
    idx = _position(e, e.ew("eq", x, v), _iota(e, x, axis, size), axis, size, bool(node.attr("select_last_index", 0)))
    idx = e.cast(idx, DType.i32)
    return [idx if node.attr("keepdims", 1) else _dropped(e, idx, axis)]


@handler("TopK")
def topk(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = e.input(0)
    if not e.dtype(x).is_float:
        node.unsupported(f"TopK of a {e.dtype(x).value} tensor (polysat takes float scores)")
    axis, size = _axis_size(e, x, node.attr("axis", -1))
    k = int(np.asarray(e.const(1, "K")).reshape(-1)[0])
    if not 1 <= k <= size:
        node.unsupported(f"K = {k} outside [1, {size}] (the size of axis {axis})")
    largest = bool(node.attr("largest", 1))
    node.attr("sorted", 1)  # both orders are met by sorted values
    pos = _iota(e, x, axis, size)
    beaten = e.scalar(float("-inf") if largest else float("inf"), x)
    taken, values, indices = None, [], []
    for _ in range(k):
        cur = x if taken is None else e.ew("where", taken, beaten, x)
        v = e.cast(_extreme(e, cur, axis, largest), e.dtype(x))
        hit = e.ew("eq", cur, v)
        if taken is not None:
            hit = e.ew("where", taken, e.op("Constant", [], {"value": False, "dtype": "bool", "shape": []}), hit)
        idx = _position(e, hit, pos, axis, size)
        now = e.ew("eq", pos, idx)
        taken = now if taken is None else e.ew("max", taken, now)
        values.append(v)
        indices.append(idx)
    cat = (lambda xs: xs[0] if len(xs) == 1 else e.op("Concat", xs, {"axis": axis}))
    return [cat(values), e.cast(cat(indices), DType.i32)]
