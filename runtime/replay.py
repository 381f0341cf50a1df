"""Record once, replay after (docs/DESIGN.md §Runtime): the first call of a shape set runs eagerly and records
each kernel's prepared launch (bound to its arena and pool addresses) and its measured time; the recorded
sequence is then captured; a later call with the same shapes copies its inputs into the same arena, copies
parameters given as other arrays into their pool slots, replays the capture and copies the outputs out.

The device supplies four operations — ``prepare`` (a launch of one kernel on its tensors), ``measure`` (run
it, returning µs or None), ``capture`` (a recorded sequence -> something replayable) and ``replay`` — so
the same bookkeeping runs on the GPU (runtime/cuda.py: a CUDA Graph) and on the host (runtime/host.py: the
recorded numpy launches called again in order), where the tests check it. A model with a step on the CPU is
never captured (host work between kernels), and a new constant pool (another set of parameters) drops every
capture: its addresses are stale.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from .model import Memory, ModelRuntime, _host, execute


@dataclass
class Record:
    """What one eager run launched, in order, and each kernel's measured time (µs; region name -> µs: regions with
    one kernel share its spec, so the region names the launch)."""
    launches: list = field(default_factory=list)  # (region name, launch)
    actual_us: dict = field(default_factory=dict)


class ReplayRuntime(ModelRuntime, ABC):
    """ModelRuntime that captures each shape set's launch sequence after its first run and replays it."""

    def __init__(self, steps, mem: Memory, params: frozenset = frozenset()):
        super().__init__(steps, Memory(mem.alloc, mem.view, mem.copy_in, mem.copy_out, self._launch), params)
        self.captures: dict = {}   # shape set -> the device's replayable sequence
        self.records: dict = {}    # shape set -> Record of its eager run
        self.replays = 0
        self._recording: Record | None = None
        self._captured_pool = None

    # ---- the device's part --------------------------------------------------------------------------
    @abstractmethod
    def prepare(self, kind, spec, tensors: Mapping[str, Any], env: Mapping[str, int]) -> Any:
        """A launch of one kernel on its tensors (inputs and output by the spec's names): launch(stream) runs it."""

    @abstractmethod
    def measure(self, launch) -> "float | None":
        """Run the launch (more than once if it times it); its time in µs, or None where nothing is timed."""

    @abstractmethod
    def capture(self, launches: list) -> Any:
        """The recorded (region name, launch) sequence made replayable."""

    @abstractmethod
    def replay(self, captured: Any) -> None:
        """Run a captured sequence again (finished, or ordered before the next copy out)."""

    # ---- the bookkeeping ----------------------------------------------------------------------------
    def _launch(self, kind, spec, tensors: Mapping[str, Any], env: Mapping[str, int], out: Any) -> None:
        launch = self.prepare(kind, spec, {**tensors, spec.c: out}, env)
        rec = self._recording
        region = self._kernel_regions[len(rec.launches)]  # the steps with a kernel launch in order
        rec.launches.append((region, launch))
        us = self.measure(launch)
        if us is not None:
            rec.actual_us[region] = us

    def run(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        key = self.shape_set(inputs)
        mp, arena = self.memory_plan(key), self.arena(key)
        if key in self.captures:
            self.pool.tensors(self.mem, mp.params, inputs)  # parameters given as other arrays: into their slots
            if self.pool.buffer is self._captured_pool:
                for name in mp.inputs:
                    sh, dt = mp.tensors[name]
                    self.mem.copy_in(self.mem.view(arena.buffer, mp.arena.offsets[name], sh, dt.np),
                                     _host(inputs[name], sh, dt, name))
                self.replay(self.captures[key])
                self.replays += 1
                return {n: self.mem.copy_out(self.mem.view(arena.buffer, mp.arena.offsets[n], mp.tensors[n][0],
                                                           mp.tensors[n][1].np)) for n in mp.outputs}
            self.captures.clear()  # a new pool: every capture holds stale addresses
        self._recording = Record()
        self._kernel_regions = [s.region.name for s in self.steps if not s.on_cpu]
        try:
            out = execute(self.steps, mp, inputs, self.mem, arena, self.pool)
        finally:
            self.records[key], self._recording = self._recording, None
        if not any(s.on_cpu for s in self.steps):
            if self.pool.buffer is not self._captured_pool:
                self.captures.clear()
                self._captured_pool = self.pool.buffer
            self.captures[key] = self.capture(self.records[key].launches)
        return out

    def actual_us(self, inputs: Mapping[str, Any]) -> dict:
        """Region name -> measured µs of each kernel at the shape set of inputs (its eager run)."""
        rec = self.records.get(self.shape_set(inputs))
        return dict(rec.actual_us) if rec else {}
