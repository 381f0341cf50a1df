"""A prepared kernel launch, shared by every kind's runtime (GEMM, conv, attention).

``device_pointers`` resolves a spec's tensors (inputs and output ``spec.c``) to checked, aligned device
pointers; ``pack`` lays the kernel's parameters out in its ABI order; :class:`Launch` holds it all alive
and launches on call; ``run_on_gpu`` is the numpy-or-device-tensors front door of every kind's ``run``.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from ...ir.diagnostics import fail
from .cuda_driver import ck, driver
from .device_tensors import DeviceArray, device_pointer

INT32_MAX = 2 ** 31 - 1


@dataclass
class Launch:
    """A prepared launch: kernel, grid, packed parameters (kept alive here). Call to launch."""
    kernel: Any     # a KernelSource of any kind: name, threads, smem_bytes, params
    fn: Any
    grid: tuple[int, int, int]
    storage: list
    argv: Any
    keep: list

    @property
    def block(self) -> tuple[int, int, int]:
        return (self.kernel.threads, 1, 1)

    @property
    def smem(self) -> int:
        return self.kernel.smem_bytes

    def __call__(self, stream: int = 0) -> None:
        drv = driver()
        ck(drv.cuLaunchKernel(self.fn, *self.grid, *self.block, self.smem, drv.CUstream(stream),
                               ctypes.addressof(self.argv), 0), "cuLaunchKernel")


def device_pointers(at: str, spec: Any, tensors: Mapping[str, Any],
                    align: Mapping[str, int]) -> tuple[dict[str, int], list]:
    """Pointers of spec's inputs and output by name, each checked (device_pointer) and aligned to
    align[name] bytes; the list keeps the tensors alive while the kernel runs."""
    shapes, dts = spec.shapes(), spec.dtypes()
    ptrs, keep = {}, []
    for name in (*spec.inputs, spec.c):
        if name not in tensors:
            fail("MissingInput", at, f"tensor {name!r} is missing")
        ptrs[name], k = device_pointer(name, tensors[name], shapes[name], dts[name])
        keep.append(k)
    for name, bytes_ in align.items():
        if ptrs[name] % bytes_:
            fail("InvalidAttribute", at, f"tensor {name!r} is not {bytes_}-byte aligned on the device",
                 "Pass a freshly allocated (or 16-byte aligned) tensor.")
    return ptrs, keep


def pack(params, arg: Callable[[Any], Any]) -> tuple[list, Any]:
    """(storage, argv) for the kernel's params in ABI order: arg(p) is a ctypes scalar, or a tensor map
    where p.kind == "tmap"; storage keeps them alive, argv holds their addresses."""
    storage, addrs = [], []
    for p in params:
        v = arg(p)
        storage.append(v)
        addrs.append(int(v.getPtr()) if p.kind == "tmap" else ctypes.addressof(v))
    return storage, (ctypes.c_void_p * len(addrs))(*addrs)


def run_on_gpu(spec: Any, inputs: Mapping[str, Any], check: Callable[[Mapping[str, Any]], None],
               prepare: Callable[[dict], Launch], out: Any = None, stream: int = 0):
    """numpy in (checked, uploaded) -> numpy out; device tensors in -> the output device tensor (``out``
    or a new one). prepare(tensors) gives the launch for inputs and output by name."""
    host = all(isinstance(inputs.get(n), np.ndarray) for n in spec.inputs)
    dts = spec.dtypes()
    if host:
        check(inputs)
        tensors = {n: DeviceArray.from_numpy(np.asarray(inputs[n]).astype(dts[n].np)) for n in spec.inputs}
    else:
        tensors = dict(inputs)
    y = out if out is not None else DeviceArray(spec.shapes()[spec.c], dts[spec.c].np)
    tensors[spec.c] = y
    prepare(tensors)(stream)
    return y.numpy() if host else y
