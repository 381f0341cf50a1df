"""Schedule Plan of a SIMT kernel and its search: block size, threads per row, elements per lane step
(the vector width), rows per block; candidates pruned by the STOP conditions and ranked by a roofline.
A CTA of more than 256 threads is pruned when an element walks a loop of its own (an inline reduction):
``__launch_bounds__(block, 1)`` leaves 65536 / block registers a thread, and such a loop body spills at 64.

A CTA of ``block`` threads holds ``block / group`` row groups (``group`` <= 32: a row is reduced with warp
shuffles alone) or one row (``group == block`` > 32: warp shuffles, then shared memory across the warps).
A lane takes ``vec`` consecutive elements per step (one vector load of each vectorizable read, one vector
store of the output when the offset is aligned; predicated scalar accesses on the tail). A final pass
that reaches Reduces without row statistics (a contraction, a pooling window) is a micro-tile instead:
``tm`` rows along the innermost outer axis by the ``vec`` elements of a lane step, one accumulator each.

Roofline (composed by analyses/roofline.py on the device table of analyses/devices.py, as every kind's:
``max(compute, memory, latency) + launch``):
  memory  = (unique bytes / coalescing efficiency + re-read bytes * L2 miss rate) / (DRAM bandwidth * the
            fraction of it the bytes in flight sustain), where the passes after the first re-read the row
            (mostly from L2), a read whose lanes stride apart wastes the rest of each 32-byte sector, and
            an SM must keep bandwidth x latency bytes in flight (vector loads keep V times more);
  compute = element ops / (SMs * 128 fp32 lanes * clock * lane utilisation), utilisation counting the
            lanes a row's tail leaves idle;
  loads   = load instructions / (SMs * 32 lanes * clock * lane utilisation): a micro-tile (``tm`` rows by
            ``vec`` elements, access.py ``reuse``) issues one load per distinct operand value of the tile;
  latency = waves of resident row groups * the steps each group walks in sequence (a dependent global
            load per step) plus the shuffle / barrier steps of each reduction tree.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from ...ir.region import R

# shared pieces, at their current homes
from ...analyses.devices import Device, device
from ...analyses.origin import SECTOR  # bytes a global memory transaction moves
from ...analyses.roofline import clock_time, dram_time, roofline as compose
from ..common.mma_search import L2_MISS
from ..common.plan_search import SearchResult, prune, rank
from .access import passes, read_stride, reuse, tiled_reduces, vector_reads, vector_store, work
from .spec import SimtSpec

SKELETON = "simt"
STEP_NS = 40.0          # one lane step of a pass: a dependent global load (L2 hit) and its combine
SHUFFLE_NS = 15.0       # one butterfly step of a warp reduction
BARRIER_NS = 60.0       # a shared-memory round (two __syncthreads) of a group wider than a warp
DRAM_LATENCY_NS = 1000.0  # a global load's round trip under load: bytes in flight per SM must cover BW x latency
VEC_BYTES = 16          # widest per-thread global access (ld.global.v4.b32)
FP32_LANES = 128        # fp32 ops per clock per SM
LSU_LANES = 32          # global load instructions per clock per SM (one per lane)
MAX_ACCUMULATORS = 32   # fp32 accumulators of a micro-tile a thread keeps in registers
MAX_LOOP_BLOCK = 256    # CTA size when an element walks a loop of its own: 255 registers a thread (65536 / 256)
GROUPS = (1, 2, 4, 8, 16, 32)
TMS = (1, 2, 4)
WIDE = (64, 128, 256, 512, 1024)


@dataclass(frozen=True)
class SimtPlan:
    arch: str
    block: int              # threads per CTA
    group: int              # threads per row
    vec: int                # elements per lane step (TN: the micro-tile's columns when the pass is tiled)
    tm: int = 1             # rows per thread (TM: the micro-tile's rows along the innermost outer axis)
    est: tuple = field(default=(), compare=False)
    skeleton: str = SKELETON

    @property
    def threads(self) -> int:
        return self.block

    @property
    def rows_per_block(self) -> int:
        """Row groups per CTA (each group owns ``tm`` consecutive rows)."""
        return self.block // self.group


    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory (none: the reduction scratch is a static 32-entry array per type)."""
        return 0

    @property
    def static_smem(self) -> int:
        return 32 * 4 * 3 if self.group > 32 else 0

    def key(self) -> str:
        return f"simt_b{self.block}_g{self.group}_v{self.vec}" + (f"_t{self.tm}" if self.tm > 1 else "")

    def to_json(self, spec: SimtSpec | None = None) -> dict[str, Any]:
        d: dict[str, Any] = {"skeleton": SKELETON, "arch": self.arch, "block": self.block, "threads_per_row": self.group,
                             "rows_per_block": self.rows_per_block, "rows_per_thread": self.tm,
                             "elements_per_step": self.vec,
                             "reduction": ("warp_shuffle" if self.group <= 32 else "warp_shuffle+smem"),
                             "accumulate": "fp32", "est": dict(self.est)}
        if spec is not None:
            tiled = tiled_reduces(spec)
            if tiled:
                d["micro_tile"] = {"rows": self.tm, "cols": self.vec, "accumulators": self.tm * self.vec * len(tiled),
                                   "reduces": [n.arg[0] + "[" + ", ".join(n.arg[1]) + "]" for n in tiled]}
            ps = passes(spec)
            d["passes"] = [{"walks": list(p.axes), "reduces": p.stat.arg[0] if p.stat is not None else None,
                            "vector_reads": sorted({n.arg[0] for n in vector_reads(spec, p)}) if self.vec > 1 and not tiled else [],
                            "vector_store": p.stat is None and self.vec > 1 and vector_store(spec) and not tiled} for p in ps]
            d["outer"], d["loop"] = list(spec.outer), list(spec.loop)
        return d


