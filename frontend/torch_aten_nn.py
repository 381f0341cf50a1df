"""The ATen mappings of a network's layers (contractions: mm, bmm, addmm and einsum; convolution, batch, group and
layer norms, softmax, reductions, sorts, pools, adaptive pools and upsampling) and of its reads and writes at index
tensors (boolean masks as their true positions; scatters) onto the ONNX handlers, registered in ``torch_aten.ATEN``
beside the elementwise and movement ones (frontend/torch_export.py, which imports this module)."""
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
    """eval-mode batch_norm of fp32 x whose statistics, weight and bias are the model's constants (a deployed
    model's): x s + (b - mean s) per channel, s = w / sqrt(var + eps), s and the shift folded at import into
    per-channel constants, as ONNX exporters fold them into the convolution before (computed per kernel at run
    time, Inception-v1's branch convolutions stayed apart from their concatenation); otherwise
    BatchNormalization."""
    known = all(isinstance(t, str) and t in c.imp.consts for t in (w, b, mean, var))
    if not known or c.np_dtype(x) != np.float32:
        return (c.onnx("BatchNormalization", [x, w, b, mean, var], epsilon=float(eps)), None, None)
    s = c.onnx("Div", [w, c.onnx("Sqrt", [c.onnx("Add", [var, c.like(float(eps), var)])])])
    shift = c.onnx("Sub", [b, c.onnx("Mul", [mean, s])])
    per_channel = _i64([1, -1] + [1] * (len(c.shape(x)) - 2))
    y = c.onnx("Add", [c.onnx("Mul", [x, c.onnx("Reshape", [s, per_channel])]),
                       c.onnx("Reshape", [shift, per_channel])])
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


@aten("aten.index.Tensor")
def index(c: Call, x, indices):
    """x[..., idx, ...] with one index tensor (the others None): a Gather along its axis. Several index tensors
    (``mask[batch_idx, kv_idx]``, transformers' mask functions) broadcast together and index one element each of
    their axes: a Gather of those axes merged into one, at the row-major flat index of the (wrapped) indices. As
    torch places it, the broadcast index shape replaces adjacent indexed axes where they stand and comes first
    when other axes separate them. A boolean mask over r axes is the r index tensors of its true positions
    (``mask.nonzero()``, as torch defines it): a constant mask only, as the result's shape is the mask's count."""
    indices = _index_tensors(c, indices)
    given = [(k, t) for k, t in enumerate(indices) if t is not None]
    if not given:
        c.unsupported("indexing by no index tensor")
    if len(given) == 1:
        axis, idx = given[0]
        return c.onnx("Gather", [x, idx], axis=axis)
    shape = list(c.shape(x))
    axes = [k for k, _ in given]
    if axes != list(range(axes[0], axes[0] + len(axes))):  # separated: the indexed axes first, in order
        rest = [k for k in range(len(shape)) if k not in axes]
        x = c.onnx("Transpose", [x], perm=axes + rest)
        shape, axes = [shape[k] for k in axes + rest], list(range(len(axes)))
    flat = None
    for (_, idx), a in zip(given, axes):
        size = np.asarray(shape[a], dtype=np.int64)
        idx = c.onnx("Cast", [idx], to=7)  # int64
        idx = c.onnx("Where", [c.onnx("Less", [idx, np.asarray(0, np.int64)]), c.onnx("Add", [idx, size]), idx])
        flat = idx if flat is None else c.onnx("Add", [c.onnx("Mul", [flat, size]), idx])
    merged = shape[:axes[0]] + [int(np.prod([shape[a] for a in axes]))] + shape[axes[-1] + 1:]
    return c.onnx("Gather", [c.onnx("Reshape", [x, _i64(merged)]), flat], axis=axes[0])


