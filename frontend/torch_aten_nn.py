"""The ATen mappings of a network's layers (convolution, batch, group and layer norms, softmax, reductions, pools,
adaptive pools and upsampling) onto the ONNX handlers, registered in ``torch_aten.ATEN`` beside the elementwise and
movement ones (frontend/torch_export.py, which imports this module)."""
from __future__ import annotations

import numpy as np

from .onnx_table import i64 as _i64
from .torch_aten import Call, aten


def _per_axis(v, n: int) -> list:
    """A pool or convolution argument as one entry per spatial axis (torch allows one entry for all)."""
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return v * n if len(v) == 1 else v


@aten("aten.convolution.default")
def convolution(c: Call, x, w, b, stride, padding, dilation, transposed, output_padding, groups):
    n = len(c.shape(x)) - 2  # one entry may stand for every spatial axis (padding="valid": [0])
    stride, padding, dilation = (_per_axis(v, n) for v in (stride, padding, dilation))
    if transposed:  # ConvTranspose2d (DPT, U-Net decoders): frontend/onnx_ops_convt.py
        return c.onnx("ConvTranspose", [x, w, b], strides=stride, pads=padding * 2, dilations=dilation,
                      output_padding=_per_axis(output_padding, n), group=int(groups))
    return c.onnx("Conv", [x, w, b], strides=stride, pads=padding * 2, dilations=dilation, group=int(groups))


@aten("aten._native_batch_norm_legit_no_training.default")
def batch_norm(c: Call, x, w, b, mean, var, momentum, eps):
    y = c.onnx("BatchNormalization", [x, w, b, mean, var], epsilon=float(eps))
    return (y, None, None)


@aten("aten._native_batch_norm_legit.no_stats", "aten._native_batch_norm_legit.default")
def batch_norm_batch_stats(c: Call, x, w, b, *rest):
    """batch_norm on the batch's own statistics (training=True: BiT's weight standardization normalizes each conv
    weight so): per channel over every other axis, the biased variance; (y, mean, 1/std), the two stats of shape [C].
    The running statistics (``.default``) are not updated: the program computes a forward pass."""
    eps = float(rest[-1])
    rank = len(c.shape(x))
    axes = _i64([0] + list(range(2, rank)))
    mean = c.onnx("ReduceMean", [x, axes], keepdims=1)
    d = c.onnx("Sub", [x, mean])
    inv = c.onnx("Reciprocal", [c.onnx("Sqrt", [c.onnx("Add", [c.onnx("ReduceMean", [c.onnx("Mul", [d, d]), axes],
                                                                       keepdims=1), c.like(eps, x)])])])
    y = c.onnx("Mul", [d, inv])
    per_channel = _i64([-1] + [1] * (rank - 2))
    if w is not None:
        y = c.onnx("Mul", [y, c.onnx("Reshape", [w, per_channel])])
    if b is not None:
        y = c.onnx("Add", [y, c.onnx("Reshape", [b, per_channel])])
    stats = [c.onnx("Reshape", [v, _i64([-1])]) if k in c.used_outputs() else None for k, v in ((1, mean), (2, inv))]
    return (y, *stats)


@aten("aten.upsample_nearest2d.vec", "aten.upsample_bilinear2d.vec", "aten.upsample_nearest1d.vec",
      "aten.upsample_linear1d.vec", "aten.upsample_nearest2d.default", "aten.upsample_bilinear2d.default")
def upsample(c: Call, x, output_size=None, *rest, **kw):
    """interpolate(): ONNX Resize as torch.onnx writes it (nearest: floor of o / scale; linear: pytorch_half_pixel,
    or align_corners). The .default overloads take (output_size, [align_corners,] scales_h, scales_w)."""
    linear = "linear" in c.op
    align = bool(rest[0]) if linear and rest else bool(kw.get("align_corners", False))
    factors = rest[1] if linear and len(rest) > 1 and ".vec" in c.op else kw.get("scale_factors")
    if ".vec" in c.op and not linear:
        factors = rest[0] if rest else kw.get("scale_factors")
    shape = c.shape(x)
    if output_size:
        sizes = list(shape[:2]) + list(output_size)
    elif factors:
        sizes = list(shape[:2]) + [int(d * f) for d, f in zip(shape[2:], factors)]
    else:
        c.unsupported("neither an output size nor scale factors")
    if linear:
        return c.onnx("Resize", [x, None, None, _i64(sizes)], mode="linear",
                      coordinate_transformation_mode="align_corners" if align else "pytorch_half_pixel")
    return c.onnx("Resize", [x, None, None, _i64(sizes)], mode="nearest",
                  coordinate_transformation_mode="asymmetric", nearest_mode="floor")


