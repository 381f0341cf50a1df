"""Schedule Plan of one flash-attention kernel and its search: a handful of candidates, STOP-condition
pruning, roofline ranking.

A plan names the skeleton (``sm80``: cp.async ring + ldmatrix + mma.sync, one warp per 16 query rows;
``sm90``: TMA + mbarrier ring + wgmma, a producer warpgroup and ``warps[0]`` consumer warpgroups of 64
rows), the CTA tile ``(BLOCK_M, BLOCK_N, D)`` (query rows, keys per K/V tile, head dim), the ring
depth, and the softmax algorithm (``algo_choice.attention``):

  ``online_softmax``           one pass, running max and sum, O rescaled when the max grows (default);
  ``streaming_softmax_2pass``  pass 1 streams K for the row max and sum, pass 2 recomputes S and
                               accumulates the normalised P V (1.5x the QK^T FLOPs, no rescaling).

``to_json`` writes the plan's fields; sizes of the smem pieces and the register estimate the STOP
conditions use live on the plan so the search and the code generator agree.

Candidates: sm90 (on sm90 targets) 1 or 2 consumer warpgroups x BLOCK_N {64, 128} x stages {2, 3, 4};
sm80 BLOCK_M {64, 128} x BLOCK_N {64, 128} (and 32 where the head dims padded to 16 exceed 256 together)
x stages {2, 3}, Q's fragments in registers unless that exceeds the register budget (then re-read from
smem per key block); each for the algorithms asked for
(``algo_choice.attention``; both by default: the online one ranks first, it issues fewer FLOPs).
STOP conditions drop a candidate when its smem exceeds ~80 % of the block limit, its register
estimate exceeds the per-thread budget (255; 240 for the consumers of two warpgroups, which
``setmaxnreg`` gives 240), the sm80 skeleton falls to one CTA per SM (a preference: kept when nothing
else survives), or (sm90) the tile is not one wgmma / TMA can take. Survivors are ranked by
:func:`estimate`.

The estimate counts the blocks every CTA really visits (causal CTAs stop at their diagonal; the
2-pass algorithm visits them twice), the tensor-core time of the issued MMAs, the exp2 time on the
16-per-clock special-function units (partly hidden behind the other warpgroup's / warps' MMAs), and
the bytes: Q and O once, K and V once per CTA with a fixed L2 miss fraction for the re-reads; the
roofline (analyses/roofline.py) combines them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, ClassVar, Mapping

from ...analyses.devices import Device, device
from ...analyses.roofline import clock_time, dram_time, roofline, tensor_time
from ...ir.diagnostics import fail
from ..common.plan_search import SearchResult, occupancy_reason, prune, rank, ranking_env, skeletons_for, smem_reason
from .spec import AttentionSpec, causal_pairs, head_dims_reason, padded_dim

ALGOS = ("online_softmax", "streaming_softmax_2pass")
SM80_BIND = {"m.o": "block.x (per batch entry, longest causal tile first)", "batch": "block.x / tiles_m",
             "m.i.o": "warp (16 rows)", "n.i": "mma.m16n8k16 n-tiles"}  # the sm80 skeleton's loop binding


@dataclass(frozen=True)
class AttentionPlan:
    arch: str                        # target GPU: sm80 | sm90
    skeleton: str                    # sm80 | sm90
    tile: tuple[int, int, int]       # BLOCK_M, BLOCK_N, D
    dv: int                          # head dim of V and O
    stages: int                      # K/V smem ring depth
    warps: tuple[int, int]           # sm80: (BLOCK_M / 16 warps, 1); sm90: (consumer warpgroups, 1)
    algo: str = "online_softmax"
    causal: bool = False
    predicate_tail: tuple[str, ...] = ()
    q_regs: bool = True              # sm80: Q's A fragments kept in registers (else re-read from smem per key block)
    vec: int = 8                     # sm80: elements per global copy (copy_vec of the head dims and windows)
    est: tuple[tuple[str, float], ...] = field(default=(), compare=False)  # cost-model numbers
    store_p: ClassVar[bool] = False  # scores.plan.ScoresPlan: pass 2 stores P instead of O += P V

    @property
    def block_m(self) -> int:
        return self.tile[0]

    @property
    def block_n(self) -> int:
        return self.tile[1]

    @property
    def d(self) -> int:
        return self.tile[2]

    @property
    def dp(self) -> int:
        """D as the smem tiles and MMAs hold it (padded_dim; the sm90 skeleton takes multiples of 64 as they are)."""
        return padded_dim(self.d)

    @property
    def dvp(self) -> int:
        return padded_dim(self.dv)

    @property
    def two_pass(self) -> bool:
        return self.algo == "streaming_softmax_2pass"

    @property
    def threads(self) -> int:
        if self.skeleton == "sm90":
            return 128 * (self.warps[0] + 1)
        return 32 * self.warps[0]

    @property
    def q_bytes(self) -> int:
        return self.block_m * self.dp * 2

    @property
    def stage_bytes(self) -> int:
        return self.block_n * (self.dp + self.dvp) * 2

    @property
    def smem_bytes(self) -> int:
        ring = self.q_bytes + self.stages * self.stage_bytes
        if self.skeleton == "sm90":
            return ring + (1 + 4 * self.stages) * 8 + 1024  # + mbarriers (full q, full/empty k/v) + alignment slack
        return ring

    @property
    def barrier_model(self) -> str:
        return "mbarrier" if self.skeleton == "sm90" else "cp_async_group"

    @property
    def regs_estimate(self) -> int:
        """Registers per (consumer) thread: S and O accumulators, P fragments, (sm80) Q fragments, addressing.
        Calibrated on ptxas -v of the generated kernels (tests/test_attention_kernel.py checks the bound): the
        sm80 skeleton needs fewer below a padded head dim of 64, Q from smem costs about D/8 (the K fragments
        in flight), copies narrower than 16 bytes about D/8 while their loop is unrolled (at most 8 per
        thread: load_rows in polysat_attention.cuh), and single-element copies (an odd head dim) about 6 a copy
        (K's and V's, each a value and its 64-bit address: ptxas 138-140 for the 64x64 tile of head dims 7/5)."""
        bn, d, dv = self.block_n, self.dp, self.dvp
        if self.skeleton == "sm90":
            return bn // 2 + dv // 2 + bn // 4 + 40
        q = d if self.q_regs else 0
        copies = self.copies_per_thread(bn, d)
        unrolled = (6 * copies if self.vec == 1 else d // 8) if self.vec < 8 and copies <= 8 else 0
        return (9 * bn + (9 * (q + dv)) // 2) // 10 + 60 - max(0, 64 - d) + (0 if self.q_regs else d // 8) + unrolled

    def copies_per_thread(self, rows: int, cols: int) -> int:
        """Global copies (plan.vec elements each) one thread issues for a [rows][cols] smem tile."""
        return -(-rows * (cols // self.vec) // self.threads)

    def key(self) -> str:
        """Every specialisation parameter, for cache and kernel names."""
        bm, bn, d = self.tile
        return (f"{self.skeleton}_{bm}x{bn}x{d}v{self.dv}_s{self.stages}_w{self.warps[0]}"
                f"_{'2p' if self.two_pass else 'on'}{'_c' if self.causal else ''}{'' if self.q_regs else '_qs'}")

    def to_json(self, spec: AttentionSpec | None = None) -> dict[str, Any]:
        bm, bn, d = self.tile
        q, k, v = (spec.q, spec.k, spec.v) if spec else ("Q", "K", "V")
        sm90 = self.skeleton == "sm90"
        if sm90:
            bind = {"m.o": "block.x (per batch entry, longest causal tile first)", "batch": "block.x / tiles_m",
                    "m.i.o": "warpgroup (consumer, 64 rows)", "m.i.i": "warp (16 rows)", "n.i": "wgmma.n",
                    "producer": "warpgroup 0 (one thread issues TMA)"}
        else:
            bind = dict(SM80_BIND)
        swz = "128B" if sm90 else "xor16B"
        return {
            "tile": [bm, bn, d],
            "dv": self.dv,
            "padded_head_dims": None if sm90 else [self.dp, self.dvp],
            "stages": self.stages,
            "bind": bind,
            "warp_tile": f"16x{bn}",
            "warps": self.warps[0] * (4 if sm90 else 1),
            "warpgroups": {"producer": 1, "consumer": self.warps[0]} if sm90 else None,
            "threads": self.threads,
            "cache": [
                {"tensor": q, "where": "smem", "at": "m.o", "pingpong": False, "swizzle": swz,
                 "then": "wgmma A descriptor" if sm90 else q_then(self)},
                {"tensor": k, "where": "smem", "at": "n.o", "pingpong": True, "depth": self.stages, "swizzle": swz},
                {"tensor": v, "where": "smem", "at": "n.o", "pingpong": True, "depth": self.stages, "swizzle": swz,
                 "major": "N (wgmma imm-trans-b)" if sm90 else "N (ldmatrix.trans)"},
            ],
            "vectorize": {"loads": {"width": 8, "via": "TMA box {64, rows}"} if sm90 else sm80_loads(self),
                          "store": {"axis": "dv.i", "width": 2}},
            "predicate_tail": list(self.predicate_tail),
            "causal": {"mask": "j <= i + (N - M)", "skip_blocks_above_diagonal": True,
                       "mask_only_diagonal_blocks": True} if self.causal else None,
            "arch": self.arch,
            "skeleton": self.skeleton,
            "layout_hints": {"Q_swizzle": True, "K_swizzle": True, "V_swizzle": True, "O_stride": "row"},
            "algo_choice": {"attention": self.algo,
                            "mma": "tma_wgmma_ss_rs_ws" if sm90 else "mma_sync_cp_async"},
            **self.json_tail({"from": "row_softmax", "to": "pv_matmul", "buffer": "reg", "what": "P as A fragments"}),
        }

    def json_tail(self, p_edge: dict[str, Any]) -> dict[str, Any]:
        """The last plan fields (local edges around p_edge, where P goes; async, barriers, smem, registers,
        estimate), shared with scores.plan.ScoresPlan."""
        return {
            "local_edges": [{"from": "qk_matmul", "to": "row_softmax", "buffer": "reg"}, p_edge,
                            {"from": "load", "to": "mma", "buffer": "smem_ring", "depth": self.stages}],
            "async": {"enable": True, "prefetch_depth": self.stages - 1, "epilogue_overlap": False},
            "barrier_model": self.barrier_model,
            "smem_bytes": self.smem_bytes,
            "regs_estimate": self.regs_estimate,
            "estimate": dict(self.est),
        }


def sm80_loads(plan: AttentionPlan) -> dict[str, Any]:
    """The sm80 skeleton's global copies: plan.vec elements each (cp.async of 2 * vec bytes, or plain loads)."""
    return {"width": plan.vec, "via": f"cp.async {2 * plan.vec}B" if plan.vec > 1 else "ld.global + st.shared"}


