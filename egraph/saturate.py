"""The saturation driver: rulesets run by an explicit schedule under node, iteration and time limits,
checked between iterations (egglog has none built in; docs/DESIGN.md §E-graph), with a typed stop reason and a
per-rule report (egg's StopReason/Report).

One iteration runs every ruleset of the current phase once, then the analyses to a fixpoint. When an
iteration ends past the node limit it is rolled back (egglog ``push``/``pop``), so the e-graph handed
to extraction always respects the limit. A shape or dtype conflict after an iteration means a rule
equated values of different types: that is E1404 UnsoundRule naming the rules that fired.
"""
from __future__ import annotations

import enum
import re
import time
from dataclasses import dataclass, field

from .. import knobs
from ..ir.diagnostics import fail
from ..ir.tiny import Program
from .rulefiles import discover, parse_file
from .state import EGraphState, new_state


@dataclass(frozen=True)
class Limits:
    """Bounds on one saturation, enforced between iterations (egglog has none built in)."""
    nodes: int  # stop (and roll back the last iteration) past this many e-nodes
    iterations: int  # iterations over all phases together
    seconds: float  # wall-clock budget of the whole saturation


def default_limits(**override) -> Limits:
    """The knobs' limits (POLYSAT_EGRAPH_NODES, _ITERS, _SECONDS), with ``override``'s non-None values."""
    base = dict(nodes=knobs.egraph_nodes(), iterations=knobs.egraph_iters(), seconds=knobs.egraph_seconds())
    base.update({k: v for k, v in override.items() if v is not None})
    return Limits(**base)


class StopReason(str, enum.Enum):
    saturated = "saturated"
    node_limit = "node_limit"
    iter_limit = "iter_limit"
    time_limit = "time_limit"


@dataclass(frozen=True)
class Phase:
    name: str
    rulesets: tuple
    fixpoint: bool = False  # one iteration runs the rulesets to their fixpoint (facts only: no e-nodes)


@dataclass
class RuleStats:
    name: str
    ruleset: str
    file: str
    law: str
    matches: int = 0
    seconds: float = 0.0


@dataclass(frozen=True)
class Iteration:
    index: int
    phase: str
    nodes: int  # e-nodes after the iteration (before a rollback)
    seconds: float
    matches: dict  # rule name -> matches in this iteration


@dataclass
class RunReport:
    stop: StopReason
    limits: Limits
    iterations: list = field(default_factory=list)  # Iteration
    rules: dict = field(default_factory=dict)  # name -> RuleStats
    nodes: int = 0  # e-nodes at the end (after any rollback)
    seconds: float = 0.0
    rolled_back: bool = False

    def to_json(self) -> dict:
        return {"stop": self.stop.value, "nodes": self.nodes, "seconds": round(self.seconds, 4),
                "rolled_back": self.rolled_back,
                "limits": {"nodes": self.limits.nodes, "iterations": self.limits.iterations, "seconds": self.limits.seconds},
                "iterations": [{"index": it.index, "phase": it.phase, "nodes": it.nodes, "seconds": round(it.seconds, 4),
                                "matches": it.matches} for it in self.iterations],
                "rules": {r.name: {"ruleset": r.ruleset, "file": r.file, "matches": r.matches,
                                   "seconds": round(r.seconds, 5)} for r in self.rules.values()}}


OPT_IN = ("fusion-facts", "fusion-conflicts", "fusion-search", "streaming")  # rulesets only a schedule that names them runs (search/model.py does)
FUSION = ("fusion-search", "fusion-facts", "fusion-conflicts")  # the fused alternatives, then the legality facts and conflicts


