"""Plan search of a GEMM: candidates of the MMA skeleton, STOP-condition pruning, cost ranking.

Candidates are the space ``tile x stages x warp_tile`` of the skeletons the target runs
(:mod:`..common.mma_search`). STOP conditions prune a candidate when: smem per CTA exceeds ~80 % of the block
limit; registers (or smem) drop the sm80 skeleton to one CTA per SM; its vector width is below the widest
the operands allow; for sm90, the tile is not one wgmma/TMA can take or the operands break TMA's 16-byte
stride rule. The survivors are ranked by ``cost`` (default :func:`..common.mma_search.estimate`).
``hints`` (optional) narrow the candidates: ``min_buffer.depth`` (a ring depth of at least 3 asks for
stages 3 and 4) and ``tail_axes`` (the axes to predicate).
"""
from __future__ import annotations

from typing import Callable, Mapping

from ...analyses.devices import Device, device
from ...ir.diagnostics import fail
from ..common.mma_plan import SchedulePlan
from ..common.mma_search import (contiguous_extents, ctas_per_sm, estimate, regs_estimate, sm80_candidates,
                                 sm90_candidates, sm90_tile_reason, widest_vec)
from ..common.plan_search import SearchResult, occupancy_reason, prune, rank, ranking_env, skeletons_for, smem_reason
from .prologue import chunk
from .spec import GemmSpec, packed_dims, static_strides

CostFn = Callable[[GemmSpec, SchedulePlan, Mapping[str, int], Device], "dict[str, float] | float"]


def _load_divides(rows: int, cols: int, vec: int, threads: int) -> bool:
    return (rows * cols // vec) % threads == 0


def stop_reason(spec: GemmSpec, plan: SchedulePlan, dev: Device, best_vec: tuple[int, int]) -> str | None:
    """Why the STOP conditions drop this candidate (None: it survives)."""
    bm, bn, bk = plan.tile
    if spec.pair and (spec.b_pieces[0][1] % (bn // 2) or (plan.skeleton == "sm90" and bn % 128)):
        return (f"BN {bn}: a pair tile holds BN/2 columns of each piece of B ({spec.b_pieces[0][1]} wide)"
                + (" in whole 64-column boxes" if plan.skeleton == "sm90" else ""))
    if not spec.pair and any(w % bn for _, w in spec.b_pieces):
        return f"BN {bn} does not divide every piece of B ({', '.join(str(w) for _, w in spec.b_pieces)}): a tile would straddle two"
    if smem := smem_reason(plan, dev):
        return smem
    if plan.skeleton == "sm90" and spec.in_dtype.itemsize == 4:
        return "sm90: wgmma here takes 16-bit operands; fp32 runs 3xTF32 on the sm80 skeleton's mma.sync"
    if plan.skeleton == "sm90":
        odd = [r for r in "ab" if spec.dims(r) != packed_dims(spec, r) and static_strides(spec, r) is None]
        if odd:
            stored = ", ".join(f"{r.upper()} stored [{', '.join(spec.dims(r))}]" for r in odd)
            return (f"sm90: the tensor map strides of {stored} depend on symbol sizes (a tensor map's description "
                    "is made with the kernel source)")
        if sm90 := sm90_tile_reason(plan, dev):
            return sm90
        for ext in contiguous_extents(spec):
            if isinstance(ext, int) and ext % 8:
                return f"sm90: TMA needs 16-byte strides, contiguous extent {ext} is not a multiple of 8"
        if regs_estimate(plan) > 232:
            return "sm90: accumulators exceed the consumer register budget"
        if spec.a_prologue is not None and spec.a_prologue.stats and bm > 64:
            return ("sm90: a prologue with a row statistic runs with one consumer warpgroup (BM 64), whose producer "
                    "keeps its registers (setmaxnreg's 40 spill it)")
        return None
    if regs_estimate(plan) > 255:
        return f"registers ~{regs_estimate(plan)} > 255 (spills)"
    if spec.a_prologue is not None and (bm * bk // chunk(spec.in_dtype)) % plan.threads:
        return "the prologue's 16-byte chunks of the A tile do not divide evenly among the threads"
    if spec.a_prologue is not None and plan.elem_bytes == 4:
        chunks = bm * bk // chunk(spec.in_dtype) // plan.threads
        staged = chunks * sum(s.role in ("mk", "k") for s in spec.a_prologue.sources) * 4  # 4 registers a chunk
        if staged > 32:  # ptxas: 24 bytes spilled at 64x64x64 (8 chunks of 2 sources a thread, 64 registers)
            return f"fp32 prologue: {staged} registers a thread hold its staged chunks (> 32: spills)"
    a_rows, a_cols = (bm, bk) if plan.a_kmajor else (bk, bm)
    b_rows, b_cols = (bn, bk) if plan.b_kmajor else (bk, bn)
    if not (_load_divides(a_rows, a_cols, plan.vec_a, plan.threads) and _load_divides(b_rows, b_cols, plan.vec_b, plan.threads)):
        return "tile copies do not divide evenly among the threads"
    if (plan.vec_a, plan.vec_b) < best_vec:
        return f"vector width {plan.vec_a}/{plan.vec_b} shrinks below {best_vec[0]}/{best_vec[1]}"
    return occupancy_reason(ctas_per_sm(plan, dev))


def search(spec: GemmSpec, arch: str = "sm90", env: Mapping[str, int] | None = None, hints: Mapping | None = None,
           cost: CostFn | None = None, skeletons: tuple[str, ...] | None = None) -> SearchResult:
    """Rank the plans for spec on arch; env binds symbols (unbound ones rank at HINT_SIZE)."""
    dev = device(arch)
    sizes = spec.sizes(ranking_env(spec.symbols, env))
    skeletons = skeletons_for(arch, skeletons)
    cands: list[SchedulePlan] = []
    if "sm90" in skeletons and arch == "sm90":
        cands += sm90_candidates(spec, sizes, hints)
    if "sm80" in skeletons:
        cands += sm80_candidates(spec, arch, sizes, hints)
    best_vec = tuple(widest_vec(e, spec.in_dtype.itemsize) for e in contiguous_extents(spec))
    kept, pruned = prune(cands, lambda p: stop_reason(spec, p, dev, best_vec))
    if not kept:
        fail("InternalError", f"gemm {spec.name!r}", "no schedule candidate survives the STOP conditions",
             "Report the GEMM spec; smaller tiles should always fit.")
    cost = cost or estimate
    return SearchResult(rank(kept, lambda p: cost(spec, p, sizes, dev)), tuple(pruned))


def choose_plan(spec: GemmSpec, arch: str = "sm90", env: Mapping[str, int] | None = None, hints: Mapping | None = None,
                cost: CostFn | None = None, skeletons: tuple[str, ...] | None = None) -> SchedulePlan:
    return search(spec, arch, env, hints, cost, skeletons).best


def fits_runtime(plan: SchedulePlan, spec: GemmSpec, env: Mapping[str, int] | None) -> bool:
    """Whether the concrete shape honours the plan's vector widths (its `assumes`)."""
    env = env or {}
    ea, eb = contiguous_extents(spec)
    ea = ea if isinstance(ea, int) else env.get(ea, 0)
    eb = eb if isinstance(eb, int) else env.get(eb, 0)
    if plan.skeleton == "sm90":
        return ea % 8 == 0 and eb % 8 == 0
    return ea % plan.vec_a == 0 and eb % plan.vec_b == 0

