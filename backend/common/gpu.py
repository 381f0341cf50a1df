"""The visible GPU, shared by every kind's launcher: whether one is there (:func:`cuda_available`), its
context and skeleton family (:func:`device`), kernels loaded from the kernel cache (:func:`load_function`),
TMA descriptors encoded on the host (:func:`tensor_map`), and specs made concrete per shape (:func:`concrete`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

from ...ir.diagnostics import fail
from ...ir.dtypes import DType
from .cuda_driver import ck, driver
from .kernel_cache import cubin_for
from .render import KernelSource


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


def concrete(spec, env: Mapping[str, int] | None, dims: tuple[str, ...]):
    """spec with its symbols (fields dims and batch) replaced by their values under env; raises on
    unbound / bad symbols. Every kind specialises its plan per concrete shape this way."""
    env = env or {}

    def bind(d):
        return env[d] if isinstance(d, str) else d

    spec.sizes(env)
    return dataclasses.replace(spec, **{f: bind(getattr(spec, f)) for f in dims},
                               batch=tuple(bind(d) for d in spec.batch))


def tma_strides(op, sizes: Mapping[str, int], itemsize: int) -> list[int]:
    """The byte strides of op's dims after the innermost (cuTensorMapEncodeTiled's globalStrides): op.strides
    (elements) when given, else packed."""
    if getattr(op, "strides", ()):
        return [s * itemsize for s in op.strides]
    out, acc = [], itemsize
    for d in op.dims[:-1]:
        acc *= sizes[d]
        out.append(acc)
    return out


def tensor_map(op, base: int, sizes: Mapping[str, int], dtype: DType):
    drv = driver()
    dims = [sizes[d] for d in op.dims]
    strides = tma_strides(op, sizes, dtype.itemsize)
    dt = (drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16 if dtype == DType.fp16
          else drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16)
    return ck(drv.cuTensorMapEncodeTiled(
        dt, len(dims), base, [drv.cuuint64_t(x) for x in dims], [drv.cuuint64_t(x) for x in strides],
        [drv.cuuint32_t(x) for x in op.box], [drv.cuuint32_t(1)] * len(dims),
        drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, drv.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
        drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE), "cuTensorMapEncodeTiled")
