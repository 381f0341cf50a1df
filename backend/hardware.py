"""Numbers of the two targets the cost model and the STOP conditions use (seed 000 §11).

Sources: /work/shared/research/gpu-performance-anchors.md §1 (datasheet peaks; practical ceilings:
the mma.sync path reaches ~50-65 % of dense peak on Hopper, wgmma ~80 %).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    arch: str                 # "sm80" | "sm90"
    name: str
    sms: int
    smem_per_sm: int          # bytes
    smem_per_block: int       # bytes a block may opt in to
    regs_per_sm: int
    max_threads_per_sm: int
    peak_tflops: float        # dense fp16/bf16 tensor core, fp32 accumulate
    bw_tbs: float             # DRAM bandwidth, TB/s
    mma_sync_eff: float       # fraction of peak the sm80 skeleton (mma.sync) reaches here
    wgmma_eff: float          # fraction of peak the sm90 skeleton reaches (0: not available)
    clock_ghz: float = 1.4
    smem_bytes_per_clk: int = 128  # shared-memory bandwidth per SM
    launch_us: float = 3.0


TARGETS = {
    "sm80": Target("sm80", "A100-SXM4", 108, 164 * 1024, 163 * 1024, 65536, 2048, 312.0, 2.039, 0.85, 0.0, 1.41),
    "sm90": Target("sm90", "H100-SXM5", 132, 228 * 1024, 227 * 1024, 65536, 2048, 989.4, 3.35, 0.50, 0.80, 1.83),
}


def target(arch: str) -> Target:
    from ..ir.diagnostics import fail
    if arch not in TARGETS:
        fail("UnknownTarget", "--arch", f"unknown arch {arch!r}; archs: {', '.join(TARGETS)}")
    return TARGETS[arch]
