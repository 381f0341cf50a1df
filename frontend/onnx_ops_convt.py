"""ONNX op handlers, part 7: ConvTranspose (DPT's and U-Net's upsampling, segmentation heads) as the convolutions it
equals. Written as one convolution: the input with stride - 1 zeros put between its elements along each spatial axis,
padded by ``dilation * (kernel - 1) - pad`` (plus ``output_padding`` at the end; a negative amount crops), convolved
at stride 1 with the kernel flipped along its spatial axes and its in/out channels swapped within each group; that
computes on the zeros, s^d times the useful work of a d-D transposed convolution at stride s. So where every
dilation is 1 and each phase has a tap (kernel >= stride), it is written by phases instead: output o = s q + r of an
axis reads the input only through the flipped kernel's taps t = t_r, t_r + s, .. (t_r = (L - r) mod s, L the
padding before the spread input), at input index q + c_r + j for tap t_r + s j (c_r = (r + t_r - L) / s). Each
phase (r_1, .., r_d) is then a stride-1 convolution of the input, padded or cropped by -c_r, with the sub-kernel of
those taps; the phases are interleaved (each padded to ceil(out / s) along its axes, stacked on a new axis after
it, reshaped) and cropped to the output. The weight's rearrangement folds at import when W is a parameter.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .onnx_table import handler, i64 as _i64

if TYPE_CHECKING:  # annotations only (frontend/onnx.py loads the handlers)
    from .onnx import Importer, OnnxNode


def _zeros_between(imp: Importer, at: str, x: str, axis: int, stride: int) -> str:
    """x with stride - 1 zeros after each element along axis but the last: size (n - 1) * stride + 1."""
    shape = list(imp.shape(x))
    n = shape[axis]
    y = imp.call("Unsqueeze", f"{at}/spread{axis}", [x, _i64([axis + 1])])[0]
    pads = [0] * (2 * (len(shape) + 1))
    pads[len(shape) + 1 + axis + 1] = stride - 1  # the end of the new axis
    y = imp.call("Pad", f"{at}/spread{axis}", [y, _i64(pads)])[0]
    y = imp.call("Reshape", f"{at}/spread{axis}", [y, _i64(shape[:axis] + [n * stride] + shape[axis + 1:])])[0]
    return imp.call("Slice", f"{at}/spread{axis}", [y, _i64([0]), _i64([(n - 1) * stride + 1]), _i64([axis])])[0]


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
    if any(s > 1 for s in strides) and all(d == 1 for d in dil) and all(kernel[k] >= strides[k] for k in range(nd)):
        return [_by_phases(imp, at, x, g, bias, strides, kernel, lead, out, groups)]
    y = x
    for k in range(nd):
        if strides[k] > 1:
            y = _zeros_between(imp, at, y, 2 + k, strides[k])
        span = dil[k] * (kernel[k] - 1)
        y = _pad_or_crop(imp, at, y, 2 + k, span - pads[k], span - pads[nd + k] + extra[k])
    return imp.call("Conv", at, [y, g] + bias, {"dilations": dil, "group": groups, "kernel_shape": kernel,
                                               "pads": [0] * 2 * nd, "strides": [1] * nd})


def _by_phases(imp: Importer, at: str, x: str, g: str, bias: list, strides: list, kernel: list, lead: list, out: list,
               groups: int) -> str:
    """The transposed convolution by phases (the module docstring): g the flipped, channel-swapped kernel."""
    nd = len(strides)
    n_in = list(imp.shape(x))[2:]
    whole = [-(-out[k] // strides[k]) for k in range(nd)]  # ceil(out / s): every phase padded to it

    def phase(r: tuple) -> str:
        y, starts, subs = x, [], []
        for k in range(nd):
            s, t0 = strides[k], (lead[k] - r[k]) % strides[k]
            taps = -(-(kernel[k] - t0) // s)
            c = (r[k] + t0 - lead[k]) // s
            q = len(range(r[k], out[k], s))  # outputs of this phase
            y = _pad_or_crop(imp, f"{at}/phase", y, 2 + k, -c, q + taps - 1 - (n_in[k] - c))
            starts.append(t0)
            subs.append(taps)
        big = np.iinfo(np.int64).max
        w = imp.call("Slice", f"{at}/w", [g, _i64(starts), _i64([big] * nd), _i64(list(range(2, 2 + nd))),
                                           _i64(strides)])[0]
        y = imp.call("Conv", f"{at}/phase", [y, w] + bias, {"group": groups, "kernel_shape": subs,
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