def candidates(arch: str, spec: SimtSpec | None = None) -> list[SimtPlan]:
    """Block x group x vector width; for a spec whose final pass is tiled (a contraction, a pooling window)
    also the rows per thread of the micro-tile."""
    tms = TMS if spec is not None and tiled_reduces(spec) else (1,)
    out = []
    for tm in tms:
        for v in (1, 2, 4, 8):
            for block in (128, 256):
                out += [SimtPlan(arch, block, g, v, tm) for g in GROUPS]
            out += [SimtPlan(arch, g, g, v, tm) for g in WIDE]
    return out


def loops_per_element(spec: SimtSpec) -> bool:
    """Does an element walk a loop of its own (a Reduce that is not a row statistic: inline, or a micro-tile's
    accumulation; a streamed softmax sum)? Its loop keeps the element's operands, indices and accumulators
    live at once."""
    stats = {id(s) for s in spec.stats()}
    return any((n.op == R.REDUCE and id(n) not in stats) or n.op == R.ONLINE for n in spec.nodes())


def stop_reason(spec: SimtSpec, plan: SimtPlan) -> str | None:
    if plan.block > MAX_LOOP_BLOCK and loops_per_element(spec):
        return (f"{plan.block} threads leave {65536 // plan.block} registers a thread; an element that walks a loop of "
                f"its own (an inline reduction) needs more (ptxas spills): at most {MAX_LOOP_BLOCK} threads")
    tiled = tiled_reduces(spec)
    if tiled:
        if plan.tm > 1 and not spec.outer:
            return "rows per thread > 1 needs an outer axis to tile (the output is one row)"
        acc = plan.tm * plan.vec * len(tiled)
        if acc > MAX_ACCUMULATORS:
            return f"a {plan.tm}x{plan.vec} micro-tile of {len(tiled)} reduction(s) holds {acc} accumulators > {MAX_ACCUMULATORS}"
        return None  # a tiled pass loads scalars (reused across the micro-tile) and stores each element
    if plan.tm > 1:
        return "rows per thread > 1 needs a tiled final pass (a contraction without row statistics)"
    if plan.vec > 1:
        ps = passes(spec)
        vr = [n for p in ps for n in vector_reads(spec, p)]
        if not vr and not vector_store(spec):
            return "no read or store is contiguous along a walked axis: nothing moves as a vector"
        widest = max([n.dtype.itemsize for n in vr] + ([spec.out.memref.dtype.itemsize] if vector_store(spec) else []))
        if plan.vec * widest > VEC_BYTES:
            return f"{plan.vec} x {widest} B > {VEC_BYTES} B per thread access"
    return None


