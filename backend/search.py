"""Plan search: 10-20 candidates from Poly Core hints, STOP-condition pruning, cost ranking (seed 000
§10 step 6, §11; seed 001 §5.2).

Candidates are the MVP space ``tile x stages x warp_tile`` of the skeletons the target runs. STOP
conditions prune a candidate when: smem per CTA exceeds ~80 % of the block limit; registers (or smem)
drop the sm80 skeleton to one CTA per SM; its vector width is below the widest the operands allow;
for sm90, the tile is not one wgmma/TMA can take or the operands break TMA's 16-byte stride rule.
The survivors are ranked by ``cost`` (default :func:`roofline`); a Poly Core model plugs in there.
"""
from __future__ import annotations

from typing import Callable, Mapping

from ..ir.diagnostics import fail
from .cost import ctas_per_sm, regs_estimate, roofline
from .gemm_spec import GemmSpec
from .hardware import Target, target
from .plan import SchedulePlan
from .plan_search import SMEM_FRACTION  # noqa: F401  (part of this module's interface)
from .plan_search import SearchResult, occupancy_reason, prune, rank, ranking_env, skeletons_for, smem_reason

CostFn = Callable[[GemmSpec, SchedulePlan, Mapping[str, int], Target], "dict[str, float] | float"]


def contiguous_extents(spec: GemmSpec) -> tuple["int | str", "int | str"]:
    """The contiguous (leading) extent of A and of B."""
    a = spec.k if spec.a_layout == "row" else spec.m
    b = spec.n if spec.b_layout == "row" else spec.k
    return a, b


def widest_vec(extent: "int | str") -> int:
    """Elements per aligned load: the largest of 8, 4, 2, 1 dividing the extent (symbols: 8, guarded)."""
    if isinstance(extent, str):
        return 8
    return next(v for v in (8, 4, 2, 1) if extent % v == 0)


def _assumes(spec: GemmSpec, need: int) -> tuple[str, ...]:
    out = []
    for ext in contiguous_extents(spec):
        if isinstance(ext, str):
            out.append(f"{ext} % {need} == 0")
    return tuple(dict.fromkeys(out))


def _tail_axes(spec: GemmSpec, sizes_known: Mapping[str, "int | None"], tile: tuple[int, int, int], hints) -> tuple[str, ...]:
    if hints and "tail_axes" in hints:
        return tuple(hints["tail_axes"])
    out = []
    for axis, t in zip(("m", "n", "k"), tile, strict=True):
        size = sizes_known[axis]
        if size is None or size % t:
            out.append(axis)
    return tuple(out)


