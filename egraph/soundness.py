"""Rule soundness, tested not assumed (docs/DESIGN.md §E-graph): ``polysat rules --check``.

For every rule: random programs (``randprog``) are loaded into one e-graph per program in which each
rule sits alone in its own ruleset; the rule runs alone (a few bounded iterations, then the
analyses), and every e-class it left with two or more e-nodes is checked: each e-node, completed with
the smallest terms for its children, is converted back to Tiny IR and evaluated on random inputs by
the reference evaluator, against the value of the original node of that class (or, for a class the
rule created, against the class's first e-node). A difference beyond rtol = atol = 1e-3, or a
shape/dtype conflict, makes the rule unsound; the report names it, its file, and the smallest
counterexample (the program cut down to the failing value's cone).
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

import numpy as np

from ..ir.diagnostics import PolysatError
from ..ir.evaluate import evaluate
from ..ir.printer import format_program
from ..ir.tiny import Arg, Ops, Program, UOp
from .. import knobs
from .boundaries import default_cuts
from .cost import SizeCost
from .extract import solve
from .graph import export
from .numeric import bind_env, close, max_error, random_inputs
from .printer import format_terms
from .randprog import motif_programs, random_program
from .rulefiles import RuleFile, RuleInfo, discover, parse_file
from .state import EGraphState, add_rule_files, base_egraph, load_program, validate
from .totiny import TermBuilder


@dataclass
class RuleVerdict:
    rule: RuleInfo
    fired: int = 0  # programs on which the rule matched
    checked_pairs: int = 0  # e-nodes compared against their class's reference value
    unsound: bool = False
    counterexample: str = ""

    @property
    def status(self) -> str:
        return "UNSOUND" if self.unsound else ("ok" if self.fired else "never-fired")


@dataclass
class CheckReport:
    verdicts: list = field(default_factory=list)
    errors: list = field(default_factory=list)  # Diagnostics of files that failed to load
    programs: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.errors and not any(v.unsound for v in self.verdicts)

    def format(self) -> str:
        lines = [f"checked {len(self.verdicts)} rule(s) on {self.programs} random program(s) in {self.seconds:.1f}s"]
        for v in self.verdicts:
            lines.append(f"  {v.status:<11} {v.rule.name:<36} {v.rule.ruleset:<12} fired on {v.fired}, "
                         f"{v.checked_pairs} term(s) compared  ({v.rule.file}:{v.rule.line})")
        for v in self.verdicts:
            if v.unsound:
                lines.append(f"\nUNSOUND rule {v.rule.name!r} in {v.rule.file}:{v.rule.line}\n  law: {v.rule.law}\n"
                             + v.counterexample)
        for d in self.errors:
            lines.append(str(d))
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"ok": self.ok, "programs": self.programs, "seconds": round(self.seconds, 2),
                "rules": [{"name": v.rule.name, "file": v.rule.file, "line": v.rule.line, "ruleset": v.rule.ruleset,
                           "status": v.status, "fired": v.fired, "compared": v.checked_pairs,
                           "counterexample": v.counterexample or None} for v in self.verdicts],
                "errors": [d.to_json() for d in self.errors]}


def _isolated(files: list) -> tuple:
    """Egglog text declaring each rule alone in ruleset chk<k>: (text, {chk<k>: RuleInfo})."""
    decls, rules, by_set = [], [], {}
    k = 0
    for rf in files:
        text = rf.text
        for r in rf.rules:
            text = text.replace(r.text, "")
            name = f"chk{k}"
            k += 1
            by_set[name] = r
            rules.append(f"(ruleset {name})\n" + re.sub(r":ruleset\s+[^\s()]+", f":ruleset {name}", r.text))
        decls.append(text)
    return "\n".join(decls) + "\n" + "\n".join(rules), by_set


def check_rules(dirs=None, cases: "int | None" = None, builtin: bool = True, seed: "int | None" = None,
                max_programs: int = 60) -> CheckReport:
    """Check every rule of rules/ (unless builtin=False) and of dirs; never raises for a bad rule file."""
    t0 = time.perf_counter()
    rep = CheckReport()
    cases = knobs.check_cases() if cases is None else cases
    rng = np.random.default_rng(knobs.check_seed() if seed is None else seed)
    files = []
    for path in discover(dirs, builtin):
        try:
            rf = parse_file(path)
            validate(files + [rf])
            files.append(rf)
        except PolysatError as e:
            rep.errors.extend(e.diagnostics)
    text, by_set = _isolated(files)
    verdicts = {name: RuleVerdict(r) for name, r in by_set.items()}
    rep.verdicts = list(verdicts.values())
    n = 0
    while n < max_programs and any(v.fired < cases and not v.unsound for v in verdicts.values()):
        progs = motif_programs(rng) if n % 2 == 0 else [random_program(rng, int(rng.integers(4, 12)))]
        for prog in progs:
            n += 1
            _check_program(prog, text, verdicts, rng, cases)
    rep.programs = n
    rep.seconds = time.perf_counter() - t0
    return rep


def _check_program(prog: Program, text: str, verdicts: dict, rng: np.random.Generator, cases: int) -> None:
    """Apply the rules one at a time, each alone, in random order (so one rule's output feeds another's
    pattern), verifying the whole e-graph after every rule that matched: the e-graph was consistent
    before that rule ran, so a disagreement is that rule's. An unsound rule is dropped and the
    program restarted without it."""
    env = bind_env(prog, rng, 1, 3)
    inputs = random_inputs(prog, rng, env)
    ref = evaluate(prog, inputs, keep_all=True)
    for _attempt in range(4):
        active = [k for k, v in verdicts.items() if not v.unsound]
        st = _fresh(prog, text, default_cuts(prog) if rng.random() < 0.5 else set())
        fired: set = set()
        restart = False
        for _round in range(3):
            matched_any = False
            for name in rng.permutation(active):
                v = verdicts[str(name)]
                (out,) = st.run(f"(run-schedule (seq (run {name}) (saturate (run analysis))))")
                if not out.report.num_matches_per_rule.get(v.rule.name, 0):
                    continue
                matched_any = True
                if v.fired >= cases and name not in fired:
                    continue  # verified on enough programs: it only feeds other rules' patterns now
                bad = _verify(st, prog, inputs, ref, v)
                if name not in fired:
                    fired.add(name)
                    v.fired += 1
                if bad:
                    v.unsound, v.counterexample = True, bad
                    restart = True
                    break
                if st.enodes() > 3000:
                    break
            if restart or not matched_any or st.enodes() > 3000:
                break
        if not restart:
            return


def _fresh(prog: Program, text: str, cuts: set) -> EGraphState:
    eg = base_egraph()
    add_rule_files(eg, [RuleFile("<isolated rules>", text, (), ())])
    st = EGraphState(eg, prog, ())
    load_program(st, cuts)
    st.run("(run-schedule (saturate (run analysis)))")
    return st


def _verify(st: EGraphState, prog: Program, inputs: dict, ref: dict, v: RuleVerdict) -> str:
    """"" when every e-node of every multi-node class evaluates to its class's value, else a report.
    The smallest term of every class is evaluated once (one Tiny program); each other e-node is then
    evaluated alone, on its children's values."""
    sizes = st.sizes()
    if sizes.get("shape-conflict") or sizes.get("dtype-conflict"):
        return "  it equated values of different shapes or dtypes on:\n" + _indent(format_program(prog))
    view = export(st)
    best, _ = solve(view, SizeCost())
    original: dict = {}
    for nid, i in st.index.items():
        original.setdefault(view.by_index[i], nid)
    multi = [c for c, ns in view.classes.items() if len(ns) > 1 and not ns[0].is_memory and c in best]
    if not multi:
        return ""
    b = TermBuilder(st, view, {k: ch.node for k, ch in best.items()})
    try:
        for c in multi:
            b.value(c)
        vals = evaluate(Program(tuple(prog.inputs) + tuple(b.nodes), ()), inputs, keep_all=True)
    except PolysatError:
        return ""
    for c in multi:
        want = ref[original[c]] if c in original and prog[original[c]].op != Ops.INPUT else vals[b.made[c].id]
        for node in view.classes[c]:
            if any(ch not in best for ch in node.children) or any(best[ch].contains(c) for ch in node.children):
                continue  # no finite term through this e-node
            got = _node_value(b, c, node, vals)
            if got is None:
                continue
            v.checked_pairs += 1
            if not close(want, got):
                return _counterexample(view, best, c, node, prog, original.get(c), want, got)
    return ""


