"""The runtime on a CUDA GPU (docs/DESIGN.md §Runtime): the arena and the constant pool are device buffers
(cuMemAlloc), tensors are typed windows into them, kernels launch on one stream, and copies go through the same
stream (asynchronous copies, then a stream synchronisation), so copies and kernels keep the stream's order.

The record-and-replay bookkeeping is runtime/replay.py's; here its device operations: the first call of a shape
set launches each kernel ``TIMED_REPS`` times between CUDA events (the median is the measurement log's
``actual``; a kernel writes nothing it reads, so repeating it is harmless), the recorded launches are captured
into a CUDA Graph (cuStreamBeginCapture / cuStreamEndCapture / cuGraphInstantiate), and a later call with the
same shapes replays it (cuGraphLaunch).
"""
from __future__ import annotations

import statistics
from typing import Any, Mapping

import numpy as np

from ..backend.common.cuda_driver import ck, driver
from ..backend.common.device_tensors import DeviceArray
from ..ir.dtypes import DType
from . import kernels
from .model import Memory, ModelRuntime, steps_of
from .replay import ReplayRuntime

TIMED_REPS = 5


def _alloc(nbytes: int) -> DeviceArray:
    """Owned device bytes (cuMemAlloc; freed with the object)."""
    return DeviceArray((max(int(nbytes), 1),), np.uint8)


class DeviceView:
    """A packed tensor at ``ptr`` inside an arena or pool buffer (kept alive), with ``__cuda_array_interface__``."""

    def __init__(self, owner: DeviceArray, ptr: int, shape: tuple, dtype: np.dtype):
        self.owner, self.ptr, self.shape, self.dtype = owner, int(ptr), tuple(shape), np.dtype(dtype)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def reshape(self, shape) -> "DeviceView":
        return DeviceView(self.owner, self.ptr, tuple(shape), self.dtype)

    @property
    def __cuda_array_interface__(self) -> dict:
        typestr = "<V2" if self.dtype == DType.bf16.np else self.dtype.str
        return {"shape": self.shape, "typestr": typestr, "data": (self.ptr, False), "version": 3, "strides": None}


def _view(buf: DeviceArray, offset: int, shape: tuple, dtype: np.dtype) -> DeviceView:
    v = DeviceView(buf, buf.ptr + offset, shape, dtype)
    if offset < 0 or offset + v.nbytes > buf.nbytes:
        raise IndexError(f"view of {v.nbytes} bytes at {offset} leaves the {buf.nbytes}-byte buffer")
    return v


class _Timer:
    def __init__(self, stream: Any):
        drv = driver()
        self.stream = stream
        self.start, self.stop = (ck(drv.cuEventCreate(0), "cuEventCreate") for _ in range(2))

    def median_us(self, launch, reps: int) -> float:
        drv = driver()
        times = []
        for _ in range(reps):
            ck(drv.cuEventRecord(self.start, self.stream), "cuEventRecord")
            launch(int(self.stream))
            ck(drv.cuEventRecord(self.stop, self.stream), "cuEventRecord")
            ck(drv.cuEventSynchronize(self.stop), "cuEventSynchronize")
            times.append(float(ck(drv.cuEventElapsedTime(self.start, self.stop), "cuEventElapsedTime")) * 1e3)
        return statistics.median(times)


