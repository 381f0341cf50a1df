"""The A-operand prologue of a tensor-core statement that needs a per-row statistic, as the cost model prices it
(docs/DESIGN.md §Cost model, "Operand prologues with a row statistic").

The cone of a region: the statements that compute, from the region's inputs, an operand the region's tensor-core
statements read (one GEMM, or sibling GEMMs over one A), each read only by the cone or by those statements, at least one of them a reduction
(RMSNorm before a projection: the row's sum of squares, its rsqrt, x * r, * g), and none a load-path value
(analyses/buffers.py ``load_path``: those are staged with the MMA operands already). The GEMM kind computes such
a cone as its A prologue (backend/gemm/prologue.py ``stat``, polysat_gemm.cuh ``PrologueStats``), so the price reads:

* its values on chip: the statistic in shared memory, everything else in the producer's registers as each A stage
  is filled, never through device memory (:func:`on_chip`);
* its work done by the producer: on sm90 the producer warpgroup, beside the consumers' wgmma and the weight stream
  (a limit of its own at ``PRODUCER_SIMT_SHARE`` of the FP32 rate), on sm80 by the CTA's own warps as they fill each
  A stage after issuing the k tile's MMAs (a limit at ``FILL_SIMT_SHARE``), except the statistic's pass before the
  main loop (its work stays in the kernel's shared terms);
* the statistic's first pass: each CTA re-reads its rows of the reduction's inputs over all of K, L2 -> SM bytes once
  more per tile (:func:`first_pass_l2`), except where the region is marked ``stat_in_loop`` (the sm80 skeleton and A
  linear in its one statistic, RMSNorm's x r g: summed from A's own loads as its tiles land, the accumulators' rows
  scaled after the main loop, pricing/kernels.py ``as_emitted``): no pass, no serial term;
* the loads the template issues (:func:`latency_us`): a producer thread holds ``prologue_chunk`` passes of an A
  stage in flight (backend/gemm/render.py), and ``STAT_LOADS`` (``STAT_LOADS_ONE``; sm80 ``STAT_LOADS_SM80``)
  16-byte loads in the statistic's pass, so each stage takes ceil(passes / chunk) L2 round trips and the pass
  ceil(chunks / (threads per row x STAT_LOADS)).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import ceil

from .buffers import load_path
from .footprint import extents, footprint, sectors
from .origin import SECTOR

L2_LATENCY_US = 0.25  # estimate: one L2 round trip of a producer's loads under load (~450 clocks at 1.8 GHz)
# estimate (no GPU measured it): the share of the FP32 rate the sm90 producer warpgroup reaches beside the wgmma
# consumers: one warp per SM sub-partition, 8-element chunks giving each enough independent work to issue most cycles
PRODUCER_SIMT_SHARE = 0.5
# estimate (no GPU measured it): the share of the FP32 rate the sm80 skeleton's warps give their register-staged A
# fill (computed after each k tile's MMAs are issued, while the tensor pipe runs them) beside those MMAs
FILL_SIMT_SHARE = 0.5
STAT_LOADS = 4  # 16-byte loads a thread holds in flight in the statistic's pass (polysat_gemm.cuh PrologueStats U) ...
STAT_LOADS_ONE = 16  # ... and in the sm90 producer of one consumer warpgroup (no setmaxnreg: PrologueSm90) ...
STAT_LOADS_SM80 = 16  # ... and in the sm80 CTA, before its main loop (mainloop_sm80_prologue)
PRODUCER_THREADS = 128  # the sm90 producer warpgroup


@dataclass(frozen=True)
class Cone:
    statements: frozenset  # statement names
    tensors: frozenset  # the internal tensors they write
    mma: str  # the (first) tensor-core statement
    reductions: tuple  # the cone's reductions (the statistics)
    first_pass: tuple  # the statements the statistics' pass runs: the reductions and what they read in the cone
    sources: int  # input tensors the cone reads besides the statistics' (the A fill's chunked sources)
    k: int  # the contraction's extent
    chunk: int = 8  # elements of one 16-byte load of the statistics' inputs (8 16-bit, 4 fp32)


def cone(region) -> "Cone | None":
    """The region's A-prologue cone with a statistic, or None (most regions)."""
    return _cone(region)