def default_schedule(rulesets: list, opt_in: tuple = ()) -> tuple:
    """Movement normalization first (views into reads), then every ruleset together (the OPT_IN
    ones only when named in opt_in). Naming ``fusion-search`` names the legality rulesets too, and
    orders them (rules/fusion.egg): after every rewrite (streaming included), ``fusion-search`` adds the
    fused alternatives, with the rulesets of SETTLE (the reduction normal form's ``-fused`` rules match
    the fused reads it adds); then, on that final e-graph, ``fusion-facts`` runs to a fixpoint (where
    each value is evaluated, through which boundaries, and which reductions so reached are legal) and
    ``fusion-conflicts`` names the sets of sites no partition may fuse together. The facts add no
    e-node, so every term the search extracts was seen by them."""
    fusing = "fusion-search" in opt_in
    opt_in = tuple(opt_in) + (FUSION if fusing else ())
    rulesets = [r for r in rulesets if r not in OPT_IN or r in opt_in]
    first = tuple(r for r in rulesets if r == "movement")
    if not fusing:
        phases = [Phase("normalize", first)] if first else []
        return tuple(phases + [Phase("rewrite", tuple(rulesets))]) if rulesets else tuple(phases)
    rest = tuple(r for r in rulesets if r not in FUSION)
    phases = [Phase("normalize", first), Phase("rewrite", rest),
              Phase("fusion-search", ("fusion-search",) + tuple(r for r in SETTLE if r in rulesets)),
              Phase("fusion-facts", ("fusion-facts",), True), Phase("fusion-conflicts", ("fusion-conflicts",), True)]
    return tuple(ph for ph in phases if ph.rulesets)


SETTLE = ("movement", "algebra", "contraction", "srnf")  # run again with fusion-search (default_schedule)


def rule_files(rules_dirs=None, builtin: bool = True) -> list:
    return [parse_file(p) for p in discover(rules_dirs, builtin)]


def saturate(program: Program, rules_dirs=None, limits: "Limits | None" = None, schedule=None,
             builtin: bool = True) -> tuple:
    """Load program, run the rules of rules/ (and rules_dirs) under limits -> (EGraphState, RunReport)."""
    files = rule_files(rules_dirs, builtin)
    st = new_state(program, files)
    return st, run(st, schedule or default_schedule(st.rulesets), limits)


def run(st: EGraphState, schedule: tuple, limits: "Limits | None" = None) -> RunReport:
    lim = limits or default_limits()
    known = set(st.rulesets)
    for ph in schedule:
        for r in ph.rulesets:
            if r not in known:  # an unknown ruleset name panics inside egglog
                fail("RuleFileError", f"schedule phase {ph.name}", f"no ruleset named {r!r}; rulesets: {sorted(known)}")
    rep = RunReport(StopReason.saturated, lim)
    for rf in st.files:
        for r in rf.rules:
            rep.rules[r.name] = RuleStats(r.name, r.ruleset, rf.path, r.law)
    t0 = time.perf_counter()
    _run_schedule(st, "(saturate (run analysis))")
    nodes = st.enodes()
    for ph in schedule:
        if not ph.rulesets:
            continue
        body = " ".join(f"(run {r})" for r in ph.rulesets)
        if ph.fixpoint:
            body = f"(saturate {body})"
        while True:
            if len(rep.iterations) >= lim.iterations:
                rep.stop = StopReason.iter_limit
                break
            if time.perf_counter() - t0 > lim.seconds:
                rep.stop = StopReason.time_limit
                break
            guard = nodes * 8 > lim.nodes  # one iteration can grow the graph ~5x
            if guard:
                st.run("(push)")
            ti = time.perf_counter()
            report = _run_schedule(st, f"(seq {body} (saturate (run analysis)))")
            after = st.enodes()
            matches = {k: v for k, v in report.num_matches_per_rule.items() if k in rep.rules and v}
            rep.iterations.append(Iteration(len(rep.iterations), ph.name, after, time.perf_counter() - ti, matches))
            for k, v in matches.items():
                rep.rules[k].matches += v
            for k, secs in _rule_seconds(report).items():
                if k in rep.rules:
                    rep.rules[k].seconds += secs
            _check_conflicts(st, matches)
            if after > lim.nodes:
                if guard:
                    st.run("(pop)")
                    rep.rolled_back = True
                    after = st.enodes()
                rep.stop = StopReason.node_limit
                nodes = after
                break
            grew = after != nodes or _updated(report)
            nodes = after
            if not grew or ph.fixpoint:  # a fixpoint phase is done in one iteration
                break
        if rep.stop != StopReason.saturated:
            break
    rep.nodes = nodes
    rep.seconds = time.perf_counter() - t0
    return rep