@aten("aten.native_group_norm.default")
def group_norm(c: Call, x, w, b, n, channels, hw, groups, eps):
    if c.used_outputs() - {0}:
        c.unsupported("its mean and rstd outputs (polysat computes the normalized tensor only)")
    dt = c.imp.uop(c.imp.value(x, c.name)).dtype.np
    w = np.ones(channels, dtype=dt) if w is None else w
    b = np.zeros(channels, dtype=dt) if b is None else b
    return (c.onnx("GroupNormalization", [x, w, b], num_groups=int(groups), epsilon=float(eps)), None, None)


@aten("aten.native_layer_norm.default")
def layer_norm(c: Call, x, shape, w, b, eps):
    axis = -len(shape)
    if w is None:  # elementwise_affine=False (OLMo): a scale of ones
        w = np.ones([int(d) for d in shape], dtype=c.imp.uop(c.imp.value(x, c.name)).dtype.np)
    if c.used_outputs() <= {0}:
        return (c.onnx("LayerNormalization", [x, w, b], axis=axis, epsilon=float(eps)), None, None)
    return tuple(c.onnx("LayerNormalization", [x, w, b], n_out=3, axis=axis, epsilon=float(eps)))


@aten("aten._softmax.default", "aten._log_softmax.default")
def softmax(c: Call, x, dim, half_to_float=False):
    return c.onnx("LogSoftmax" if "log" in c.op else "Softmax", [x], axis=int(dim))


def _reduce(onnx_op: str):
    def fn(c: Call, x, dims=None, keepdim=False, dtype=None):
        axes = list(range(len(c.shape(x)))) if not dims else list(dims if isinstance(dims, (list, tuple)) else [dims])
        if onnx_op == "ReduceSum" and c.np_dtype(x) == np.bool_:  # a count: torch sums bool as int64
            x = c.onnx("Cast", [x], to=7)
        return c.onnx(onnx_op, [x, _i64(axes)], keepdims=int(bool(keepdim)))
    return fn


aten("aten.sum.dim_IntList", "aten.sum.default")(_reduce("ReduceSum"))
aten("aten.mean.dim", "aten.mean.default")(_reduce("ReduceMean"))
aten("aten.amax.default")(_reduce("ReduceMax"))
aten("aten.amin.default")(_reduce("ReduceMin"))
aten("aten.max.default")(_reduce("ReduceMax"))
aten("aten.min.default")(_reduce("ReduceMin"))


@aten("aten.topk.default")
def topk(c: Call, x, k, dim=-1, largest=True, sorted=True):  # a mixture-of-experts router (Mixtral, Qwen2-MoE)
    return tuple(c.onnx("TopK", [x, _i64([k])], n_out=2, axis=int(dim), largest=int(bool(largest)),
                        sorted=int(bool(sorted))))


@aten("aten.sort.default", "aten.sort.stable")
def sort(c: Call, x, *args, dim=-1, descending=False, stable=None):
    """Every element ranked (JetMoE's router): TopK of the whole axis, ties to the lower index as a stable sort
    ranks them; integers ranked by their fp32 values (in order below 2^24 in magnitude) and gathered at the ranks."""
    if c.op == "aten.sort.default" and args:
        dim, *rest = args
        descending = rest[0] if rest else descending
    n = c.shape(x)[int(dim)]
    if not isinstance(n, int):
        c.unsupported(f"sorting an axis of symbolic size {n}")
    if np.issubdtype(c.np_dtype(x), np.floating):
        return topk(c, x, n, dim, bool(descending), True)
    _, idx = topk(c, c.onnx("Cast", [x], to=1), n, dim, bool(descending), True)
    return c.onnx("GatherElements", [x, idx], axis=int(dim)), idx