@lru_cache(maxsize=4096)
def _cone(region) -> "Cone | None":
    b = region.bind()
    live = [s for s in b.statements if not (region.tensor(s.stmt.write.tensor).role == "internal"
                                            and not b.readers(s.stmt.write.tensor))]
    mma = [s for s in live if s.stmt.unit == "tensor"]  # one GEMM, or the pieces of sibling GEMMs over one A
    if not mma or any(len(s.reduce_dims) != 1 for s in mma):
        return None
    t = mma[0]
    ks = {(lambda e: e[1] - e[0])(extents(s.domain)[s.dims.index(s.reduce_dims[0])]) for s in mma}
    if len(ks) != 1:
        return None
    staged = load_path(b)
    members: dict = {}
    todo = [x for s in mma for x, _ in s.reads if region.tensor(x).role == "internal" and x not in staged]
    while todo:
        x = todo.pop()
        w = b.writer(x)
        if w is None or w.name in members:
            continue
        if w.stmt.unit == "tensor" or w.index > max(s.index for s in mma):
            return None
        members[w.name] = w
        todo += [y for y, _ in w.reads if region.tensor(y).role == "internal" and y not in staged]
    tensors = frozenset(s.stmt.write.tensor for s in members.values())
    names, mmas = {s.name for s in live}, {s.name for s in mma}
    if any(r.name not in members and r.name not in mmas and r.name in names for x in tensors for r in b.readers(x)):
        return None  # a cone value read elsewhere (the epilogue, an output): not the operand's alone
    reds = tuple(s.name for s in members.values() if s.reduce_dims)
    if not reds:
        return None
    first, todo = set(), list(reds)
    while todo:
        n = todo.pop()
        if n not in first:
            first.add(n)
            todo += [b.writer(y).name for y, _ in members[n].reads if y in tensors]
    stat_in = {y for n in first for y, _ in members[n].reads if region.tensor(y).role == "input"}
    other = {y for s in members.values() if not s.reduce_dims for y, _ in s.reads
             if region.tensor(y).role == "input"}
    lo, hi = extents(t.domain)[t.dims.index(t.reduce_dims[0])]
    chunk = 16 // max((region.tensor(y).dtype.itemsize for y in stat_in), default=2)
    return Cone(frozenset(members), tensors, t.name, reds, tuple(sorted(first)), len(other | stat_in), hi - lo + 1,
                chunk)


def on_chip(c: Cone, es: list) -> list:
    """The edges with the cone's values held in registers (transient), as the prologue holds them."""
    from dataclasses import replace
    return [replace(e, buffer="reg", depth=1, transient=True) if e.tensor in c.tensors else e for e in es]


def work(c: Cone, live: tuple, factors: dict, skip: tuple = ()) -> dict:
    """unit -> FLOPs the cone's statements (but those in skip) execute per kernel, recompute across tiles included."""
    out = {"fp32": 0, "sfu": 0, "tensor": 0}
    for s, n in live:
        if s.name in c.statements and s.name not in skip:
            out[s.stmt.unit] += int(s.stmt.flops * n * max(1.0, factors.get(s.name, 1.0)))
    return out


def first_pass_l2(b, c: Cone, t) -> int:
    """L2 -> SM bytes of the statistics' first pass: their input reads, once more per tile (none when the statistic
    is summed in the main loop, ``stat_in_loop``: from the A tiles' own loads)."""
    if b.region.stat_in_loop:
        return 0
    inst = {n: t.slices[n] for n in c.first_pass if n in t.slices}
    out = 0
    for x in b.region.tensors:
        if x.role == "input" and any(y == x.name for n in c.first_pass for y, _ in b.stmt(n).reads):
            out += sectors(footprint(b, inst, x.name), x.dtype.itemsize, SECTOR, b.shapes[x.name]) * SECTOR * t.count
    return out


