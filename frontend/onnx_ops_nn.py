"""ONNX op handlers, part 2: contractions (MatMul, Gemm, Einsum), Conv, pooling, BatchNormalization, the recurrences
(RNN, GRU, LSTM: unrolled),
Softmax/LogSoftmax and the Reduce family, onto GEMM / Conv2D / MaxPool2D / AvgPool2D / Reduce /
Softmax / LayerNorm / Einsum Frontend IR nodes (Conv3D / MaxPool3D / AvgPool3D for 3 spatial axes). 1-D
convolutions and pools run as 2-D ones with H = 1.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..ir.diagnostics import fail
from ..ir.dtypes import DType
from .onnx_table import Emit, handler, i64

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


# ---- recurrences: RNN, GRU, LSTM unrolled over their (static) sequence ------------------------------------
_RNN_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_RNN_ACTS = {"RNN": ("Tanh",), "GRU": ("Sigmoid", "Tanh"), "LSTM": ("Sigmoid", "Tanh", "Tanh")}


@handler("RNN", "GRU", "LSTM")
def recurrence(imp: Importer, node: OnnxNode) -> list:
    """One time step after another, each step's hidden state the next one's input (ONNX's equations, gates in its
    order: GRU z, r, h; LSTM i, o, f, c): the input's projection for every step is one GEMM, each step adds its
    hidden state's. The sequence must be static; ``sequence_lens`` is taken only when every sequence is full."""
    e, op = Emit(imp, node), node.op
    x = e.input(0)
    if node.attr("layout", 0):
        x = e.op("Transpose", [x], {"perm": [1, 0, 2]})
    seq, _, _ = e.shape(x)
    if not isinstance(seq, int):
        node.unsupported(f"its sequence length {seq} is symbolic; the recurrence is unrolled at import")
    acts = tuple((a.decode() if isinstance(a, bytes) else a).lower() for a in (node.attr("activations") or ()))
    dirs = {"forward": (False,), "reverse": (True,), "bidirectional": (False, True)}.get(node.attr("direction", "forward"))
    if dirs is None:
        node.unsupported(f"direction {node.attr('direction')!r}", "direction")
    if acts and acts != tuple(a.lower() for a in _RNN_ACTS[op]) * len(dirs):
        node.unsupported(f"activations {list(acts)}: only ONNX's defaults {list(_RNN_ACTS[op])} are taken", "activations")
    if node.attr("activation_alpha") is not None or node.attr("activation_beta") is not None:
        node.unsupported("activation_alpha/beta parametrize activations other than the defaults", "activation_alpha")
    if node.has(4):
        lens = imp.const(node.inputs[4])
        if lens is None or not np.all(np.asarray(lens) == seq):
            node.unsupported("sequence_lens other than the full length of every sequence")
    hidden, clip = int(node.attr("hidden_size")), node.attr("clip")
    state = {"coupled": bool(node.attr("input_forget", 0)), "before_reset": bool(node.attr("linear_before_reset", 0))}
    ys, hs, cs = [], [], []
    for d, backward in enumerate(dirs):
        y, h, c = _direction(e, op, x, d, backward, seq, hidden, clip, state)
        ys.append(y)
        hs.append(h)
        cs.append(c)
    outs = [_stack(e, ys, 1), _stack(e, hs, 0)] + ([_stack(e, cs, 0)] if op == "LSTM" else [])
    if node.attr("layout", 0):  # Y [batch, seq, dirs, hidden]; the states [batch, dirs, hidden]
        outs = [e.op("Transpose", [outs[0]], {"perm": [2, 0, 1, 3]})] + \
               [e.op("Transpose", [s], {"perm": [1, 0, 2]}) for s in outs[1:]]
    return outs


def _stack(e: Emit, xs: list, axis: int) -> str:
    """The tensors, each given a new axis ``axis``, joined along it."""
    xs = [e.imp.call("Unsqueeze", e.name(), [t, i64([axis])])[0] for t in xs]
    return xs[0] if len(xs) == 1 else e.imp.call("Concat", e.name(), xs, {"axis": axis})[0]


