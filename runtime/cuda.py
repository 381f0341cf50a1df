"""The runtime on a CUDA GPU (docs/DESIGN.md §Runtime): the arena and the constant pool are device buffers
(cuMemAlloc), tensors are typed windows into them, kernels launch on one stream.

The first call of a shape set runs eagerly, each kernel launched ``TIMED_REPS`` times between CUDA events
(the median is the measurement log's ``actual``; a kernel reads only inputs no kernel of the step writes, so
repeating it is harmless), and its launch sequence is then captured into a CUDA Graph (cuStreamBeginCapture /
cuStreamEndCapture / cuGraphInstantiate); copies go through the same stream (asynchronous copies, then a
stream synchronisation), so the order of copies and kernels is the stream's; later calls with the same shape set copy the inputs in, replay the
graph (cuGraphLaunch) and copy the outputs out. A model with a step on the CPU runs eagerly every time
(host work cannot be captured), and a new constant pool (other parameters) drops the captured graphs.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from ..backend.common.cuda_driver import ck, driver
from ..backend.common.device_tensors import DeviceArray
from ..ir.dtypes import DType
from . import kernels
from .model import Memory, ModelRuntime, _host, execute, steps_of

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


@dataclass
class _Record:
    """What one eager run launched (in order) and how long each kernel took (µs, median of TIMED_REPS)."""
    launches: list = field(default_factory=list)  # (region name, Launch)
    actual_us: dict = field(default_factory=dict)


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


class CudaRuntime(ModelRuntime):
    """ModelRuntime on the GPU with a CUDA Graph per shape set (``graphs``: shape set -> executable graph)."""

    def __init__(self, regions, params: frozenset = frozenset(), timed_reps: int = TIMED_REPS):
        from ..backend.common.gpu import device
        self.dev = device()
        drv = driver()
        self.stream = ck(drv.cuStreamCreate(drv.CUstream_flags.CU_STREAM_NON_BLOCKING.value), "cuStreamCreate")
        self.timed_reps = timed_reps
        self.timer = _Timer(self.stream)
        self.graphs: dict = {}
        self.graph_launches = 0
        self.record: _Record | None = None
        self.records: dict = {}  # shape set -> _Record of its eager run
        self._pool_buffer = None
        super().__init__(steps_of(regions), Memory(_alloc, _view, self._copy_in, self._copy_out, self._launch),
                         params)

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

    def _launch(self, kind, spec, tensors: Mapping[str, Any], env: Mapping[str, int], out: Any) -> None:
        launch = kernels.prepare(kind.name, spec, {**tensors, spec.c: out}, env)
        rec, name = self.record, spec.name
        if rec is not None:
            rec.launches.append((name, launch))
            rec.actual_us[name] = self.timer.median_us(launch, max(1, self.timed_reps))
        else:
            launch(int(self.stream))

    def run(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        key = self.shape_set(inputs)
        mp, arena = self.memory_plan(key), self.arena(key)
        if self.pool.buffer is not self._pool_buffer:  # a new pool: captured addresses are stale
            self.graphs.clear()
        graph = self.graphs.get(key)
        if graph is None:
            self.record = _Record()
            try:
                out = execute(self.steps, mp, inputs, self.mem, arena, self.pool)
            finally:
                self.records[key], self.record = self.record, None
            self._pool_buffer = self.pool.buffer
            if not any(s.on_cpu for s in self.steps):
                self.graphs[key] = self._capture(self.records[key].launches)
            return out
        self.pool.tensors(self.mem, mp.params, inputs)  # parameters given as other arrays are copied in again
        if self.pool.buffer is not self._pool_buffer:
            self.graphs.clear()
            return self.run(inputs)
        for name in mp.inputs:
            sh, dt = mp.tensors[name]
            self._copy_in(self.mem.view(arena.buffer, mp.arena.offsets[name], sh, dt.np), _host(inputs[name], sh, dt, name))
        drv = driver()
        ck(drv.cuGraphLaunch(graph, self.stream), "cuGraphLaunch")
        self.graph_launches += 1
        return {name: self._copy_out(self.mem.view(arena.buffer, mp.arena.offsets[name], *_shape_dt(mp, name)))
                for name in mp.outputs}

    def _capture(self, launches: list) -> Any:
        """The launch sequence captured on the stream and instantiated."""
        drv = driver()
        ck(drv.cuStreamBeginCapture(self.stream, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL),
           "cuStreamBeginCapture")
        try:
            for _, launch in launches:
                launch(int(self.stream))
        finally:
            graph = ck(drv.cuStreamEndCapture(self.stream), "cuStreamEndCapture")
        return ck(drv.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")

    def actual_us(self, inputs: Mapping[str, Any]) -> dict:
        """Kernel name -> measured µs of the shape set of inputs (its eager run)."""
        rec = self.records.get(self.shape_set(inputs))
        return dict(rec.actual_us) if rec else {}


def _shape_dt(mp, name: str) -> tuple:
    sh, dt = mp.tensors[name]
    return sh, dt.np
