"""ONNX op handlers, part 7: ConvTranspose (DPT's and U-Net's upsampling, segmentation heads) as the convolution it
equals: the input with stride - 1 zeros put between its elements along each spatial axis, padded by
``dilation * (kernel - 1) - pad`` (plus ``output_padding`` at the end; a negative amount crops), convolved at stride 1
with the kernel flipped along its spatial axes and its in/out channels swapped within each group. The weight's
rearrangement folds at import when W is a parameter. The zeros are computed on: a stride s does s^d times the
useful work of a d-D transposed convolution (a dedicated kernel kind would skip them).
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
    y = x
    for k in range(nd):
        if strides[k] > 1:
            y = _zeros_between(imp, at, y, 2 + k, strides[k])
        span = dil[k] * (kernel[k] - 1)
        y = _pad_or_crop(imp, at, y, 2 + k, span - pads[k], span - pads[nd + k] + extra[k])
    # W [C, M/g, k...] -> [M, C/g, k...] flipped: per group, in and out channels swapped
    g = imp.call("Reshape", f"{at}/w", [w, _i64([groups, cin // groups, mg] + kernel)])[0]
    g = imp.call("Transpose", f"{at}/w", [g], {"perm": [0, 2, 1] + list(range(3, 3 + nd))})[0]
    g = imp.call("Reshape", f"{at}/w", [g, _i64([groups * mg, cin // groups] + kernel)])[0]
    spatial = list(range(2, 2 + nd))
    big = np.iinfo(np.int64).max
    g = imp.call("Slice", f"{at}/w", [g, _i64([-1] * nd), _i64([-big] * nd), _i64(spatial), _i64([-1] * nd)])[0]
    ins = [y, g] + ([node.inputs[2]] if node.has(2) else [])
    return imp.call("Conv", at, ins, {"dilations": dil, "group": groups, "kernel_shape": kernel,
                                      "pads": [0] * 2 * nd, "strides": [1] * nd})
