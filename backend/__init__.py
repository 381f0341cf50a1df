"""Backend: GEMM-family regions -> Schedule Plan -> GPU IR -> CUDA text (seed 000 §8-§12).

Entry points for the pipeline and the CLI (none of them needs a GPU):
  ``plan_gemm(spec, arch, env)``           -> SearchResult (ranked + pruned candidates)
  ``compile_gemm(spec, arch, env, plan)``  -> KernelSource (CUDA text + launch ABI)
  ``dump_plan / dump_gpu / write_cu``      -> the `--dump=plan,gpu,cu` artifacts
  ``match_gemm(program, name)``            -> GemmSpec | None for a whole Tiny IR program that is one
                                              GEMM-family kernel (until regions come from the e-graph)
The GPU runtime lives in ``polysat.backend.runtime`` (imports cuda-python lazily).
"""
from __future__ import annotations

import os
from typing import Mapping

from .codegen import KernelSource, render
from .from_tiny import match_gemm
from .gemm_spec import EpilogueOp, GemmSpec
from .gpu_ir import GpuIR, build_gpu_ir
from .plan import SchedulePlan
from .search import SearchResult, search

__all__ = ["EpilogueOp", "GemmSpec", "GpuIR", "KernelSource", "SchedulePlan", "SearchResult",
           "build_gpu_ir", "compile_gemm", "dump_gpu", "dump_plan", "match_gemm", "plan_gemm", "render", "search", "write_cu"]


def plan_gemm(spec: GemmSpec, arch: str = "sm90", env: Mapping[str, int] | None = None,
              hints: Mapping | None = None, cost=None) -> SearchResult:
    return search(spec, arch, env, hints, cost)


def compile_gemm(spec: GemmSpec, arch: str = "sm90", env: Mapping[str, int] | None = None,
                 plan: SchedulePlan | None = None, hints: Mapping | None = None, cost=None) -> KernelSource:
    return render(spec, plan or search(spec, arch, env, hints, cost).best)


def dump_plan(spec: GemmSpec, arch: str = "sm90", env: Mapping[str, int] | None = None, hints: Mapping | None = None) -> dict:
    """`--dump=plan`: the chosen plan in §8.1 form, with the ranked and pruned candidates."""
    return {"spec": spec.to_json(), **search(spec, arch, env, hints).to_json(spec)}


def dump_gpu(spec: GemmSpec, plan: SchedulePlan) -> dict:
    """`--dump=gpu`: the §9 statements with async tokens."""
    return build_gpu_ir(spec, plan).to_json()


def write_cu(ks: KernelSource, out_dir: str) -> str:
    """`--dump=cu`: write the standalone .cu file; returns its path."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{ks.name}.cu")
    with open(path, "w", encoding="utf-8") as f:
        f.write(ks.source)
    return path