@aten("aten.index_put.default", "aten.index_put_.default")
def index_put(c: Call, x, indices, values, accumulate=False):
    """``x[idx] = values`` (XMOD's adapters: ``y[mask] = f(x[mask])``) with constant index tensors (boolean masks as
    their true positions) on x's leading axes: ONNX ScatterND at their broadcast positions, values broadcast to the
    rows they write."""
    indices = _index_tensors(c, indices)
    if accumulate or any(t is None or not isinstance(t, np.ndarray) and t not in c.imp.consts for t in indices):
        c.unsupported("an assignment through index tensors computed at run time, or accumulating, or after a full "
                      "slice (polysat takes constant indices on the leading axes)")
    shape = list(c.shape(x))
    pos = np.broadcast_arrays(*[np.asarray(c.imp.consts[t] if isinstance(t, str) else t, np.int64) for t in indices])
    rows = np.stack(pos, axis=-1) if pos[0].ndim else np.stack(pos)[None]
    rows = np.where(rows < 0, rows + np.asarray(shape[:len(indices)]), rows)
    want = list(rows.shape[:-1]) + shape[len(indices):]
    if list(c.shape(values)) != want:
        values = c.onnx("Expand", [values, _i64(want)])
    return c.onnx("ScatterND", [x, rows, values])


def _index_tensors(c: Call, indices: list) -> list:
    """torch's index tensors with each boolean mask over r axes made the r index tensors of its true positions."""
    return [n for t in indices for n in (_true_positions(c, t) if t is not None and c.np_dtype(t) == np.bool_
                                         else [t])]


def _true_positions(c: Call, mask: str) -> list:
    """The index tensors (one per axis of the mask) of a constant boolean mask's true elements."""
    if mask not in c.imp.consts:
        c.unsupported("a boolean mask index computed at run time: the result's shape would be its count of true "
                      "elements")
    return [np.asarray(p, dtype=np.int64) for p in np.nonzero(np.asarray(c.imp.consts[mask]))]


@aten("aten.scatter.src", "aten.scatter.value", "aten.scatter_add.default", "aten.scatter_reduce.two")
def scatter(c: Call, x, dim, index, src, reduce=None, include_self=True):
    """``x.scatter(dim, index, src or value)``, ``scatter_add``, ``scatter_reduce`` (sum, amax, amin, with x's own
    values included): ONNX ScatterElements, src cut to the index's shape (torch reads only that corner of it)."""
    if c.op == "aten.scatter_reduce.two":
        red = {"sum": "add", "amax": "max", "amin": "min"}.get(reduce)
    else:
        red = "add" if c.op == "aten.scatter_add.default" else "none"
    if red is None or not include_self:
        c.unsupported(f"scatter_reduce {reduce!r}" + ("" if include_self else " without x's own values"))
    shape = list(c.shape(index))
    if not isinstance(src, str):  # a value: every update
        src = np.full(shape, src, dtype=c.np_dtype(x))
    elif list(c.shape(src)) != shape:
        src = c.onnx("Slice", [src, _i64([0] * len(shape)), _i64(shape), _i64(list(range(len(shape))))])
    return c.onnx("ScatterElements", [x, index, src], axis=int(dim), reduction=red)


@aten("aten.grid_sampler_2d.default", "aten.grid_sampler_3d.default")
def grid_sampler(c: Call, x, grid, interpolation_mode=0, padding_mode=0, align_corners=False):
    """``F.grid_sample`` of a 4-D or 5-D input (RAFT, RT-DETR): ONNX GridSample, its modes by torch's numbers."""
    modes, pads = {0: "bilinear", 1: "nearest", 2: "bicubic"}, {0: "zeros", 1: "border", 2: "reflection"}
    return c.onnx("GridSample", [x, grid], mode=modes[int(interpolation_mode)], padding_mode=pads[int(padding_mode)],
                  align_corners=int(bool(align_corners)))


@aten("aten.mm.default", "aten.bmm.default", "aten.matmul.default")
def mm(c: Call, a, b):
    x = _unflattened(c, a) if c.op == "aten.mm.default" else None
    if x is not None:
        return c.onnx("Reshape", [c.onnx("MatMul", [x, b]), _i64(c.shape(a)[:1] + c.shape(b)[1:])])
    xy = _unbatched(c, a, b) if c.op == "aten.bmm.default" else None
    if xy is not None:
        return c.onnx("Reshape", [c.onnx("MatMul", list(xy)), _i64(list(c.node.meta["val"].shape))])
    return c.onnx("MatMul", [a, b])


