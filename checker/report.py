"""The verdict of ``polysat rules --check`` per rule, its text and JSON, and the exit status.

Exit status: 0 when every checked rule was exercised on at least the requested number of test
programs and every rewrite agreed; 1 when a rule is unsound (or a rule file does not load, or a
rewrite could not be evaluated); 2 when some rule was never exercised enough (the report says why).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..egraph.rulefiles import RuleInfo


@dataclass
class RuleVerdict:
    rule: RuleInfo
    fired: int = 0  # test programs on which the rule matched and its rewrites were compared
    from_pattern: int = 0  # of those, programs built from the rule's own left-hand side
    checked_pairs: int = 0  # new e-nodes and merged classes compared
    built: int = 0  # rule-directed instances built
    unsound: bool = False
    error: str = ""  # a rewrite the checker could not evaluate
    counterexample: str = ""
    why_not: str = ""  # why the rule was not exercised enough
    queries: list = field(default_factory=list)  # the rule's left-hand side(s), read for instantiation
    seconds: float = 0.0  # wall time spent checking it (reported only)
    index_rule: bool = False  # its law is an equality of index maps (checker/isl_proof.py)
    proved: int = 0  # symbolic instances on which isl proved every rewrite, for all sizes
    unproved: str = ""  # why an index-map rule is only tested (a rewrite isl could not place)
    refuted: str = ""  # the isl counterexample of an index-map rule, when isl found one

    @property
    def method(self) -> str:
        """"proved" (an index-map rule isl proved on symbolic instances, for all sizes, and tested) or "tested"."""
        return "proved" if self.index_rule and self.proved and not self.unproved and not self.unsound else "tested"

    def status(self, cases: int) -> str:
        if self.unsound:
            return "UNSOUND"
        if self.error:
            return "ERROR"
        return "ok" if self.fired >= cases else "UNEXERCISED"


@dataclass
class CheckReport:
    verdicts: list = field(default_factory=list)
    errors: list = field(default_factory=list)  # Diagnostics of files that failed to load
    programs: int = 0
    seconds: float = 0.0
    cases: int = 1

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    @property
    def exit_status(self) -> int:
        if self.errors or any(v.unsound or v.error for v in self.verdicts):
            return 1
        return 2 if any(v.fired < self.cases for v in self.verdicts) else 0

    def format(self) -> str:
        lines = [f"checked {len(self.verdicts)} rule(s) on {self.programs} test program(s) in {self.seconds:.1f}s "
                 f"(each must fire on {self.cases})"]
        for v in self.verdicts:
            proof = f", proved for all sizes on {v.proved} symbolic instance(s)" if v.method == "proved" else ""
            lines.append(f"  {v.status(self.cases):<11} {v.method:<6} {v.rule.name:<36} fired on {v.fired} ({v.from_pattern} "
                         f"from its pattern), {v.checked_pairs} rewrite(s) compared{proof}  ({v.rule.file}:{v.rule.line})")
        for v in self.verdicts:
            if v.unsound or v.error:
                what = "UNSOUND" if v.unsound else "UNCHECKABLE"
                lines.append(f"\n{what} rule {v.rule.name!r} in {v.rule.file}:{v.rule.line}\n  law: {v.rule.law}\n"
                             + (v.counterexample or f"  {v.error}"))
        for v in self.verdicts:
            if not (v.unsound or v.error) and v.fired < self.cases:
                lines.append(f"\nUNEXERCISED rule {v.rule.name!r} in {v.rule.file}:{v.rule.line}: fired on {v.fired} of "
                             f"{self.cases} required program(s): {v.why_not}")
        for d in self.errors:
            lines.append(str(d))
        lines.append(f"exit status {self.exit_status}")
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"ok": self.ok, "exit_status": self.exit_status, "programs": self.programs,
                "seconds": round(self.seconds, 2), "cases": self.cases,
                "rules": [{"name": v.rule.name, "file": v.rule.file, "line": v.rule.line, "ruleset": v.rule.ruleset,
                           "status": v.status(self.cases), "method": v.method, "proved_instances": v.proved,
                           "unproved": v.unproved or None, "refuted_by_isl": v.refuted or None, "fired": v.fired,
                           "from_pattern": v.from_pattern,
                           "compared": v.checked_pairs, "counterexample": v.counterexample or None,
                           "error": v.error or None, "why_not": v.why_not or None, "seconds": round(v.seconds, 3)}
                          for v in self.verdicts],
                "errors": [d.to_json() for d in self.errors]}
