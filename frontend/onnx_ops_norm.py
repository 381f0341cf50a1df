"""ONNX op handlers, part 4: normalizations written with Reduce and Elementwise nodes (LayerNormalization
with its Mean / InvStdDev outputs, RMSNormalization, InstanceNormalization, GroupNormalization,
LpNormalization), Trilu, Swish, IsNaN and IsInf. Statistics are computed in fp32 (ONNX's stash type).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..ir.dtypes import DType
from .onnx_table import Emit, handler

if TYPE_CHECKING:  # annotations only (frontend/onnx.py loads the handlers)
    from .onnx import Importer, OnnxNode


def _mean(e: Emit, x: str, axes: list) -> str:
    return e.op("Reduce", [x], {"op": "mean", "axes": axes, "keepdim": True})


def normalize(e: Emit, xf: str, axes: list, eps: float, center: bool = True) -> tuple:
    """(y, mean, inv_std) of an fp32 tensor over axes (kept as size-1 axes); RMS form when not center."""
    mean = _mean(e, xf, axes) if center else None
    d = e.ew("sub", xf, mean) if center else xf
    var = _mean(e, e.ew("mul", d, d), axes)
    inv = e.ew("rsqrt", e.ew("add", var, e.scalar(eps, var)))
    return e.ew("mul", d, inv), mean, inv


def _affine(e: Emit, y: str, scale: str | None, bias: str | None) -> str:
    if scale is not None:
        y = e.ew("mul", y, e.cast(scale, DType.fp32))
    if bias is not None:
        y = e.ew("add", y, e.cast(bias, DType.fp32))
    return y


def _stash(node: OnnxNode) -> None:
    if node.attr("stash_type", 1) != 1:
        node.unsupported("stash_type other than float32", "stash_type")


def _float_x(e: Emit) -> str:
    x = e.input(0)
    if not e.dtype(x).is_float:
        e.node.unsupported(f"{e.node.op} takes a float input, got {e.dtype(x).value}")
    return x


def _normalized(e: Emit) -> tuple:
    """(X, its rank, the first normalized axis) of a LayerNormalization / RMSNormalization node."""
    _stash(e.node)
    x = _float_x(e)
    rank = len(e.shape(x))
    axis = e.node.attr("axis", -1)
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        e.node.unsupported(f"axis {e.node.attr('axis')} for rank {rank}", "axis")
    return x, rank, axis


@handler("LayerNormalization")
def layernorm(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x, rank, axis = _normalized(e)
    eps = node.attr("epsilon", 1e-5)
    scale = e.input(1)
    bias = e.input(2) if node.has(2) else None
    norm = list(e.shape(x)[axis:])
    if not any(node.outputs[1:]) and list(e.shape(scale)) == norm and (bias is None or list(e.shape(bias)) == norm):
        return [e.op("LayerNorm", [x, scale] + ([bias] if bias else []), {"axis": axis, "eps": eps})]
    y, mean, inv = normalize(e, e.cast(x, DType.fp32), list(range(axis, rank)), eps)
    return [e.cast(_affine(e, y, scale, bias), e.dtype(x)), mean, inv]


@handler("RMSNormalization")
def rmsnorm(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x, rank, axis = _normalized(e)
    y, _, _ = normalize(e, e.cast(x, DType.fp32), list(range(axis, rank)), node.attr("epsilon", 1e-5), center=False)
    return [e.cast(_affine(e, y, e.input(1), None), e.dtype(x))]


def _per_channel(e: Emit, t: str, rank: int) -> str:
    return e.op("Reshape", [t], {"shape": [str(e.shape(t)[0])] + [1] * (rank - 2)})


@handler("InstanceNormalization")
def instancenorm(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = _float_x(e)
    rank = len(e.shape(x))
    y, _, _ = normalize(e, e.cast(x, DType.fp32), list(range(2, rank)), node.attr("epsilon", 1e-5))
    y = _affine(e, y, _per_channel(e, e.input(1), rank), _per_channel(e, e.input(2), rank))
    return [e.cast(y, e.dtype(x))]


@handler("GroupNormalization")
def groupnorm(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    _stash(node)
    x = _float_x(e)
    xs = e.shape(x)
    g = node.attr("num_groups")
    n, c = xs[0], xs[1]
    if not isinstance(c, int) or c % g:
        node.unsupported(f"{c} channels in {g} groups")
    if node.opset < 21:
        node.unsupported("the opset-18 form (scale and bias per group) is not supported; use opset 21")
    grouped = e.op("Reshape", [e.cast(x, DType.fp32)],
                   {"shape": [str(n), g, c // g] + [str(d) for d in xs[2:]]})
    y, _, _ = normalize(e, grouped, list(range(2, len(xs) + 1)), node.attr("epsilon", 1e-5))
    y = e.op("Reshape", [y], {"shape": [str(d) for d in xs]})
    y = _affine(e, y, _per_channel(e, e.input(1), len(xs)), _per_channel(e, e.input(2), len(xs)))
    return [e.cast(y, e.dtype(x))]


@handler("LpNormalization")
def lpnorm(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = _float_x(e)
    p = node.attr("p", 2)
    axis = node.attr("axis", -1)
    if p not in (1, 2):
        node.unsupported(f"p = {p}", "p")
    mag = e.ew("mul", x, x) if p == 2 else e.ew("max", x, e.ew("neg", x))
    norm = e.op("Reduce", [mag], {"op": "sum", "axes": [axis], "keepdim": True})
    if p == 2:
        norm = e.ew("sqrt", norm)
    zero = e.scalar(0, norm)
    y = e.ew("where", e.ew("eq", norm, zero), zero, e.ew("div", e.cast(x, DType.fp32), norm))  # 0 where the norm is 0
    return [e.cast(y, e.dtype(x))]


@handler("Trilu")
def trilu(imp: Importer, node: OnnxNode) -> list:
    """x where the (static) triangle mask holds, else 0; the mask is a constant built at import."""
    e = Emit(imp, node)
    x = e.input(0)
    k = int(np.asarray(e.const(1, "k")).reshape(-1)[0]) if node.has(1) else 0
    rows, cols = e.shape(x)[-2:]
    if not (isinstance(rows, int) and isinstance(cols, int)):
        node.unsupported("Trilu needs static sizes on the last two axes")
    ones = np.ones((rows, cols), dtype=bool)
    mask = np.triu(ones, k) if node.attr("upper", 1) else np.tril(ones, k)
    m = imp.materialize(mask, f"{node.name}/mask", node.name)
    return [e.ew("where", m, x, e.scalar(0, x))]


@handler("Swish")
def swish(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = _float_x(e)
    alpha = node.attr("alpha", 1.0)
    return [e.ew("mul", x, e.ew("sigmoid", e.ew("mul", x, e.scalar(alpha, x)) if alpha != 1.0 else x))]


@handler("IsNaN")
def isnan(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = _float_x(e)
    return [e.ew("ne", x, x)]


@handler("IsInf")
def isinf(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = _float_x(e)
    pos, neg = node.attr("detect_positive", 1), node.attr("detect_negative", 1)
    hits = [e.ew("eq", x, e.scalar(s, x)) for s, on in ((float("inf"), pos), (float("-inf"), neg)) if on]
    if not hits:
        return [e.op("Constant", [], {"value": False, "dtype": "bool", "shape": [str(d) for d in e.shape(x)]})]
    return [hits[0] if len(hits) == 1 else e.ew("max", hits[0], hits[1])]


@handler("CumSum")
def cumsum(imp: Importer, node: OnnxNode) -> list:
    """The running sum along a constant axis (frontend/lower_window.py CumSum)."""
    e = Emit(imp, node)
    x = e.input(0)
    axis = int(np.asarray(e.const(1, "axis")).reshape(-1)[0])
    return [e.op("CumSum", [x], {"axis": axis, "exclusive": bool(node.attr("exclusive", 0)),
                                 "reverse": bool(node.attr("reverse", 0))})]
