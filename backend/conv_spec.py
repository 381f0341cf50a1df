"""Conv2D as an implicit GEMM: the problem description and its numpy meaning (issue 7, seed 000 §6.8.1, §8).

``Y[n, co, ho, wo] = epilogue(sum_{c, r, s} W[co, c, r, s] * X[n, c, stride_h*ho + dil_h*r - pad_t,
stride_w*wo + dil_w*s - pad_l])`` with NCHW input, OIHW weights and NCHW output; out-of-bounds input
reads are zero. As a GEMM: M = N*Ho*Wo (row m = (n, ho, wo), wo fastest), N_gemm = Co, K = C*Kh*Kw
(column k = (c, r, s), s fastest), so B is W viewed as [Co, K] (a ``col`` operand, no copy) and the
A operand is an im2col view of X computed per element (``polysat::im2col_coord`` in polysat_gemm.cuh),
never materialized. The epilogue reuses :class:`EpilogueOp`; a bias is along Co (the GEMM's n axis).
Only ``groups == 1`` has a template (others: E1504 NoKernelTemplate).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ..ir.diagnostics import fail
from ..ir.dtypes import DType, round_to
from .gemm_spec import EpilogueOp, GemmSpec, IN_DTYPES, OUT_DTYPES


@dataclass(frozen=True)
class ConvSpec:
    name: str
    n: int
    c: int
    h: int
    w: int
    co: int
    kh: int
    kw: int
    stride: tuple[int, int] = (1, 1)
    pad: tuple[int, int, int, int] = (0, 0, 0, 0)   # top, bottom, left, right
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    in_dtype: DType = DType.fp16
    out_dtype: DType = DType.fp16
    epilogue: tuple[EpilogueOp, ...] = ()
    x: str = "X"
    wt: str = "W"
    y: str = "Y"

    def __post_init__(self):
        at = f"conv {self.name!r}"
        for v, what in ((self.n, "N"), (self.c, "C"), (self.h, "H"), (self.w, "W"), (self.co, "Co"),
                        (self.kh, "Kh"), (self.kw, "Kw"), (self.groups, "groups")):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                fail("UnaddressableShape", at, f"{what} = {v!r}; conv sizes are positive ints")
        if len(self.stride) != 2 or len(self.dilation) != 2 or len(self.pad) != 4:
            fail("InvalidAttribute", at, "stride and dilation take 2 ints, pad 4 (top, bottom, left, right)")
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in (*self.stride, *self.dilation)):
            fail("InvalidAttribute", at, f"stride {self.stride} / dilation {self.dilation} must be positive ints")
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in self.pad):
            fail("InvalidAttribute", at, f"pad {self.pad} must be non-negative ints")
        if self.groups != 1:
            fail("NoKernelTemplate", at, f"groups = {self.groups}: only groups = 1 convs have a CUDA template",
                 "Run grouped / depthwise convs with --target playback.")
        if self.in_dtype not in IN_DTYPES or self.out_dtype not in OUT_DTYPES:
            fail("DtypeMismatch", at, "conv inputs must be fp16|bf16 and the output fp16|bf16|fp32")
        ho, wo = self.out_hw
        if ho < 1 or wo < 1:
            fail("UnaddressableShape", at, f"the output would be {ho}x{wo}: the window does not fit the padded input")
        self.as_gemm()  # validates the epilogue with the GEMM rules

    @property
    def out_hw(self) -> tuple[int, int]:
        (sh, sw), (dh, dw), (pt, pb, pl, pr) = self.stride, self.dilation, self.pad
        ho = (self.h + pt + pb - dh * (self.kh - 1) - 1) // sh + 1
        wo = (self.w + pl + pr - dw * (self.kw - 1) - 1) // sw + 1
        return ho, wo

    def gemm_sizes(self) -> dict[str, int]:
        ho, wo = self.out_hw
        return {"batch": 1, "m": self.n * ho * wo, "n": self.co, "k": self.c * self.kh * self.kw}

    def as_gemm(self) -> GemmSpec:
        """The GEMM the conv is implicitly: A = im2col(X) [M, K] row, B = W as [Co, K] (``col``)."""
        s = self.gemm_sizes()
        return GemmSpec(name=self.name, m=s["m"], n=s["n"], k=s["k"], in_dtype=self.in_dtype,
                        out_dtype=self.out_dtype, a_layout="row", b_layout="col", epilogue=self.epilogue,
                        a=self.x, b=self.wt, c=self.y)

    def shapes(self) -> dict[str, tuple[int, ...]]:
        ho, wo = self.out_hw
        out = {self.x: (self.n, self.c, self.h, self.w), self.wt: (self.co, self.c, self.kh, self.kw),
               self.y: (self.n, self.co, ho, wo)}
        for op in self.epilogue:
            if op.kind == "bias":
                out[op.tensor] = (self.co,)
            elif op.kind == "residual":
                out[op.tensor] = out[self.y]
        return out

    def geometry(self) -> tuple[int, ...]:
        """The ints polysat::ConvGeom is built from, in its field order."""
        ho, wo = self.out_hw
        return (self.c, self.h, self.w, self.kh, self.kw, ho, wo, *self.stride, self.pad[0], self.pad[2], *self.dilation)


def im2col(spec: ConvSpec, x: np.ndarray) -> np.ndarray:
    """The [M, K] matrix the A operand denotes, materialized (tests only): zero outside the input."""
    ho, wo = spec.out_hw
    (sh, sw), (dh, dw) = spec.stride, spec.dilation
    pt, pl = spec.pad[0], spec.pad[2]
    xp = np.zeros((spec.n, spec.c, spec.h + pt + spec.pad[1] + sh * ho + dh * spec.kh,
                   spec.w + pl + spec.pad[3] + sw * wo + dw * spec.kw), dtype=x.dtype)
    xp[:, :, pt:pt + spec.h, pl:pl + spec.w] = x
    cols = np.empty((spec.n, ho, wo, spec.c, spec.kh, spec.kw), dtype=x.dtype)
    for r in range(spec.kh):
        for s in range(spec.kw):
            win = xp[:, :, dh * r: dh * r + sh * ho: sh, dw * s: dw * s + sw * wo: sw]  # [n, c, ho, wo]
            cols[:, :, :, :, r, s] = win.transpose(0, 2, 3, 1)
    return cols.reshape(spec.n * ho * wo, spec.c * spec.kh * spec.kw)


def conv_reference(spec: ConvSpec, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    """NCHW result of the conv + epilogue: the implicit GEMM's meaning, via gemm_reference."""
    from .reference import gemm_reference
    shapes = spec.shapes()
    for name in (spec.x, spec.wt, *(op.tensor for op in spec.epilogue if op.tensor is not None)):
        if name not in inputs:
            fail("MissingInput", f"conv {spec.name!r}", f"input {name!r} is missing")
        if tuple(np.shape(inputs[name])) != shapes[name]:
            fail("AxisSizeMismatch", f"conv {spec.name!r}",
                 f"input {name!r} has shape {np.shape(inputs[name])}, expected {shapes[name]}")
    ho, wo = spec.out_hw
    g = spec.as_gemm()
    ginputs = {spec.x: im2col(spec, round_to(inputs[spec.x], spec.in_dtype)),
               spec.wt: np.asarray(inputs[spec.wt]).reshape(spec.co, -1)}
    for op in spec.epilogue:
        if op.kind == "bias":
            ginputs[op.tensor] = inputs[op.tensor]
        elif op.kind == "residual":  # NCHW -> [M = (n, ho, wo), Co]
            ginputs[op.tensor] = np.asarray(inputs[op.tensor]).transpose(0, 2, 3, 1).reshape(-1, spec.co)
    v = gemm_reference(g, ginputs)  # [M, Co]
    return v.reshape(spec.n, ho, wo, spec.co).transpose(0, 3, 1, 2)
