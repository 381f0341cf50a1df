"""The roofline: how one kernel's work turns into time on a device of :mod:`.devices` (docs/DESIGN.md §Cost model).

Every estimate in polysat (the extraction cost model of :mod:`.cost_model` and the plan searches of every
kernel kind in ``backend/``) counts its own work (FLOPs issued, bytes moved, smem bytes read, instructions
per clock) and then composes it here, the same way:

    time = max(limits) + sum(serial) - hidden + sum(penalties) + launch

``limits`` are the times of the units that run concurrently (tensor cores, DRAM, L2, shared memory, a
gather); the slowest bounds the kernel. ``serial`` are phases that do not overlap the main loop (a pool
after the tile, an epilogue that waits for the accumulators), ``hidden`` is time that asynchronous copies
take off again (loads overlapping the epilogue), ``penalties`` are extra work (recomputation, wasted
sectors, spills), and ``launch`` is the device's per-kernel launch and drain time.

The rate helpers turn work into seconds at the device's ceiling times the utilisation factors the caller
knows (efficiency of the datapath, occupancy, wave quantisation ...), multiplied in the order given.
"""
from __future__ import annotations

from typing import Iterable

from .devices import Device


def _rate(base: float, factors: Iterable[float]) -> float:
    for f in factors:
        base *= f
    return base


def tensor_time(flops: float, dev: Device, *factors: float) -> float:
    """Seconds of tensor-core work at dev's dense peak times the factors."""
    return flops / _rate(dev.tensor_tflops * 1e12, factors)


def dram_time(nbytes: float, dev: Device, *factors: float) -> float:
    """Seconds of device-memory traffic at dev's measured bandwidth times the factors."""
    return nbytes / _rate(dev.dram_tbps * 1e12, factors)


def smem_time(nbytes: float, dev: Device, *factors: float) -> float:
    """Seconds of shared-memory reads at dev's smem bandwidth (bytes per clock per SM) times the factors."""
    return nbytes / _rate(dev.smem_bytes_per_clk * dev.sms * dev.clock_ghz * 1e9, factors)


def clock_time(ops: float, per_clk: float, dev: Device, *factors: float) -> float:
    """Seconds of ops issued at per_clk per clock per SM (exp2 on the SFUs, the im2col gather ...)."""
    return ops / _rate(per_clk * dev.sms * dev.clock_ghz * 1e9, factors)


def roofline(dev: Device, limits: Iterable[float], *, serial: Iterable[float] = (), hidden: float = 0.0,
             penalties: Iterable[float] = (), unit: str = "s") -> float:
    """max(limits) + sum(serial) - hidden + sum(penalties) + dev's launch time; every term in unit ("s" or "us")."""
    t = max(limits)
    for s in serial:
        t = t + s
    t = t - hidden
    for p in penalties:
        t = t + p
    return t + (dev.launch_us if unit == "us" else dev.launch_us * 1e-6)