@aten("aten.addmm.default")
def addmm(c: Call, bias, a, b, beta=1, alpha=1):
    x = _unflattened(c, a) if alpha == 1 and beta == 1 else None
    if x is not None:
        y = c.onnx("Add", [c.onnx("MatMul", [x, b]), bias])
        return c.onnx("Reshape", [y, _i64(c.shape(a)[:1] + c.shape(b)[1:])])
    return c.onnx("Gemm", [a, b, bias], alpha=float(alpha), beta=float(beta))


def _unflattened(c: Call, a) -> "str | None":
    """X when the matrix ``a`` is X [.., M', K] reshaped to [M, K] (M the product of X's leading sizes) and every
    reader views the product back to [.., M', N]: torch.export's ``linear`` of a batched input, decomposed. Its
    product is computed on X, as the ONNX exporter's MatMul is, and flattened after: the same numbers, and no reshape
    between the contraction and what made X (a LayerNorm's rows merged across the batch read as many-to-many by the
    fusion rules: LayerNorm + Linear at batch 2 was 2 kernels). An importer's canonical form, not the rules' fix: an
    ONNX graph that flattens before its MatMul meets the same refusal."""
    x = _merged_from(c, a)
    if x is None:
        return None
    xs, (m, k) = c.imp.uop(x).shape, c.shape(a)
    if len(xs) < 3 or xs[-1] != k or not all(isinstance(d, int) for d in xs) or int(np.prod(xs[:-1])) != m:
        return None
    n = c.node.meta["val"].shape[-1]  # every reader views the product back to X's leading sizes (a linear's output)
    return x if _read_back_as(c, list(xs[:-1]) + [int(n)]) else None


def _merged_from(c: Call, a) -> "str | None":
    """X when the value ``a`` is a Reshape of X (an argument of the graph's, not a constant), else None."""
    if not isinstance(a, str) or a in c.imp.consts:
        return None
    t = c.imp.value(a, c.name)
    made = next((n for n in reversed(c.imp.nodes) if n["outputs"] == [t]), None)
    return made["inputs"][0] if made is not None and made["op"] == "Reshape" else None


def _unbatched(c: Call, a, b) -> "tuple | None":
    """(X, Y) when ``bmm(a, b)`` multiplies X [*L, M, K] and Y [*L, K, N] with their leading dims L merged into
    one batch dim and every reader views the product back to [*L, M, N]: torch.export's ``matmul`` of 4-D
    tensors (attention's scores and P @ V), decomposed. The product is computed on X and Y, as the ONNX
    exporter's MatMul is: the scores' softmax then sits in the contraction's own axes, where attention's rules
    read it (it was 3 kernels, and 1 from ONNX); the numbers are the same. An importer's canonical form, as
    ``_unflattened``."""
    x, y = _merged_from(c, a), _merged_from(c, b)
    if x is None or y is None:
        return None
    xs, ys = c.imp.uop(x).shape, c.imp.uop(y).shape
    (bt, m, k), n = c.shape(a), c.shape(b)[-1]
    lead = list(xs[:-2])
    if len(xs) < 4 or list(ys[:-2]) != lead or tuple(xs[-2:]) != (m, k) or tuple(ys[-2:]) != (k, n) or \
            not all(isinstance(d, int) for d in (*xs, *ys)) or int(np.prod(lead)) != bt:
        return None
    return (x, y) if _read_back_as(c, lead + [int(m), int(n)]) else None


_VIEWS = ("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default")


def _read_back_as(c: Call, shape: list) -> bool:
    """Every reader of the call's value views it as ``shape``."""
    return bool(c.node.users) and all(str(u.target) in _VIEWS and [int(d) for d in u.args[1]] == shape
                                      for u in c.node.users)


@aten("aten.einsum.default")
def einsum(c: Call, equation, tensors, path=None):
    return c.onnx("Einsum", list(tensors), equation=equation.replace(" ", ""))
