"""What every kernel kind's plan search shares: the result (ranked and pruned
candidates), the STOP conditions that read only the plan's smem and the target, the pruning loop (with
occupancy as a preference: kept when nothing else survives) and the ranking by estimated time.

A plan here is any schedule plan with ``key()``, ``smem_bytes``, ``skeleton``, ``est`` and ``to_json(spec)``
(GEMM, conv, attention).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Mapping

from ...analyses.devices import Device
from ...ir.diagnostics import fail

SMEM_FRACTION = 0.8
HINT_SIZE = 4096          # size assumed for a symbol when ranking (the plan is re-specialised at run time)


@dataclass(frozen=True)
class Pruned:
    plan: Any
    reason: str


@dataclass(frozen=True)
class SearchResult:
    ranked: tuple   # plans, best first
    pruned: tuple[Pruned, ...]

    @property
    def best(self) -> Any:
        if not self.ranked:  # every candidate pruned (say, a sum of hundreds of contractions in one region)
            why = "; ".join(sorted({p.reason for p in self.pruned})[:3]) or "no candidate plan"
            fail("NoKernelTemplate", "plan search", f"every plan for this kernel was pruned: {why}")
        return self.ranked[0]

    def to_json(self, spec: Any = None) -> dict:
        return {"chosen": self.best.to_json(spec),
                "ranked": [{"key": p.key(), **dict(p.est)} for p in self.ranked],
                "pruned": [{"key": p.plan.key(), "why": p.reason} for p in self.pruned]}


def skeletons_for(arch: str, skeletons: "tuple[str, ...] | None") -> tuple[str, ...]:
    """The skeletons to try: the ones asked for, else every skeleton the target runs (sm90 first)."""
    return skeletons or (("sm90", "sm80") if arch == "sm90" else ("sm80",))


def ranking_env(symbols: Iterable[str], env: Mapping[str, int] | None) -> dict[str, int]:
    """env with every unbound symbol at HINT_SIZE (plans rank on it; they are re-specialised per shape)."""
    env = dict(env or {})
    for sym in symbols:
        env.setdefault(sym, HINT_SIZE)
    return env


def smem_reason(plan: Any, dev: Device) -> str | None:
    """The STOP condition on shared memory: more than SMEM_FRACTION of the block limit."""
    if plan.smem_bytes > SMEM_FRACTION * dev.smem_per_cta:
        return f"smem {plan.smem_bytes} B > {int(SMEM_FRACTION * 100)}% of {dev.smem_per_cta} B"
    return None


def occupancy_reason(ctas: int) -> str | None:
    """The (soft) STOP condition of the sm80 skeletons: one CTA per SM."""
    return f"occupancy collapses to {ctas} CTA/SM" if ctas < 2 else None


def prune(cands: Iterable[Any], why: Callable[[Any], "str | None"]) -> tuple[list, list[Pruned]]:
    """(kept, pruned) by the STOP conditions why(plan); when none survives, the plans pruned for occupancy
    alone are kept (a preference, not a wall). The caller fails when nothing is kept."""
    kept, pruned = [], []
    for p in cands:
        reason = why(p)
        if reason is None:
            kept.append(p)
        else:
            pruned.append(Pruned(p, reason))
    if not kept:
        kept = [x.plan for x in pruned if x.reason.startswith("occupancy")]
        pruned = [x for x in pruned if not x.reason.startswith("occupancy")]
    return kept, pruned


def _with_est(plan: Any, est: dict) -> Any:
    return replace(plan, est=tuple(sorted(est.items())))


def rank(plans: Iterable[Any], estimate: Callable[[Any], "dict[str, float] | float"],
         with_est: Callable[[Any, dict], Any] = _with_est) -> tuple:
    """The plans with their estimates (estimate(plan): {"time_s": ...} or seconds), fastest first; ties by the
    estimate's ``margin`` (larger first: how far the plan is from its next limit, where a kind reports one),
    then by key."""
    scored = []
    for p in plans:
        c = estimate(p)
        scored.append(with_est(p, c if isinstance(c, dict) else {"time_s": float(c)}))
    scored.sort(key=lambda p: (dict(p.est)["time_s"], -dict(p.est).get("margin", 0.0), p.key()))
    return tuple(scored)