@aten("aten.argmax.default", "aten.argmin.default")
def argmax(c: Call, x, dim=None, keepdim=False):
    op = "ArgMax" if "argmax" in c.op else "ArgMin"
    if dim is None:  # over every element: of x flattened (keepdim keeps every axis at size 1)
        idx = c.onnx(op, [c.onnx("Reshape", [x, _i64([-1])])], axis=0, keepdims=1)
        return c.onnx("Reshape", [idx, _i64([1] * len(c.shape(x)) if keepdim else [])])
    return c.onnx(op, [x], axis=int(dim), keepdims=int(bool(keepdim)))


@aten("aten.max.dim", "aten.min.dim")
def max_dim(c: Call, x, dim, keepdim=False):
    big = "max" in c.op
    y = c.onnx("ReduceMax" if big else "ReduceMin", [x, _i64([dim])], keepdims=int(bool(keepdim)))
    return y, c.onnx("ArgMax" if big else "ArgMin", [x], axis=int(dim), keepdims=int(bool(keepdim)))


@aten("aten.max_pool2d_with_indices.default", "aten.max_pool3d_with_indices.default")
def max_pool(c: Call, x, kernel, stride=(), padding=0, dilation=1, ceil_mode=False):
    n = len(c.shape(x)) - 2
    kernel = _per_axis(kernel, n)
    y = c.onnx("MaxPool", [x], kernel_shape=kernel, strides=_per_axis(stride, n) if stride else kernel,
               pads=_per_axis(padding, n) * 2, dilations=_per_axis(dilation, n), ceil_mode=int(ceil_mode))
    return (y, None)


@aten("aten.avg_pool2d.default", "aten.avg_pool3d.default")
def avg_pool(c: Call, x, kernel, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
             divisor_override=None):
    if divisor_override is not None:
        c.unsupported("divisor_override")
    n = len(c.shape(x)) - 2
    kernel = _per_axis(kernel, n)
    return c.onnx("AveragePool", [x], kernel_shape=kernel, strides=_per_axis(stride, n) if stride else kernel,
                  pads=_per_axis(padding, n) * 2, ceil_mode=int(ceil_mode), count_include_pad=int(count_include_pad))


@aten("aten._adaptive_avg_pool2d.default", "aten.adaptive_avg_pool2d.default")
def adaptive_avg_pool(c: Call, x, size):
    """Output bin i of an axis of n averages elements [floor(i n / o), ceil((i + 1) n / o)): a global average
    for (1, 1), else two contractions with constant averaging matrices (exact for every size, the upsampling
    case of n < o too): Y = P_h X P_w^T."""
    if list(size) == [1, 1]:
        return c.onnx("GlobalAveragePool", [x])
    *lead, h, w = c.shape(x)
    if not all(isinstance(d, int) for d in (h, w)):
        c.unsupported("adaptive average pooling of symbolic spatial sizes")
    ph, pw = (adaptive_bins(n, int(o)) for n, o in ((h, size[0]), (w, size[1])))
    y = c.onnx("MatMul", [x, np.ascontiguousarray(pw.T)])                    # (.., H, Ow)
    y = c.onnx("Transpose", [y], perm=list(range(len(lead))) + [len(lead) + 1, len(lead)])  # (.., Ow, H)
    y = c.onnx("MatMul", [y, np.ascontiguousarray(ph.T)])                    # (.., Ow, Oh)
    return c.onnx("Transpose", [y], perm=list(range(len(lead))) + [len(lead) + 1, len(lead)])


def adaptive_bins(n: int, o: int) -> np.ndarray:
    """(o, n): row i averages torch's adaptive bin i of an axis of n elements."""
    p = np.zeros((o, n), dtype=np.float32)
    for i in range(o):
        lo, hi = (i * n) // o, -((-(i + 1) * n) // o)
        p[i, lo:hi] = 1.0 / (hi - lo)
    return p