def _load_divides(rows: int, cols: int, vec: int, threads: int) -> bool:
    return (rows * cols // vec) % threads == 0


def sm80_candidates(spec: GemmSpec, arch: str, sizes: Mapping[str, int], hints) -> list[SchedulePlan]:
    va, vb = (widest_vec(e) for e in contiguous_extents(spec))
    a_k, b_k = spec.a_layout == "row", spec.b_layout == "col"
    tiles = [(128, 128, (2, 2)), (128, 128, (2, 4)), (128, 64, (2, 2)), (64, 128, (2, 2)), (64, 64, (2, 2))]
    if sizes["m"] <= 64:
        tiles = [t for t in tiles if t[0] == 64]
    if sizes["n"] <= 64:
        tiles = [t for t in tiles if t[1] == 64] or tiles
    depth = (hints or {}).get("min_buffer", {}).get("depth")
    stages = (2, 3) if depth in (None, 2) else (3, 4)
    out = []
    known = {ax: (d if isinstance(d, int) else None) for ax, d in (("m", spec.m), ("n", spec.n), ("k", spec.k))}
    for bm, bn, warps in tiles:
        for bk in (32, 64):
            for s in stages:
                out.append(SchedulePlan(arch=arch, skeleton="sm80", tile=(bm, bn, bk), stages=s, warps=warps,
                                        vec_a=va, vec_b=vb, epilogue=tuple(op.kind for op in spec.epilogue),
                                        predicate_tail=_tail_axes(spec, known, (bm, bn, bk), hints),
                                        a_kmajor=a_k, b_kmajor=b_k, assumes=_assumes(spec, max(va, vb))))
    return out


def sm90_candidates(spec: GemmSpec, sizes: Mapping[str, int], hints) -> list[SchedulePlan]:
    a_k, b_k = spec.a_layout == "row", spec.b_layout == "col"
    known = {ax: (d if isinstance(d, int) else None) for ax, d in (("m", spec.m), ("n", spec.n), ("k", spec.k))}
    out = []
    for nc in ((1, 2) if sizes["m"] > 64 else (1,)):
        for bn in (64, 128, 256):
            for s in (3, 4, 5):
                tile = (64 * nc, bn, 64)
                out.append(SchedulePlan(arch="sm90", skeleton="sm90", tile=tile, stages=s, warps=(nc, 1),
                                        vec_a=8, vec_b=8, epilogue=tuple(op.kind for op in spec.epilogue),
                                        predicate_tail=_tail_axes(spec, known, tile, hints),
                                        a_kmajor=a_k, b_kmajor=b_k, persistent=True, assumes=_assumes(spec, 8)))
    return out


def stop_reason(spec: GemmSpec, plan: SchedulePlan, tgt: Target, best_vec: tuple[int, int]) -> str | None:
    """Why the STOP conditions drop this candidate (None: it survives)."""
    bm, bn, bk = plan.tile
    if smem := smem_reason(plan, tgt):
        return smem
    if plan.skeleton == "sm90":
        if sm90 := sm90_tile_reason(plan, tgt):
            return sm90
        for ext in contiguous_extents(spec):
            if isinstance(ext, int) and ext % 8:
                return f"sm90: TMA needs 16-byte strides, contiguous extent {ext} is not a multiple of 8"
        if regs_estimate(plan) > 232:
            return "sm90: accumulators exceed the consumer register budget"
        return None
    if regs_estimate(plan) > 255:
        return f"registers ~{regs_estimate(plan)} > 255 (spills)"
    a_rows, a_cols = (bm, bk) if plan.a_kmajor else (bk, bm)
    b_rows, b_cols = (bn, bk) if plan.b_kmajor else (bk, bn)
    if not (_load_divides(a_rows, a_cols, plan.vec_a, plan.threads) and _load_divides(b_rows, b_cols, plan.vec_b, plan.threads)):
        return "tile copies do not divide evenly among the threads"
    if (plan.vec_a, plan.vec_b) < best_vec:
        return f"vector width {plan.vec_a}/{plan.vec_b} shrinks below {best_vec[0]}/{best_vec[1]}"
    return occupancy_reason(ctas_per_sm(plan, tgt))


def sm90_tile_reason(plan: SchedulePlan, tgt: Target) -> str | None:
    """The sm90 GEMM skeleton's STOP conditions on the target and the tile (wgmma x TMA boxes)."""
    bm, bn, bk = plan.tile
    if tgt.arch != "sm90":
        return "sm90 skeleton needs an sm90 GPU"
    if bm not in (64, 128) or bn not in (64, 128, 256) or bk != 64:
        return "sm90: tile outside wgmma m64nNk16 x TMA 128B-swizzle boxes"
    return None


def search(spec: GemmSpec, arch: str = "sm90", env: Mapping[str, int] | None = None, hints: Mapping | None = None,
           cost: CostFn | None = None, skeletons: tuple[str, ...] | None = None) -> SearchResult:
    """Rank the plans for spec on arch; env binds symbols (unbound ones rank at HINT_SIZE)."""
    tgt = target(arch)
    sizes = spec.sizes(ranking_env(spec.symbols, env))
    skeletons = skeletons_for(arch, skeletons)
    cands: list[SchedulePlan] = []
    if "sm90" in skeletons and arch == "sm90":
        cands += sm90_candidates(spec, sizes, hints)
    if "sm80" in skeletons:
        cands += sm80_candidates(spec, arch, sizes, hints)
    best_vec = tuple(widest_vec(e) for e in contiguous_extents(spec))
    kept, pruned = prune(cands, lambda p: stop_reason(spec, p, tgt, best_vec))
    if not kept:
        fail("InternalError", f"gemm {spec.name!r}", "no schedule candidate survives the STOP conditions",
             "Report the GEMM spec; smaller tiles should always fit.")
    cost = cost or roofline
    return SearchResult(rank(kept, lambda p: cost(spec, p, sizes, tgt)), tuple(pruned))


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

