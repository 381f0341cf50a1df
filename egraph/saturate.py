"""The saturation driver: rulesets run by an explicit schedule under node, row, memory, iteration and time limits
(egglog has none built in; docs/DESIGN.md §E-graph), with a typed stop reason and a
per-rule report (egg's StopReason/Report).

One iteration runs every ruleset of the current phase once, then the analyses to a fixpoint, in steps whose rows
and memory are checked (a fixpoint runs in chunks, time checked between them; :class:`Limits`). An iteration
that crosses a limit is rolled back (near the limits, by egglog ``pop`` to the snapshot its phase took with
``push`` and the phase's iterations before it run again; else by replaying the iterations before it on a fresh
e-graph), so the e-graph handed to extraction always respects the limits. The loaded
program's own analysis crossing a limit is E1505 ResourceLimit. A shape or dtype conflict after an iteration means a rule
equated values of different types: that is E1404 UnsoundRule naming the rules that fired.
"""
from __future__ import annotations

import enum
import re
import time
from contextlib import nullcontext
from dataclasses import dataclass, field

from .. import knobs
from ..ir import progress
from ..ir.diagnostics import fail
from ..ir.tiny import Program
from .rulefiles import discover, parse_file, shipped_rulesets
from .state import EGraphState, new_state
from .watchdog import bounded, rss_mb as _rss_mb


@dataclass(frozen=True)
class Limits:
    """Bounds on one saturation (egglog has none built in): nodes, rows and memory are checked after every step
    (one iteration of a phase's rulesets, or a chunk of a fixpoint), time between steps; an iteration that
    crosses one is rolled back."""
    nodes: int  # stop (and roll back the last iteration) past this many e-nodes
    iterations: int  # iterations over all phases together
    seconds: float  # CPU-second budget of the whole saturation (the process's CPU time: independent of load)
    rows: int = 1_000_000  # rows of every table together (e-nodes, relation and function rows, analysis facts)
    memory_mb: int = 4096  # growth of the process's resident memory during the saturation, in MiB


def default_limits(**override) -> Limits:
    """The knobs' limits (POLYSAT_EGRAPH_NODES, _ITERS, _SECONDS, _ROWS, _MEMORY_MB), with ``override``'s
    non-None values."""
    base = dict(nodes=knobs.egraph_nodes(), iterations=knobs.egraph_iters(), seconds=knobs.egraph_seconds(),
                rows=knobs.egraph_rows(), memory_mb=knobs.egraph_memory_mb())
    base.update({k: v for k, v in override.items() if v is not None})
    return Limits(**base)


