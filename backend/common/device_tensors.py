"""Device tensors for the CUDA runtime: polysat's own buffers and foreign ones.

:class:`DeviceArray` is a packed buffer from cuMemAlloc with ``__cuda_array_interface__``;
:func:`device_pointer` accepts any tensor offering ``__cuda_array_interface__`` or DLPack (torch,
CuPy, JAX...) and checks shape, element size and packed row-major strides, with coded diagnostics.
"""
from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from ...ir.diagnostics import fail
from ...ir.dtypes import DType
from .cuda_driver import ck, driver


class DeviceArray:
    """A packed device buffer with ``__cuda_array_interface__`` (owned: freed with the object)."""

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype):
        drv = driver()
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self.ptr = int(ck(drv.cuMemAlloc(max(self.nbytes, 1)), "cuMemAlloc"))

    @staticmethod
    def from_numpy(a: np.ndarray) -> "DeviceArray":
        a = np.ascontiguousarray(a)
        d = DeviceArray(a.shape, a.dtype)
        if a.nbytes:
            drv = driver()
            ck(drv.cuMemcpyHtoD(drv.CUdeviceptr(d.ptr), a.ctypes.data, a.nbytes), "cuMemcpyHtoD")
        return d

    def numpy(self) -> np.ndarray:
        out = np.empty(self.shape, self.dtype)
        if self.nbytes:
            drv = driver()
            ck(drv.cuCtxSynchronize(), "cuCtxSynchronize")
            ck(drv.cuMemcpyDtoH(out.ctypes.data, drv.CUdeviceptr(self.ptr), self.nbytes), "cuMemcpyDtoH")
        return out

    @property
    def __cuda_array_interface__(self) -> dict:
        typestr = "<V2" if self.dtype == DType.bf16.np else self.dtype.str
        return {"shape": self.shape, "typestr": typestr, "data": (self.ptr, False), "version": 3, "strides": None}

    def __del__(self):
        try:
            if getattr(self, "ptr", 0):
                drv = driver()
                drv.cuMemFree(drv.CUdeviceptr(self.ptr))
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


def _dlpack_view(obj) -> tuple[int, tuple[int, ...], tuple[int, ...] | None, int, Any]:
    capsule = obj.__dlpack__()
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    t = _DLTensor.from_address(get(capsule, b"dltensor"))  # DLManagedTensor starts with its DLTensor
    if t.device.device_type not in (2, 13):  # kDLCUDA, kDLCUDAManaged
        fail("InvalidAttribute", "run_gemm", "a DLPack tensor given to the CUDA runtime is not on a CUDA device")
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = tuple(t.strides[i] for i in range(t.ndim)) if t.strides else None
    return int(t.data or 0) + int(t.byte_offset), shape, strides, t.dtype.bits * t.dtype.lanes // 8, capsule


def device_pointer(name: str, x: Any, shape: tuple[int, ...], dtype: DType) -> tuple[int, Any]:
    """(pointer, keep-alive) of a packed device tensor; a diagnostic if it is not usable as is."""
    keep: Any = x
    try:
        cai = x.__cuda_array_interface__
    except (AttributeError, TypeError):  # torch raises TypeError for bf16: use DLPack then
        cai = None
    if cai is not None:
        ptr, got, strides = int(cai["data"][0]), tuple(cai["shape"]), cai.get("strides")
        itemsize = np.dtype(cai["typestr"]).itemsize if not cai["typestr"].startswith("<V") else 2
    elif hasattr(x, "__dlpack__"):
        ptr, got, strides, itemsize, keep = _dlpack_view(x)
        strides = tuple(s * itemsize for s in strides) if strides else None
    else:
        fail("InvalidAttribute", "run_gemm", f"tensor {name!r} is neither a numpy array nor a CUDA tensor")
    if got != shape:
        fail("AxisSizeMismatch", "run_gemm", f"tensor {name!r} has shape {got}, expected {shape}")
    if itemsize != dtype.itemsize:
        fail("DtypeMismatch", "run_gemm", f"tensor {name!r} has {itemsize}-byte elements, expected {dtype.value}")
    if strides is not None:
        want, acc = [], dtype.itemsize
        for d in reversed(shape):
            want.append(acc)
            acc *= d
        if tuple(s for s, d in zip(strides, shape, strict=True) if d > 1) != tuple(
                s for s, d in zip(reversed(want), shape, strict=True) if d > 1):
            fail("InvalidAttribute", "run_gemm", f"tensor {name!r} is not packed row-major",
                 "Pass a contiguous tensor (e.g. .contiguous()); layouts are declared by the GemmSpec.")
    return ptr, keep
