"""Schedule Plan of one softmax_scores kernel and its search: the sm80 flash skeleton's tiles, the attention
STOP conditions, an estimate dominated by the store of P.

The kernel is the sm80 flash-attention skeleton in its STORE_P mode (polysat_attention.cuh): CTA = BLOCK_M
query rows, one warp per 16 rows, Q kept as mma.sync A fragments, K tiles of BLOCK_N keys streamed through
a cp.async ring twice (pass 1: row max and sum; pass 2: S recomputed, P = exp2(c t - c m) / l rounded to P's
type and stored from the accumulator fragments). No V: ``dv`` is 0 and the ring holds K only. So a
ScoresPlan is an AttentionPlan (same tile, smem and occupancy arithmetic, same STOP conditions) with its
own register estimate, key and JSON.

Candidates: sm80 BLOCK_M {64, 128} x BLOCK_N {64, 128} (attention.plan.sm80_block_ns; without V the padded
head dims never call for 32) x stages {2, 3}, Q's fragments in registers unless the register estimate
exceeds 255 (then from smem), algorithm streaming_softmax_2pass
(P is stored normalised, so the row statistics must be complete before the first store). On sm90 targets
the sm90 skeleton's tiles are listed and pruned: its wgmma / TMA consumer path has no P-store mode, so the
sm80 skeleton (mma.sync) is built for sm_90a. Survivors are pruned like attention plans
(attention.plan.stop_reason: smem, registers, occupancy) and ranked by :func:`estimate`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping

from ...analyses.devices import Device, device
from ...analyses.roofline import dram_time, roofline
from ...ir.diagnostics import fail
from ..attention.plan import (L2_MISS, SM80_BIND, AttentionPlan, core_time, load_vec, pairs, q_then, sm80_block_ns,
                              sm80_loads, stop_reason, tail_axes, visited_blocks, with_q_regs)
from ..attention.spec import head_dims_reason
from ..common.plan_search import Pruned, SearchResult, prune, rank, ranking_env
from .spec import ScoresSpec

ALGO = "streaming_softmax_2pass"


@dataclass(frozen=True)
class ScoresPlan(AttentionPlan):
    """Made with dv = 0 (no V)."""
    algo: str = ALGO
    store_p: ClassVar[bool] = True

    @property
    def regs_estimate(self) -> int:
        """Registers per thread: S accumulators, Q fragments, row statistics, addressing (ptxas -v of the
        generated kernels, checked in tests/test_scores_kernel.py)."""
        d = self.dp
        narrow = self.vec < 8 and self.copies_per_thread(self.block_n, d) <= 8  # unrolled narrow copies
        return self.block_n + ((3 * d) // 4 + 25 if self.q_regs else d // 4 + 40) + (d // 4 if narrow else 0)

    def key(self) -> str:
        return super().key() + "_p"

    def to_json(self, spec: Any = None) -> dict[str, Any]:
        bm, bn, d = self.tile
        q, k, p = (spec.q, spec.k, spec.p) if spec else ("Q", "K", "P")
        return {
            "tile": [bm, bn, d],
            "stages": self.stages,
            "bind": dict(SM80_BIND),
            "warp_tile": f"16x{bn}",
            "warps": self.warps[0],
            "threads": self.threads,
            "cache": [
                {"tensor": q, "where": "smem", "at": "m.o", "pingpong": False, "swizzle": "xor16B",
                 "then": q_then(self)},
                {"tensor": k, "where": "smem", "at": "n.o", "pingpong": True, "depth": self.stages, "swizzle": "xor16B",
                 "passes": 2},
            ],
            "vectorize": {"loads": sm80_loads(self),
                          "store": {"tensor": p, "axis": "n.i", "width": 2, "when": "N even (else scalar)"}},
            "predicate_tail": list(self.predicate_tail),
            "causal": {"mask": "j <= i + (N - M)", "skip_blocks_above_diagonal": True,
                       "mask_only_diagonal_blocks": True, "blocks_above_diagonal": "stored as 0, no MMA"}
            if self.causal else None,
            "arch": self.arch,
            "skeleton": self.skeleton,
            "layout_hints": {"Q_swizzle": True, "K_swizzle": True, "P_stride": "row"},
            "algo_choice": {"attention": self.algo, "mma": "mma_sync_cp_async", "p": "stored (materialize)"},
            **self.json_tail({"from": "row_softmax", "to": "store_p", "buffer": "reg",
                              "what": "P from the S accumulators"}),
        }


CostFn = Callable[[ScoresSpec, ScoresPlan, Mapping[str, int], Device], "dict[str, float] | float"]
SM90_PRUNED = ("sm90 skeleton: its wgmma/TMA consumer path has no P-store mode (P leaves registers only as "
               "wgmma A operands); softmax_scores runs the sm80 skeleton (mma.sync) built for sm_90a")


def candidates(spec: ScoresSpec, arch: str, sizes: Mapping[str, int]) -> list[ScoresPlan]:
    out = []
    for bm in ((64, 128) if sizes["m"] > 64 else (64,)):
        for bn in sm80_block_ns(spec.d, 0):
            for st in (2, 3):
                out.append(with_q_regs(ScoresPlan(arch, "sm80", (bm, bn, spec.d), 0, st, (bm // 16, 1),
                                                  causal=spec.causal, predicate_tail=tail_axes(spec, bm, bn),
                                                  vec=load_vec(spec))))
    return out


def sm90_pruned(spec: ScoresSpec, arch: str) -> list[Pruned]:
    """The sm90 skeleton's tiles, each pruned with the reason (listed in the plan's `pruned`)."""
    if arch != "sm90":
        return []
    return [Pruned(ScoresPlan("sm90", "sm90", (64 * nc, bn, spec.d), 0, 2, (nc, 1), causal=spec.causal), SM90_PRUNED)
            for nc in (1, 2) for bn in (64, 128)]


def estimate(spec: ScoresSpec, plan: ScoresPlan, sizes: Mapping[str, int], dev: Device) -> dict[str, float]:
    """The time of one softmax_scores plan under sizes {batch, m, n} on dev, with its terms."""
    b, m, n = sizes["batch"], sizes["m"], sizes["n"]
    bm, bn, d = plan.tile
    ctas = -(-m // bm) * b
    visits = visited_blocks(spec, sizes, bm, bn)  # one pass, one batch entry
    flops = 2.0 * 2 * b * visits * bm * bn * d    # S computed in both passes
    exps = 2.0 * b * visits * bm * bn
    occ, waves, wave_eff, t_mma, t_exp, t_core = core_time(plan, dev, ctas, flops, exps)  # the sm80 branch
    isz = spec.in_dtype.itemsize
    q_bytes = b * m * d * isz
    p_bytes = b * m * n * spec.p_dtype.itemsize  # every element, the blocks past the diagonal too
    k_unique = b * n * d * isz
    k_reads = 2.0 * b * visits * bn * d * isz
    total = q_bytes + p_bytes + k_unique + L2_MISS * max(0.0, k_reads - k_unique)
    t_mem = dram_time(total, dev)
    time = roofline(dev, (t_core, t_mem))
    useful = pairs(m, n, spec.causal)
    return {"time_s": time, "t_mma_s": t_mma, "t_exp_s": t_exp, "t_mem_s": t_mem, "flops_issued": flops,
            "flops_useful": 2.0 * b * useful * d, "bytes": float(total), "ctas_per_sm": float(occ),
            "waves": float(waves), "wave_eff": wave_eff, "regs_est": float(plan.regs_estimate)}


def search(spec: ScoresSpec, arch: str = "sm90", env: Mapping[str, int] | None = None, hints: Mapping | None = None,
           cost: CostFn | None = None) -> SearchResult:
    """Rank the plans for spec on arch; env binds symbols (unbound ones rank at HINT_SIZE)."""
    at = f"softmax_scores {spec.name!r}"
    if why := head_dims_reason(spec.d):
        fail("NoKernelTemplate", at, why)
    choice = ((hints or {}).get("algo_choice") or {}).get("attention")
    if choice not in (None, "streaming_softmax_2pass"):
        fail("InvalidAttribute", "algo_choice.attention", f"softmax_scores stores P normalised: only "
             f"streaming_softmax_2pass computes it, not {choice!r}")
    dev = device(arch)
    sizes = spec.sizes(ranking_env(spec.symbols, env))
    kept, pruned = prune(candidates(spec, arch, sizes), lambda p: stop_reason(spec, p, dev))
    if not kept:
        fail("InternalError", at, "no softmax_scores schedule candidate survives the STOP conditions",
             "Report the spec; the 64x64 tiles should always fit.")
    cost = cost or estimate
    return SearchResult(rank(kept, lambda p: cost(spec, p, sizes, dev)), tuple(sm90_pruned(spec, arch) + pruned))


def choose_plan(spec: ScoresSpec, arch: str = "sm90", env: Mapping[str, int] | None = None,
                hints: Mapping | None = None) -> ScoresPlan:
    return search(spec, arch, env, hints).best