def roofline(spec: SimtSpec, plan: SimtPlan, env: Mapping[str, int], tgt: Device) -> dict[str, float]:
    env = spec.env(env)
    rows = max(spec.rows(env), 1)
    g, v = plan.group, plan.vec
    stats = {id(s) for s in spec.stats()}
    touched = flops = 0.0
    steps = 0.0
    eff_bytes = []
    inflight: list = []  # bytes one lane has in flight per step of the final pass
    tail_util = []
    inner = spec.outer[-1] if spec.outer else None
    tiled = bool(tiled_reduces(spec))
    tm = plan.tm
    loads = 0.0  # load instructions issued
    gathered: dict = {}  # bytes loaded through a Gather, per tensor: at most these of its bytes are ever touched
    for p in passes(spec):
        length = 1
        for a in p.axes:
            length *= spec.axis_size(a, env)
        top = p.body if p.stat is not None else spec.top
        ops, reads = work(spec, top, env, stats - ({id(p.stat)} if p.stat is not None else set()))
        vec_ids = {id(n) for n in vector_reads(spec, p)} if v > 1 and not tiled else set()
        for n, mult in reads:
            if tiled:  # one load per distinct point of the read's axes in the micro-tile
                mult = mult / reuse(spec, n, tm, v)
            tensor = n.arg[0]
            shape = next(b.memref.shape for b in spec.region.inputs if b.name == tensor)
            isz = n.dtype.itemsize
            lane_axis = p.axes[-1] if (g > 1 and p.axes) else inner
            s = read_stride(spec, n, shape, lane_axis, env) if lane_axis else 0
            s = SECTOR if s is None else abs(s) * (v if lane_axis in p.axes else 1)  # None: scattered, a sector a load
            lane_bytes = isz * (v if id(n) in vec_ids else 1)
            eff = 1.0 if s == 0 else min(1.0, lane_bytes / min(SECTOR, s * isz))
            b = rows * length * mult * isz
            loads += rows * length * mult / (v if id(n) in vec_ids else 1)
            touched += b
            if n.op == R.GATHER:
                gathered[tensor] = gathered.get(tensor, 0.0) + b
            eff_bytes.append((b, eff))
            if p.stat is None:
                inflight.append(lane_bytes if id(n) in vec_ids else isz * min(v, 2))
        flops += rows * length * ops
        per_step = g * v
        n_steps = math.ceil(length / per_step)
        tail_util.append((length, length / (n_steps * per_step)))
        steps += n_steps * (STEP_NS + ops * v * tm / tgt.clock_ghz) * 1e-9
        if p.stat is not None:
            steps += (math.log2(min(g, 32)) * SHUFFLE_NS + (BARRIER_NS if g > 32 else 0.0)) * 1e-9
    unique = sum(min(b.memref.dtype.itemsize * math.prod(spec.shapes(env)[b.name]), gathered.get(b.name, math.inf))
                 for b in spec.region.inputs)  # an embedding table is touched only at the rows gathered
    out_bytes = spec.out.memref.dtype.itemsize * math.prod(spec.shapes(env)[spec.c])
    total_b = sum(b for b, _ in eff_bytes) or 1.0
    eff = sum(b * e for b, e in eff_bytes) / total_b if eff_bytes else 1.0
    if v > 1 and vector_store(spec) and plan.group > 1 and not tiled:
        out_eff = 1.0
    else:
        out_eff = 1.0 if (g > 1 or not spec.outer) else 1.0 / max(1, min(SECTOR // spec.out.memref.dtype.itemsize,
                                                                           spec.row_len(env)))
    dram = min(unique, touched) / max(eff, 1e-3) + max(0.0, touched - unique) * L2_MISS + out_bytes / out_eff
    tiles = spec.tile_rows(tm, env)
    ctas = math.ceil(tiles / plan.rows_per_block)
    per_sm = min(tgt.max_threads_per_sm, max(plan.block, (tgt.max_threads_per_sm // plan.block) * plan.block),
                 ctas * plan.block / tgt.sms)  # a grid too small to fill the GPU keeps less in flight
    need = tgt.dram_tbps * 1e12 * DRAM_LATENCY_NS * 1e-9 / tgt.sms
    active = min(1.0, spec.row_len(env) / (g * v))  # lanes a short row leaves idle keep nothing in flight
    mem_eff = min(1.0, per_sm * active * max(sum(inflight), 1) / need)
    t_mem = dram_time(dram, tgt, mem_eff)
    util = sum(l * u for l, u in tail_util) / max(sum(l for l, _ in tail_util), 1)
    t_comp = clock_time(flops, FP32_LANES, tgt, max(util, 1e-3))
    t_ld = clock_time(loads, LSU_LANES, tgt, max(util, 1e-3))
    resident = tgt.sms * (tgt.max_threads_per_sm // g) if g <= 32 else tgt.sms * (tgt.max_threads_per_sm // plan.block)
    waves = math.ceil(tiles / max(resident, 1))
    t_lat = waves * steps
    time = compose(tgt, [t_comp, t_ld, t_mem, t_lat])
    return {"time_s": time, "t_compute_s": t_comp, "t_load_issue_s": t_ld, "t_mem_s": t_mem, "t_latency_s": t_lat, "bytes": float(dram),
            "flops": float(flops), "coalescing": eff, "mem_eff": mem_eff, "lane_util": util, "ctas": float(ctas), "waves": float(waves)}


def search(spec: SimtSpec, arch: str = "sm90", env: Mapping[str, int] | None = None, hints: Mapping | None = None,
           cost=None) -> SearchResult:
    """Rank the plans for spec on arch; env binds symbols (unbound ones rank at the hint size)."""
    tgt = device(arch)
    kept, pruned = prune(candidates(arch, spec), lambda p: stop_reason(spec, p))
    cost = cost or roofline
    return SearchResult(rank(kept, lambda p: cost(spec, p, env or {}, tgt)), tuple(pruned))


def choose_plan(spec: SimtSpec, arch: str = "sm90", env: Mapping[str, int] | None = None) -> SimtPlan:
    return search(spec, arch, env).best


__all__ = ["SimtPlan", "candidates", "choose_plan", "roofline", "search", "stop_reason"]
