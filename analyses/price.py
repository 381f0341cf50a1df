"""The roofline cost model that prices one candidate region (one kernel) from Poly Core facts
(docs/DESIGN.md §Cost model).

``time_est = max(FLOPs/(peak·occ·eff), Bytes/(BW·share)) + epilogue − overlap_gain + penalties +
launch``, where FLOPs are statement instances × FLOPs per instance (isl counts), bytes are the
32-byte sectors of the region's footprints in device memory (inputs read once, outputs written
once; internal edges that do not fit on chip go through memory twice), L2 -> SM traffic is the
per-tile footprints × tiles (halo and reuse included), smem is the staged operand ring plus on-chip
edges, and occupancy comes from smem, registers, threads and wave quantization; the bandwidth share of a
kernel of few CTAs is what their SMs' load ports draw (a few busy SMs saturate DRAM), not a pro-rata share. Penalties:
fan-out (recomputed producers), layout (wasted sector bytes), piecewise (predicated accesses),
spills. ``price`` tries a few tiles and keeps the cheapest that hits no STOP condition (docs/DESIGN.md §Cost model).

A streamed region (``PolyRegion.stream``: an online softmax-weighted sum) runs its running
reductions ``stream_block`` keys at a time: on-chip values, staging, registers and threads are those
of one key block of the tile (:func:`stream_tile`), while FLOPs and device/L2 traffic stay the whole
tile's (every query tile reads all of K and V once), plus the recurrence's rescaling work per block
(running max, exp of its change, running sum, accumulator rescale). A two-pass stream runs the
statements of ``stream_recompute`` (scores, exponentials) and their operand traffic twice.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from functools import lru_cache
from math import ceil, log2, prod
from typing import Mapping, Sequence

import islpy as isl

from ..ir.diagnostics import PolysatError, fail
from .buffers import SMEM_BUDGET, edges, halo_matters, staged_operands, staging_bytes
from .devices import Device, device, tf32x3
from .occupancy import bandwidth_share, occupancy
from .origin import SECTOR, at_origin
from .footprint import (card, stream_tile, extents, footprint, full_footprint, image, make_tile, normalize_tile,
                        sectors, tile_footprint)
from .halo import halo
from .poly_region import BoundRegion, BoundStatement, PolyRegion
from .price_facts import PREDICATE_COST, SIMT_EFF, dead, exact_floor, facts, floor, region_floor, tile_floor
from .prologue_cone import cone, first_pass_l2, on_chip, producer
from .polycore import MAX_RECOMPUTE, analyze, bounded_recompute, default_tile, kstep, recompute_factors, stages
from .roofline import roofline

BASE_REGS = 32  # registers per thread besides accumulators and on-chip values (addresses, indices)
MAX_ACC = 128 * 256  # accumulator cells of the largest MMA sub-tile one CTA holds (128x256 CTA tile)
SEARCH_STEPS = 8  # tiles the local search may price beyond the candidates


@dataclass(frozen=True, order=True)
class Cost:
    """The modelled cost of one region (or, summed, of a partition); ordered by time."""
    time_est_us: float
    flops: int = field(compare=False)  # executed (recompute included)
    bytes: int = field(compare=False)  # device-memory bytes (sector granularity)
    l2_bytes: int = field(compare=False)
    smem: int = field(compare=False)  # bytes per CTA
    regs: int = field(compare=False)  # per thread
    threads: int = field(compare=False)
    occupancy: float = field(compare=False)
    ctas_per_sm: int = field(compare=False)
    tiles: int = field(compare=False)
    tile: tuple = field(compare=False)  # ((dim, size), ...)
    bound: str = field(compare=False)  # compute | memory | latency
    terms: tuple = field(compare=False)  # ((name, us), ...) the roofline terms
    penalties: tuple = field(compare=False)  # ((name, us), ...)
    overlap_gain_us: float = field(compare=False)
    stops: tuple = field(compare=False)  # STOP conditions hit (docs/DESIGN.md §Cost model)
    kernels: int = field(compare=False, default=1)
    region: str = field(compare=False, default="")

    def __add__(self, other: "Cost") -> "Cost":
        """The cost of running both kernels one after the other."""
        return Cost(self.time_est_us + other.time_est_us, self.flops + other.flops, self.bytes + other.bytes,
                    self.l2_bytes + other.l2_bytes, max(self.smem, other.smem), max(self.regs, other.regs),
                    max(self.threads, other.threads), min(self.occupancy, other.occupancy),
                    min(self.ctas_per_sm, other.ctas_per_sm), self.tiles + other.tiles, (), "sum",
                    _add_pairs(self.terms, other.terms), _add_pairs(self.penalties, other.penalties),
                    self.overlap_gain_us + other.overlap_gain_us, self.stops + other.stops,
                    self.kernels + other.kernels, f"{self.region}+{other.region}")

    def to_json(self) -> dict:
        return {"region": self.region, "time_est_us": round(self.time_est_us, 4), "flops": self.flops,
                "bytes": self.bytes, "l2_bytes": self.l2_bytes, "smem": self.smem, "regs": self.regs,
                "threads": self.threads, "occupancy": round(self.occupancy, 4), "ctas_per_sm": self.ctas_per_sm,
                "tiles": self.tiles, "tile": dict(self.tile), "bound": self.bound, "kernels": self.kernels,
                "terms": {k: round(v, 4) for k, v in self.terms},
                "penalties": {k: round(v, 4) for k, v in self.penalties},
                "overlap_gain_us": round(self.overlap_gain_us, 4), "stops": list(self.stops)}


def _add_pairs(a: tuple, b: tuple) -> tuple:
    d = dict(a)
    for k, v in b:
        d[k] = d.get(k, 0.0) + v
    return tuple(d.items())


def total(costs: Sequence[Cost]) -> Cost:
    """The cost of a partition: its kernels run back to back."""
    out = costs[0]
    for c in costs[1:]:
        out = out + c
    return out


def used_dims(m, dims: Sequence[str]) -> set:
    """The input dims a single-valued access map's index expressions depend on (a nonzero
    coefficient in some piece)."""
    out: set = set()

    def piece(_set, ma):
        for i in range(ma.dim(isl.dim_type.out)):
            a = ma.get_aff(i)
            out.update(d for k, d in enumerate(dims) if not a.get_coefficient_val(isl.dim_type.in_, k).is_zero())
    m.as_pw_multi_aff().foreach_piece(piece)
    return out


def _operand_dims(s: BoundStatement) -> tuple:
    """(M dims, N dims) of a tensor-core statement: parallel dims that only its first, resp.
    second, operand depends on (implicit GEMM: conv's n,h,w are M and k is N)."""
    if len(s.reads) < 2:
        return (), ()
    ua, ub = used_dims(s.reads[0][1], s.dims), used_dims(s.reads[1][1], s.dims)
    par = [d for d in s.dims if d not in s.reduce_dims]
    return tuple(d for d in par if d in ua and d not in ub), tuple(d for d in par if d in ub and d not in ua)


@lru_cache(maxsize=8192)
def _operand_dims_of(region: PolyRegion, name: str) -> tuple:
    """_operand_dims of the region's statement ``name`` (no tile changes it)."""
    return _operand_dims(region.bind().stmt(name))


def _mma_eff(b: BoundRegion, slices: Mapping, dev: Device) -> tuple:
    """Useful fraction of the MMA instruction shape the tile fills, per tensor statement, and the
    STOP reasons (sm90: M tile a multiple of 64, N a multiple of 8 up to 256)."""
    mm, mn = (64, 8) if dev.arch == "sm90" else (16, 8)
    effs, stops = {}, []
    for s in b.statements:
        if s.stmt.unit != "tensor" or s.name not in slices or slices[s.name].is_empty():
            continue
        ext = dict(zip(s.dims, extents(slices[s.name]), strict=True))
        md, nd = _operand_dims_of(b.region, s.name)
        M = prod(ext[d][1] - ext[d][0] + 1 for d in md) if md else 1
        N = prod(ext[d][1] - ext[d][0] + 1 for d in nd) if nd else 1
        effs[s.name] = (M / (ceil(M / mm) * mm)) * (N / (ceil(N / mn) * mn))
        if dev.arch == "sm90" and (M % 64 or N % 8 or N > 256 and N % 256):
            stops.append(f"sm90: tile {M}x{N} of {s.name} is outside the wgmma/TMA shapes (M%64, N%8)")
    return effs, stops


def _vector_width(b: BoundRegion, tile) -> int:
    """Widest vector (bytes, 16/8/4/2) every input tile row allows: row extent and the tensor's row
    length must both be multiples of it."""
    width = 16
    for t in b.region.tensors:
        if t.role != "input" or not t.shape:
            continue
        fp = tile_footprint(b, tile, t.name)
        if fp.is_empty():
            continue
        lo, hi = extents(fp)[-1]
        row = (hi - lo + 1) * t.dtype.itemsize
        full = b.shapes[t.name][-1] * t.dtype.itemsize
        start = lo * t.dtype.itemsize
        while width > t.dtype.itemsize and (row % width or full % width or start % width):
            width //= 2
    return width


def on_path(region: PolyRegion, arch: "str | Device") -> Device:
    """The device the region's tensor-core statements run on: the target, or the target as the sm80 skeleton runs
    fp32 operands (``mma_path`` tf32x3: three tf32 MMAs per product, devices.tf32x3)."""
    return tf32x3(device(arch)) if region.mma_path == "tf32x3" else device(arch)


def price_tile(region: PolyRegion, arch: "str | Device", tile: Mapping[str, int]) -> Cost:
    """The cost of `region` run with one given tile of its driver."""
    dev = on_path(region, arch)
    return _price(at_origin(region), dev, tuple(sorted(tile.items())))


@dataclass(frozen=True)
class _Work:
    useful: dict  # unit -> FLOPs, each instance once
    extra: dict  # unit -> FLOPs recomputed across tiles (halos, fan-out)
    epilogue: int  # FP32-pipe FLOPs after the last tensor-core statement
    epilogue_sfu: int  # SFU FLOPs after it
    mma: bool  # the region has a tensor-core statement
    factors: dict  # statement -> recompute factor


def _rewalk_l2(b: BoundRegion, t) -> int:
    """L2 -> SM bytes of the second walk of a two-pass stream: the inputs its rewalked statements
    read, once more per tile."""
    again = {n: t.slices[n] for n in b.region.stream_recompute if n in t.slices and not dead(b, b.stmt(n))}
    if not again:
        return 0
    out = 0
    for x in b.region.tensors:
        if x.role == "input":
            out += sectors(footprint(b, again, x.name), x.dtype.itemsize, SECTOR, b.shapes[x.name]) * SECTOR * t.count
    return out


def _work(b: BoundRegion, t) -> _Work:
    """The tile's work (made once per region and tile: the tile search's floor reads it before the price)."""
    return _work_at(b.region, t.sizes)


@lru_cache(maxsize=4096)
def _work_at(region: PolyRegion, sizes: tuple) -> _Work:
    b = region.bind()
    t = make_tile(b, dict(sizes))
    f = facts(region)
    extra = {"tensor": 0, "fp32": 0, "sfu": 0}
    factors = recompute_factors(b, t)
    for s, n in f.live:
        extra[s.stmt.unit] += int(s.stmt.flops * n * max(0.0, factors.get(s.name, 1.0) - 1.0))
    return _Work(dict(f.useful), extra, f.epilogue, f.epilogue_sfu, f.mma, factors)


def _l2_in(b: BoundRegion, t) -> int:
    """L2 -> SM bytes of the inputs: each tile's footprint, in sectors, once per tile."""
    return sum(sectors(tile_footprint(b, t, x.name), x.dtype.itemsize, SECTOR, b.shapes[x.name]) * SECTOR * t.count
               for x in b.region.tensors if x.role == "input")


def _traffic(b: BoundRegion, t, es: list) -> tuple:
    """(device-memory bytes at sector granularity, useful input bytes, useful output bytes,
    spilled-edge bytes, L2 -> SM bytes)."""
    f = facts(b.region)
    l2 = _l2_in(b, t)
    spill = 0
    spilled = [e.tensor for e in es if e.buffer == "gmem"]  # written once, read once per consumer
    for name in set(spilled):
        spill += (1 + spilled.count(name)) * card(full_footprint(b, name)) * b.region.tensor(name).dtype.itemsize
    return f.dram + spill, f.in_useful, f.out_useful, spill, l2


def _resources(b: BoundRegion, t, es: list, ring: int, dev: Device) -> tuple:
    """(smem per CTA, threads, regs per thread, CTAs per SM, CTAs allowed by regs, by smem)."""
    smem = ring + sum(e.tile_bytes * e.depth for e in
                      {e.tensor: e for e in es if e.buffer == "smem_ring" and not e.staged}.values())
    # threads follow the largest per-tile piece of work: MMA accumulator cells (32 per thread) or
    # SIMT statement instances (16 per thread)
    cells = {s.name: card(image(t.slices[s.name], s.write)) for s in b.statements  # accumulator cells
             if s.stmt.unit == "tensor" and s.name in t.slices}
    work = max(cells[s.name] // 32 if s.stmt.unit == "tensor" else card(t.slices[s.name]) // 16
               for s in b.statements if s.name in t.slices)
    threads = 1 << (max(32, min(256, work)).bit_length() - 1)
    # accumulators: one MMA sub-tile (at most 128x256) at a time; GEMMs in sequence reuse them
    acc = min(MAX_ACC, max(cells.values(), default=0))
    # values held in registers across statements (a streamed or accumulator edge holds none extra)
    held = max([e.tile_elems for e in es if e.buffer == "reg" and not e.transient
                and b.stmt(e.producer).stmt.unit != "tensor"], default=0)
    regs = BASE_REGS + ceil(max(acc, held) / threads)  # epilogue values overwrite the accumulator
    by_smem = dev.smem_per_sm // max(1, smem + 1024) if smem else dev.max_ctas_per_sm
    by_regs = dev.regs_per_sm // (min(regs, 255) * threads)
    ctas = max(1, min(dev.max_ctas_per_sm, dev.max_threads_per_sm // threads, by_regs, by_smem))
    return smem, threads, regs, ctas, by_regs, by_smem


@lru_cache(maxsize=4096)
def _price(region: PolyRegion, dev: Device, tile_key: tuple) -> Cost:
    b = region.bind()
    sizes = normalize_tile(b, dict(tile_key))
    t = make_tile(b, sizes)
    ts = stream_tile(b, t)  # what one step holds on chip (t itself unless the region is streamed)
    budget = int(dev.smem_per_cta * SMEM_BUDGET)
    h = halo(b, t, halo_matters(b))  # edge halos decide class and ring depth (Edge.halo_elems of the rest: 0)
    staged = staged_operands(b, ts, kstep(dev))
    ring = staging_bytes(staged, stages(dev))
    es = edges(b, ts, h.per_tensor, max(0, budget - ring))
    es = on_chip(pc, es) if (pc := cone(region)) else es  # an A prologue with a row statistic (prologue_cone.py)
    w = _work(b, t)
    dram, in_useful, out_useful, spill_bytes, l2 = _traffic(b, t, es)
    first = first_pass_l2(b, pc, t) if pc else 0  # the statistics' pass: serial before the sm80 main loop
    l2 += _rewalk_l2(b, t) + first
    smem, threads, regs, ctas, by_regs, by_smem = _resources(b, ts, es, ring, dev)
    occ = occupancy(t.count, ctas, threads, dev)
    dram_occ = bandwidth_share(t.count, ctas, threads, dev, dev.dram_tbps)
    l2_occ = bandwidth_share(t.count, ctas, threads, dev, dev.l2_tbps)

    # roofline terms (us)
    effs, stops = _mma_eff(b, ts.slices, dev)
    eff = min(effs.values(), default=1.0) * dev.mma_eff
    us, mma_rate = 1e6, dev.tensor_tflops * 1e12 * occ * eff
    simt_rate = dev.fp32_tflops * 1e12 * occ * SIMT_EFF
    sfu_rate = simt_rate * dev.sfu_ratio
    epi, epi_sfu = (w.epilogue, w.epilogue_sfu) if w.mma else (0, 0)
    t_mma = w.useful["tensor"] / mma_rate * us
    t_simt, t_sfu = (w.useful["fp32"] - epi) / simt_rate * us, (w.useful["sfu"] - epi_sfu) / sfu_rate * us
    t_epi = (epi / simt_rate + epi_sfu / sfu_rate) * us
    l2_rate = dev.l2_tbps * 1e12 * l2_occ
    p_lim, p_ser, d_simt, d_sfu, d_fan = producer(pc, b, t, facts(region).live, w.factors, dev, simt_rate, sfu_rate,
                                                  ctas, first / l2_rate * us) if pc else (0.0,) * 5
    t_simt, t_sfu = t_simt - d_simt, t_sfu - d_sfu  # on sm90 the producer's limit p_lim
    bw = dev.dram_tbps * 1e12 * dram_occ
    t_load, t_store = (in_useful + spill_bytes // 2) / bw * us, (out_useful + spill_bytes // 2) / bw * us
    t_mem = t_load + t_store  # loads and stores share the DRAM bandwidth
    t_l2 = (l2 - (first if p_ser else 0)) / l2_rate * us  # a serial pass's bytes are its own time
    compute = t_mma + t_simt + t_sfu
    # async copies (cp.async / TMA) run under the epilogue, unless an on-chip edge is single-buffered
    single = any(e.buffer == "smem_ring" and e.depth == 1 and not e.staged for e in es)
    overlap = 0.0 if single else min(t_mem, t_epi)

    # penalties (us): recomputed work, wasted sector bytes, predicated accesses, register spills
    fanout = (w.extra["tensor"] / mma_rate + w.extra["fp32"] / simt_rate + w.extra["sfu"] / sfu_rate) * us - d_fan
    layout = max(0.0, (dram - spill_bytes - in_useful - out_useful) / bw * us)
    piecewise = PREDICATE_COST * facts(region).predicated * compute
    spill = 0.0
    if regs > 255:
        spill = (regs - 255) * 4 * threads * t.count * 2 / (dev.l2_tbps * 1e12 * l2_occ) * us
        stops.append(f"regs {regs} per thread > 255: spills")
    penalties = (("fanout", fanout), ("layout", layout), ("piecewise", piecewise), ("spill", spill))
    time = roofline(dev, (compute, t_mem, t_l2, p_lim), serial=(t_epi, p_ser), hidden=overlap,
                    penalties=(fanout, layout, piecewise, spill), unit="us")

    # STOP conditions (docs/DESIGN.md §Cost model)
    if smem > budget:
        stops.append(f"smem {smem} B per CTA > {SMEM_BUDGET:.0%} of {dev.smem_per_cta} B")
    if by_regs <= 1 < min(by_smem, dev.max_threads_per_sm // threads):
        stops.append(f"regs {regs} per thread limit the SM to 1 CTA")
    vec = _vector_width(b, t)
    if vec < 16:
        stops.append(f"vectorize.width 16 -> {vec} bytes")
    worst = max(bounded_recompute(b, w.factors).values(), default=1.0)
    if worst > MAX_RECOMPUTE:
        stops.append(f"recompute {worst:.2f}x > {MAX_RECOMPUTE}")
    bound = "latency" if dev.launch_us > max(compute, t_mem, t_l2) else \
        ("compute" if compute >= max(t_mem, t_l2) else "memory")
    terms = (("mma", t_mma), ("simt", t_simt), ("sfu", t_sfu), ("load", t_load), ("l2", t_l2),
             ("epilogue", t_epi), ("store", t_store), ("launch", dev.launch_us))
    flops = sum(w.useful.values()) + sum(w.extra.values())
    return Cost(time, flops, dram, l2, smem, regs, threads, occ, ctas, t.count, tuple(sizes.items()), bound,
                terms, penalties, overlap, tuple(stops), 1, region.name)


def _pow2(n: int) -> int:
    return 1 << (max(1, int(n)).bit_length() - 1)


def candidate_tiles(b: BoundRegion, dev: Device) -> list:
    """A few tiles to try: the Poly Core default (no excess recompute, fits on chip) and
    output-cell budgets of 128x128, 128x64 and 64x64 spread over the innermost parallel dims."""
    drv = b.driver
    par = drv.parallel_dims
    full = {d: hi - lo + 1 for d, (lo, hi) in zip(drv.dims, extents(drv.domain), strict=True)}
    base = default_tile(b, dev)
    start = normalize_tile(b, None)
    widened = [d for d in par if base[d] == full[d] > start[d]]  # widened by default_tile against recompute
    out = [dict(base)]

    def add(sizes):
        for d in widened:
            sizes[d] = full[d]
        if sizes not in out:
            out.append(sizes)
    for cells in (128 * 256, 128 * 128, 128 * 64, 64 * 64):
        inner = {d: 1 for d in par}  # innermost dims first, each as large as it goes
        rest = cells
        for d in reversed(par):
            inner[d] = min(full[d], _pow2(rest))
            rest = max(1, rest // inner[d])
        add(inner)
        bal = {d: 1 for d in par}  # the budget spread evenly over the dims longer than 1
        live = [d for d in reversed(par) if full[d] > 1]
        rest = cells
        for i, d in enumerate(live):
            share = 1 << round(log2(max(1, rest)) / (len(live) - i))
            bal[d] = min(full[d], share)
            rest = max(1, rest // bal[d])
        add(bal)
    if len(par) >= 3:  # a square block on the two innermost dims (a spatial patch), outer dims filled
        for inner, cells in ((8, 128 * 64), (16, 128 * 128)):
            blk = {d: 1 for d in par}
            blk[par[-1]], blk[par[-2]] = min(inner, full[par[-1]]), min(inner, full[par[-2]])
            rest = cells // (blk[par[-1]] * blk[par[-2]])
            for d in reversed(par[:-2]):
                blk[d] = min(full[d], _pow2(rest))
                rest = max(1, rest // blk[d])
            add(blk)
    if par:  # a few rows per tile: many CTAs for row-wise (reduction) drivers
        for n in (16, 4):
            add({d: (min(n, full[d]) if d == par[-1] else 1) for d in par})
    return out


def price(region: PolyRegion, arch: "str | Device" = "sm90", tile: Mapping[str, int] | None = None) -> Cost:
    """The modelled cost of one region. With no tile, the cheapest of :func:`candidate_tiles`
    that hits no STOP condition (or the cheapest of all when every one does). Priced on the region
    :func:`at_origin` moves (the same price), so slices of one tensor at other offsets share one pricing."""
    dev = on_path(region, arch)
    try:
        region = at_origin(region)
        if tile is not None:
            return _price(region, dev, tuple(sorted(tile.items())))
        return _best(region, dev)
    except PolysatError:
        raise
    except Exception as e:
        fail("InternalError", f"cost model on region {region.name}", f"{type(e).__name__}: {e}")


@lru_cache(maxsize=2048)
def _best(region: PolyRegion, dev: Device) -> Cost:
    """The best candidate tile, then a bounded local search: halve or double one parallel dim
    (powers of two, within the extent) while that lowers the key (hard STOP, time)."""
    b = region.bind()
    drv = b.driver
    full = {d: hi - lo + 1 for d, (lo, hi) in zip(drv.dims, extents(drv.domain), strict=True)}

    def cost(sizes):
        return _price(region, dev, tuple(sorted(sizes.items())))

    def key(c):
        return (any(_hard(s) for s in c.stops), c.time_est_us)

    exact = exact_floor(region)

    def above(lb: float, k: "int | None") -> bool:
        """No price at or above ``lb`` displaces the best (one that hits no hard STOP): above it, or (a floor exact
        to the bit) at it while a tie cannot win (a later candidate than the best's, or a local step (k None),
        which must undercut it)."""
        return lb > best.time_est_us * (1 + 1e-9) + 1e-9 or \
            exact and lb >= best.time_est_us and (k is None or k > first)

    def beaten(sizes) -> bool:
        """No price of a local step of these sizes can displace a best that hits no hard STOP: a floor is above it,
        or the MMA shape stops it; first the tile count's floor, then the made tile's."""
        if key(best)[0]:
            return False
        return above(floor(region, dev, sizes), None) or stopped(sizes) or \
            any(above(lb, None) for lb in _tile_floors(region, dev, sizes))
    best, first = None, None
    shape: dict = {}

    def stopped(sizes) -> bool:  # _shape_stopped, asked once per sizes
        got = shape.get(k := tuple(sizes.items()))
        if got is None:
            got = shape[k] = _shape_stopped(b, dev, sizes)
        return got

    def consider(k: int) -> None:
        nonlocal best, first
        c = cost(tiles[k])
        if best is None or (key(c), k) < (key(best), first):
            best, first = c, k
    # the candidates best-first on their floors, each floor raised as it comes up (the tile count's, then the made
    # tile's: _tile_floors) before the tile is priced, those with an MMA shape STOP after the rest: an early best
    # rules the others out unpriced (a tile recomputing 32x is never priced before the one that wins). The best is
    # the least (hard STOP, time, candidate index), which no order changes, so the tile chosen is the one
    # candidate order gives
    tiles = candidate_tiles(b, dev)
    heap = [(floor(region, dev, t), k, 0) for k, t in enumerate(tiles)]
    heapq.heapify(heap)
    later: list = []
    made: dict = {}  # candidate -> its made tile's floors, still to raise it to
    while heap:
        lb, k, raised = heapq.heappop(heap)
        if best is not None and not key(best)[0] and above(lb, k):
            continue
        if not raised:
            if stopped(tiles[k]):
                later.append(k)  # a hard STOP: priced only if no tile free of one comes first
                continue
            made[k] = _tile_floors(region, dev, tiles[k])
        more = next(made[k], None)
        if more is not None:
            heapq.heappush(heap, (max(lb, more), k, raised + 1))
            continue
        consider(k)
    for k in later:
        if best is None or key(best)[0]:
            consider(k)
    steps = 0
    improved = True
    while improved and steps < SEARCH_STEPS:
        improved = False
        cur = dict(best.tile)
        for d in drv.parallel_dims:
            for new in (cur[d] // 2, min(full[d], cur[d] * 2)):
                if new < 1 or new == cur[d] or steps >= SEARCH_STEPS:
                    continue
                steps += 1
                if beaten({**cur, d: new}):
                    continue
                c = cost({**cur, d: new})
                if key(c) < key(best):
                    best, improved = c, True
    return best


def _shape_stopped(b: BoundRegion, dev: Device, sizes: Mapping[str, int]) -> bool:
    """Whether a tile of these sizes hits the MMA shape STOP (a hard one) that ``_price`` would report: from
    the tile's slices alone, so the tile search skips it unpriced once it has a best that hits no hard STOP
    (most of the tiles it would otherwise price on a GEMM region). Only sm90 tiles of a region with a
    tensor-core statement can hit it: no other tile is made here."""
    if dev.arch != "sm90" or not facts(b.region).mma:
        return False
    t = make_tile(b, normalize_tile(b, dict(sizes)))
    return bool(_mma_eff(b, stream_tile(b, t).slices, dev)[1])


def _tile_floors(region: PolyRegion, dev: Device, sizes: Mapping[str, int]):
    """The floors of the made tile of these sizes (price_facts.tile_floor), the cheaper first: with its recompute
    and MMA efficiency, then with its L2 bytes too (what ``_price`` computes first and reuses); none where a
    prologue's producer moves work between terms (no floor but the count's holds there)."""
    if cone(region):
        return
    b = region.bind()
    t = make_tile(b, normalize_tile(b, dict(sizes)))
    effs = _mma_eff(b, stream_tile(b, t).slices, dev)[0]
    eff, extra = min(effs.values(), default=1.0) * dev.mma_eff, _work(b, t).extra
    yield tile_floor(region, dev, t.count, extra, 0, eff)
    yield tile_floor(region, dev, t.count, extra, _l2_in(b, t), eff)


def _hard(stop: str) -> bool:
    """STOP conditions that rule a tile out; a narrow vector width (a layout fact) and one CTA per
    SM (priced by occupancy) are reported but allowed."""
    return not (stop.startswith("vectorize") or stop.endswith("limit the SM to 1 CTA"))


def price_floor(region: PolyRegion, arch: "str | Device" = "sm90") -> float:
    """A time :func:`price` never returns below for this region (price_facts.region_floor: its useful work and bytes
    at full occupancy and bandwidth), at a fraction of its cost: lets a caller asking only whether kernels add up
    to more than a price stop before pricing them (up to rounding: compare with a margin)."""
    return region_floor(region, on_path(region, arch))


def price_partition(regions: Sequence[PolyRegion], arch: "str | Device" = "sm90") -> Cost:
    return total([price(r, arch) for r in regions])


@dataclass(frozen=True)
class FusionDelta:
    """Both prices of a fusion decision, for `--explain`."""
    separate: Cost
    fused: Cost

    @property
    def delta_us(self) -> float:
        """fused − separate: negative when fusing is modelled faster."""
        return self.fused.time_est_us - self.separate.time_est_us

    @property
    def saved_bytes(self) -> int:
        return self.separate.bytes - self.fused.bytes

    @property
    def profitable(self) -> bool:
        return self.delta_us < 0

    def to_json(self) -> dict:
        return {"separate": self.separate.to_json(), "fused": self.fused.to_json(),
                "delta_us": round(self.delta_us, 4), "saved_bytes": self.saved_bytes, "profitable": self.profitable}


def fusion_delta(a: PolyRegion, b: PolyRegion, fused: PolyRegion, arch: "str | Device" = "sm90") -> FusionDelta:
    """Price a and b as two kernels and `fused` as one (the fusion delta, docs/DESIGN.md §Cost model)."""
    return FusionDelta(price(a, arch) + price(b, arch), price(fused, arch))


def report(region: PolyRegion, arch: "str | Device" = "sm90", tile: Mapping[str, int] | None = None) -> dict:
    """``--dump=analysis``: the Poly Core report at the tile the cost model picks (or `tile`),
    with value-based dependences, and the price of the region at that tile."""
    cost = price(region, arch, tile)
    rep = analyze(region, arch, dict(cost.tile), exact=True).to_json()
    rep["analysis"]["cost"] = cost.to_json()
    return rep