def load_vec(spec) -> int:
    """Elements per global copy of the sm80 skeleton: the widest of 8, 4, 2, 1 dividing the head dims and every
    column-window offset, row and head stride (copy_vec in polysat_attention.cuh)."""
    xs = [spec.d, getattr(spec, "dv", spec.d), *(x for c in spec.cols for x in c)]
    return next(v for v in (8, 4, 2, 1) if all(x % v == 0 for x in xs))


def q_then(plan: AttentionPlan) -> str:
    """Where the sm80 skeleton takes Q's mma A fragments from."""
    return "registers (mma A fragments)" if plan.q_regs else "ldmatrix per key block (registers are short)"


CostFn = Callable[[AttentionSpec, AttentionPlan, Mapping[str, int], Device], "dict[str, float] | float"]

L2_MISS = 0.15         # fraction of K/V re-reads that reach DRAM
SFU_PER_CLK = 16       # ex2 per clock per SM (sm80 and sm90)
# fraction of the softmax time hidden behind MMAs of other warps. sm90, two consumer warpgroups: fit to the H200
# (20 fp16 rows, d 64/128, seq 1k-16k, causal and not, bench/results/nvidia-h200.json): the MMAs plus the exp2s
# with almost none hidden, and CTA_US a CTA; one warpgroup (unmeasured) hides less. sm80: estimates (FA3 paper
# Table 2 loses ~12 % without softmax/GEMM overlap)
SOFTMAX_OVERLAP = {("sm90", 1): 0.0, ("sm90", 2): 0.1, ("sm80", 4): 0.3, ("sm80", 8): 0.5}
CTA_US = 2.5  # µs a CTA spends outside its key loop (Q in, the first K/V round trip, O out; fit on sm90)
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


