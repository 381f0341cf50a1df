"""The conv + epilogue + max-pool kernel kind (compute-at, seed 003): the pool tile drives the conv tile, the
conv's halo rows are recomputed and its result never reaches device memory (issue 7)."""
from __future__ import annotations

from .conv_codegen import render_conv
from .conv_gpu_ir import build_conv_gpu_ir
from .conv_plan import conv_search
from .conv_pool_from_region import conv_pool_binding
from .conv_pool_spec import conv_pool_reference
from .kinds import KernelKind


def _launch(spec, tensors, env, out) -> None:
    from .conv_runtime import run_conv
    run_conv(spec, tensors, out=out)


KIND = KernelKind("conv_pool", bind=conv_pool_binding, search=conv_search, render=render_conv,
                  gpu_ir=build_conv_gpu_ir, launch=_launch, reference=conv_pool_reference)
