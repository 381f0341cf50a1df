"""The numpy meaning of a ConvPoolSpec: the conv reference, its epilogue, then the max-pool window by window
(padding reads -inf); random inputs for the tests and benchmarks."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ...ir.dtypes import round_to
from ..conv.reference import check_inputs as check_conv_inputs
from ..conv.reference import random_inputs as random_conv_inputs
from ..conv.reference import reference as conv_reference
from .spec import ConvPoolSpec


def reference(spec: ConvPoolSpec, inputs: Mapping[str, np.ndarray],
                        env: Mapping[str, int] | None = None) -> np.ndarray:
    """NCHW pooled output: the conv's meaning (conv_reference) cropped to conv_hw, max-pooled with -inf padding."""
    check_conv_inputs(spec.conv, inputs)
    ho, wo = spec.conv_hw
    z = conv_reference(spec.conv, inputs)[:, :, :ho, :wo].astype(np.float32)
    (kh, kw), (sh, sw), (pt, pl), (dh, dw), (hp, wp) = spec.kernel, spec.stride, spec.pad, spec.dilation, spec.out_hw
    hz = max(ho + pt, (hp - 1) * sh + (kh - 1) * dh + 1)
    wz = max(wo + pl, (wp - 1) * sw + (kw - 1) * dw + 1)
    zp = np.full(z.shape[:2] + (hz, wz), -np.inf, np.float32)
    zp[:, :, pt:pt + ho, pl:pl + wo] = z
    out = np.full(z.shape[:2] + (hp, wp), -np.inf, np.float32)
    for i in range(kh):
        for j in range(kw):
            out = np.maximum(out, zp[:, :, i * dh: i * dh + (hp - 1) * sh + 1: sh, j * dw: j * dw + (wp - 1) * sw + 1: sw])
    return round_to(out, spec.conv.out_dtype)


def random_inputs(spec: ConvPoolSpec, seed: int = 0) -> dict[str, np.ndarray]:
    return random_conv_inputs(spec.conv, seed)
