"""Plan search for flash attention: a handful of candidates, STOP-condition pruning, roofline ranking
(seed 000 §10 step 6, §11; issue 7).

Candidates: sm90 (on sm90 targets) 1 or 2 consumer warpgroups x BLOCK_N {64, 128} x stages {2, 3, 4};
sm80 BLOCK_M {64, 128} x BLOCK_N {64, 128} x stages {2, 3}; each for the algorithms asked for
(``algo_choice.attention``; both by default: the online one ranks first, it issues fewer FLOPs).
STOP conditions drop a candidate when its smem exceeds ~80 % of the block limit, its register
estimate exceeds the per-thread budget (255; 240 for the consumers of two warpgroups, which
``setmaxnreg`` gives 240), the sm80 skeleton falls to one CTA per SM (a preference: kept when nothing
else survives), or (sm90) the tile is not one wgmma / TMA can take. Survivors are ranked by
:func:`roofline`.

The estimate counts the blocks every CTA really visits (causal CTAs stop at their diagonal; the
2-pass algorithm visits them twice), the tensor-core time of the issued MMAs, the exp2 time on the
16-per-clock special-function units (partly hidden behind the other warpgroup's / warps' MMAs), and
the bytes: Q and O once, K and V once per CTA with a fixed L2 miss fraction for the re-reads.
"""
from __future__ import annotations

import math
from typing import Callable, Mapping

from ..ir.diagnostics import fail
from .attention_plan import ALGOS, AttentionPlan
from .attention_spec import HEAD_DIMS, AttentionSpec, _causal_pairs
from .hardware import Target, target
from .plan_search import SMEM_FRACTION  # noqa: F401  (part of this module's interface)
from .plan_search import SearchResult, occupancy_reason, prune, rank, ranking_env, skeletons_for, smem_reason

CostFn = Callable[[AttentionSpec, AttentionPlan, Mapping[str, int], Target], "dict[str, float] | float"]

L2_MISS = 0.15         # fraction of K/V re-reads that reach DRAM
SFU_PER_CLK = 16       # ex2 per clock per SM (sm80 and sm90)
# fraction of the softmax time hidden behind MMAs of other warps (estimates: FA3 paper Table 2 loses
# ~12 % without softmax/GEMM overlap; one consumer warpgroup alone hides little)
SOFTMAX_OVERLAP = {("sm90", 1): 0.2, ("sm90", 2): 0.6, ("sm80", 4): 0.3, ("sm80", 8): 0.5}
WGMMA_N_EFF = {64: 0.8, 128: 0.95}


AttentionSearchResult = SearchResult  # ranked AttentionPlans, best first, and the pruned ones


