"""Run generated flash-attention kernels on a CUDA GPU through cuda-python (`polysat[cuda]`).

Reuses the GEMM runtime's pieces: ``device()`` (context, arch, SM count), ``load_function`` (compile
through the kernel cache, load, opt in to large dynamic smem), the TMA descriptor encoding
(cuTensorMapEncodeTiled, 128-byte swizzle, zero fill out of bounds), and every kind's ``launch``
(device pointers, parameter packing, :class:`Launch`).

Python API:
  ``run(spec, inputs, env=None)``: numpy arrays in -> numpy array out; device tensors
  (``__cuda_array_interface__`` or DLPack, e.g. torch CUDA tensors) in -> a :class:`DeviceArray` (or the
  ``out=`` tensor) out.
  ``prepare(spec, tensors, env)``: everything resolved once; calling the result launches again
  (benchmarks, CUDA-graph capture).
The plan is specialised to the concrete shape of each call and cached per shape; ``algo``
forces ``algo_choice.attention`` (default: the search's choice).
"""
from __future__ import annotations

import ctypes
from functools import lru_cache
from typing import Any, Mapping

from ...ir.diagnostics import fail
from ..common.gpu import Device, concrete, device, load_function, tensor_map
from ..common.launch import INT32_MAX, Launch, device_pointers, pack, run_on_gpu
from .plan import AttentionPlan, choose_plan
from .reference import check_inputs
from .render import AttentionKernelSource, render
from .spec import AttentionSpec


def concrete_spec(spec: AttentionSpec, env: Mapping[str, int] | None) -> AttentionSpec:
    """spec with every symbol replaced by its value (the plan is specialised per concrete shape)."""
    return concrete(spec, env, ("m", "n"))


@lru_cache(maxsize=256)
def _plan_and_source(spec: AttentionSpec, arch: str, algo: str | None) -> AttentionKernelSource:
    return render(spec, choose_plan(spec, arch, algos=(algo,) if algo else None))


def prepare(spec: AttentionSpec, tensors: Mapping[str, Any], env: Mapping[str, int] | None = None,
                      plan: AttentionPlan | None = None, dev: Device | None = None,
                      algo: str | None = None) -> Launch:
    """tensors: device tensors for Q, K, V and the output O, by the spec's names."""
    dev = dev or device()
    cspec = concrete_spec(spec, env)
    ks = render(cspec, plan) if plan is not None else _plan_and_source(cspec, dev.arch, algo)
    if ks.skeleton == "sm90" and dev.arch != "sm90":
        fail("UnknownTarget", "--target cuda", "an sm90 attention plan cannot run on this GPU")
    need = {cspec.q: 16, cspec.k: 16, cspec.v: 16, cspec.o: 2 * cspec.out_dtype.itemsize}  # cp.async / TMA; paired stores
    roles = {"Q": cspec.q, "K": cspec.k, "V": cspec.v, "O": cspec.o, **{t: t for t in cspec.extra_inputs}}
    return launch("attention launch", ks, cspec, tensors, need, roles, dev)


def launch(what: str, ks: AttentionKernelSource, cspec, tensors: Mapping[str, Any], need: Mapping[str, int],
           roles: Mapping[str, str], dev: Device) -> Launch:
    """The Launch of ks (an attention or softmax_scores kernel) for the concrete spec cspec: device pointers of
    tensors (aligned as need says), tensor maps of the sm90 TMA operands, the kernel's parameters by role
    (roles: parameter role -> tensor name; M, N, batch from the sizes), the grid."""
    sizes = cspec.sizes()
    if sizes["batch"] == 0:
        fail("UnaddressableShape", what, "a batch dim is 0")
    if max(sizes["m"], sizes["n"]) > INT32_MAX - 256:  # the kernel rounds M and N up to its blocks in int32
        fail("UnaddressableShape", what, f"M = {sizes['m']}, N = {sizes['n']}: the kernel indexes rows in int32")
    ptrs, keep = device_pointers(what, cspec, tensors, need)
    tmaps = {}
    if ks.skeleton == "sm90":
        for op in ks.tma:
            tmaps[op.role] = tensor_map(op, ptrs[roles[op.role]] + op.offset * cspec.in_dtype.itemsize, sizes,
                                        cspec.in_dtype)
    scalars = {"M": sizes["m"], "N": sizes["n"], "batch": sizes["batch"]}

    def arg(p):
        if p.kind == "tmap":
            return tmaps[p.role]
        return ctypes.c_uint64(ptrs[roles[p.role]]) if p.kind == "ptr" else ctypes.c_int32(scalars[p.role])

    storage, argv = pack(ks.params, arg)
    grid = ks.grid(sizes, dev.sms)
    if grid[0] > INT32_MAX:
        fail("UnaddressableShape", what, f"{grid[0]} CTAs exceed the grid limit {INT32_MAX}")
    return Launch(ks, load_function(ks, dev), grid, storage, argv, keep)


def run(spec: AttentionSpec, inputs: Mapping[str, Any], env: Mapping[str, int] | None = None, *,
                  out: Any = None, plan: AttentionPlan | None = None, algo: str | None = None, stream: int = 0):
    """Compute the attention on the GPU. numpy in -> numpy out; device tensors in -> device tensor out."""
    dev = device()
    cspec = concrete_spec(spec, env)
    return run_on_gpu(cspec, inputs, lambda x: check_inputs(cspec, x),
                      lambda tensors: prepare(cspec, tensors, None, plan, dev, algo), out, stream)
