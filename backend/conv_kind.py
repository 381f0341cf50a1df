"""The implicit-GEMM conv kernel kind: a Conv2D region (SUM over (c, r, s) of a guarded X read times W) with an
elementwise epilogue, on the GEMM skeleton with the im2col producer (issue 7)."""
from __future__ import annotations

from .conv_codegen import render_conv
from .conv_from_region import conv_binding
from .conv_gpu_ir import build_conv_gpu_ir
from .conv_plan import conv_search
from .conv_spec import conv_reference
from .kinds import KernelKind


def _launch(spec, tensors, env, out) -> None:
    from .conv_runtime import run_conv
    run_conv(spec, tensors, out=out)


KIND = KernelKind("conv", bind=conv_binding, search=conv_search, render=render_conv, gpu_ir=build_conv_gpu_ir,
                  launch=_launch, reference=conv_reference)
