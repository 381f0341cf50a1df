"""The GEMM-family kernel kind: a C-CON1 contraction with an elementwise epilogue (seed 000 §6.8.1, seed 001)."""
from __future__ import annotations

from .codegen import render
from .from_region import gemm_binding
from .gpu_ir import build_gpu_ir
from .kinds import KernelKind
from .reference import gemm_reference
from .search import search


def _launch(spec, tensors, env, out) -> None:
    from .runtime import run_gemm
    run_gemm(spec, tensors, env, out=out)


KIND = KernelKind("gemm", bind=gemm_binding, search=search, render=render, gpu_ir=build_gpu_ir, launch=_launch,
                  reference=gemm_reference)
