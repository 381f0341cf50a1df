"""Run generated flash-attention kernels on a CUDA GPU through cuda-python (issue 7; seed 000 §12).

Reuses the GEMM runtime's pieces: ``device()`` (context, arch, SM count), ``load_function`` (compile
through the kernel cache, load, opt in to large dynamic smem), the TMA descriptor encoding
(cuTensorMapEncodeTiled, 128-byte swizzle, zero fill out of bounds) and ``device_tensors``.

Python API:
  ``run_attention(spec, inputs, env=None)``: numpy arrays in -> numpy array out; device tensors
  (``__cuda_array_interface__`` or DLPack, e.g. torch CUDA tensors) in -> a :class:`DeviceArray` (or the
  ``out=`` tensor) out.
  ``prepare_attention(spec, tensors, env)``: everything resolved once; calling the result launches again
  (benchmarks, CUDA-graph capture).
The plan is specialised to the concrete shape of each call (seed 003) and cached per shape; ``algo``
forces ``algo_choice.attention`` (default: the search's choice).
"""
from __future__ import annotations

import ctypes
import dataclasses
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

import numpy as np

from ..ir.diagnostics import fail
from ..ir.dtypes import DType
from .attention_codegen import AttentionKernelSource, render
from .attention_plan import AttentionPlan
from .attention_search import choose_plan
from .attention_spec import AttentionSpec, check_attention_inputs
from .cuda_driver import ck, driver
from .device_tensors import DeviceArray, device_pointer
from .runtime import Device, _tensor_map, device, load_function

_NP_OF = {DType.fp16: np.dtype(np.float16), DType.bf16: DType.bf16.np, DType.fp32: np.dtype(np.float32)}
INT32_MAX = 2 ** 31 - 1


def concrete_spec(spec: AttentionSpec, env: Mapping[str, int] | None) -> AttentionSpec:
    """spec with every symbol replaced by its value (the plan is specialised per concrete shape)."""
    env = env or {}
    spec.sizes(env)  # raises on unbound / bad symbols

    def bind(x):
        return env[x] if isinstance(x, str) else x

    return dataclasses.replace(spec, m=bind(spec.m), n=bind(spec.n), batch=tuple(bind(x) for x in spec.batch))


@lru_cache(maxsize=256)
def _plan_and_source(spec: AttentionSpec, arch: str, algo: str | None) -> AttentionKernelSource:
    return render(spec, choose_plan(spec, arch, algos=(algo,) if algo else None))


@dataclass
class AttentionLaunch:
    """A prepared launch: kernel, grid, packed parameters (kept alive here). Call to launch."""
    kernel: AttentionKernelSource
    fn: Any
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int
    storage: list
    argv: Any
    keep: list

    def __call__(self, stream: int = 0) -> None:
        drv = driver()
        ck(drv.cuLaunchKernel(self.fn, *self.grid, *self.block, self.smem, drv.CUstream(stream),
                               ctypes.addressof(self.argv), 0), "cuLaunchKernel")


def prepare_attention(spec: AttentionSpec, tensors: Mapping[str, Any], env: Mapping[str, int] | None = None,
                      plan: AttentionPlan | None = None, dev: Device | None = None,
                      algo: str | None = None) -> AttentionLaunch:
    """tensors: device tensors for Q, K, V and the output O, by the spec's names."""
    dev = dev or device()
    cspec = concrete_spec(spec, env)
    ks = render(cspec, plan) if plan is not None else _plan_and_source(cspec, dev.arch, algo)
    if ks.skeleton == "sm90" and dev.arch != "sm90":
        fail("UnknownTarget", "--target cuda", "an sm90 attention plan cannot run on this GPU")
    sizes = cspec.sizes()
    if sizes["batch"] == 0:
        fail("UnaddressableShape", "run_attention", "a batch dim is 0")
    shapes, dts = cspec.shapes(), cspec.dtypes()
    ptrs, keep = {}, []
    for name in (*cspec.inputs, cspec.o):
        if name not in tensors:
            fail("MissingInput", "run_attention", f"tensor {name!r} is missing")
        ptrs[name], k = device_pointer(name, tensors[name], shapes[name], dts[name])
        keep.append(k)
    need = {cspec.q: 16, cspec.k: 16, cspec.v: 16, cspec.o: 2 * cspec.out_dtype.itemsize}  # cp.async / TMA; paired stores
    for name, align in need.items():
        if ptrs[name] % align:
            fail("InvalidAttribute", "run_attention", f"tensor {name!r} is not {align}-byte aligned on the device",
                 "Pass a freshly allocated (or 16-byte aligned) tensor.")
    storage: list = []
    tmaps = {}
    if ks.skeleton == "sm90":
        names = {"Q": cspec.q, "K": cspec.k, "V": cspec.v}
        for op in ks.tma:
            tmaps[op.role] = _tensor_map(op, ptrs[names[op.role]], sizes, cspec.in_dtype)
    scalars = {"M": sizes["m"], "N": sizes["n"], "batch": sizes["batch"]}
    roles = {"Q": cspec.q, "K": cspec.k, "V": cspec.v, "O": cspec.o}
    addrs = []
    for p in ks.params:
        if p.kind == "tmap":
            tm = tmaps[p.role]
            storage.append(tm)
            addrs.append(int(tm.getPtr()))
            continue
        c = ctypes.c_uint64(ptrs[roles[p.role]]) if p.kind == "ptr" else ctypes.c_int32(scalars[p.role])
        storage.append(c)
        addrs.append(ctypes.addressof(c))
    argv = (ctypes.c_void_p * len(addrs))(*addrs)
    grid = ks.grid(sizes, dev.sms)
    if grid[0] > INT32_MAX:
        fail("UnaddressableShape", "run_attention", f"{grid[0]} CTAs exceed the grid limit {INT32_MAX}")
    return AttentionLaunch(ks, load_function(ks, dev), grid, (ks.threads, 1, 1), ks.smem_bytes, storage, argv, keep)


def run_attention(spec: AttentionSpec, inputs: Mapping[str, Any], env: Mapping[str, int] | None = None, *,
                  out: Any = None, plan: AttentionPlan | None = None, algo: str | None = None, stream: int = 0):
    """Compute the attention on the GPU. numpy in -> numpy out; device tensors in -> device tensor out."""
    dev = device()
    cspec = concrete_spec(spec, env)
    host = all(isinstance(inputs.get(n), np.ndarray) for n in cspec.inputs)
    if host:
        check_attention_inputs(cspec, inputs)
        dts = cspec.dtypes()
        tensors = {n: DeviceArray.from_numpy(np.asarray(inputs[n]).astype(_NP_OF[dts[n]])) for n in cspec.inputs}
    else:
        tensors = dict(inputs)
    o = out if out is not None else DeviceArray(cspec.shapes()[cspec.o], _NP_OF[cspec.out_dtype])
    tensors[cspec.o] = o
    launch = prepare_attention(cspec, tensors, None, plan, dev, algo)
    launch(stream)
    if host:
        return o.numpy()
    return o
