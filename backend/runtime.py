"""Run generated GEMM kernels on a CUDA GPU through cuda-python (seed 000 §12; `polysat[cuda]`).

Kernels compile through ``kernel_cache`` (NVRTC or nvcc, cached on disk by source hash + arch), the
driver API loads and launches them, and TMA descriptors are encoded on the host
(cuTensorMapEncodeTiled). Device tensors are ``device_tensors``'s.

Python API:
  ``run_gemm(spec, inputs, env=None)``: numpy arrays in -> numpy array out; device tensors
  (``__cuda_array_interface__`` or DLPack, e.g. torch CUDA tensors) in -> a :class:`DeviceArray`
  (or the ``out=`` tensor) out.
  ``prepare_gemm(spec, tensors, env)``: everything resolved once; calling the result launches again
  (for benchmarks and CUDA-graph capture).
The plan is specialised to the concrete shape of each call (seed 003), and cached per shape.
"""
from __future__ import annotations

import ctypes
import dataclasses
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

from ..ir.diagnostics import fail
from ..ir.dtypes import DType
from .codegen import KernelSource, render
from .cuda_driver import ck, driver
from .device_tensors import DeviceArray, device_pointer  # noqa: F401 - re-exported for callers
from .gemm_spec import GemmSpec
from .kernel_cache import cubin_for
from .launch import Launch, device_pointers, pack, run_on_gpu
from .plan import SchedulePlan
from .reference import check_inputs
from .search import choose_plan, fits_runtime


def cuda_available() -> bool:
    """True when cuda-python, a driver and at least one device are present (never raises)."""
    try:
        from cuda.bindings import driver
        if int(driver.cuInit(0)[0]) != 0:
            return False
        err, n = driver.cuDeviceGetCount()
        return int(err) == 0 and n > 0
    except Exception:  # noqa: BLE001 - any failure to load the driver means "no GPU here"
        return False


@dataclass
class Device:
    ordinal: int
    arch: str       # the skeleton family it runs: sm90 (Hopper) or sm80 (Ampere and every other >= 8.0)
    sms: int
    ctx: Any
    cc: tuple[int, int] = (8, 0)  # compute capability: the cubin is built for exactly this (sm_90a on 9.0)