def producer_chunk(passes: int, consumers: int, sources: int) -> int:
    """The passes of its A stage an sm90 producer thread loads at once (backend/gemm/render.py; each pass holds 4
    registers per chunked source): with two or more consumer warpgroups setmaxnreg leaves the producer 40
    registers, at most 8 of them for the loaded chunks (more spill); with one, the CTA's 256 threads keep up to
    255 each, and 32 go to the chunks."""
    regs = 8 if consumers >= 2 else 32
    return max(c for c in range(1, passes + 1) if passes % c == 0 and c * sources * 4 <= regs) if sources else 1


def latency_us(c: Cone, rows: int, waves: int) -> float:
    """The producer's load round trips (sm90 template, :mod:`module docs <.prologue_cone>`) per tile, times the
    waves of tiles: each A stage of 64 K columns, then the statistic's pass over K."""
    bm = max(64, min(256, ceil(rows / 64) * 64))
    passes = bm * (64 // c.chunk) // PRODUCER_THREADS
    per_stage = ceil(passes / producer_chunk(passes, bm // 64, c.sources))
    tpr = max(1, PRODUCER_THREADS // bm)
    loads = STAT_LOADS_ONE if bm == 64 else STAT_LOADS
    stat = ceil(ceil(c.k / c.chunk / tpr) / loads) * ceil(bm / PRODUCER_THREADS)
    return (ceil(c.k / 64) * per_stage + stat * len(c.reductions)) * L2_LATENCY_US * waves


def producer(c: Cone, b, t, live: tuple, factors: dict, dev, simt_rate: float, sfu_rate: float,
             ctas: int, pass_us: float = 0.0) -> tuple:
    """(the producer's own limit, a serial term, and the FP32, SFU and fan-out µs the cone takes off the kernel's
    shared terms), in µs. sm90: the producer warpgroup runs the cone's work at ``PRODUCER_SIMT_SHARE`` of the
    rates and its loads' round trips beside the consumers (a limit). sm80: the CTA's warps run the A fill's work
    between their MMAs at ``FILL_SIMT_SHARE`` (a limit; the fill's loads overlap the stage's MMAs, register-staged),
    and the statistic's pass before the main loop (serial: every CTA of a wave starts with it, so it takes its loads'
    round trips or its L2 bytes at the kernel's L2 rate, ``pass_us``, whichever is longer; its work stays in the
    shared terms), or, ``stat_in_loop``, no pass: the statistic is summed in the fill."""
    us = 1e6
    sm80, in_loop = dev.arch != "sm90", b.region.stat_in_loop
    skip = c.first_pass if sm80 and not in_loop else ()  # sm80's pass before the main loop: its work stays shared
    once, done = work(c, live, {}, skip), work(c, live, factors, skip)
    t_fp, t_sfu = once["fp32"] / simt_rate * us, once["sfu"] / sfu_rate * us
    t_fan = ((done["fp32"] - once["fp32"]) / simt_rate + (done["sfu"] - once["sfu"]) / sfu_rate) * us
    waves = ceil(t.count / (dev.sms * max(1, ctas)))
    sizes = dict(t.sizes)
    par = b.driver.parallel_dims
    rows = 1
    for d in par[:-1]:
        rows *= sizes.get(d, 1)
    if sm80:  # the fill's work between the warps' MMAs (a limit); the statistic's pass, unless in the loop, serial
        stat = ceil(ceil(c.k / c.chunk / max(1, 128 // rows)) / STAT_LOADS_SM80) * len(c.reductions)
        serial = 0.0 if in_loop else max(stat * L2_LATENCY_US * waves, pass_us)
        return (t_fp + t_sfu + t_fan) / FILL_SIMT_SHARE, serial, t_fp, t_sfu, t_fan
    limit = (t_fp + t_sfu + t_fan) / PRODUCER_SIMT_SHARE + latency_us(c, rows, waves)
    return limit, 0.0, t_fp, t_sfu, t_fan
