"""The conv kind's entry in the kernel-kind table (:mod:`..kinds`)."""
from __future__ import annotations

from ..kinds import KernelKind
from .bind import bind
from .gpu_ir import build_gpu_ir
from .plan import search
from .reference import reference
from .render import render


def _launch(spec, tensors, env, out) -> None:
    from .launch import run
    run(spec, tensors, out=out)


def _source(spec, env, arch: str):  # conv and conv_pool: static shapes, the sizes change nothing
    from . import launch
    return launch._source(spec, arch)


def _prepare(spec, tensors, env):
    from .launch import prepare
    return prepare(spec, tensors)


KIND = KernelKind("conv", bind=bind, search=search, render=render, gpu_ir=build_gpu_ir, launch=_launch,
                  reference=reference, source=_source, prepare=_prepare)