@lru_cache(maxsize=None)
def device(ordinal: int = 0) -> Device:
    drv = driver()
    try:
        ck(drv.cuInit(0), "cuInit")
    except Exception as e:  # noqa: BLE001 - a missing driver library raises before returning an error code
        if hasattr(e, "diagnostics"):
            raise
        fail("UnknownTarget", "--target cuda", f"no CUDA driver: {e}", "Run on a machine with an NVIDIA GPU and driver.")
    dev = ck(drv.cuDeviceGet(ordinal), "cuDeviceGet")
    ctx = ck(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    ck(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    attr = drv.CUdevice_attribute
    major = ck(drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute")
    minor = ck(drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cuDeviceGetAttribute")
    sms = ck(drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), "cuDeviceGetAttribute")
    if major < 8:
        fail("UnknownTarget", "--target cuda", f"compute capability {major}.x; polysat needs sm80 or newer")
    arch = "sm90" if major == 9 else "sm80"  # newer families run the portable sm80 skeleton, built for them
    return Device(ordinal, arch, int(sms), ctx, (int(major), int(minor)))


_FUNCS: dict[tuple[str, str], Any] = {}


def load_function(ks: KernelSource, dev: Device):
    key = (ks.digest, dev.arch)
    if key not in _FUNCS:
        drv = driver()
        mod = ck(drv.cuModuleLoadData(cubin_for(ks, dev.arch, dev.cc)), "cuModuleLoadData")
        fn = ck(drv.cuModuleGetFunction(mod, ks.name.encode()), "cuModuleGetFunction")
        if ks.smem_bytes > 48 * 1024:
            ck(drv.cuFuncSetAttribute(fn, drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                       ks.smem_bytes), "cuFuncSetAttribute")
        _FUNCS[key] = (mod, fn)
    return _FUNCS[key][1]


# ---------------------------------------------------------------------------------------------
# launch
# ---------------------------------------------------------------------------------------------
def concrete(spec, env: Mapping[str, int] | None, dims: tuple[str, ...]):
    """spec with its symbols (fields dims and batch) replaced by their values under env; raises on
    unbound / bad symbols. Every kind specialises its plan per concrete shape this way."""
    env = env or {}

    def bind(d):
        return env[d] if isinstance(d, str) else d

    spec.sizes(env)
    return dataclasses.replace(spec, **{f: bind(getattr(spec, f)) for f in dims},
                               batch=tuple(bind(d) for d in spec.batch))


def concrete_spec(spec: GemmSpec, env: Mapping[str, int] | None) -> GemmSpec:
    """spec with every symbol replaced by its value (the plan is specialised per concrete shape)."""
    return concrete(spec, env, ("m", "n", "k"))


@lru_cache(maxsize=256)
def _plan_and_source(spec: GemmSpec, arch: str) -> KernelSource:
    return render(spec, choose_plan(spec, arch))


def _tensor_map(op, base: int, sizes: Mapping[str, int], dtype: DType):
    drv = driver()
    dims = [sizes[d] for d in op.dims]
    strides, acc = [], dtype.itemsize
    for d in dims[:-1]:
        acc *= d
        strides.append(acc)
    dt = (drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16 if dtype == DType.fp16
          else drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16)
    return ck(drv.cuTensorMapEncodeTiled(
        dt, len(dims), base, [drv.cuuint64_t(x) for x in dims], [drv.cuuint64_t(x) for x in strides],
        [drv.cuuint32_t(x) for x in op.box], [drv.cuuint32_t(1)] * len(dims),
        drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, drv.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
        drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE), "cuTensorMapEncodeTiled")


def prepare_gemm(spec: GemmSpec, tensors: Mapping[str, Any], env: Mapping[str, int] | None = None,
                 plan: SchedulePlan | None = None, dev: Device | None = None) -> Launch:
    """tensors: device tensors for every input and the output (spec.c), by name."""
    dev = dev or device()
    cspec = concrete_spec(spec, env)
    ks = render(cspec, plan) if plan is not None else _plan_and_source(cspec, dev.arch)
    if ks.skeleton == "sm90" and dev.arch != "sm90":
        fail("UnknownTarget", "--target cuda", "an sm90 plan cannot run on this GPU")
    if not fits_runtime(ks.plan, cspec, None):
        fail("InvalidAttribute", "run_gemm", f"the plan's vector widths do not divide this shape ({', '.join(ks.plan.assumes)})",
             "Let run_gemm choose the plan for the concrete shape (plan=None).")
    sizes = cspec.sizes()
    need = {cspec.a: 2 * ks.plan.vec_a, cspec.b: 2 * ks.plan.vec_b}
    if ks.skeleton == "sm90":
        need = {cspec.a: 16, cspec.b: 16}
    need[cspec.c] = 2 * cspec.out_dtype.itemsize  # paired stores
    ptrs, keep = device_pointers("run_gemm", cspec, tensors, need)
    tmaps = {}
    if ks.skeleton == "sm90":
        for op in ks.tma:
            name = cspec.a if op.role == "A" else cspec.b
            tmaps[op.role] = _tensor_map(op, ptrs[name], sizes, cspec.in_dtype)
    b, m, n, k = sizes["batch"], sizes["m"], sizes["n"], sizes["k"]
    scalars = {"M": m, "N": n, "K": k, "batch": b,
               "a_bstride": 0 if cspec.a_broadcast else m * k, "b_bstride": 0 if cspec.b_broadcast else k * n}
    roles = {"A": cspec.a, "B": cspec.b, "C": cspec.c}

    def arg(p):
        if p.kind == "tmap":
            return tmaps[p.role]
        if p.kind == "ptr":
            return ctypes.c_uint64(ptrs[roles.get(p.role, p.role)])
        return ctypes.c_int32(scalars[p.role]) if p.kind == "i32" else ctypes.c_int64(scalars[p.role])

    storage, argv = pack(ks.params, arg)
    grid = ks.grid(sizes, dev.sms)
    if grid[1] > 65535 or grid[2] > 65535:
        fail("UnaddressableShape", "run_gemm", f"grid {grid} exceeds the limit 65535 in y (M tiles) or z (batch)")
    return Launch(ks, load_function(ks, dev), grid, storage, argv, keep)


def run_gemm(spec: GemmSpec, inputs: Mapping[str, Any], env: Mapping[str, int] | None = None, *,
             out: Any = None, plan: SchedulePlan | None = None, stream: int = 0):
    """Compute the GEMM on the GPU. numpy in -> numpy out; device tensors in -> device tensor out."""
    dev = device()
    cspec = concrete_spec(spec, env)
    return run_on_gpu(cspec, inputs, lambda x: check_inputs(cspec, x),
                      lambda tensors: prepare_gemm(cspec, tensors, None, plan, dev), out, stream)
