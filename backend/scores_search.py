"""Plan search for softmax_scores: the sm80 flash skeleton's tiles, the attention STOP conditions, a
roofline dominated by the store of P (seed 000 §10 step 6, §11).

Candidates: sm80 BLOCK_M {64, 128} x BLOCK_N {64, 128} x stages {2, 3}, algorithm streaming_softmax_2pass
(P is stored normalised, so the row statistics must be complete before the first store). On sm90 targets
the sm90 skeleton's tiles are listed and pruned: its wgmma / TMA consumer path has no P-store mode, so the
sm80 skeleton (mma.sync) is built for sm_90a. Survivors are pruned like attention plans
(attention_search.stop_reason: smem, registers, occupancy) and ranked by :func:`roofline`.
"""
from __future__ import annotations

from typing import Callable, Mapping

from ..ir.diagnostics import fail
from .attention_search import L2_MISS, _pairs, _tail_axes, core_time, stop_reason, visited_blocks
from .attention_spec import HEAD_DIMS
from .hardware import Target, target
from .plan_search import Pruned, SearchResult, prune, rank, ranking_env
from .scores_plan import ScoresPlan
from .scores_spec import ScoresSpec

CostFn = Callable[[ScoresSpec, ScoresPlan, Mapping[str, int], Target], "dict[str, float] | float"]
SM90_PRUNED = ("sm90 skeleton: its wgmma/TMA consumer path has no P-store mode (P leaves registers only as "
               "wgmma A operands); softmax_scores runs the sm80 skeleton (mma.sync) built for sm_90a")


def candidates(spec: ScoresSpec, arch: str, sizes: Mapping[str, int]) -> list[ScoresPlan]:
    out = []
    for bm in ((64, 128) if sizes["m"] > 64 else (64,)):
        for bn in (64, 128):
            for st in (2, 3):
                out.append(ScoresPlan(arch, "sm80", (bm, bn, spec.d), 0, st, (bm // 16, 1), causal=spec.causal,
                                      predicate_tail=_tail_axes(spec, bm, bn)))
    return out


def sm90_pruned(spec: ScoresSpec, arch: str) -> list[Pruned]:
    """The sm90 skeleton's tiles, each pruned with the reason (listed in the plan's `pruned`)."""
    if arch != "sm90":
        return []
    return [Pruned(ScoresPlan("sm90", "sm90", (64 * nc, bn, spec.d), 0, 2, (nc, 1), causal=spec.causal), SM90_PRUNED)
            for nc in (1, 2) for bn in (64, 128)]


def roofline(spec: ScoresSpec, plan: ScoresPlan, sizes: Mapping[str, int], tgt: Target) -> dict[str, float]:
    b, m, n = sizes["batch"], sizes["m"], sizes["n"]
    bm, bn, d = plan.tile
    ctas = -(-m // bm) * b
    visits = visited_blocks(spec, sizes, bm, bn)  # one pass, one batch entry
    flops = 2.0 * 2 * b * visits * bm * bn * d    # S computed in both passes
    exps = 2.0 * b * visits * bm * bn
    occ, waves, wave_eff, t_mma, t_exp, t_core = core_time(plan, tgt, ctas, flops, exps)  # the sm80 branch
    isz = spec.in_dtype.itemsize
    q_bytes = b * m * d * isz
    p_bytes = b * m * n * spec.p_dtype.itemsize  # every element, the blocks past the diagonal too
    k_unique = b * n * d * isz
    k_reads = 2.0 * b * visits * bn * d * isz
    total = q_bytes + p_bytes + k_unique + L2_MISS * max(0.0, k_reads - k_unique)
    t_mem = total / (tgt.bw_tbs * 1e12)
    time = max(t_core, t_mem) + tgt.launch_us * 1e-6
    useful = _pairs(m, n, spec.causal)
    return {"time_s": time, "t_mma_s": t_mma, "t_exp_s": t_exp, "t_mem_s": t_mem, "flops_issued": flops,
            "flops_useful": 2.0 * b * useful * d, "bytes": float(total), "ctas_per_sm": float(occ),
            "waves": float(waves), "wave_eff": wave_eff, "regs_est": float(plan.regs_estimate)}


def search(spec: ScoresSpec, arch: str = "sm90", env: Mapping[str, int] | None = None, hints: Mapping | None = None,
           cost: CostFn | None = None) -> SearchResult:
    """Rank the plans for spec on arch; env binds symbols (unbound ones rank at HINT_SIZE)."""
    at = f"softmax_scores {spec.name!r}"
    if spec.d not in HEAD_DIMS:
        fail("NoKernelTemplate", at, f"head dim D = {spec.d}: the flash skeleton is instantiated for "
             f"{', '.join(map(str, HEAD_DIMS))}")
    choice = ((hints or {}).get("algo_choice") or {}).get("attention")
    if choice not in (None, "streaming_softmax_2pass"):
        fail("InvalidAttribute", "algo_choice.attention", f"softmax_scores stores P normalised: only "
             f"streaming_softmax_2pass computes it, not {choice!r}")
    tgt = target(arch)
    sizes = spec.sizes(ranking_env(spec.symbols, env))
    kept, pruned = prune(candidates(spec, arch, sizes), lambda p: stop_reason(spec, p, tgt))
    if not kept:
        fail("InternalError", at, "no softmax_scores schedule candidate survives the STOP conditions",
             "Report the spec; the 64x64 tiles should always fit.")
    cost = cost or roofline
    return SearchResult(rank(kept, lambda p: cost(spec, p, sizes, tgt)), tuple(sm90_pruned(spec, arch) + pruned))


def choose_plan(spec: ScoresSpec, arch: str = "sm90", env: Mapping[str, int] | None = None,
                hints: Mapping | None = None) -> ScoresPlan:
    return search(spec, arch, env, hints).best
