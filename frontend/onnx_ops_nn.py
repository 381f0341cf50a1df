"""ONNX op handlers, part 2: contractions (MatMul, Gemm, Einsum), Conv, pooling, BatchNormalization,
Softmax/LogSoftmax and the Reduce family, onto GEMM / Conv2D / MaxPool2D / AvgPool2D / Reduce /
Softmax / LayerNorm / Einsum Frontend IR nodes (Conv3D / MaxPool3D / AvgPool3D for 3 spatial axes). 1-D
convolutions and pools run as 2-D ones with H = 1.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..ir.diagnostics import fail
from ..ir.dtypes import DType
from .onnx_table import Emit, handler

if TYPE_CHECKING:  # annotations only (frontend/onnx.py loads the handlers)
    from .onnx import Importer, OnnxNode


def _back(e: Emit, y: str, dt: DType) -> str:
    """A contraction's fp32/i32 accumulator cast back to the operands' dtype (as ONNX types it)."""
    return e.cast(y, dt)


def _acc(dt: DType) -> str:
    return "fp32" if dt.is_float else "i32"


@handler("MatMul")
def matmul(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    a, b = e.input(0), e.input(1)
    dt = e.dtype(a)
    return [_back(e, e.op("GEMM", [a, b], {"acc_dtype": _acc(dt)}), dt)]


@handler("Gemm")
def gemm(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    a, b = e.input(0), e.input(1)
    dt = e.dtype(a)
    alpha, beta = node.attr("alpha", 1.0), node.attr("beta", 1.0)
    y = e.op("GEMM", [a, b], {"trans_a": bool(node.attr("transA", 0)), "trans_b": bool(node.attr("transB", 0)),
                              "acc_dtype": _acc(dt)})
    if alpha != 1.0:
        y = e.ew("mul", y, e.scalar(alpha, y))
    if node.has(2):
        c = e.cast(e.input(2), e.dtype(y))
        if beta != 1.0:
            c = e.ew("mul", c, e.scalar(beta, c))
        y = e.ew("add", y, c)
    return [_back(e, y, dt)]


@handler("Einsum")
def einsum(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    xs = [e.input(k) for k in range(len(node.inputs))]
    if len(xs) > 2:
        node.unsupported("polysat's Einsum takes one or two operands")
    dt = e.dtype(xs[0])
    return [_back(e, e.op("Einsum", xs, {"equation": node.attr("equation"), "acc_dtype": _acc(dt)}), dt)]


def _spatial(e: Emit, x: str, what: str) -> tuple:
    """X with 2 or 3 spatial axes, (N, C, H, W) or (N, C, D, H, W): a 1-D input gains H = 1. Returns
    (x, was_1d)."""
    shape = e.shape(x)
    if len(shape) in (4, 5):
        return x, False
    if len(shape) == 3:
        return e.op("Reshape", [x], {"shape": [str(shape[0]), str(shape[1]), 1, str(shape[2])]}), True
    e.node.unsupported(f"{what} of rank {len(shape)}: polysat lowers 1-D, 2-D and 3-D {e.node.op} only")


def _window_attrs(e: Emit, xn: str, one_d: bool, kernel: tuple) -> tuple:
    """(strides, dilations, pads (lo, hi) per spatial axis flattened, extra ceil-mode tails per axis)."""
    node = e.node
    sizes = tuple(e.shape(xn)[2:])
    nd = len(sizes)
    given = 1 if one_d else nd
    strides = list(node.attr("strides", [1] * given))
    dil = list(node.attr("dilations", [1] * given))
    pads = list(node.attr("pads", [0] * (2 * given)))
    auto = node.attr("auto_pad", "NOTSET")
    ceil = node.attr("ceil_mode", 0) if node.op in ("MaxPool", "AveragePool") else 0
    for what, v, want in (("strides", strides, given), ("dilations", dil, given), ("pads", pads, 2 * given)):
        if len(v) != want:
            fail("InvalidAttribute", node.name, f"ONNX {node.op} node {node.name!r}: {what} {v} has {len(v)} entries; "
                 f"its {given} spatial axes need {want}", f"Give {what} {want} entries.")
    if one_d:
        strides, dil, pads = [1] + strides, [1] + dil, [0, pads[0], 0, pads[1]]
    if not all(isinstance(s, int) for s in sizes):
        if auto not in ("NOTSET", "VALID") or ceil:
            node.unsupported("auto_pad SAME_* and ceil_mode need static spatial sizes", "auto_pad")
    if auto == "VALID":
        pads = [0] * (2 * nd)
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        per = []
        for k in range(nd):
            out = -(-sizes[k] // strides[k])
            total = max(0, (out - 1) * strides[k] + dil[k] * (kernel[k] - 1) + 1 - sizes[k])
            small, big = total // 2, total - total // 2
            per.append((small, big) if auto == "SAME_UPPER" else (big, small))
        pads = [lo for lo, _ in per] + [hi for _, hi in per]
    elif auto != "NOTSET":
        node.unsupported(f"auto_pad {auto!r}", "auto_pad")
    lohi = [(pads[k], pads[nd + k]) for k in range(nd)]  # ONNX order: begins then ends
    extra = [0] * nd
    if ceil:
        for k, (lo, hi) in enumerate(lohi):
            span = sizes[k] + lo + hi - dil[k] * (kernel[k] - 1) - 1
            out = -(-span // strides[k]) + 1
            if (out - 1) * strides[k] >= sizes[k] + lo:
                out -= 1  # the last window must start inside the input or its leading pad
            extra[k] = max(0, (out - 1) * strides[k] + dil[k] * (kernel[k] - 1) + 1 - (sizes[k] + lo + hi))
    return strides, dil, [p for pair in lohi for p in pair], extra


def _unspatial(e: Emit, y: str, one_d: bool) -> str:
    if not one_d:
        return y
    s = e.shape(y)
    return e.op("Reshape", [y], {"shape": [str(s[0]), str(s[1]), str(s[3])]})


@handler("Conv")
def conv(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x, w = e.input(0), e.input(1)
    dt = e.dtype(x)
    x4, one_d = _spatial(e, x, "X")
    ws = e.shape(w)
    if one_d:
        w = e.op("Reshape", [w], {"shape": [str(ws[0]), str(ws[1]), 1, str(ws[2])]})
    kernel = tuple(e.shape(w)[2:])
    ks = node.attr("kernel_shape")
    if ks is not None and tuple(([1] if one_d else []) + list(ks)) != kernel:
        node.unsupported(f"kernel_shape {list(ks)} differs from W's spatial shape", "kernel_shape")
    strides, dil, pads, _ = _window_attrs(e, x4, one_d, kernel)
    ins = [x4, w] + ([e.input(2)] if node.has(2) else [])
    y = e.op(f"Conv{len(kernel)}D", ins, {"groups": node.attr("group", 1), "stride": strides, "dilation": dil, "pad": pads,
                             "acc_dtype": _acc(dt)})
    return [_back(e, _unspatial(e, y, one_d), dt)]


def _pool_kernel(e: Emit, one_d: bool) -> tuple:
    ks = list(e.node.attr("kernel_shape"))
    return tuple([1] + ks if one_d else ks)


@handler("MaxPool")
def maxpool(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    if len(node.outputs) > 1 and node.outputs[1]:
        node.unsupported("the Indices output (int64) is not supported")
    if node.attr("storage_order", 0) != 0:
        node.unsupported("storage_order applies to the Indices output only", "storage_order")
    x4, one_d = _spatial(e, e.input(0), "X")
    kernel = _pool_kernel(e, one_d)
    strides, dil, pads, extra = _window_attrs(e, x4, one_d, kernel)
    full = [[pads[2 * k], pads[2 * k + 1] + extra[k]] for k in range(len(kernel))]
    if any(p for pair in full for p in pair):
        x4 = e.op("Pad", [x4], {"pads": [[0, 0], [0, 0]] + full, "value": "-inf"})
    y = e.op(f"MaxPool{len(kernel)}D", [x4], {"kernel": list(kernel), "stride": strides, "dilation": dil,
                                              "pad": [0] * (2 * len(kernel))})
    return [_unspatial(e, y, one_d)]


@handler("AveragePool")
def avgpool(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x4, one_d = _spatial(e, e.input(0), "X")
    kernel = _pool_kernel(e, one_d)
    strides, dil, pads, extra = _window_attrs(e, x4, one_d, kernel)
    y = e.op(f"AvgPool{len(kernel)}D", [x4], {"kernel": list(kernel), "stride": strides, "dilation": dil, "pad": pads,
                                 "extra": extra, "count_include_pad": bool(node.attr("count_include_pad", 0))})
    return [_unspatial(e, y, one_d)]


@handler("GlobalAveragePool", "GlobalMaxPool")
def global_pool(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = e.input(0)
    axes = list(range(2, len(e.shape(x))))
    op = "mean" if node.op == "GlobalAveragePool" else "max"
    y = e.op("Reduce", [x], {"op": op, "axes": axes, "keepdim": True,
                             "acc_dtype": "fp32" if e.dtype(x).is_float else e.dtype(x).value})
    return [e.cast(y, e.dtype(x))]


def _per_channel(e: Emit, t: str, rank: int) -> str:
    """A (C,) parameter reshaped to (C, 1, ..., 1) so it broadcasts over (N, C, ...)."""
    return e.op("Reshape", [t], {"shape": [str(e.shape(t)[0])] + [1] * (rank - 2)})


@handler("BatchNormalization")
def batchnorm(imp: Importer, node: OnnxNode) -> list:
    """Inference form: (x - mean) / sqrt(var + eps) * scale + B, per channel (axis 1)."""
    e = Emit(imp, node)
    if node.attr("training_mode", 0):
        node.unsupported("training_mode = 1 (batch statistics) is not supported; export in eval mode",
                         "training_mode")
    if any(node.outputs[1:]):
        node.unsupported("running_mean / running_var outputs exist only in training mode")
    node.attr("momentum")
    x = e.input(0)
    rank = len(e.shape(x))
    if rank < 2:
        node.unsupported(f"X of rank {rank}: BatchNormalization needs (N, C, ...)")
    scale, bias, mean, var = (_per_channel(e, e.input(k), rank) for k in range(1, 5))
    inv = e.ew("rsqrt", e.ew("add", var, e.scalar(node.attr("epsilon", 1e-5), var)))
    y = e.ew("mul", e.ew("sub", x, mean), e.ew("mul", inv, scale))
    return [e.cast(e.ew("add", y, bias), e.dtype(x))]


@handler("Softmax", "LogSoftmax")
def softmax(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = e.input(0)
    axis = node.attr("axis", -1)
    if node.op == "Softmax":
        return [e.op("Softmax", [x], {"axis": axis})]
    xf = e.cast(x, DType.fp32)
    mx = e.op("Reduce", [xf], {"op": "max", "axes": [axis], "keepdim": True})
    d = e.ew("sub", xf, mx)
    lse = e.ew("log", e.op("Reduce", [e.ew("exp", d)], {"op": "sum", "axes": [axis], "keepdim": True}))
    return [e.cast(e.ew("sub", d, lse), e.dtype(x))]


_REDUCE = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min",
           "ReduceSumSquare": "sum", "ReduceL1": "sum", "ReduceL2": "sum", "ReduceLogSum": "sum",
           "ReduceLogSumExp": "sum"}


@handler(*_REDUCE)
def reduce(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = e.input(0)
    rank = len(e.shape(x))
    if node.has(1):
        axes = [int(a) for a in np.asarray(e.const(1, "axes")).reshape(-1)]
    else:
        axes = node.attr("axes")
        axes = list(axes) if axes is not None else []
    keep = bool(node.attr("keepdims", 1))
    noop = node.attr("noop_with_empty_axes", 0)
    if not axes:
        if noop:
            return [e.op("Reshape", [x], {"shape": [str(d) for d in e.shape(x)]})]
        axes = list(range(rank))
    dt = e.dtype(x)
    if rank == 0:  # a scalar's reduction: of it as one element
        x, rank, axes, keep = e.op("Reshape", [x], {"shape": ["1"]}), 1, [0], False
    op = node.op
    if op == "ReduceLogSumExp":
        xf = e.cast(x, DType.fp32)
        mx = e.op("Reduce", [xf], {"op": "max", "axes": axes, "keepdim": True})
        s = e.op("Reduce", [e.ew("exp", e.ew("sub", xf, mx))], {"op": "sum", "axes": axes, "keepdim": True})
        y = e.ew("add", e.ew("log", s), mx)
        if not keep:
            y = e.op("Reshape", [y], {"shape": [str(d) for i, d in enumerate(e.shape(y)) if i not in
                                                 {a % rank for a in axes}]})
        return [e.cast(y, dt)]
    src = x
    if op in ("ReduceSumSquare", "ReduceL2"):
        src = e.ew("mul", x, x)
    elif op == "ReduceL1":
        src = e.ew("max", x, e.ew("neg", x))
    acc = "fp32" if dt.is_float else "i32"
    if dt == DType.bool:
        if op not in ("ReduceMax", "ReduceMin"):
            node.unsupported(f"{op} of a bool tensor")
        src = e.cast(src, DType.i32)  # any / all as max / min over 0 and 1
    y = e.op("Reduce", [src], {"op": _REDUCE[op], "axes": axes, "keepdim": keep, "acc_dtype": acc})
    if op == "ReduceL2":
        y = e.ew("sqrt", y)
    elif op == "ReduceLogSum":
        y = e.ew("log", y)
    return [e.cast(y, dt)]


@handler("LRN")
def lrn(imp: Importer, node: OnnxNode) -> list:
    """Local response normalization across channels: x / (bias + alpha/size * sum of x^2 over the size channels
    around c)^beta. The channel window is an average pool of x^2 (N, 1, C, H*W) with a (size, 1) kernel and the
    ONNX padding (floor((size-1)/2) before, ceil after), padding counted, so its mean is the sum / size."""
    e = Emit(imp, node)
    x = e.input(0)
    xs = e.shape(x)
    if len(xs) < 3:
        node.unsupported(f"LRN needs an (N, C, ...) input, got rank {len(xs)}")
    size = int(node.attr("size"))
    alpha, beta, bias = float(node.attr("alpha", 1e-4)), float(node.attr("beta", 0.75)), float(node.attr("bias", 1.0))
    rest = 1
    for d in xs[2:]:
        if not isinstance(d, int):
            node.unsupported("LRN needs static spatial sizes")
        rest *= d
    xf = e.cast(x, DType.fp32)
    sq = e.op("Reshape", [e.ew("mul", xf, xf)], {"shape": [str(xs[0]), 1, str(xs[1]), rest]})
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    mean = e.op("AvgPool2D", [sq], {"kernel": [size, 1], "stride": [1, 1], "dilation": [1, 1],
                                    "pad": [lo, hi, 0, 0], "extra": [0, 0], "count_include_pad": True})
    mean = e.op("Reshape", [mean], {"shape": [str(d) for d in xs]})
    scale = e.ew("add", e.ew("mul", mean, e.const_of(alpha, DType.fp32)), e.const_of(bias, DType.fp32))
    y = e.ew("div", xf, e.ew("pow", scale, e.const_of(beta, DType.fp32)))
    return [e.cast(y, e.dtype(x))]
