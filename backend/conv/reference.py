"""The numpy meaning of a ConvSpec: im2col, then the GEMM reference (inputs rounded to their types, fp32
accumulation, the epilogue in order); the input checks and random inputs of the tests and benchmarks."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ...ir.diagnostics import fail
from ...ir.dtypes import round_to
from ..gemm.reference import reference as gemm_reference
from ..gemm.spec import GemmSpec
from .spec import ConvSpec


def im2col(spec: ConvSpec, x: np.ndarray) -> np.ndarray:
    """The [M, K] matrix the A operand denotes, materialized (tests only): zero outside the input. x is
    [N, c, H, W] for any channel count c (one group's channels), so K = c * Kh * Kw."""
    ho, wo = spec.out_hw
    (sh, sw), (dh, dw) = spec.stride, spec.dilation
    pt, pl = spec.pad[0], spec.pad[2]
    nc = x.shape[1]
    xp = np.zeros((spec.n, nc, spec.h + pt + spec.pad[1] + sh * ho + dh * spec.kh,
                   spec.w + pl + spec.pad[3] + sw * wo + dw * spec.kw), dtype=x.dtype)
    xp[:, :, pt:pt + spec.h, pl:pl + spec.w] = x
    cols = np.empty((spec.n, ho, wo, nc, spec.kh, spec.kw), dtype=x.dtype)
    for r in range(spec.kh):
        for s in range(spec.kw):
            win = xp[:, :, dh * r: dh * r + sh * ho: sh, dw * s: dw * s + sw * wo: sw]  # [n, c, ho, wo]
            cols[:, :, :, :, r, s] = win.transpose(0, 2, 3, 1)
    return cols.reshape(spec.n * ho * wo, nc * spec.kh * spec.kw)


def check_inputs(spec: ConvSpec, inputs: Mapping[str, Any]) -> None:
    """E1111 / E1002 on a missing or misshapen input."""
    shapes = spec.shapes()
    for name in spec.inputs:
        if name not in inputs:
            fail("MissingInput", f"conv {spec.name!r}", f"input {name!r} is missing")
        if tuple(np.shape(inputs[name])) != shapes[name]:
            fail("AxisSizeMismatch", f"conv {spec.name!r}",
                 f"input {name!r} has shape {np.shape(inputs[name])}, expected {shapes[name]}")


def reference(spec: ConvSpec, inputs: Mapping[str, np.ndarray], env: Mapping[str, int] | None = None) -> np.ndarray:
    """NCHW result of the conv + epilogue: each group's implicit GEMM, via gemm_reference."""
    check_inputs(spec, inputs)
    ho, wo = spec.out_hw
    s = spec.gemm_sizes()
    cg, cog = spec.cg, spec.cog
    x = round_to(np.asarray(inputs[spec.x]), spec.in_dtype)
    w = np.asarray(inputs[spec.wt])
    g1 = GemmSpec(name=spec.name, m=s["m"], n=cog, k=s["k"], in_dtype=spec.in_dtype, out_dtype=spec.out_dtype,
                  a_layout="row", b_layout="col", epilogue=spec.epilogue, a=spec.x, b=spec.wt, c=spec.y)
    out = np.empty((spec.n, spec.co, ho, wo), dtype=spec.out_dtype.np)
    for g in range(spec.groups):
        ch = slice(g * cog, (g + 1) * cog)
        ginputs = {spec.x: im2col(spec, x[:, g * cg:(g + 1) * cg]), spec.wt: w[ch].reshape(cog, -1)}
        for op in spec.epilogue:
            if op.kind == "bias":
                ginputs[op.tensor] = np.asarray(inputs[op.tensor])[ch]
            elif op.kind == "residual":  # NCHW -> [M = (n, ho, wo), Cog]
                ginputs[op.tensor] = np.asarray(inputs[op.tensor])[:, ch].transpose(0, 2, 3, 1).reshape(-1, cog)
        v = gemm_reference(g1, ginputs)  # [M, Cog]
        out[:, ch] = v.reshape(spec.n, ho, wo, cog).transpose(0, 3, 1, 2)
    return out


def random_inputs(spec: ConvSpec, seed: int = 0) -> dict[str, np.ndarray]:
    """Uniform [-1, 1) inputs of the right shapes and dtypes, X and W scaled by K^-1/4 (sums stay O(1))."""
    rng = np.random.default_rng(seed)
    shapes, dts = spec.shapes(), spec.dtypes()
    scale = np.float32(spec.gemm_sizes()["k"] ** -0.25)
    out = {}
    for name in spec.inputs:
        v = rng.uniform(-1.0, 1.0, size=shapes[name]).astype(np.float32)
        out[name] = round_to(v * scale if name in (spec.x, spec.wt) else v, dts[name])
    return out
