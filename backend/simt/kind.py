"""The SIMT kind's entry in the kernel-kind table (:mod:`..kinds`), tried last: the MMA kinds win the
regions they take."""
from __future__ import annotations

from ..kinds import KernelKind
from .bind import bind
from .gpu_ir import build_gpu_ir
from .plan import search
from .reference import references
from .render import render


def _launch(spec, tensors, env, out) -> None:
    from .launch import run
    run(spec, tensors, env, out=out)


def reference(spec, tensors, env=None):
    """The primary output's numpy meaning; the other outputs, where tensors holds arrays for them, are
    written there (as the kernel writes the tensors it is given for them)."""
    outs = references(spec, tensors, env)
    for name in spec.outputs:
        if name != spec.c and name in tensors:
            tensors[name][...] = outs[name].reshape(tensors[name].shape)
    return outs[spec.c]


def _source(spec, env, arch: str):
    from . import launch
    return launch._source(spec, arch, tuple(sorted(launch._env(spec, env).items())))


def _prepare(spec, tensors, env):
    from .launch import prepare
    return prepare(spec, tensors, env)


KIND = KernelKind("simt", bind=bind, search=search, render=render, gpu_ir=build_gpu_ir, launch=_launch,
                  reference=reference, source=_source, prepare=_prepare, gathers=True)