def key_blocks(m0: int, rows: int, bn: int, m: int, n: int, causal: bool) -> tuple[int, int]:
    """(count, first_masked): the key blocks a CTA of rows [m0, m0+rows) visits, and the first that needs
    the mask. The Python twin of ``key_range`` in polysat_attention.cuh (both are checked against brute force)."""
    nb = -(-n // bn)
    full = n // bn
    count, first = nb, full
    if causal:
        last = min(m0 + rows, m) - 1
        hi = last + n - m
        count = 0 if hi < 0 else min(hi // bn + 1, nb)
        first = max(0, min((m0 + n - m + 1) // bn, full))
    return count, min(first, count)


def visited_blocks(spec: AttentionSpec, sizes: Mapping[str, int], bm: int, bn: int) -> int:
    """Key blocks visited by all CTAs of one batch entry (one pass)."""
    m, n = sizes["m"], sizes["n"]
    return sum(key_blocks(tm * bm, bm, bn, m, n, spec.causal)[0] for tm in range(-(-m // bm)))


def _pairs(m: int, n: int, causal: bool) -> int:
    return _causal_pairs(m, n) if causal else m * n


def _tail_axes(spec: AttentionSpec, bm: int, bn: int) -> tuple[str, ...]:
    out = []
    for axis, size, t in (("m", spec.m, bm), ("n", spec.n, bn)):
        if not isinstance(size, int) or size % t:
            out.append(axis)
    return tuple(out)


def candidates(spec: AttentionSpec, arch: str, sizes: Mapping[str, int], skeletons: tuple[str, ...],
               algos: tuple[str, ...]) -> list[AttentionPlan]:
    out = []
    d, dv = spec.d, spec.dv
    if "sm90" in skeletons and arch == "sm90":
        for nc in ((1, 2) if sizes["m"] > 64 else (1,)):
            for bn in (64, 128):
                for st in (2, 3, 4):
                    for algo in algos:
                        out.append(AttentionPlan("sm90", "sm90", (64 * nc, bn, d), dv, st, (nc, 1), algo, spec.causal,
                                                 _tail_axes(spec, 64 * nc, bn)))
    if "sm80" in skeletons:
        for bm in ((64, 128) if sizes["m"] > 64 else (64,)):
            for bn in (64, 128):
                for st in (2, 3):
                    for algo in algos:
                        out.append(AttentionPlan(arch, "sm80", (bm, bn, d), dv, st, (bm // 16, 1), algo, spec.causal,
                                                 _tail_axes(spec, bm, bn)))
    return out


def ctas_per_sm(plan: AttentionPlan, tgt: Target) -> int:
    regs = ((plan.regs_estimate + 7) // 8) * 8
    if plan.skeleton == "sm90":
        by_regs = tgt.regs_per_sm // (max(regs, 168) * plan.threads)
    else:
        by_regs = tgt.regs_per_sm // (regs * plan.threads)
    by_smem = tgt.smem_per_sm // max(plan.smem_bytes, 1)
    by_threads = tgt.max_threads_per_sm // plan.threads
    return max(0, min(by_regs, by_smem, by_threads, 32))


def stop_reason(spec: AttentionSpec, plan: AttentionPlan, tgt: Target) -> str | None:
    """Why the STOP conditions drop this candidate (None: it survives)."""
    bm, bn, d = plan.tile
    if smem := smem_reason(plan, tgt):
        return smem
    if plan.skeleton == "sm90":
        if tgt.arch != "sm90":
            return "sm90 skeleton needs an sm90 GPU"
        if bm not in (64, 128) or bn not in (64, 128) or d % 64 or plan.dv not in (64, 128):
            return "sm90: tile outside wgmma m64nNk16 (N = BLOCK_N, Dv in {64, 128}) x TMA 128B-swizzle boxes"
        budget = 240 if plan.warps[0] >= 2 else 255
        if plan.regs_estimate > budget:
            return f"sm90: ~{plan.regs_estimate} registers per consumer thread > {budget}"
        return None
    if plan.regs_estimate > 255:
        return f"registers ~{plan.regs_estimate} > 255 (spills)"
    return occupancy_reason(ctas_per_sm(plan, tgt))


def core_time(plan: AttentionPlan, tgt: Target, ctas: int, flops: float, exps: float):
    """The compute side of the flash skeleton's roofline: (CTAs per SM, waves, wave efficiency, MMA time,
    exp2 time, MMA + the exp2 time the softmax does not overlap, over the wave efficiency)."""
    bn = plan.block_n
    occ = max(ctas_per_sm(plan, tgt), 1)
    slots = tgt.sms * occ
    waves = math.ceil(ctas / slots)
    wave_eff = ctas / (waves * slots)
    if plan.skeleton == "sm90":
        eff = tgt.wgmma_eff * WGMMA_N_EFF.get(bn, 0.8)
        overlap = SOFTMAX_OVERLAP.get(("sm90", plan.warps[0]), 0.2)
    else:
        eff = tgt.mma_sync_eff * (0.9 if bn >= 64 else 0.75)
        overlap = SOFTMAX_OVERLAP[("sm80", 8 if occ * plan.warps[0] >= 8 else 4)]
    t_mma = flops / (tgt.peak_tflops * 1e12 * eff)
    t_exp = exps / (SFU_PER_CLK * tgt.sms * tgt.clock_ghz * 1e9)
    t_core = (t_mma + (1.0 - overlap) * t_exp) / wave_eff
    return occ, waves, wave_eff, t_mma, t_exp, t_core


def roofline(spec: AttentionSpec, plan: AttentionPlan, sizes: Mapping[str, int], tgt: Target) -> dict[str, float]:
    b, m, n = sizes["batch"], sizes["m"], sizes["n"]
    bm, bn, d = plan.tile
    dv = plan.dv
    tiles_m = -(-m // bm)
    ctas = tiles_m * b
    blocks = b * visited_blocks(spec, sizes, bm, bn)  # one pass, all CTAs
    passes = 2 if plan.two_pass else 1
    flops = 2.0 * blocks * bm * bn * (d * passes + dv)
    exps = float(blocks * bm * bn * passes)
    occ, waves, wave_eff, t_mma, t_exp, t_core = core_time(plan, tgt, ctas, flops, exps)
    isz = spec.in_dtype.itemsize
    q_bytes = b * m * d * isz
    o_bytes = b * m * dv * spec.out_dtype.itemsize
    kv_unique = b * n * (d + dv) * isz
    kv_reads = b * bn * (d * passes + dv) * isz * visited_blocks(spec, sizes, bm, bn)
    total = q_bytes + o_bytes + kv_unique + L2_MISS * max(0.0, kv_reads - kv_unique)
    t_mem = total / (tgt.bw_tbs * 1e12)
    time = max(t_core, t_mem) + tgt.launch_us * 1e-6
    return {"time_s": time, "t_mma_s": t_mma, "t_exp_s": t_exp, "t_mem_s": t_mem, "flops_issued": flops,
            "flops_useful": 2.0 * b * _pairs(m, n, spec.causal) * (d + dv), "bytes": float(total),
            "ctas_per_sm": float(occ), "waves": float(waves), "wave_eff": wave_eff,
            "regs_est": float(plan.regs_estimate)}


def _algos(hints: Mapping | None, algos: tuple[str, ...] | None) -> tuple[str, ...]:
    want = algos
    if want is None and hints:
        choice = hints.get("algo_choice", {}).get("attention") if isinstance(hints.get("algo_choice"), Mapping) else None
        want = (choice,) if choice else None
    want = tuple(want or ALGOS)
    for a in want:
        if a not in ALGOS:
            fail("InvalidAttribute", "algo_choice.attention", f"unknown attention algorithm {a!r}; choose one of {', '.join(ALGOS)}")
    return want


def check_p_dtype(spec: AttentionSpec, at: str) -> None:
    """E1504 unless P is rounded to the inputs' type: the PV MMA takes P and V in one type."""
    if spec.p_dtype != spec.in_dtype:
        fail("NoKernelTemplate", at, f"it rounds P to {spec.p_dtype.value} but V is {spec.in_dtype.value}; "
             "the PV MMA takes both in one type")


def search(spec: AttentionSpec, arch: str = "sm90", env: Mapping[str, int] | None = None, hints: Mapping | None = None,
           cost: CostFn | None = None, skeletons: tuple[str, ...] | None = None,
           algos: tuple[str, ...] | None = None) -> AttentionSearchResult:
    """Rank the plans for spec on arch; env binds symbols (unbound ones rank at HINT_SIZE)."""
    at = f"attention {spec.name!r}"
    check_p_dtype(spec, at)
    if spec.d not in HEAD_DIMS or spec.dv not in HEAD_DIMS:
        fail("NoKernelTemplate", at, f"head dims D = {spec.d}, Dv = {spec.dv}: the flash template is instantiated for "
             f"{', '.join(map(str, HEAD_DIMS))}")
    tgt = target(arch)
    sizes = spec.sizes(ranking_env(spec.symbols, env))
    cands = candidates(spec, arch, sizes, skeletons_for(arch, skeletons), _algos(hints, algos))
    kept, pruned = prune(cands, lambda p: stop_reason(spec, p, tgt))
    if not kept:
        fail("InternalError", at, "no attention schedule candidate survives the STOP conditions",
             "Report the attention spec; the 64x64 tiles should always fit.")
    cost = cost or roofline
    return AttentionSearchResult(rank(kept, lambda p: cost(spec, p, sizes, tgt)), tuple(pruned))


def choose_plan(spec: AttentionSpec, arch: str = "sm90", env: Mapping[str, int] | None = None,
                hints: Mapping | None = None, **kw) -> AttentionPlan:
    return search(spec, arch, env, hints, **kw).best
