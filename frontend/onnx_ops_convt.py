"""ONNX op handlers, part 7: ConvTranspose (DPT's and U-Net's upsampling, segmentation heads) as the convolutions it
equals. It is one convolution of the input with stride - 1 zeros put between its elements along each spatial axis,
padded by ``L = dilation * (kernel - 1) - pad`` (plus ``output_padding`` at the end; a negative amount crops), at
stride 1 with the kernel flipped along its spatial axes and its in/out channels swapped within each group; that
computes on the zeros, s^d times the useful work of a d-D transposed convolution at stride s. So where strided it is
written by phases: output o = s q + r of an axis reads the input only through the flipped kernel's taps t with
d t = L - r (mod s), d the dilation: with e = gcd(d, s), none unless e divides L - r, else t = t_r, t_r + s/e, .. (t_r
the least), at input index q + c_r + j d/e for tap t_r + j s/e (c_r = (r + d t_r - L) / s). Each phase (r_1, .., r_d)
is then a stride-1 convolution of the input, padded or cropped by -c_r, with the sub-kernel of those taps at dilation
d/e (a phase without a tap along some axis is the bias alone); the phases are interleaved (each padded to ceil(out / s)
along its axes, stacked on a new axis after it, reshaped) and cropped to the output. The weight's rearrangement folds
at import when W is a parameter.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from .onnx_table import handler, i64 as _i64

if TYPE_CHECKING:  # annotations only (frontend/onnx.py loads the handlers)
    from .onnx import Importer, OnnxNode


def _pad_or_crop(imp: Importer, at: str, x: str, axis: int, lo: int, hi: int) -> str:
    """x padded with zeros (a positive amount) or cropped (a negative one) at each end of axis."""
    n = imp.shape(x)[axis]
    if lo < 0 or hi < 0:
        x = imp.call("Slice", f"{at}/crop{axis}", [x, _i64([max(0, -lo)]), _i64([n - max(0, -hi)]), _i64([axis])])[0]
        lo, hi = max(0, lo), max(0, hi)
    if lo or hi:
        rank = len(imp.shape(x))
        pads = [0] * (2 * rank)
        pads[axis], pads[rank + axis] = lo, hi
        x = imp.call("Pad", f"{at}/pad{axis}", [x, _i64(pads)])[0]
    return x


@handler("ConvTranspose")
def conv_transpose(imp: Importer, node: OnnxNode) -> list:
    at = node.name
    x, w = imp.value(node.inputs[0], at), node.inputs[1]  # W by its name: a parameter's rearrangement folds
    xs = list(imp.shape(x))
    ws = list(np.shape(imp.consts[w])) if w in imp.consts else list(imp.shape(imp.value(w, at)))
    nd = len(xs) - 2
    if nd < 1 or len(ws) != nd + 2 or not all(isinstance(d, int) for d in xs[2:] + ws):
        node.unsupported("ConvTranspose needs static spatial sizes and a weight of rank 3 to 5")
    kernel = ws[2:]
    ks = node.attr("kernel_shape")
    if ks is not None and list(ks) != kernel:
        node.unsupported(f"kernel_shape {list(ks)} differs from W's spatial shape", "kernel_shape")
    if node.attr("auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET"):
        node.unsupported(f"auto_pad {node.attr('auto_pad')!r} (give pads)", "auto_pad")
    if node.attr("output_shape") is not None:
        node.unsupported("output_shape (give pads and output_padding)", "output_shape")
    strides = list(node.attr("strides", [1] * nd))
    dil = list(node.attr("dilations", [1] * nd))
    pads = list(node.attr("pads", [0] * 2 * nd))
    extra = list(node.attr("output_padding", [0] * nd))
    groups = int(node.attr("group", 1))
    cin, mg = ws[0], ws[1]
    if cin % groups or xs[1] != cin:
        node.unsupported(f"W's {cin} input channels for X's {xs[1]} in {groups} groups")
    # W [C, M/g, k...] -> [M, C/g, k...] flipped: per group, in and out channels swapped
    g = imp.call("Reshape", f"{at}/w", [w, _i64([groups, cin // groups, mg] + kernel)])[0]
    g = imp.call("Transpose", f"{at}/w", [g], {"perm": [0, 2, 1] + list(range(3, 3 + nd))})[0]
    g = imp.call("Reshape", f"{at}/w", [g, _i64([groups * mg, cin // groups] + kernel)])[0]
    spatial = list(range(2, 2 + nd))
    big = np.iinfo(np.int64).max
    g = imp.call("Slice", f"{at}/w", [g, _i64([-1] * nd), _i64([-big] * nd), _i64(spatial), _i64([-1] * nd)])[0]
    bias = [node.inputs[2]] if node.has(2) else []
    lead = [dil[k] * (kernel[k] - 1) - pads[k] for k in range(nd)]  # L: the padding before the spread input
    out = [(xs[2 + k] - 1) * strides[k] + 1 + lead[k] - pads[nd + k] + extra[k] for k in range(nd)]
    if any(s > 1 for s in strides):
        return [_by_phases(imp, at, x, g, bias, strides, dil, kernel, lead, out, groups, groups * mg)]
    y = x
    for k in range(nd):
        span = dil[k] * (kernel[k] - 1)
        y = _pad_or_crop(imp, at, y, 2 + k, span - pads[k], span - pads[nd + k] + extra[k])
    return imp.call("Conv", at, [y, g] + bias, {"dilations": dil, "group": groups, "kernel_shape": kernel,
                                               "pads": [0] * 2 * nd, "strides": [1] * nd})


def _taps(stride: int, dil: int, kernel: int, lead: int, r: int) -> tuple:
    """(first tap t_r, taps, their step s/e, input offset c_r, dilation d/e) of phase r along one axis (the module
    docstring); taps 0 where no tap reaches the phase."""
    e = math.gcd(dil, stride)
    step, d = stride // e, dil // e
    if (lead - r) % e:
        return 0, 0, step, 0, d
    t0 = (lead - r) // e * pow(d, -1, step) % step if step > 1 else 0
    if t0 >= kernel:
        return t0, 0, step, 0, d
    return t0, -(-(kernel - t0) // step), step, (r + dil * t0 - lead) // stride, d


def _by_phases(imp: Importer, at: str, x: str, g: str, bias: list, strides: list, dil: list, kernel: list, lead: list,
               out: list, groups: int, m: int) -> str:
    """The transposed convolution by phases (the module docstring): g the flipped, channel-swapped kernel of m
    output channels."""
    nd = len(strides)
    xs = list(imp.shape(x))
    n_in = xs[2:]
    whole = [-(-out[k] // strides[k]) for k in range(nd)]  # ceil(out / s): every phase padded to it

    def phase(r: tuple) -> str:
        taps = [_taps(strides[k], dil[k], kernel[k], lead[k], r[k]) for k in range(nd)]
        if any(n == 0 for _, n, _, _, _ in taps):  # no tap reaches it: the bias alone
            y = imp.materialize(np.broadcast_to(np.zeros((), imp.dtype(x).np), [xs[0], m] + whole), f"{at}/phase", at)
            if bias:
                b = imp.call("Reshape", f"{at}/phase", [bias[0], _i64([1, m] + [1] * nd)])[0]
                y = imp.call("Add", f"{at}/phase", [y, b])[0]
            return y
        y = x
        for k, (_, n, _, c, d) in enumerate(taps):
            q = len(range(r[k], out[k], strides[k]))  # outputs of this phase
            y = _pad_or_crop(imp, f"{at}/phase", y, 2 + k, -c, q + (n - 1) * d - (n_in[k] - c))
        big = np.iinfo(np.int64).max
        w = imp.call("Slice", f"{at}/w", [g, _i64([t[0] for t in taps]), _i64([big] * nd), _i64(list(range(2, 2 + nd))),
                                           _i64([t[2] for t in taps])])[0]
        y = imp.call("Conv", f"{at}/phase", [y, w] + bias, {"group": groups, "kernel_shape": [t[1] for t in taps],
                                                             "dilations": [t[4] for t in taps],
                                                             "pads": [0] * 2 * nd, "strides": [1] * nd})[0]
        for k in range(nd):  # to ceil(out / s) outputs: the last phases of an axis may hold one fewer
            y = _pad_or_crop(imp, f"{at}/phase", y, 2 + k, 0, whole[k] - imp.shape(y)[2 + k])
        return y

    def interleave(k: int, r: tuple) -> str:  # the phases r + (every r_k, ..) along axes k.. interleaved
        if k == nd:
            return phase(r)
        parts = [imp.call("Unsqueeze", f"{at}/interleave", [interleave(k + 1, r + (j,)), _i64([3 + k])])[0]
                 for j in range(strides[k])]
        y = imp.call("Concat", f"{at}/interleave", parts, {"axis": 3 + k})[0] if len(parts) > 1 else parts[0]
        shape = list(imp.shape(y))
        merged = shape[:2 + k] + [shape[2 + k] * strides[k]] + shape[4 + k:]
        return imp.call("Reshape", f"{at}/interleave", [y, _i64(merged)])[0]
    y = interleave(0, ())
    for k in range(nd):
        y = _pad_or_crop(imp, f"{at}/crop", y, 2 + k, 0, out[k] - imp.shape(y)[2 + k])
    return y