def pairs(m: int, n: int, causal: bool) -> int:
    return causal_pairs(m, n) if causal else m * n


def tail_axes(spec: AttentionSpec, bm: int, bn: int) -> tuple[str, ...]:
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
                                                 tail_axes(spec, 64 * nc, bn)))
    if "sm80" in skeletons:
        for bm in ((64, 128) if sizes["m"] > 64 else (64,)):
            for bn in sm80_block_ns(d, dv):
                for st in (2, 3):
                    for algo in algos:
                        out.append(with_q_regs(AttentionPlan(arch, "sm80", (bm, bn, d), dv, st, (bm // 16, 1), algo,
                                                             spec.causal, tail_axes(spec, bm, bn),
                                                             vec=load_vec(spec))))
    return out


def sm80_block_ns(d: int, dv: int) -> tuple[int, ...]:
    """BLOCK_N of the sm80 candidates: 64 and 128, and 32 where the padded head dims are wide (> 256 together:
    the S accumulators and the K/V ring shrink so that O's registers and the smem fit)."""
    return (32, 64, 128) if padded_dim(d) + padded_dim(dv) > 256 else (64, 128)


def with_q_regs(plan: AttentionPlan) -> AttentionPlan:
    """The sm80 plan with Q's A fragments in registers where the register estimate allows, else from smem."""
    return plan if plan.regs_estimate <= 255 else replace(plan, q_regs=False)


def ctas_per_sm(plan: AttentionPlan, dev: Device) -> int:
    regs = ((plan.regs_estimate + 7) // 8) * 8
    if plan.skeleton == "sm90":
        by_regs = dev.regs_per_sm // (max(regs, 168) * plan.threads)
    else:
        by_regs = dev.regs_per_sm // (regs * plan.threads)
    by_smem = dev.smem_per_sm // max(plan.smem_bytes, 1)
    by_threads = dev.max_threads_per_sm // plan.threads
    return max(0, min(by_regs, by_smem, by_threads, 32))


def stop_reason(spec: AttentionSpec, plan: AttentionPlan, dev: Device) -> str | None:
    """Why the STOP conditions drop this candidate (None: it survives)."""
    bm, bn, d = plan.tile
    if smem := smem_reason(plan, dev):
        return smem
    if plan.skeleton == "sm90":
        if dev.arch != "sm90":
            return "sm90 skeleton needs an sm90 GPU"
        if bm not in (64, 128) or bn not in (64, 128) or d % 64 or plan.dv not in (64, 128):
            return ("sm90: tile outside wgmma m64nNk16 (N = BLOCK_N, Dv in {64, 128}) x TMA 128B-swizzle boxes "
                    "(D a multiple of 64); the sm80 skeleton takes the other head dims")
        if any(x % 8 for c in spec.cols for x in c):
            return "sm90: TMA needs 16-byte column windows (offsets, row and head strides multiples of 8 elements)"
        if spec.q_pro or spec.k_pro or spec.fn or spec.mask is not None or spec.kv_rep != 1:
            return ("sm90: TMA lands Q and K as they lie and the consumers score them unmasked; Q/K prologues, score "
                    "programs, mask tensors and shared KV heads run in the sm80 skeleton (mma.sync, built for sm_90a too)")
        budget = 240 if plan.warps[0] >= 2 else 255
        if plan.regs_estimate > budget:
            return f"sm90: ~{plan.regs_estimate} registers per consumer thread > {budget}"
        return None
    if plan.regs_estimate > 255:
        return f"registers ~{plan.regs_estimate} > 255 (spills)"
    return occupancy_reason(ctas_per_sm(plan, dev))


def core_time(plan: AttentionPlan, dev: Device, ctas: int, flops: float, exps: float):
    """The compute side of the flash skeleton's roofline: (CTAs per SM, waves, wave efficiency, MMA time,
    exp2 time, MMA + the exp2 time the softmax does not overlap, over the wave efficiency, and each wave's part
    outside the key loop, ``CTA_US``)."""
    bn = plan.block_n
    occ = max(ctas_per_sm(plan, dev), 1)
    slots = dev.sms * occ
    waves = math.ceil(ctas / slots)
    wave_eff = ctas / (waves * slots)
    if plan.skeleton == "sm90":
        eff = dev.mma_eff_of("sm90") * WGMMA_N_EFF.get(bn, 0.8)
        overlap = SOFTMAX_OVERLAP.get(("sm90", plan.warps[0]), 0.2)
    else:
        eff = dev.mma_eff_of("sm80") * (0.9 if bn >= 64 else 0.75)
        overlap = SOFTMAX_OVERLAP[("sm80", 8 if occ * plan.warps[0] >= 8 else 4)]
    t_mma = tensor_time(flops, dev, eff)
    t_exp = clock_time(exps, SFU_PER_CLK, dev)
    t_core = (t_mma + (1.0 - overlap) * t_exp) / wave_eff
    t_core += waves * CTA_US * 1e-6  # a wave's CTAs spend their fixed parts side by side
    return occ, waves, wave_eff, t_mma, t_exp, t_core


def operand_time(spec: AttentionSpec, plan: AttentionPlan, ctas: int, blocks: int, passes: int, dev: Device) -> float:
    """Seconds of FP32-pipe work the Q/K prologues, the score program and the mask add, in series with the MMAs
    (the prologue tiles are filled by plain loads and stores, not in the copy ring): every CTA computes its Q tile
    once and redoes K's prologue for each key block it visits (each pass): rotary embeddings of K are recomputed
    by every query tile; one op per program step and per source read or guard."""
    bm, bn, d = plan.tile

    def ops(p) -> int:
        return 0 if p is None else len(p.steps) + len(p.sources)
    elems = ops(spec.q_pro) * ctas * bm * d + ops(spec.k_pro) * blocks * bn * d * passes
    elems += (len(spec.fn) + (spec.mask is not None)) * blocks * bm * bn * passes
    return elems / (dev.fp32_tflops * 1e12 / 2) if elems else 0.0


def estimate(spec: AttentionSpec, plan: AttentionPlan, sizes: Mapping[str, int], dev: Device) -> dict[str, float]:
    """The time of one attention plan under sizes {batch, m, n} on dev, with its terms."""
    b, m, n = sizes["batch"], sizes["m"], sizes["n"]
    bm, bn, d = plan.tile
    dv = plan.dv
    tiles_m = -(-m // bm)
    ctas = tiles_m * b
    blocks = b * visited_blocks(spec, sizes, bm, bn)  # one pass, all CTAs
    passes = 2 if plan.two_pass else 1
    flops = 2.0 * blocks * bm * bn * (d * passes + dv)
    exps = float(blocks * bm * bn * passes)
    occ, waves, wave_eff, t_mma, t_exp, t_core = core_time(plan, dev, ctas, flops, exps)
    isz = spec.in_dtype.itemsize
    q_bytes = b * m * d * isz
    o_bytes = b * m * dv * spec.out_dtype.itemsize
    kv_unique = b * n * (d + dv) * isz
    kv_reads = b * bn * (d * passes + dv) * isz * visited_blocks(spec, sizes, bm, bn)
    total = q_bytes + o_bytes + kv_unique + L2_MISS * max(0.0, kv_reads - kv_unique)
    t_mem = dram_time(total, dev)
    t_pro = operand_time(spec, plan, ctas, blocks, passes, dev)
    time = roofline(dev, (t_core + t_pro, t_mem))
    return {"time_s": time, "t_mma_s": t_mma, "t_exp_s": t_exp, "t_mem_s": t_mem, "t_prologue_s": t_pro,
            "flops_issued": flops,
            "flops_useful": 2.0 * b * pairs(m, n, spec.causal) * (d + dv), "bytes": float(total),
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


def p_dtype_reason(spec: AttentionSpec) -> str | None:
    """Why the template cannot compute spec's P (None: it can): P must be rounded to the inputs' type, the
    PV MMA takes P and V in one type."""
    if spec.p_dtype != spec.in_dtype:
        return f"it rounds P to {spec.p_dtype.value} but V is {spec.in_dtype.value}; the PV MMA takes both in one type"
    return None


def check_p_dtype(spec: AttentionSpec, at: str) -> None:
    """E1504 unless P is rounded to the inputs' type (:func:`p_dtype_reason`)."""
    why = p_dtype_reason(spec)
    if why is not None:
        fail("NoKernelTemplate", at, why)


def search(spec: AttentionSpec, arch: str = "sm90", env: Mapping[str, int] | None = None, hints: Mapping | None = None,
           cost: CostFn | None = None, skeletons: tuple[str, ...] | None = None,
           algos: tuple[str, ...] | None = None) -> AttentionSearchResult:
    """Rank the plans for spec on arch; env binds symbols (unbound ones rank at HINT_SIZE)."""
    at = f"attention {spec.name!r}"
    check_p_dtype(spec, at)
    if why := head_dims_reason(spec.d, spec.dv):
        fail("NoKernelTemplate", at, why)
    dev = device(arch)
    sizes = spec.sizes(ranking_env(spec.symbols, env))
    cands = candidates(spec, arch, sizes, skeletons_for(arch, skeletons), _algos(hints, algos))
    kept, pruned = prune(cands, lambda p: stop_reason(spec, p, dev))
    if not kept:
        fail("InternalError", at, "no attention schedule candidate survives the STOP conditions",
             "Report the attention spec; the 64x64 tiles should always fit.")
    cost = cost or estimate
    return AttentionSearchResult(rank(kept, lambda p: cost(spec, p, sizes, dev)), tuple(pruned))


def choose_plan(spec: AttentionSpec, arch: str = "sm90", env: Mapping[str, int] | None = None,
                hints: Mapping | None = None, **kw) -> AttentionPlan:
    return search(spec, arch, env, hints, **kw).best