class CudaRuntime(ReplayRuntime):
    """The model on the GPU: device arena and pool, kernels on one stream, a CUDA Graph per shape set."""

    def __init__(self, regions, params: frozenset = frozenset(), timed_reps: int = TIMED_REPS):
        from ..backend.common.gpu import device
        self.dev = device()
        drv = driver()
        self.stream = ck(drv.cuStreamCreate(drv.CUstream_flags.CU_STREAM_NON_BLOCKING.value), "cuStreamCreate")
        self.timed_reps = max(1, timed_reps)
        self.timer = _Timer(self.stream)
        super().__init__(steps_of(regions), Memory(_alloc, _view, self._copy_in, self._copy_out, None), params)

    def _copy_in(self, v: DeviceView, host: np.ndarray) -> None:
        """Host -> device on the runtime's stream, finished before returning (the host array may go)."""
        host = np.ascontiguousarray(host)
        if v.nbytes:
            drv = driver()
            ck(drv.cuMemcpyHtoDAsync(drv.CUdeviceptr(v.ptr), host.ctypes.data, v.nbytes, self.stream), "cuMemcpyHtoDAsync")
            ck(drv.cuStreamSynchronize(self.stream), "cuStreamSynchronize")

    def _copy_out(self, v: DeviceView) -> np.ndarray:
        """Device -> host after everything queued on the runtime's stream."""
        out = np.empty(v.shape, v.dtype)
        if v.nbytes:
            drv = driver()
            ck(drv.cuMemcpyDtoHAsync(out.ctypes.data, drv.CUdeviceptr(v.ptr), v.nbytes, self.stream), "cuMemcpyDtoHAsync")
            ck(drv.cuStreamSynchronize(self.stream), "cuStreamSynchronize")
        return out

    def prepare(self, kind, spec, tensors: Mapping[str, Any], env: Mapping[str, int]) -> Any:
        return kernels.prepare(kind.name, spec, tensors, env)

    def measure(self, launch) -> float:
        return self.timer.median_us(launch, self.timed_reps)

    def capture(self, launches: list) -> Any:
        """The launch sequence captured on the stream (cuStreamBeginCapture / cuStreamEndCapture) and instantiated."""
        drv = driver()
        ck(drv.cuStreamBeginCapture(self.stream, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL),
           "cuStreamBeginCapture")
        try:
            for _, launch in launches:
                launch(int(self.stream))
        finally:
            graph = ck(drv.cuStreamEndCapture(self.stream), "cuStreamEndCapture")
        return ck(drv.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")

    def replay(self, captured: Any) -> None:
        drv = driver()
        ck(drv.cuGraphLaunch(captured, self.stream), "cuGraphLaunch")  # the copy out waits on the stream


def run_once(regions, inputs: Mapping[str, np.ndarray], params: frozenset = frozenset(), prepare=None) -> dict:
    """Every region's kernel launched exactly once on the default stream, the context synchronised and checked
    after each launch: no timing repeats and no graph capture (what compute-sanitizer should see of a model).
    ``prepare(kind name, spec, tensors, env)`` gives a launch (default: the kind's own, runtime/kernels.py); a
    region no kind takes runs on the CPU (playback) inside the same arena, saying so."""
    drv = driver()
    make = prepare or kernels.prepare

    def copy_in(v: DeviceView, host: np.ndarray) -> None:
        host = np.ascontiguousarray(host)
        if v.nbytes:
            ck(drv.cuMemcpyHtoD(drv.CUdeviceptr(v.ptr), host.ctypes.data, v.nbytes), "cuMemcpyHtoD")

    def copy_out(v: DeviceView) -> np.ndarray:
        out = np.empty(v.shape, v.dtype)
        if v.nbytes:
            ck(drv.cuCtxSynchronize(), "cuCtxSynchronize")
            ck(drv.cuMemcpyDtoH(out.ctypes.data, drv.CUdeviceptr(v.ptr), v.nbytes), "cuMemcpyDtoH")
        return out

    def launch(kind, spec, tensors, env, out) -> None:
        make(kind.name, spec, {**tensors, spec.c: out}, env)(0)
        ck(drv.cuCtxSynchronize(), f"{kind.name} kernel {spec.name!r}")

    from ..backend.common.gpu import device
    device()  # the context is current before the first allocation
    mem = Memory(alloc=_alloc, view=_view, copy_in=copy_in, copy_out=copy_out, launch=launch)
    return ModelRuntime(steps_of(list(regions)), mem, params).run(inputs)
