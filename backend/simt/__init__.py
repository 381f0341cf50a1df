"""The SIMT kernel kind: every region without a tensor-core contraction (elementwise chains, casts,
broadcasts, row reductions on any axis, pooling windows, small or skinny contractions) as one kernel
generated from its RB-SSA ops. Tried last: the MMA kinds win the regions they take.

bind (bind.py) -> spec (spec.py) -> plan search (plan.py) -> GPU IR (gpu_ir.py) -> CUDA text (render.py,
emit.py) -> launch (launch.py); reference.py is the numpy meaning.
"""
from __future__ import annotations

from ..kinds import KernelKind
from .bind import simt_binding
from .gpu_ir import build_simt_gpu_ir
from .plan import search
from .reference import simt_reference
from .render import render_simt


def _launch(spec, tensors, env, out) -> None:
    from .launch import run_simt
    run_simt(spec, tensors, env, out=out)


KIND = KernelKind("simt", bind=simt_binding, search=search, render=render_simt, gpu_ir=build_simt_gpu_ir,
                  launch=_launch, reference=simt_reference)