class StopReason(str, enum.Enum):
    saturated = "saturated"
    node_limit = "node_limit"
    iter_limit = "iter_limit"
    time_limit = "time_limit"
    row_limit = "row_limit"  # the tables' rows, or one rule's matches in one iteration
    memory_limit = "memory_limit"


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
                "limits": {"nodes": self.limits.nodes, "iterations": self.limits.iterations, "seconds": self.limits.seconds,
                           "rows": self.limits.rows, "memory_mb": self.limits.memory_mb},
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
    the fused reads it adds) and every user ruleset (one no shipped file declares: a user's rule on a
    fused operand, ``View(...)``, matches there); then, on that final e-graph, ``fusion-facts`` runs to a fixpoint (where
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
    shipped = set(shipped_rulesets())  # (read once: each call reads and parses the shipped files)
    user = tuple(r for r in rest if r not in shipped)  # a user's ruleset also sees the fused reads
    phases = [Phase("normalize", first), Phase("rewrite", rest),
              Phase("fusion-search", ("fusion-search",) + tuple(r for r in SETTLE if r in rulesets) + user),
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


_clock = time.process_time  # the budget is CPU seconds of this process (egglog's threads included), as the search's

CHUNK = (4, 128)  # iterations of a fixpoint per egglog call: the first, doubling to the last while the rows grow slowly
GROWTH = 8  # the most one iteration is taken to multiply the rows or e-nodes by (~5x seen): below limit / GROWTH, no check needed


class _Stop(Exception):
    """A limit crossed inside an iteration: the iteration is undone."""

    def __init__(self, reason: StopReason):
        super().__init__(reason.value)
        self.reason = reason


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
    t0 = _clock()
    drive = _Driver(st, lim, rep, t0)
    try:
        drive.fixpoint(("analysis",), max(lim.seconds, 1.0))  # the loaded program's facts: at least a second
    except _Stop as e:
        fail("ResourceLimit", "e-graph analysis", f"the analysis of the loaded program stopped at the e-graph's "
             f"{e.reason.value.replace('_', ' ')} before its fixpoint ({drive.rows} rows, {lim.rows} allowed; "
             f"{_clock() - t0:.1f}s of {lim.seconds:g}s)",
             "Raise POLYSAT_EGRAPH_ROWS / _SECONDS / _MEMORY_MB, or compile a smaller model; a rule file whose "
             "analysis rules grow without end must be fixed.")
    nodes = st.enodes()
    for ph in schedule:
        if not ph.rulesets:
            continue
        snap = None  # the phase's iterations done when its snapshot (push) was taken; None: none taken
        while True:
            if len(rep.iterations) >= lim.iterations:
                rep.stop = StopReason.iter_limit
                break
            last = rep.iterations[-1] if rep.iterations and rep.iterations[-1].phase == ph.name else None
            if _clock() - t0 + (last.seconds if last else 0.0) > lim.seconds:  # (at the last one's pace)
                rep.stop = StopReason.time_limit
                break
            done = len(rep.iterations)
            # an iteration can grow the graph ~5x (a fixpoint phase's facts add rows, not e-nodes: rules/fusion.egg)
            if snap is None and ((nodes * GROWTH > lim.nodes and not ph.fixpoint) or drive.rows * GROWTH > lim.rows):
                st.push()  # (a copy of the whole e-graph: once a phase, its iterations since then redone on a rollback)
                snap = done
            ti = _clock()
            drive.matches = {}
            stop = None
            try:
                grew = drive.iteration(ph)
            except _Stop as e:
                stop, grew = e.reason, True
            after = st.enodes(drive.sizes)  # (the tables as the iteration's last egglog call left them)
            rep.iterations.append(Iteration(done, ph.name, after, _clock() - ti, dict(drive.matches)))
            progress.note(f"iteration {done} ({ph.name}): {after} e-nodes, {_clock() - ti:.1f} s")
            if stop is None:
                _check_conflicts(st, drive.matches, drive.sizes)
                if after > lim.nodes:
                    stop = StopReason.node_limit
            if stop is not None:
                if snap is not None:  # back to the phase's snapshot, and its iterations before this one again
                    st.pop()
                    _redo(st, lim, [ph] * (done - snap))
                else:  # no snapshot: rebuild the e-graph and replay the iterations before this one
                    _replay(st, schedule, lim, done)
                rep.rolled_back = True
                rep.stop = stop
                nodes = st.enodes()
                break
            grew = grew or after != nodes
            nodes = after
            if not grew or ph.fixpoint:  # a fixpoint phase is done in one iteration
                break
        if rep.stop != StopReason.saturated:
            break
    rep.nodes = nodes
    rep.seconds = _clock() - t0
    return rep


class _Driver:
    """Runs iterations in steps small enough to check: one egglog call per iteration of a phase's rulesets, a
    fixpoint (the analysis, a fixpoint phase) in chunks of CHUNK iterations; rows and memory are checked after
    each step, time between the chunks of a fixpoint, whose length the budget left bounds at the last chunk's
    pace (an iteration predicted to cross the budget is not started). Inside one egglog call, which cannot be
    interrupted, egraph/watchdog.py ends the process (E1505) past the memory limit or twice the budget."""

    def __init__(self, st: EGraphState, lim: Limits, rep: RunReport, t0: float, check: bool = True):
        self.st, self.lim, self.rep, self.t0, self.check = st, lim, rep, t0, check
        self.rows = 0
        self.sizes: "dict | None" = None  # every table's rows after the last egglog call
        self.matches: dict = {}
        self.rss0 = _rss_mb()
        # inside one egglog call (egraph/watchdog.py): the memory limit, and twice the budget (at least 1 s) and 2 s more
        self.cpu_until = t0 + 2 * max(lim.seconds, 1.0) + 2.0

    def iteration(self, ph: Phase) -> bool:
        if not ph.fixpoint and self.rows * GROWTH <= self.lim.rows:
            # a small e-graph (``step``): the phase's rulesets and the analysis's first chunk in one egglog call, the
            # same runs in the same order (a run that changes nothing leaves the e-graph as it is)
            changed = self._call(f"(seq {_runs(ph.rulesets)} (repeat {CHUNK[0]} (run analysis)))")
            return (self.fixpoint(("analysis",)) if changed[-1] else False) or any(changed)
        grew = self.fixpoint(ph.rulesets) if ph.fixpoint else self.step(ph.rulesets, 1)[0]
        return self.fixpoint(("analysis",)) or grew

    def fixpoint(self, rulesets: tuple, seconds: "float | None" = None) -> bool:
        budget = self.lim.seconds if seconds is None else seconds
        grew, k, per = False, CHUNK[0], 0.0
        while True:
            if self.check and per:  # a chunk no longer than the budget left allows, at the last chunk's pace
                left = budget - (_clock() - self.t0)
                if left < per:  # even one more iteration would cross the budget
                    raise _Stop(StopReason.time_limit)
                k = max(1, min(k, int(left / per)))
            before, t = self.rows, _clock()
            changed, last = self.step(rulesets, k)
            per = (_clock() - t) / k
            k = min(2 * k, CHUNK[1]) if self.rows < 1.5 * before + 1000 else 1  # fast growth: check every iteration
            grew |= changed
            if not last:
                return grew
            if self.check and _clock() - self.t0 > budget:
                raise _Stop(StopReason.time_limit)

    def step(self, rulesets: tuple, k: int) -> tuple:
        """Run rulesets k times -> (anything changed, the last iteration changed). One iteration of several
        rulesets is one egglog call per ruleset, the limits checked after each (time included): a limit is
        overshot by at most one iteration of one ruleset; on a small e-graph (GROWTH: an iteration of every ruleset
        stays far inside the rows limit) one call runs them all: each call's fixed cost (egglog's run, the sizes
        read back, the report) dominates there, and a segment of a program saturated alone is such a graph."""
        if k > 1 or len(rulesets) == 1 or self.rows * GROWTH <= self.lim.rows:
            body = _runs(rulesets)
            changed = self._call(f"(repeat {k} (seq {body}))" if k > 1 else f"(seq {body})")
            return any(changed), any(changed[-len(rulesets):])
        changed = False
        for r in rulesets:
            if self.check and _clock() - self.t0 > self.lim.seconds:
                raise _Stop(StopReason.time_limit)
            changed = any(self._call(f"(run {r})")) or changed
        return changed, changed

    def _call(self, sched: str) -> list:
        """One egglog call of sched, its matches and times added to the report, then rows and memory checked
        -> whether each of its iterations changed the e-graph."""
        lim = self.lim
        with bounded(sched, self.cpu_until, self.rss0, lim.memory_mb) if self.check else nullcontext():
            report = _run_schedule(self.st, sched)
        for name, v in report.num_matches_per_rule.items():
            if v and name in self.rep.rules:
                self.matches[name] = self.matches.get(name, 0) + v
                self.rep.rules[name].matches += v
        for name, secs in _rule_seconds(report).items():
            if name in self.rep.rules:
                self.rep.rules[name].seconds += secs
        self.sizes = self.st.sizes()
        self.rows = sum(self.sizes.values())
        if self.check:
            if self.rows > lim.rows:
                raise _Stop(StopReason.row_limit)
            if _rss_mb() - self.rss0 > lim.memory_mb:
                raise _Stop(StopReason.memory_limit)
        return [it.rule_set_report.changed for it in report.iterations]


def _runs(rulesets: tuple) -> str:
    """One run of each ruleset, in order, as egglog schedule text."""
    return " ".join(f"(run {r})" for r in rulesets)


def _replay(st: EGraphState, schedule: tuple, lim: Limits, iterations: int) -> None:
    """st rebuilt from its program and rule files and run for its first ``iterations`` iterations again (egglog is
    deterministic): an iteration that crossed a limit with no snapshot taken is undone."""
    from .state import new_state
    fresh = new_state(st.program, list(st.files), set(st.cuts))
    st.eg, st.index, st.tensors, st.pushes = fresh.eg, fresh.index, fresh.tensors, 0
    drive = _redo(st, lim, [])
    drive.fixpoint(("analysis",))
    done = 0
    for ph in schedule:
        while ph.rulesets and done < iterations:
            grew = drive.iteration(ph)
            done += 1
            if not grew or ph.fixpoint:
                break


def _redo(st: EGraphState, lim: Limits, phases: list) -> "_Driver":
    """One iteration of each phase of ``phases`` run on st again, unchecked (egglog is deterministic: the
    iterations since a snapshot, popped back to) -> the driver."""
    drive = _Driver(st, lim, RunReport(StopReason.saturated, lim), _clock(), check=False)
    for ph in phases:
        drive.iteration(ph)
    return drive


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


def _run_schedule(st: EGraphState, sched: str):
    try:
        (out,) = st.run(f"(run-schedule {sched})")
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # noqa: BLE001 — a Rust panic inside a rule's action (PanicException)
        fail("RuleFileError", f"schedule {sched}", f"egglog failed while running rules: {str(e).splitlines()[-1] if str(e) else type(e).__name__}",
             "Run `polysat rules --check` to find the rule; fix or remove its file.")
    return out.report


def _check_conflicts(st: EGraphState, matches: dict, sizes: dict) -> None:
    """A shape or dtype conflict the iteration made (``sizes``: the tables' rows after it) is E-UnsoundRule."""
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
             f"{rep.limits.seconds:g}s, {rep.limits.rows} rows, {rep.limits.memory_mb} MiB)" + (" [last iteration rolled back]" if rep.rolled_back else "")]
    if rep.iterations:
        lines.append("  nodes per iteration: " + " ".join(str(it.nodes) for it in rep.iterations))
    busy = sorted((r for r in rep.rules.values() if r.matches), key=lambda r: (-r.matches, r.name))
    for r in busy[:top]:
        lines.append(f"  {r.name:<36} {r.ruleset:<12} {r.matches:>7} matches {r.seconds * 1000:8.2f} ms")
    quiet = len(rep.rules) - len(busy)
    if quiet:
        lines.append(f"  ({quiet} rule(s) never matched)")
    return "\n".join(lines)