def _direction(e: Emit, op: str, x: str, d: int, backward: bool, seq: int, hidden: int, clip, state: dict) -> tuple:
    """(Y [seq, batch, hidden], the last hidden state, the last cell state or None) of direction d."""
    node, imp, g = e.node, e.imp, _RNN_GATES[op]

    def call(op_: str, inputs: list) -> str:  # an ONNX op on them (a constant's slice folds), as a graph tensor
        return imp.value(imp.call(op_, e.name(), inputs)[0], node.name)

    def cut(t: str, lo: int, hi: int, axis: int) -> str:
        return call("Slice", [t, i64([lo]), i64([hi]), i64([axis])])

    def mine(k: int) -> str:  # input k of direction d (its leading axis dropped)
        return call("Squeeze", [cut(node.inputs[k], d, d + 1, 0), i64([0])])

    def gate(t: str, k: int, axis: int = -1) -> str:  # gate k of a tensor holding g of them along axis
        return cut(t, k * hidden, (k + 1) * hidden, axis)

    def act(fn: str, t: str) -> str:  # clip bounds the input of a gate's activation
        if clip is not None:
            t = e.ew("min", e.ew("max", t, e.scalar(-float(clip), t)), e.scalar(float(clip), t))
        return e.ew(fn, t)

    def mm(a: str, b: str) -> str:
        return e.op("GEMM", [a, b], {"trans_b": True, "acc_dtype": "fp32"})

    dt = e.dtype(x)
    w, r = mine(1), mine(2)  # [g*hidden, input], [g*hidden, hidden]
    xw, rb = mm(x, w), None  # [seq, batch, g*hidden]: every step's input projection
    if node.has(3):
        b = mine(3)
        wb, rb = cut(b, 0, g * hidden, 0), cut(b, g * hidden, 2 * g * hidden, 0)
        if op == "GRU" and state["before_reset"]:
            xw = e.ew("add", xw, wb)  # Rb_h stays inside r * (h R_h^T + Rb_h): Rb added per step
        else:
            xw, rb = e.ew("add", xw, e.ew("add", wb, rb)), None
    batch = e.shape(x)[1]
    zeros = e.op("Constant", [], {"value": 0.0, "dtype": dt.value,
                                  "shape": [1, batch if isinstance(batch, int) else str(batch), hidden]})
    lift = lambda t: call("Unsqueeze", [t, i64([0])])  # [batch, hidden] -> [1, batch, hidden]
    h = lift(mine(5)) if node.has(5) else zeros
    c = lift(mine(6)) if op == "LSTM" and node.has(6) else zeros
    peep = [gate(mine(7), k, 0) for k in range(3)] if op == "LSTM" and node.has(7) else None
    one = e.scalar(1.0, x)
    ys = [None] * seq
    for t in (range(seq - 1, -1, -1) if backward else range(seq)):
        xt = cut(xw, t, t + 1, 0)  # [1, batch, g*hidden]
        if op == "RNN":
            h = act("tanh", e.ew("add", xt, mm(h, r)))
        elif op == "GRU":
            hr = mm(h, cut(r, 0, 2 * hidden, 0))
            hr = hr if rb is None else e.ew("add", hr, cut(rb, 0, 2 * hidden, 0))  # linear_before_reset: Rb kept apart
            z = act("sigmoid", e.ew("add", gate(xt, 0), gate(hr, 0)))
            rs = act("sigmoid", e.ew("add", gate(xt, 1), gate(hr, 1)))
            if state["before_reset"]:  # r * (h R_h^T + Rb_h)
                lin = mm(h, gate(r, 2, 0))
                lin = lin if rb is None else e.ew("add", lin, gate(rb, 2, 0))
                cand = act("tanh", e.ew("add", gate(xt, 2), e.ew("mul", rs, lin)))
            else:  # (r * h) R_h^T
                cand = act("tanh", e.ew("add", gate(xt, 2), mm(e.ew("mul", rs, h), gate(r, 2, 0))))
            h = e.ew("add", e.ew("mul", e.ew("sub", one, z), cand), e.ew("mul", z, h))
        else:
            pre = e.ew("add", xt, mm(h, r))
            i_pre, f_pre = gate(pre, 0), gate(pre, 2)
            if peep is not None:
                i_pre, f_pre = e.ew("add", i_pre, e.ew("mul", peep[0], c)), e.ew("add", f_pre, e.ew("mul", peep[2], c))
            i = act("sigmoid", i_pre)
            f = e.ew("sub", one, i) if state["coupled"] else act("sigmoid", f_pre)
            c = e.cast(e.ew("add", e.ew("mul", f, c), e.ew("mul", i, act("tanh", gate(pre, 3)))), dt)
            o_pre = gate(pre, 1) if peep is None else e.ew("add", gate(pre, 1), e.ew("mul", peep[1], c))
            h = e.ew("mul", act("sigmoid", o_pre), e.ew("tanh", c))
        h = e.cast(h, dt)
        ys[t] = h
    y = ys[0] if seq == 1 else imp.value(imp.call("Concat", e.name(), ys, {"axis": 0})[0], node.name)
    drop = lambda t: call("Squeeze", [t, i64([0])])
    return y, drop(h), (drop(c) if op == "LSTM" else None)
