"""The MMA skeleton's plan space, shared by the kinds that run on it (GEMM, implicit-GEMM conv): candidate
tiles for the sm80 and sm90 skeletons, the register and occupancy estimates, the sm90 tile rule, and the
estimate of one plan's time.

``estimate`` counts the padded tiles actually issued (FLOPs), the operand bytes the MMAs read from shared
memory (ldmatrix per warp tile, wgmma per m64nBN step: small warp tiles re-read more per FLOP), and the
bytes moved: the unique tensor bytes plus the tile re-reads that miss L2 (a fixed fraction); ``wave_eff`` is
the fraction of CTA slots the last wave fills, and loads overlapping the epilogue hide
``min(T_load, T_epilogue)``. The roofline (analyses/roofline.py) composes them.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from ...analyses.devices import Device
from ...analyses.roofline import dram_time, roofline, smem_time, tensor_time
from .mma_plan import SchedulePlan

L2_MISS = 0.15          # fraction of tile re-reads that reach DRAM
PIPELINE_EFF = {2: 0.85, 3: 0.95}
# estimates: MMA issue efficiency by instruction/warp-tile shape (wider wgmma N and bigger warp tiles
# keep the tensor cores fed; published CUTLASS tuning: 64x64 warp tiles +37 % over small ones)
WGMMA_N_EFF = {64: 0.8, 128: 0.95, 256: 1.0}
WARP_TILE_EFF = {(32, 32): 0.75, (64, 32): 0.9, (32, 64): 0.9, (64, 64): 1.0}
# a plain copy (an operand of VEC 1: rows not 16-bit-pair aligned) is a load whose value the thread stores to
# shared memory at once, so a thread's copies of a stage are round trips one after another: fit to the H200's
# 4095x4097x1000 GEMM (sm80_128x128x32_s3_w2x2_v81: 4,096 such copies a thread, 427 µs, fp16 and bf16)
PLAIN_COPY_US = 0.1


def regs_estimate(plan: SchedulePlan) -> int:
    """Registers per thread the skeleton needs (accumulators + fragments + addressing), and on sm80 about 6 a plain
    copy of a stage (its value, 64-bit address and guard, the copies unrolled; ptxas: 236 for
    sm80_128x128x32_s2_w2x4_v81, 16 such copies, against 128 without them), those up to 255 at most: ptxas fits
    the w2x2 tile's 32 in 253 with B's (and spills 80 bytes at 255 with A's), and a GEMM whose operands are both
    unaligned has no tile without such copies, so they never prune a plan; they set its occupancy."""
    bm, bn, _ = plan.tile
    if plan.skeleton == "sm90":
        return min(232, bn // 2 + 72)
    wm, wn = plan.warp_tile
    mi, ni = wm // 16, wn // 8
    # fp32: each fragment loaded, then split into big + small (ptxas: 246-255 and spills for 64x64 warp tiles)
    frags = (mi * 4 + ni * 2) * (3 if plan.elem_bytes == 4 else 1)
    base = mi * ni * 4 + frags + 40
    return base if base > 255 else min(255, base + 6 * plain_copies(plan))


def plain_copies(plan: SchedulePlan) -> int:
    """The plain copies (``load_tile`` with VEC 1: a load, then its shared store) a thread of the sm80 skeleton
    makes a stage, of A's and B's tiles."""
    if plan.skeleton != "sm80":
        return 0
    bm, bn, bk = plan.tile
    return sum(rows * bk // plan.threads for rows, vec in ((bm, plan.vec_a), (bn, plan.vec_b)) if vec == 1)


def ctas_per_sm(plan: SchedulePlan, dev: Device) -> int:
    if plan.skeleton == "sm90":
        return 1 if plan.persistent else max(1, min(dev.smem_per_sm // max(plan.smem_bytes, 1), 2))
    regs = ((regs_estimate(plan) + 7) // 8) * 8
    by_regs = dev.regs_per_sm // (regs * plan.threads)
    by_smem = dev.smem_per_sm // max(plan.smem_bytes, 1)
    by_threads = dev.max_threads_per_sm // plan.threads
    return max(0, min(by_regs, by_smem, by_threads, 32))


def contiguous_extents(spec: Any) -> tuple["int | str", "int | str"]:
    """The contiguous (leading) extent of A and of B."""
    a = spec.k if spec.a_layout == "row" else spec.m
    b = spec.n if spec.b_layout == "row" else spec.k
    pieces = getattr(spec, "b_pieces", ())
    if pieces and spec.b_layout == "row":  # B concatenated along N: each piece is its own packed tensor
        b = math.gcd(*(w for _, w in pieces))
    return a, b


def widest_vec(extent: "int | str", itemsize: int = 2) -> int:
    """Elements per aligned load of at most 16 bytes: the largest of 8, 4, 2, 1 (4, 2, 1 for 4-byte elements)
    dividing the extent (symbols: the widest, guarded)."""
    widths = tuple(v for v in (8, 4, 2, 1) if v * itemsize <= 16)
    if isinstance(extent, str):
        return widths[0]
    return next(v for v in widths if extent % v == 0)


def _assumes(spec: Any, need: int) -> tuple[str, ...]:
    out = []
    for ext in contiguous_extents(spec):
        if isinstance(ext, str):
            out.append(f"{ext} % {need} == 0")
    return tuple(dict.fromkeys(out))


def _tail_axes(spec: Any, sizes_known: Mapping[str, "int | None"], tile: tuple[int, int, int], hints) -> tuple[str, ...]:
    if hints and "tail_axes" in hints:
        return tuple(hints["tail_axes"])
    out = []
    for axis, t in zip(("m", "n", "k"), tile, strict=True):
        size = sizes_known[axis]
        if size is None or size % t:
            out.append(axis)
    return tuple(out)


def sm80_candidates(spec: Any, arch: str, sizes: Mapping[str, int], hints) -> list[SchedulePlan]:
    isz = spec.in_dtype.itemsize
    va, vb = (widest_vec(e, isz) for e in contiguous_extents(spec))
    a_k, b_k = spec.a_layout == "row", spec.b_layout == "col"
    tiles = [(128, 128, (2, 2)), (128, 128, (2, 4)), (128, 64, (2, 2)), (64, 128, (2, 2)), (64, 64, (2, 2))]
    if sizes["m"] <= 64:
        tiles = [t for t in tiles if t[0] == 64]
    if sizes["n"] <= 64:
        tiles = [t for t in tiles if t[1] == 64] or tiles
    depth = (hints or {}).get("min_buffer", {}).get("depth")
    stages = (2, 3) if depth in (None, 2) else (3, 4)
    out = []
    known = {ax: (d if isinstance(d, int) else None) for ax, d in (("m", spec.m), ("n", spec.n), ("k", spec.k))}
    for bm, bn, warps in tiles:
        for bk in (32, 64):
            for s in stages:
                out.append(SchedulePlan(arch=arch, skeleton="sm80", tile=(bm, bn, bk), stages=s, warps=warps,
                                        vec_a=va, vec_b=vb, epilogue=tuple(op.kind for op in spec.epilogue),
                                        predicate_tail=_tail_axes(spec, known, (bm, bn, bk), hints),
                                        a_kmajor=a_k, b_kmajor=b_k, assumes=_assumes(spec, max(va, vb)),
                                        elem_bytes=isz))
    return out


def sm90_candidates(spec: Any, sizes: Mapping[str, int], hints) -> list[SchedulePlan]:
    a_k, b_k = spec.a_layout == "row", spec.b_layout == "col"
    known = {ax: (d if isinstance(d, int) else None) for ax, d in (("m", spec.m), ("n", spec.n), ("k", spec.k))}
    out = []
    for nc in ((1, 2) if sizes["m"] > 64 else (1,)):
        for bn in (64, 128, 256):
            for s in (3, 4, 5):
                tile = (64 * nc, bn, 64)
                out.append(SchedulePlan(arch="sm90", skeleton="sm90", tile=tile, stages=s, warps=(nc, 1),
                                        vec_a=8, vec_b=8, epilogue=tuple(op.kind for op in spec.epilogue),
                                        predicate_tail=_tail_axes(spec, known, tile, hints),
                                        a_kmajor=a_k, b_kmajor=b_k, persistent=True, assumes=_assumes(spec, 8)))
    return out


def sm90_tile_reason(plan: SchedulePlan, dev: Device) -> str | None:
    """The sm90 GEMM skeleton's STOP conditions on the target and the tile (wgmma x TMA boxes)."""
    bm, bn, bk = plan.tile
    if dev.arch != "sm90":
        return "sm90 skeleton needs an sm90 GPU"
    if bm not in (64, 128) or bn not in (64, 128, 256) or bk != 64:
        return "sm90: tile outside wgmma m64nNk16 x TMA 128B-swizzle boxes"
    return None


def estimate(spec: Any, plan: SchedulePlan, sizes: Mapping[str, int], dev: Device) -> dict[str, float]:
    """The time of one GEMM-shaped plan (spec: a GemmSpec) under sizes {batch, m, n, k} on dev, with its terms."""
    b, m, n, k = sizes["batch"], sizes["m"], sizes["n"], sizes["k"]
    bm, bn, bk = plan.tile
    tiles = math.ceil(m / bm) * math.ceil(n / bn) * b
    occ = max(ctas_per_sm(plan, dev), 1)
    slots = dev.sms * occ
    waves = math.ceil(tiles / slots)
    wave_eff = tiles / (waves * slots)
    kpad = math.ceil(k / bk) * bk
    flops = 2.0 * tiles * bm * bn * kpad
    # fp32 operands: three tf32 MMAs per product (3xTF32), each at half the 16-bit rate
    mma_flops = flops * (6.0 if plan.elem_bytes == 4 else 1.0)
    if plan.skeleton == "sm90":
        eff = dev.mma_eff_of("sm90") * WGMMA_N_EFF.get(bn, 0.8)
    else:
        eff = dev.mma_eff_of("sm80") * WARP_TILE_EFF.get(plan.warp_tile, 0.75)
    # a CTA of few warps cannot keep the tensor cores busy alone (at least 8 MMA warps per SM)
    warps_per_sm = occ * (plan.threads // 32 - (4 if plan.skeleton == "sm90" else 0))
    busy = min(1.0, warps_per_sm / 8.0)
    t_compute = tensor_time(mma_flops, dev, eff, PIPELINE_EFF.get(plan.stages, 1.0), wave_eff, busy)
    if plan.skeleton == "sm90":
        smem_per_flop = (64 + bn) / (64.0 * bn)  # wgmma m64nBNk16 reads A 64x16 and B BNx16 per 2*64*BN*16 FLOPs
    else:
        wm, wn = plan.warp_tile
        # the warp tile's A and B slices (ldmatrix; 4-byte loads of fp32), bytes per FLOP
        smem_per_flop = (wm + wn) * plan.elem_bytes / (2.0 * wm * wn)
    t_smem = smem_time(flops * smem_per_flop, dev, wave_eff)
    # the plain copies: each wave's CTAs walk K side by side, a thread's copies of a stage one after another
    t_plain = waves * math.ceil(k / bk) * plain_copies(plan) * PLAIN_COPY_US * 1e-6
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
    t_mem = dram_time(total_bytes, dev)
    t_epi = dram_time(c_bytes + epi_bytes, dev)
    t_load = dram_time(load_bytes, dev)
    gain = min(t_load, t_epi) / max(waves, 1) if (plan.async_enable and plan.epilogue_overlap) else 0.0
    time = roofline(dev, (t_compute, t_mem, t_smem, t_plain), hidden=gain)
    return {"time_s": time, "t_compute_s": t_compute, "t_mem_s": t_mem, "t_smem_s": t_smem, "t_plain_s": t_plain,
            "flops": 2.0 * b * m * n * k,
            "bytes": float(total_bytes), "ctas_per_sm": float(occ), "waves": float(waves), "wave_eff": wave_eff,
            "regs_est": float(regs_estimate(plan))}
