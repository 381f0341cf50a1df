"""Occupancy and bandwidth shares of a kernel of ``tiles`` CTAs (docs/DESIGN.md §Cost model): wave
quantization over the SMs, latency hiding by resident warps, and the share of a memory level's
bandwidth the busy SMs' load ports draw. Pure functions of the launch shape and the Device."""
from __future__ import annotations

from functools import lru_cache
from math import ceil

from .devices import Device

WARPS_TO_SATURATE = 8  # estimate: warps per SM that hide latency with async copies in flight


def occupancy(tiles: int, ctas: int, threads: int, dev: Device) -> float:
    """SM utilisation (wave quantization) x latency hiding (resident warps): the share of the device's
    compute rates a kernel of `tiles` CTAs reaches."""
    return sm_util(tiles, ctas, dev) * hiding(tiles, ctas, threads, dev)


def sm_util(tiles: int, ctas: int, dev: Device) -> float:
    slots = dev.sms * ctas
    return min(tiles, dev.sms) / dev.sms if tiles <= slots else tiles / (ceil(tiles / slots) * slots)


def hiding(tiles: int, ctas: int, threads: int, dev: Device) -> float:
    warps = min(ctas, ceil(tiles / dev.sms)) * threads // 32
    return min(1.0, warps / WARPS_TO_SATURATE)


def bandwidth_share(tiles: int, ctas: int, threads: int, dev: Device, tbps: float) -> float:
    """The share of a memory level's bandwidth (`tbps`: DRAM or L2) a kernel of `tiles` CTAs reaches: the busy
    SMs each draw at most their own load port (Device.sm_load_gbps), so a few SMs saturate the level
    (Device.sms_to_saturate), not all of them; x latency hiding. A 2-CTA kernel on H100 reads DRAM at
    2 x 117 GB/s, not at 2/132 of 3 TB/s."""
    ports = min(1.0, sm_util(tiles, ctas, dev) * dev.sms / dev.sms_to_saturate(tbps))
    return ports * hiding(tiles, ctas, threads, dev)


@lru_cache(maxsize=4096)
def best_shares(count: int, dev: Device) -> tuple:
    """(the best occupancy, the best DRAM bandwidth share) any CTAs-per-SM gives a kernel of ``count`` tiles."""
    ctas = range(1, dev.max_ctas_per_sm + 1)
    return (max(occupancy(count, c, 256, dev) for c in ctas),
            max(bandwidth_share(count, c, 256, dev, dev.dram_tbps) for c in ctas))
