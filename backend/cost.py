"""Roofline time estimate of one Schedule Plan (seed 000 §11, seed 001 §10).

``time_est = max(FLOPs / (peak * eff * pipeline_eff * wave_eff), Bytes / BW, smem_bytes / smem_BW)
+ launch - overlap_gain`` where FLOPs count the padded tiles actually issued, smem_bytes are the
operand bytes the MMAs read from shared memory (ldmatrix per warp tile, wgmma per m64nBN step: small
warp tiles re-read more per FLOP), Bytes are the unique tensor bytes plus the tile
re-reads that miss L2 (a fixed fraction), ``wave_eff`` is the fraction of CTA slots the last wave
fills, and ``overlap_gain = min(T_load, T_epilogue)`` when loads overlap the epilogue (§11 async).
A real Poly Core model can replace :func:`roofline` through the ``cost`` argument of the search.
"""
from __future__ import annotations

import math
from typing import Mapping

from .gemm_spec import GemmSpec
from .hardware import Target
from .plan import SchedulePlan

L2_MISS = 0.15          # fraction of tile re-reads that reach DRAM
PIPELINE_EFF = {2: 0.85, 3: 0.95}
# estimates: MMA issue efficiency by instruction/warp-tile shape (wider wgmma N and bigger warp tiles
# keep the tensor cores fed; research anchors §2.3-§2.5: 64x64 warp tiles +37 % over small ones)
WGMMA_N_EFF = {64: 0.8, 128: 0.95, 256: 1.0}
WARP_TILE_EFF = {(32, 32): 0.75, (64, 32): 0.9, (32, 64): 0.9, (64, 64): 1.0}


def regs_estimate(plan: SchedulePlan) -> int:
    """Registers per thread the skeleton needs (accumulators + fragments + addressing)."""
    bm, bn, _ = plan.tile
    if plan.skeleton == "sm90":
        return min(232, bn // 2 + 72)
    wm, wn = plan.warp_tile
    mi, ni = wm // 16, wn // 8
    return mi * ni * 4 + mi * 4 + ni * 2 + 40


def ctas_per_sm(plan: SchedulePlan, tgt: Target) -> int:
    if plan.skeleton == "sm90":
        return 1 if plan.persistent else max(1, min(tgt.smem_per_sm // max(plan.smem_bytes, 1), 2))
    regs = ((regs_estimate(plan) + 7) // 8) * 8
    by_regs = tgt.regs_per_sm // (regs * plan.threads)
    by_smem = tgt.smem_per_sm // max(plan.smem_bytes, 1)
    by_threads = tgt.max_threads_per_sm // plan.threads
    return max(0, min(by_regs, by_smem, by_threads, 32))


def roofline(spec: GemmSpec, plan: SchedulePlan, sizes: Mapping[str, int], tgt: Target) -> dict[str, float]:
    b, m, n, k = sizes["batch"], sizes["m"], sizes["n"], sizes["k"]
    bm, bn, bk = plan.tile
    tiles = math.ceil(m / bm) * math.ceil(n / bn) * b
    occ = max(ctas_per_sm(plan, tgt), 1)
    slots = tgt.sms * occ
    waves = math.ceil(tiles / slots)
    wave_eff = tiles / (waves * slots)
    kpad = math.ceil(k / bk) * bk
    flops = 2.0 * tiles * bm * bn * kpad
    if plan.skeleton == "sm90":
        eff = tgt.wgmma_eff * WGMMA_N_EFF.get(bn, 0.8)
    else:
        eff = tgt.mma_sync_eff * WARP_TILE_EFF.get(plan.warp_tile, 0.75)
    # a CTA of few warps cannot keep the tensor cores busy alone (at least 8 MMA warps per SM)
    warps_per_sm = occ * (plan.threads // 32 - (4 if plan.skeleton == "sm90" else 0))
    busy = min(1.0, warps_per_sm / 8.0)
    t_compute = flops / (tgt.peak_tflops * 1e12 * eff * PIPELINE_EFF.get(plan.stages, 1.0) * wave_eff * busy)
    if plan.skeleton == "sm90":
        smem_per_flop = (64 + bn) / (64.0 * bn)  # wgmma m64nBNk16 reads A 64x16 and B BNx16 per 2*64*BN*16 FLOPs
    else:
        wm, wn = plan.warp_tile
        smem_per_flop = (wm + wn) / (float(wm) * wn)  # ldmatrix of the warp tile's A and B slices
    t_smem = flops * smem_per_flop / (tgt.smem_bytes_per_clk * tgt.sms * tgt.clock_ghz * 1e9 * wave_eff)
    isz = spec.in_dtype.itemsize
    a_bytes = (1 if spec.a_broadcast else b) * m * k * isz
    b_bytes = (1 if spec.b_broadcast else b) * k * n * isz
    c_bytes = b * m * n * spec.out_dtype.itemsize
    epi_bytes = 0
    for op in spec.epilogue:
        if op.kind == "bias":
            epi_bytes += (n if op.axis == "n" else m) * op.dtype.itemsize
        elif op.kind == "residual":
            epi_bytes += b * m * n * op.dtype.itemsize
    rereads = tiles * (bm + bn) * kpad * isz
    load_bytes = a_bytes + b_bytes + L2_MISS * max(0.0, rereads - a_bytes - b_bytes)
    total_bytes = load_bytes + c_bytes + epi_bytes
    t_mem = total_bytes / (tgt.bw_tbs * 1e12)
    t_epi = (c_bytes + epi_bytes) / (tgt.bw_tbs * 1e12)
    t_load = load_bytes / (tgt.bw_tbs * 1e12)
    gain = min(t_load, t_epi) / max(waves, 1) if (plan.async_enable and plan.epilogue_overlap) else 0.0
    time = max(t_compute, t_mem, t_smem) + tgt.launch_us * 1e-6 - gain
    return {"time_s": time, "t_compute_s": t_compute, "t_mem_s": t_mem, "t_smem_s": t_smem, "flops": 2.0 * b * m * n * k,
            "bytes": float(total_bytes), "ctas_per_sm": float(occ), "waves": float(waves), "wave_eff": wave_eff,
            "regs_est": float(regs_estimate(plan))}

