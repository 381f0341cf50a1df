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
            an SM must keep bandwidth x latency bytes in flight in the pass that first reads the row (vector
            loads keep V times more, ``unroll`` steps issued ahead U times more) at the occupancy the
            estimated registers allow (``registers``);
  compute = element ops / (SMs * 128 fp32 lanes * clock * lane utilisation), utilisation counting the
            lanes a row's tail leaves idle;
  loads   = load instructions / (SMs * 32 lanes * clock * lane utilisation): a micro-tile (``tm`` rows by
            ``vec`` elements, access.py ``reuse``) issues one load per distinct operand value of the tile;
  latency = waves of resident row groups * the iterations each group walks in sequence (a round trip
            each: from DRAM in the first reading pass, from L2 after) plus the shuffle / barrier steps of
            each reduction tree.
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
STEP_NS = 40.0          # one lane step of a micro-tile's pass: a dependent global load (L1/L2 hit) and its combine
SHUFFLE_NS = 15.0       # one butterfly step of a warp reduction
BARRIER_NS = 60.0       # a shared-memory round (two __syncthreads) of a group wider than a warp
DRAM_LATENCY_NS = 1000.0  # a global load's round trip under load: bytes in flight per SM must cover BW x latency
L2_LATENCY_NS = 600.0   # a re-read's round trip under load (a row's later passes; H200: softmax 4 + 8 steps a row
                        # in 14.4 µs per wave of resident rows, layernorm 3 + 6 in 5.4 µs: 0.6-1.2 µs a step)
REG_BASE = 24           # registers of a thread besides its buffered elements (indices, pointers, the row)
REG_PER_ELEM = 1.0      # registers per element a lane holds per iteration (fp16 loads widened to fp32 values);
                        # ptxas (sm_90a) on the elementwise chain: 55 / 78 / 124 at 24 / 48 / 96 elements,
                        # layernorm 28 / 56 / 148 at 8 / 32 / 128 (tests/test_simt_occupancy.py)
REG_PER_STEP = 4        # registers per further step issued ahead (its start index, its predicates)
REG_GRANULE = 8         # registers are allocated to a warp in units of 256 (8 a thread)
MARGIN_CAP = 2.0        # in-flight bytes beyond twice the need add nothing; ties then go to the simpler plan
VEC_BYTES = 16          # widest per-thread global access (ld.global.v4.b32)
FP32_LANES = 128        # fp32 ops per clock per SM
LSU_LANES = 32          # global load instructions per clock per SM (one per lane)
MAX_ACCUMULATORS = 32   # fp32 accumulators of a micro-tile a thread keeps in registers
MAX_LOOP_BLOCK = 256    # CTA size when an element walks a loop of its own: 255 registers a thread (65536 / 256)
GROUPS = (1, 2, 4, 8, 16, 32)
TMS = (1, 2, 4)
UNROLLS = (1, 2, 4)
WIDE = (64, 128, 256, 512, 1024)


