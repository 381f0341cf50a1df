"""Run generated SIMT kernels on a CUDA GPU through cuda-python (the same path `--target cuda` takes).

``prepare(spec, tensors, env)`` resolves pointers (any alignment: the kernel tests each vector
access's address and falls back to scalar accesses), packs the ABI (pointers, then the size symbols as i64) and the grid; ``run`` is the numpy-or-device
front door. The plan is chosen for the concrete shape of each call and cached per (spec, arch, shape).
"""
from __future__ import annotations

import ctypes
from functools import lru_cache
from typing import Any, Mapping

from ...ir.diagnostics import fail
# shared pieces, at their current homes
from ..common.gpu import Device, device, load_function
from ..common.launch import INT32_MAX, Launch, device_pointers, pack, run_on_gpu
from .plan import SimtPlan, choose_plan
from .render import SimtKernelSource, render
from .spec import SimtSpec


@lru_cache(maxsize=256)
def _source(spec: SimtSpec, arch: str, env_key: tuple) -> SimtKernelSource:
    return render(spec, choose_plan(spec, arch, dict(env_key)))


def _env(spec: SimtSpec, env: Mapping[str, int] | None) -> dict[str, int]:
    env = dict(env or {})
    missing = [s for s in spec.symbols if s not in env]
    if missing:
        fail("UnboundSymbol", f"simt {spec.name!r}", f"sizes {', '.join(missing)} are not bound")
    return {s: int(env[s]) for s in spec.symbols}


class _AtShape:
    """The spec at one shape, as the shared launch helpers read a spec (shapes() without arguments). The
    outputs other than ``c`` travel with the inputs (tensors the caller gives, written by the kernel)."""

    def __init__(self, spec: SimtSpec, env: Mapping[str, int]):
        self.spec, self.env = spec, env
        self.inputs = spec.inputs + tuple(n for n in spec.outputs if n != spec.c)
        self.c = spec.c

    def shapes(self, env: Mapping[str, int] | None = None) -> dict:
        return self.spec.shapes(self.env)

    def dtypes(self) -> dict:
        return self.spec.dtypes()


def prepare(spec: SimtSpec, tensors: Mapping[str, Any], env: Mapping[str, int] | None = None,
                 plan: SimtPlan | None = None, dev: Device | None = None) -> Launch:
    dev = dev or device()
    env = _env(spec, env)
    ks = render(spec, plan) if plan is not None else _source(spec, dev.arch, tuple(sorted(env.items())))
    ptrs, keep = device_pointers("run", _AtShape(spec, env), tensors, {})

    def arg(p):
        return ctypes.c_uint64(ptrs[p.role]) if p.kind == "ptr" else ctypes.c_int64(env[p.role])

    storage, argv = pack(ks.params, arg)
    grid = ks.grid(env)
    if grid[0] > INT32_MAX:
        fail("UnaddressableShape", "run", f"{grid[0]} CTAs exceed the grid limit {INT32_MAX}")
    return Launch(ks, load_function(ks, dev), grid, storage, argv, keep)


def run(spec: SimtSpec, inputs: Mapping[str, Any], env: Mapping[str, int] | None = None, *,
             out: Any = None, plan: SimtPlan | None = None, stream: int = 0):
    """The region's primary output on the GPU. numpy in -> numpy out; device tensors in -> device tensor out.
    A region with several outputs writes the others into the tensors given for them by name (with numpy
    inputs, scratch arrays when none is given)."""
    dev = device()
    env = _env(spec, env)
    if any(n not in inputs for n in _AtShape(spec, env).inputs):
        import numpy as np
        shapes, dts = spec.shapes(env), spec.dtypes()
        inputs = {**{n: np.zeros(shapes[n], dts[n].np) for n in spec.outputs if n != spec.c}, **inputs}
    return run_on_gpu(_AtShape(spec, env), inputs, lambda x: None, lambda t: prepare(spec, t, env, plan, dev), out, stream)
