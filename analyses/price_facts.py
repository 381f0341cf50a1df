"""What the price of a region needs that no tile changes, and the floor it puts under the price of every tile
(docs/DESIGN.md §Cost model). A price module: the facts are counts, the floor a bound on analyses/price.py's
``_price``, which its tile search uses to leave tiles unpriced that cannot be chosen.

:func:`facts`: the useful FLOPs per unit (the stream's bookkeeping included), the epilogue's, the device bytes of
the inputs and outputs, the share of predicated reads: isl counts over the whole region, once per region.

:func:`floor`: a time no tile of given sizes is priced below, from its tile count alone: ``_price``'s own
roofline on a bound of each operand (the best occupancy and DRAM share the count allows at 256 threads, the MMA
shapes filled, no traffic but the useful bytes, no penalty but the layout and piecewise ones those imply). Where
``_price`` only adds nonnegative terms to those operands (:func:`exact_floor`: no epilogue overlap subtracted, no
prologue producer), the floor takes the same floating-point operations in the same order on operands each at
most the price's, and IEEE rounding is monotone, so the floor is at most the computed price to the last bit: a
tile whose floor equals the best price cannot undercut it even by a rounding, and a tie never displaces the best
(the tile search skips such tiles unpriced, leaving its answer unchanged). Elsewhere it is a bound up to rounding,
which the search uses with a margin. A region with an A prologue (analyses/prologue_cone.py) has its cone's FP32
and SFU work taken off the shared compute term by the sm90 producer, which runs it as a limit of its own: its
floor's compute is the tensor-core work alone (the rest of the term stays nonnegative: the cone's work is part of
the region's, before any epilogue).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import ceil
from typing import Mapping

from .devices import Device
from .footprint import card, extents, full_footprint, sectors, tile_count
from .isl_util import kept
from .occupancy import bandwidth_share, best_shares
from .origin import SECTOR
from .poly_region import BoundRegion, PolyRegion
from .prologue_cone import cone
from .roofline import roofline

SIMT_EFF = 0.6  # estimate: fraction of fp32 peak elementwise/reduction code reaches (not FMA-only)
PREDICATE_COST = 0.03  # estimate: share of compute time a predicated (guarded) access adds


def stream_work(b: BoundRegion) -> dict:
    """FLOPs per unit of the recurrence's bookkeeping, per row and key block: the running max (max of
    old and block max; exp2 of its change: sub, mul, exp2), the running sum (rescale, add) and the
    accumulator rescale (one mul per output cell)."""
    out = {"fp32": 0, "sfu": 0}
    for name in b.region.stream:
        s = b.stmt(name)
        if len(s.reduce_dims) != 1:
            continue
        lo, hi = extents(s.domain)[s.dims.index(s.reduce_dims[0])]
        blocks = ceil((hi - lo + 1) / b.region.stream_block)
        cells = card(s.domain.apply(s.write))
        if s.stmt.unit == "tensor":
            if not b.region.stream_recompute:  # a two-pass stream's weighted sum needs no rescale
                out["fp32"] += cells * blocks
        elif s.stmt.combine == "max":
            out["fp32"] += 3 * cells * blocks
            out["sfu"] += cells * blocks
        else:
            out["fp32"] += 2 * cells * blocks
    for name in b.region.stream_recompute:  # a two-pass stream walks the scores twice
        s = b.stmt(name)
        if not dead(b, s):
            out[s.stmt.unit] = out.get(s.stmt.unit, 0) + s.stmt.flops * card(s.domain)
    return out


def dead(b: BoundRegion, s) -> bool:
    """A statement whose internal tensor nothing reads: a widening cast the contraction reads through
    (Poly-View keeps its block), which the kernel never runs."""
    w = s.stmt.write.tensor
    return b.region.tensor(w).role == "internal" and not b.readers(w)


@dataclass(frozen=True)
class Facts:
    """What the price of a region needs that no tile changes (computed once per region: :func:`facts`)."""
    useful: dict  # unit -> FLOPs, each instance once (the stream's bookkeeping included)
    epilogue: int  # FP32-pipe FLOPs after the last tensor-core statement
    epilogue_sfu: int  # SFU FLOPs after it (the epilogue's exp2, rsqrt: serial after the main loop too)
    mma: bool  # the region has a tensor-core statement
    live: tuple  # of (statement, instances): the statements the kernel runs
    dram: int  # device-memory bytes of the inputs and outputs (sector granularity)
    in_useful: int
    out_useful: int
    predicated: float  # reads guarded inside their statement's domain, each weighted by its statement's share of the work


@lru_cache(maxsize=4096)
def facts(region: PolyRegion) -> Facts:
    b = region.bind()
    useful = {"tensor": 0, "fp32": 0, "sfu": 0}
    for unit, n in stream_work(b).items():  # the recurrence's bookkeeping: work the kernel really does
        useful[unit] += n
    last_mma = max([s.index for s in b.statements if s.stmt.unit == "tensor"], default=-1)
    epi = {"fp32": 0, "sfu": 0}
    live = []
    for s in b.statements:
        if dead(b, s):
            continue
        n = card(s.domain)
        live.append((s, n))
        useful[s.stmt.unit] += s.stmt.flops * n
        if s.index > last_mma >= 0 and s.stmt.unit != "tensor":
            epi[s.stmt.unit] += s.stmt.flops * n
    dram = in_useful = out_useful = 0
    for x in region.tensors:
        if x.role == "internal":
            continue
        size = x.dtype.itemsize
        fa = full_footprint(b, x.name)
        dram += sectors(fa, size, SECTOR, b.shapes[x.name]) * SECTOR
        if x.role == "input":
            in_useful += card(fa) * size
        else:
            out_useful += card(fa) * size
    # a guarded read costs in proportion to the work of the statement that performs it: the guarded pieces
    # of a concatenation's epilogue (rules/siblings.egg) are not the contraction's main loop
    weight = {s.index: max(s.stmt.flops, 1) * n for s, n in live}
    whole = sum(weight.values()) or 1
    predicated = sum(weight.get(s.index, 0) for s in b.statements for _, m in s.reads
                     if kept("guarded", (m, s.domain), lambda: not m.domain().is_equal(s.domain))) / whole
    return Facts(useful, epi["fp32"], epi["sfu"], last_mma >= 0, tuple(live), dram, in_useful, out_useful, predicated)


def floor(region: PolyRegion, dev: Device, sizes: Mapping[str, int]) -> float:
    """A time no tile of these sizes is priced below, from their tile count alone (see the module docstring;
    exact to the bit where :func:`exact_floor`)."""
    return _floor(region, dev, tile_count(region.bind(), sizes))


@lru_cache(maxsize=8192)
def _floor(region: PolyRegion, dev: Device, count: int) -> float:
    return tile_floor(region, dev, count)


def tile_floor(region: PolyRegion, dev: Device, count: int, extra: "Mapping[str, int] | None" = None, l2: int = 0,
               eff: "float | None" = None) -> float:
    """The floor of a tiling into ``count`` tiles: ``_price``'s operations, in its order, with the rates at the
    best occupancy (resp. DRAM and L2 share) the count allows, the MMA efficiency ``eff`` (default: its ceiling),
    the device bytes the useful ones, the compute without its SIMT work where a prologue's producer takes some,
    and zero for the prologue's own terms, the epilogue's net serial time (its time less what loads hide of it:
    not below zero) and the spill penalty. Given a made tile's recompute (``extra``
    FLOPs per unit), its input bytes from L2 (``l2``, without a stream's second walk) and its MMA efficiency, the
    fan-out penalty and L2 time are the tile's too."""
    occ, occ_m = best_shares(count, dev)
    return _roof(region, dev, occ, occ_m, _l2_share(count, dev) if l2 else 1.0, extra, l2, eff)


def region_floor(region: PolyRegion, dev: Device) -> float:
    """A time no tiling of the region is priced below: the floor at full occupancy and bandwidth shares (no tile
    count gives more)."""
    return _roof(region, dev, 1.0, 1.0, 1.0, None, 0, None)


def _roof(region: PolyRegion, dev: Device, occ: float, occ_m: float, l2_share: float,
          extra: "Mapping[str, int] | None", l2: int, eff: "float | None") -> float:
    """``_price``'s roofline at these shares (upper bounds of the price's) on the region's facts: see tile_floor."""
    f = facts(region)
    us = 1e6
    mma_rate = dev.tensor_tflops * 1e12 * occ * (dev.mma_eff if eff is None else eff)
    simt_rate = dev.fp32_tflops * 1e12 * occ * SIMT_EFF
    sfu_rate = simt_rate * dev.sfu_ratio
    epi, epi_sfu = (f.epilogue, f.epilogue_sfu) if f.mma else (0, 0)
    compute = f.useful["tensor"] / mma_rate * us
    if cone(region) is None:  # a prologue's producer takes its cone's FP32 and SFU work off the shared terms (sm90)
        compute = compute + (f.useful["fp32"] - epi) / simt_rate * us + (f.useful["sfu"] - epi_sfu) / sfu_rate * us
    bw = dev.dram_tbps * 1e12 * occ_m
    t_mem = f.in_useful / bw * us + f.out_useful / bw * us
    t_l2 = l2 / (dev.l2_tbps * 1e12 * l2_share) * us if l2 else 0.0
    fanout = (extra["tensor"] / mma_rate + extra["fp32"] / simt_rate + extra["sfu"] / sfu_rate) * us if extra else 0.0
    layout = max(0.0, (f.dram - f.in_useful - f.out_useful) / bw * us)
    piecewise = PREDICATE_COST * f.predicated * compute
    return roofline(dev, (compute, t_mem, t_l2, 0.0), serial=(0.0, 0.0), hidden=0.0,
                    penalties=(fanout, layout, piecewise, 0.0), unit="us")


@lru_cache(maxsize=4096)
def _l2_share(count: int, dev: Device) -> float:
    """The best L2 bandwidth share any CTAs-per-SM gives a kernel of ``count`` tiles (256 threads, the most)."""
    return max(bandwidth_share(count, c, 256, dev, dev.l2_tbps) for c in range(1, dev.max_ctas_per_sm + 1))


@lru_cache(maxsize=4096)
def exact_floor(region: PolyRegion) -> bool:
    """Whether :func:`floor` bounds the computed price to the last bit: no epilogue after a tensor-core statement
    (whose overlap with the stores ``_price`` subtracts) and no A prologue with a row statistic (whose producer
    work it moves between terms)."""
    f = facts(region)
    return cone(region) is None and not (f.mma and (f.epilogue or f.epilogue_sfu))