def _node_value(b: TermBuilder, c: int, node, vals: dict):
    """The value of e-node node (of class c) computed from its children's values in vals."""
    mark, saved = len(b.nodes), b.cur
    b.cur = []
    try:
        for ch in node.children:  # children of a Select's then-Read are memory: made already
            if ch not in b.made and b.chosen[ch].op not in ("Tensor",):
                return None
        u = b.convert(c, node)
        new = b.nodes[mark:]
        if not new:
            return vals.get(u.id)
        ids = {n.id for n in new}
        stand = {}
        for n in new:
            for sid in n.src:
                if sid not in ids and sid not in stand:
                    src = _find(b, sid)
                    stand[sid] = UOp(sid, Ops.INPUT, (), Arg({"tensor_id": sid, "dtype": src.dtype, "shape": src.shape}),
                                     src.dtype, src.shape)
        q = Program(tuple(stand.values()) + tuple(new), (("v", u.id),))
        return evaluate(q, {k: vals[k] for k in stand})["v"]
    except (PolysatError, KeyError):
        return None
    finally:
        del b.nodes[mark:]
        b.cur = saved


def _find(b: TermBuilder, nid: str):
    for n in b.nodes:
        if n.id == nid:
            return n
    return b.st.program[nid]


def _counterexample(view, best, c, node, prog, orig_id, want, got) -> str:
    chosen = {k: ch.node for k, ch in best.items()}
    chosen[c] = node
    after = format_terms(chosen, [c]).replace("out0 =", "rewritten to:")
    cone = prog if orig_id is None else _cone(prog, orig_id)
    where = "the program" if orig_id is None else f"value {orig_id} of the program, cut down to its cone"
    return (f"  counterexample ({where}):\n" + _indent(format_program(cone)) + "\n" + _indent(after)
            + f"\n  max abs difference from the original value: {max_error(want, got):.4g}")


def _cone(prog: Program, nid: str) -> Program:
    keep: set = set()
    stack = [nid]
    while stack:
        k = stack.pop()
        if k not in keep:
            keep.add(k)
            stack.extend(prog[k].src)
    return Program(tuple(n for n in prog.nodes if n.id in keep or n.op == Ops.INPUT), (("v", nid),))


def _indent(text: str) -> str:
    return "\n".join("    " + ln for ln in text.splitlines())
