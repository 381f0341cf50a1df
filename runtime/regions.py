"""The regions of a model run in order on a device (``--target cuda``, docs/DESIGN.md §Runtime): one memory
arena planned from the tensors' lifetimes, parameters in a constant pool, the launch sequence captured as a
CUDA Graph; tensors passed between regions stay on the device, only program outputs come back.
"""
from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

from ..backend.common.gpu import cuda_available
from ..ir.diagnostics import fail
from .cuda import CudaRuntime
from .model import Memory, ModelRuntime, steps_of


def run_regions(regions, inputs: Mapping[str, np.ndarray], *, alloc: Callable, view: Callable, copy_in: Callable,
                copy_out: Callable, launch: Callable, params: frozenset = frozenset()) -> dict[str, np.ndarray]:
    """The regions in order on some device, inside one arena planned from the tensors' lifetimes, parameters
    in a constant pool (runtime/model.py): alloc(nbytes) -> buffer, view(buffer, offset, shape, np dtype) ->
    tensor, copy_in(tensor, host array), copy_out(tensor) -> host array, launch(kind, spec, tensors, env, out)
    runs one kernel. A region no kind takes runs on the CPU (playback) inside the same arena, saying so."""
    mem = Memory(alloc=alloc, view=view, copy_in=copy_in, copy_out=copy_out, launch=launch)
    return ModelRuntime(steps_of(list(regions)), mem, params).run(inputs)


def run_cuda(regions, inputs: Mapping[str, np.ndarray], params: frozenset = frozenset()) -> dict[str, np.ndarray]:
    """`--target cuda` on regions: every region as a CUDA kernel of its kind, in one device arena, the launch
    sequence captured as a CUDA Graph (runtime/cuda.py); a region no kind takes runs on the CPU, saying so."""
    regions = list(regions)
    steps_of(regions)  # a binding error other than E1504 before anything else: it does not depend on the machine
    if not cuda_available():
        fail("UnknownTarget", "--target cuda", "no CUDA GPU is visible (cuda-python, an NVIDIA driver and a device "
             "are needed)", "Run on a machine with an NVIDIA GPU (sm80 or newer), or use --target playback.")
    return CudaRuntime(regions, params).run(inputs)
