"""The runtime on the host: the arena and the constant pool are numpy byte buffers and every tensor a view
into them at its planned offset (docs/DESIGN.md §Runtime), so a wrong plan corrupts values exactly as it
would on the device. Kernels run as their kind's numpy meaning (``reference``) or, with ``playback_only``,
every region plays back (ir/playback.py). :class:`HostReplayRuntime` records each shape set's kernel calls
(bound to their views) and replays them on later calls, as runtime/cuda.py replays a CUDA Graph."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from .model import Memory, ModelRuntime, steps_of
from .replay import ReplayRuntime

STALE = 0xFF  # fresh arena bytes: a 16-bit float read before it is written is NaN, an fp32 one NaN too


def _alloc(nbytes: int) -> np.ndarray:
    return np.full(nbytes, STALE, np.uint8)


def _view(buf: np.ndarray, offset: int, shape: tuple, dtype: np.dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if offset < 0 or offset + n > buf.size:
        raise IndexError(f"view of {n} bytes at {offset} leaves the {buf.size}-byte buffer")
    return buf[offset:offset + n].view(dtype).reshape(shape)


def _copy_in(view: np.ndarray, host: np.ndarray) -> None:
    view[...] = host


def _launch(kind, spec, tensors: Mapping[str, Any], env: Mapping[str, int], out: np.ndarray) -> None:
    out[...] = kind.reference(spec, tensors, env)


def host_memory(launch=_launch) -> Memory:
    return Memory(alloc=_alloc, view=_view, copy_in=_copy_in, copy_out=np.array, launch=launch)


def host_runtime(regions, params: frozenset = frozenset(), playback_only: bool = False, launch=_launch) -> ModelRuntime:
    """The regions on numpy byte buffers: kernels by their kind's numpy meaning, or all played back."""
    return ModelRuntime(steps_of(regions, playback_only), host_memory(launch), params)


class HostReplayRuntime(ReplayRuntime):
    """ReplayRuntime on numpy byte buffers: a launch is the kind's numpy meaning bound to its arena views, a
    capture the recorded launches, a replay calls them again in order; nothing is timed."""

    def __init__(self, regions, params: frozenset = frozenset()):
        super().__init__(steps_of(regions), host_memory(), params)

    def prepare(self, kind, spec, tensors: Mapping[str, Any], env: Mapping[str, int]):
        out, env = tensors[spec.c], dict(env)
        ins = {k: v for k, v in tensors.items() if k != spec.c}
        return lambda stream=0: _launch(kind, spec, ins, env, out)

    def measure(self, launch) -> None:
        launch()
        return None

    def capture(self, launches: list) -> list:
        return [launch for _, launch in launches]

    def replay(self, captured: list) -> None:
        for launch in captured:
            launch()
