"""The scores kind's entry in the kernel-kind table (:mod:`..kinds`)."""
from __future__ import annotations

from ..attention.gpu_ir import build_gpu_ir
from ..kinds import KernelKind
from .bind import bind
from .plan import search
from .reference import reference
from .render import render


def _launch(spec, tensors, env, out) -> None:
    from .launch import run
    run(spec, tensors, env, out=out)


def _source(spec, env, arch: str):
    from . import launch
    return launch._plan_and_source(launch.concrete_spec(spec, env), arch)


def _prepare(spec, tensors, env):
    from .launch import prepare
    return prepare(spec, tensors, env)


KIND = KernelKind("softmax_scores", bind=bind, search=search, render=render, gpu_ir=build_gpu_ir,
                  launch=_launch, reference=reference, source=_source, prepare=_prepare)