@dataclass(frozen=True)
class SimtPlan:
    arch: str
    block: int              # threads per CTA
    group: int              # threads per row
    vec: int                # elements per lane step (TN: the micro-tile's columns when the pass is tiled)
    tm: int = 1             # rows per thread (TM: the micro-tile's rows along the innermost outer axis)
    unroll: int = 1         # lane steps per loop iteration, every step's vector reads issued before the first is used
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
        return (f"simt_b{self.block}_g{self.group}_v{self.vec}" + (f"_t{self.tm}" if self.tm > 1 else "")
                + (f"_u{self.unroll}" if self.unroll > 1 else ""))

    def to_json(self, spec: SimtSpec | None = None) -> dict[str, Any]:
        d: dict[str, Any] = {"skeleton": SKELETON, "arch": self.arch, "block": self.block, "threads_per_row": self.group,
                             "rows_per_block": self.rows_per_block, "rows_per_thread": self.tm,
                             "elements_per_step": self.vec, "steps_per_iteration": self.unroll,
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
    """Block x group x vector width x lane steps per iteration; for a spec whose final pass is tiled (a
    contraction, a pooling window) the rows per thread of the micro-tile instead of the steps."""
    tiled = spec is not None and bool(tiled_reduces(spec))
    tms = TMS if tiled else (1,)
    out = []
    for tm in tms:
        for v in (1, 2, 4, 8):
            for u in (1,) if tiled or v == 1 else UNROLLS:
                for block in (128, 256):
                    out += [SimtPlan(arch, block, g, v, tm, u) for g in GROUPS]
                out += [SimtPlan(arch, g, g, v, tm, u) for g in WIDE]
    return out


def steps_ahead(spec: SimtSpec, plan: SimtPlan, p, env: Mapping[str, int] | None = None) -> int:
    """Lane steps of pass p whose loads one iteration issues together: ``unroll``, or fewer where the pass
    has fewer steps a lane at env (the others' loads are predicated off)."""
    if plan.vec == 1 or tiled_reduces(spec) or not vector_reads(spec, p):
        return 1
    length = math.prod(spec.axis_size(a, env) for a in p.axes)
    return max(1, min(plan.unroll, math.ceil(length / (plan.group * plan.vec))))


def registers(spec: SimtSpec, plan: SimtPlan) -> int:
    """Estimated registers a thread of plan uses: REG_BASE plus REG_PER_ELEM per element its widest pass holds
    per iteration (each vector read's and the vector store's V elements, ``unroll`` steps of them)."""
    if tiled_reduces(spec) or plan.vec == 1:
        held = plan.tm * plan.vec
    else:
        held = 0
        for p in passes(spec):
            vr = vector_reads(spec, p)
            loads = len({(n.arg, n.dtype) for n in vr if n.op == R.READ}) + sum(n.op != R.READ for n in vr)
            held = max(held, plan.vec * (plan.unroll if vr else 1) * (loads + (p.stat is None and vector_store(spec))))
    regs = REG_BASE + REG_PER_ELEM * held + REG_PER_STEP * (plan.unroll - 1)
    return min(255, REG_GRANULE * math.ceil(regs / REG_GRANULE))


def resident_threads(spec: SimtSpec, plan: SimtPlan, tgt: Device) -> int:
    """Threads of plan an SM holds at once: whole CTAs, within the thread, CTA and register limits."""
    ctas = min(tgt.max_threads_per_sm // plan.block, tgt.max_ctas_per_sm,
               tgt.regs_per_sm // (plan.block * registers(spec, plan)))
    return max(ctas, 1) * plan.block


def loops_per_element(spec: SimtSpec) -> bool:
    """Does an element walk a loop of its own (a Reduce that is not a row statistic: inline, or a micro-tile's
    accumulation; a streamed softmax sum)? Its loop keeps the element's operands, indices and accumulators
    live at once."""
    stats = {id(s) for s in spec.stats()}
    return any((n.op == R.REDUCE and id(n) not in stats) or n.op == R.ONLINE for n in spec.nodes())


def stop_reason(spec: SimtSpec, plan: SimtPlan, env: Mapping[str, int] | None = None) -> str | None:
    if plan.block > MAX_LOOP_BLOCK and loops_per_element(spec):
        return (f"{plan.block} threads leave {65536 // plan.block} registers a thread; an element that walks a loop of "
                f"its own (an inline reduction) needs more (ptxas spills): at most {MAX_LOOP_BLOCK} threads")
    if plan.unroll > 1 and all(steps_ahead(spec, plan, p, env) <= plan.unroll // 2 for p in passes(spec)):
        return (f"{plan.unroll} steps issued ahead: no pass has a vector read and more than {plan.unroll // 2} "
                "steps a lane (half as many issue the same loads)")
    regs, file = registers(spec, plan), device(plan.arch).regs_per_sm
    if regs * plan.block > file:
        return (f"{plan.block} threads x ~{regs} registers (its {plan.unroll} step(s) of {plan.vec} elements) exceed "
                f"the SM's {file}: ptxas spills")
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
    inflight: list = []  # bytes one lane has in flight per iteration of the first pass that reads
    tail_util = []
    inner = spec.outer[-1] if spec.outer else None
    tiled = bool(tiled_reduces(spec))
    tm = plan.tm
    loads = 0.0  # load instructions issued
    gathered: dict = {}  # bytes loaded through a Gather, per tensor: at most these of its bytes are ever touched
    first_read = True  # the first pass of a row reads it from device memory, later ones re-read it from L2
    for p in passes(spec):
        length = 1
        for a in p.axes:
            length *= spec.axis_size(a, env)
        top = p.body if p.stat is not None else spec.top
        ops, reads = work(spec, top, env, stats - ({id(p.stat)} if p.stat is not None else set()))
        vec_ids = {id(n) for n in vector_reads(spec, p)} if v > 1 and not tiled else set()
        per_step = g * v
        n_steps = math.ceil(length / per_step)
        ahead = steps_ahead(spec, plan, p, env)
        held: set = set()  # a tensor read twice at the same indices is one load (render.py)
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
            if first_read and (n.arg, n.dtype) not in held:  # the pass that brings the row in from DRAM
                inflight.append(lane_bytes * ahead if id(n) in vec_ids else isz * min(v, 2))
                held.add((n.arg, n.dtype))
        flops += rows * length * ops
        tail_util.append((length, length / (n_steps * per_step)))
        if tiled:
            steps += n_steps * (STEP_NS + ops * v * tm / tgt.clock_ghz) * 1e-9
        else:  # a round trip per iteration of `ahead` steps, then each step's ops
            trip = DRAM_LATENCY_NS if first_read else L2_LATENCY_NS
            steps += (math.ceil(n_steps / ahead) * trip + n_steps * ops * v / tgt.clock_ghz) * 1e-9
        first_read = first_read and not reads
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
    resident_sm = resident_threads(spec, plan, tgt)
    per_sm = min(resident_sm, ctas * plan.block / tgt.sms)  # a grid too small to fill the GPU keeps less in flight
    need = tgt.dram_tbps * 1e12 * DRAM_LATENCY_NS * 1e-9 / tgt.sms
    active = min(1.0, spec.row_len(env) / (g * v))  # lanes a short row leaves idle keep nothing in flight
    in_flight = per_sm * active * max(sum(inflight), 1) / need
    mem_eff = min(1.0, in_flight)
    t_mem = dram_time(dram, tgt, mem_eff)
    util = sum(l * u for l, u in tail_util) / max(sum(l for l, _ in tail_util), 1)
    t_comp = clock_time(flops, FP32_LANES, tgt, max(util, 1e-3))
    t_ld = clock_time(loads, LSU_LANES, tgt, max(util, 1e-3))
    resident = tgt.sms * resident_sm // g  # row groups at once
    waves = math.ceil(tiles / max(resident, 1))
    t_lat = waves * steps
    time = compose(tgt, [t_comp, t_ld, t_mem, t_lat])
    return {"time_s": time, "t_compute_s": t_comp, "t_load_issue_s": t_ld, "t_mem_s": t_mem, "t_latency_s": t_lat, "bytes": float(dram),
            "flops": float(flops), "coalescing": eff, "mem_eff": mem_eff, "lane_util": util, "ctas": float(ctas), "waves": float(waves),
            "registers": float(registers(spec, plan)), "margin": min(in_flight, MARGIN_CAP)}


def search(spec: SimtSpec, arch: str = "sm90", env: Mapping[str, int] | None = None, hints: Mapping | None = None,
           cost=None) -> SearchResult:
    """Rank the plans for spec on arch; env binds symbols (unbound ones rank at the hint size)."""
    tgt = device(arch)
    kept, pruned = prune(candidates(arch, spec), lambda p: stop_reason(spec, p, env))
    cost = cost or roofline
    return SearchResult(rank(kept, lambda p: cost(spec, p, env or {}, tgt)), tuple(pruned))


def choose_plan(spec: SimtSpec, arch: str = "sm90", env: Mapping[str, int] | None = None) -> SimtPlan:
    return search(spec, arch, env).best


__all__ = ["SimtPlan", "candidates", "choose_plan", "roofline", "search", "stop_reason"]
