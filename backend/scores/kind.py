"""The scores kind's entry in the kernel-kind table (:mod:`..kinds`)."""
from __future__ import annotations

from ..attention.gpu_ir import build_attention_gpu_ir
from ..kinds import KernelKind
from .bind import bind
from .plan import search
from .reference import scores_reference
from .render import render


def _launch(spec, tensors, env, out) -> None:
    from .launch import run_scores
    run_scores(spec, tensors, env, out=out)


KIND = KernelKind("softmax_scores", bind=bind, search=search, render=render, gpu_ir=build_attention_gpu_ir,
                  launch=_launch, reference=scores_reference)