def _rule_seconds(report) -> dict:
    """Search-and-apply time per rule (egglog 13.2 leaves the run-level per-rule times at 0 and keeps
    them in each iteration's rule-set report)."""
    out: dict = {}
    for it in report.iterations:
        rsr = it.rule_set_report
        for name, rr in rsr.rule_reports.items():
            out[name] = out.get(name, 0.0) + sum(r.search_and_apply_time.total_seconds() for r in rr)
        if not any(out.values()):  # the Python timedelta conversion drops sub-millisecond times;
            for name, num, unit in _RULE_TIME.findall(str(rsr)):  # egglog's own text keeps them
                out[name] = out.get(name, 0.0) + float(num) * _UNITS[unit]
    return out


_RULE_TIME = re.compile(r'"([^"]+)": \[RuleReport \{ plan: [^,]*, search_and_apply_time: ([0-9.]+)(ns|µs|us|ms|s),')
_UNITS = {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def _updated(report) -> bool:
    return bool(report.updated) and any(report.num_matches_per_rule.values())


def _run_schedule(st: EGraphState, sched: str):
    try:
        (out,) = st.run(f"(run-schedule {sched})")
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # noqa: BLE001 — a Rust panic inside a rule's action (PanicException)
        fail("RuleFileError", f"schedule {sched}", f"egglog failed while running rules: {str(e).splitlines()[-1] if str(e) else type(e).__name__}",
             "Run `polysat rules --check` to find the rule; fix or remove its file.")
    return out.report


def _check_conflicts(st: EGraphState, matches: dict) -> None:
    sizes = st.sizes()
    for rel, what in (("shape-conflict", "shapes"), ("dtype-conflict", "dtypes")):
        if sizes.get(rel, 0):
            g = st.eg._egraph  # noqa: SLF001
            row = g.freeze().functions[rel].rows[0]
            a, b = g.value_to_string(row.inputs[1]), g.value_to_string(row.inputs[2])
            fired = ", ".join(sorted(matches)) or "(none)"
            fail("UnsoundRule", f"rules {fired}", f"an iteration equated values of different {what}: {a} and {b}",
                 "A rewrite must keep the shape and dtype of the value it rewrites.", rules=sorted(matches))


def format_report(rep: RunReport, top: int = 12) -> str:
    """A short text form of a run report: stop reason, size, and the busiest rules."""
    lines = [f"saturation: {rep.stop.value} after {len(rep.iterations)} iteration(s), {rep.nodes} e-nodes, "
             f"{rep.seconds:.3f}s (limits: {rep.limits.nodes} nodes, {rep.limits.iterations} iterations, "
             f"{rep.limits.seconds:g}s)" + (" [last iteration rolled back]" if rep.rolled_back else "")]
    if rep.iterations:
        lines.append("  nodes per iteration: " + " ".join(str(it.nodes) for it in rep.iterations))
    busy = sorted((r for r in rep.rules.values() if r.matches), key=lambda r: (-r.matches, r.name))
    for r in busy[:top]:
        lines.append(f"  {r.name:<36} {r.ruleset:<12} {r.matches:>7} matches {r.seconds * 1000:8.2f} ms")
    quiet = len(rep.rules) - len(busy)
    if quiet:
        lines.append(f"  ({quiet} rule(s) never matched)")
    return "\n".join(lines)
