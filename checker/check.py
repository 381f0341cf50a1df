"""Rule soundness, tested not assumed (docs/DESIGN.md §E-graph): ``polysat rules --check``.

Every rule sits alone in its own ruleset of one e-graph that holds all the rule files (the shipped
ones are context for a user's). For each checked rule, test programs come from two sources:
  1. rule-directed: random well-typed instances of the rule's own left-hand side
     (``checker/instance.py``), loaded alone, so the rule fires on them without help;
  2. the random pool (``randprog``): motif and random programs, loaded and rewritten for a couple of
     rounds by the other rules, then handed to the rule (for patterns only other rules produce, such
     as the streaming softmax).
On each, the rule runs once, alone (``egglog`` push/pop keeps the e-graph), and everything it changed
is compared (``checker/diff.py``): every e-node it added against the value of its class, every pair
of classes it merged, on inputs chosen to expose rounding (``checker/numerics.py``). The first
disagreement makes the rule unsound; the report names that rule (no other rule ran in between), with
the smallest counterexample found by redrawing smaller instances, and both values.
"""
from __future__ import annotations

import pathlib
import re
import time
import zlib

import numpy as np

from .. import knobs
from ..egraph.boundaries import all_cuts, default_cuts
from ..egraph.graph import export
from ..egraph.rule_pattern import head, parse_sexp, read_query
from ..egraph.rulefiles import RuleFile, discover, parse_file
from ..egraph.state import EGraphState, add_rule_files, base_egraph, load_program, validate
from ..ir.diagnostics import PolysatError, diag
from ..ir.dtypes import DType
from ..ir.tiny import Program
from .diff import Finding, StepResult, check_step
from .explain import counterexample, consistent
from .instance import Builder, Reject, instantiate
from .isl_proof import index_rule, prove_step
from .numerics import REGIMES, draw_inputs, tricky
from .randprog import (attention_programs, chained_gemm_programs, motif_programs, owned_programs, random_program,
                       sibling_programs)
from .report import CheckReport, RuleVerdict
from .values import Valuer

POOL_NODES = 4000  # stop the context rounds of a pool program past this many e-nodes
# every instance of a rule's left-hand side is compared on its regime's draw, then on one draw of each
# regime and four more paired ones (numpy valuations of the one egglog run: a stripe along the right axis,
# a row far below another, a cancelling pair are each met by some draw)
REDRAWS = ("paired", "ordinary", "paired", "special", "paired", "scaled", "paired", "paired", "paired", "paired")
POOL_REDRAWS = ("gentle", "paired")  # a random-pool program is compared on its draw, then on these
PROOFS = 6  # symbolic instances of an index-map rule proved with isl


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
        decls.append(re.sub(r"\(ruleset\s+[^\s()]+\s*\)", "", text))  # the rules moved to chk<k>
    return "\n".join(decls) + "\n" + "\n".join(rules), by_set


def _facts_only(text: str) -> bool:
    """A rule whose actions only assert relations or set lattice facts (no union): bookkeeping other
    rules read (rules/fusion.egg's fuse-veto is such a fact)."""
    return text.lstrip("(").startswith("rule") and not re.search(r"\((union|delete|subsume)\b", text)


def _selected(rule, only: list) -> bool:
    """Whether --only names the rule, its file (name, stem or path) or the folder holding it."""
    p = pathlib.Path(rule.file).resolve()
    for o in only:
        q = pathlib.Path(o)
        if o in (rule.name, p.name, p.stem) or (q.exists() and q.resolve() in (p, p.parent)):
            return True
    return False


class Checker:
    """One e-graph with every rule isolated; checks rules one at a time on test programs."""

    def __init__(self, files: list, seed: int, cases: int):
        text, self.by_set = _isolated(files)
        self.eg = base_egraph()
        add_rule_files(self.eg, [RuleFile("<isolated rules>", text, (), ())])
        self.seed, self.cases = seed, cases
        self.rng = self.prng = np.random.default_rng(seed)  # set per rule and phase by reseed
        self.facts = [k for k, r in self.by_set.items() if _facts_only(r.text)]
        self.fact_relations = {head(a[1]) if head(a) == "set" else head(a)  # (set (f x) v) asserts f
                               for k in self.facts for a in parse_sexp(self.by_set[k].text)[2]}
        self.pool: list = []
        self.programs = 0
        self.pool_size: "int | None" = None
        self.no_context: set = set()  # rulesets found unsound (or isolated): never context for a pool program

    def reseed(self, rule, phase: int) -> None:
        """Each rule's draws come from streams of its own, keyed by the seed, its name and the phase, so its
        verdict does not depend on which other rules share the run or on their order; the symbolic draws
        of the isl proofs have a stream of their own."""
        key = [self.seed, zlib.crc32(rule.name.encode()), phase]
        self.rng, self.prng = np.random.default_rng(key), np.random.default_rng(key + [1])

    def _st(self, prog: "Program | None" = None) -> EGraphState:
        return EGraphState(self.eg, prog or Program((), ()), ())

    def _run(self, text: str):
        return self._st().run(text)

    def _settle(self, skip: str = "") -> str:
        """The schedule that derives the facts the rule reads: the analyses, and the bookkeeping rules
        (other than skip) when its query uses a relation they assert."""
        q = self.by_set[skip].text if skip in self.by_set else ""
        used = {m.group(1) for m in re.finditer(r"\(([a-z][\w-]*)\s", q)} & self.fact_relations
        sets = " ".join(f"(run {k})" for k in self.facts if k != skip) if used else ""
        return f"(run-schedule (saturate (seq (saturate (run analysis)) {sets})))"

    def _apply(self, name: str, rule) -> tuple:
        """Run the rule once, then the analyses: (matches, e-graph sizes). One egglog program."""
        outs = self._run(f"(run-schedule (run {name}))\n(run-schedule (saturate (run analysis)))\n(print-size)")
        per = outs[0].report.num_matches_per_rule
        hits = sum(per.get(rule.name + tail, 0) for tail in ("", "=>", "<="))  # a birewrite is two rules
        return hits, dict(outs[-1].sizes)

    # ---- one test program ----------------------------------------------------------------------------
    def run_instance(self, name: str, rule, inst, inputs: dict, more: tuple = ()) -> "tuple | None":
        """(StepResult, v0, val0, inputs) of the rule applied once to the instance, or None when it did not
        match (or the instance could not be valued); the e-graphs before and after are compared on inputs,
        then on each of more until one disagrees (one egglog run, several input draws)."""
        self._load(name, inst)
        try:
            return self._step(name, rule, inputs, more=more)
        finally:
            self._run("(pop)")

    def _load(self, name: str, inst) -> None:
        """Push, then load the instance's terms and settle the facts the rule reads."""
        cmds = ["(push)"]
        for t in inst.tensors:
            cmds.append(f'(has-shape (Tensor "{t.args[0]}") "[{", ".join(str(d) for d in t.shape)}]")')
            cmds.append(f'(has-dtype (Tensor "{t.args[0]}") "{t.dtype}")')
        cmds += [f"(union (N {k}) {r.sexp()})" for k, r in enumerate(inst.roots)]
        self._run("\n".join(cmds) + "\n" + self._settle(name))

    def prove(self, name: str, v: RuleVerdict) -> None:
        """An index-map rule on symbolic instances: every rewrite proved equal with isl for all sizes
        (``checker/isl_proof.py``), or refuted with a point where it differs."""
        v.index_rule = True
        for k in range(PROOFS):
            q = v.queries[k % len(v.queries)]
            inst = instantiate(q, self.prng, variant=k // len(v.queries), symbolic=True)
            if inst is None:
                continue
            self._load(name, inst)
            try:
                st = self._st()
                v0 = export(st)
                hits, sizes = self._apply(name, v.rule)
                v1 = export(st) if hits else None
            finally:
                self._run("(pop)")
            if v1 is None:
                continue
            done, finding, gap = prove_step(v0, v1, inst.syms)
            if sizes.get("shape-conflict") or sizes.get("dtype-conflict"):
                finding = finding or "it equated values of different shapes or dtypes"
            if finding:
                v.unsound = True
                self.no_context.add(name)
                v.refuted = ("  refuted by isl (sizes n_k >= 1 are parameters; the point gives them and the output index) "
                             "on a symbolic instance built from the rule's left-hand side:\n    before: "
                             + "\n    before: ".join(r.sexp() for r in inst.roots) + f"\n    {finding}")
                v.counterexample = (v.counterexample + "\n" if v.counterexample else "") + v.refuted
                return
            if gap:
                v.unproved = gap
                return
            v.proved += bool(done)

    def run_pool(self, name: str, rule, prog: Program, cuts: set, inputs: dict, more: tuple = ()) -> "tuple | None":
        self._run("(push)")
        try:
            st = self._st(prog)
            load_program(st, cuts)
            others = " ".join(f"(run {k})" for k in self.by_set if k != name and k not in self.no_context)
            for _ in range(3):
                self._run(self._settle(name) + f"\n(run-schedule (seq {others}))")
                if st.enodes() > POOL_NODES:
                    break
            self._run(self._settle(name))
            return self._step(name, rule, inputs, pool=True, more=more)
        finally:
            self._run("(pop)")

    def _step(self, name: str, rule, inputs: dict, pool: bool = False, more: tuple = ()) -> "tuple | None":
        """Value the settled e-graph, run the rule once and compare what it changed (on inputs, then on
        each of more until a draw disagrees)."""
        st = self._st()
        v0 = export(st)
        val0 = Valuer(v0, inputs)
        val0.value_all()
        if not pool and len(val0.vals) < len(v0.classes):
            return None  # an ill-typed draw: the instance itself has no value
        hits, sizes = self._apply(name, rule)
        if not hits:
            return None
        v1 = export(st)
        res = check_step(v0, val0, v1, inputs)
        if sizes.get("shape-conflict") or sizes.get("dtype-conflict"):
            res.findings.insert(0, Finding("conflict", -1, None, why="equated values of different shapes or dtypes: "
                                           + self._conflicts()))
        if pool and res.findings and not consistent(v0, val0):
            return None  # the other rules left the e-graph inconsistent: not this rule's doing
        for extra in more:
            if res.findings:
                break
            val = Valuer(v0, extra)
            val.value_all()
            if len(val.vals) < len(v0.classes):
                continue
            again = check_step(v0, val, v1, extra)
            if again.findings and not (pool and not consistent(v0, val)):
                again.compared += res.compared
                res, val0, inputs = again, val, extra
        return res, v0, val0, inputs

    def _conflicts(self) -> str:
        """The shapes and dtypes a conflict joined, as egglog lists them (the first few)."""
        rows = []
        for rel in ("shape-conflict", "dtype-conflict"):
            text = str(self._run(f"(print-function {rel} 3)")[0])
            rows += [f"{a} and {b}" for a, b in re.findall(rf'\({rel} .*? "([^"]*)" "([^"]*)"\) ->', text)]
        return "; ".join(dict.fromkeys(rows)) or "(not listed)"

    # ---- one rule ------------------------------------------------------------------------------------
    def check_patterns(self, name: str, v: RuleVerdict, budget: int) -> None:
        """Source 1: budget random instances of the rule's left-hand side (both sides of a birewrite)."""
        rule = v.rule
        queries = [read_query(rule.text, rule.line, rule.name)]
        if rule.text.lstrip("( \n").startswith("birewrite"):
            queries.append(read_query(rule.text, rule.line, rule.name, side=1))
        v.queries = queries
        for k in range(budget):
            if v.unsound or v.error or (v.built >= 12 and not v.fired):
                break  # found wrong, or twelve instances never matched: a rule for the pool's programs
            inst = instantiate(queries[k % len(queries)], self.rng, variant=k // len(queries))
            if inst is None:
                continue
            v.built += 1
            regime = REGIMES[k % len(REGIMES)]
            inputs = _inputs(inst, self.rng, regime)
            more = tuple(_inputs(inst, self.rng, r) for r in REDRAWS)
            self.programs += 1
            got = self.run_instance(name, rule, inst, inputs, more)
            if got is None:
                continue
            if self._record(name, v, got[0], True):
                v.counterexample = self._shrink(name, rule, queries[k % len(queries)], inst, got[3], got, regime)
        if index_rule(rule.text) and not v.error:
            self.prove(name, v)  # an unsound one too: refuted by isl as well as by testing

    def check_pool(self, name: str, v: RuleVerdict) -> None:
        """Source 2, for a rule its own instances did not exercise enough: the random pool."""
        if v.fired < self.cases and not (v.unsound or v.error):
            self._pool_check(name, v)
        if v.fired < self.cases and not (v.unsound or v.error):
            q = v.queries[0]
            v.why_not = ("no instance of its left-hand side could be built (" + _unbuildable(q) + ")"
                         if not v.built else
                         f"{v.built} instance(s) of its left-hand side were built but the rule matched "
                         f"{v.from_pattern} (a relation or helper condition egglog decides failed)") + \
                        f"; {len(self.pool)} random-pool program(s) tried"

    def _record(self, name: str, v: RuleVerdict, res: StepResult, from_pattern: bool) -> bool:
        """Count one exercised program; True when it found the rule wrong (or unevaluable)."""
        v.fired += 1
        v.from_pattern += from_pattern
        v.checked_pairs += res.compared
        if not res.findings:
            return False
        if all(f.kind == "checker" for f in res.findings):
            v.error = "a rewrite could not be evaluated: " + res.findings[0].why
        else:
            v.unsound = True
            self.no_context.add(name)
        return True

    def _shrink(self, name, rule, q, inst, inputs, got, regime) -> str:
        """The smallest failing instance among redraws at smaller sizes."""
        best = (inst.size(), inst, inputs, got)
        for max_dim in (1, 2, 2, 3):
            for _ in range(4):
                cand = instantiate(q, self.rng, max_dim=max_dim)
                if cand is None or cand.size() >= best[0]:
                    continue
                cin = _inputs(cand, self.rng, regime)
                r = self.run_instance(name, rule, cand, cin, tuple(_inputs(cand, self.rng, x) for x in REDRAWS))
                if r is not None and r[0].findings:
                    best = (cand.size(), cand, r[3], r)
        _, inst, inputs, (res, v0, val0, _) = best
        return counterexample(res, v0, val0, inputs, roots=len(inst.roots), source="built from the rule's left-hand side")

    def _pool_check(self, name: str, v: RuleVerdict) -> None:
        if not self.pool:  # one pool for every rule, drawn from a stream of its own (the seed's)
            rng = np.random.default_rng([self.seed, 0])
            self.pool.extend(attention_programs(rng, 10))
            for _ in range(2):
                self.pool.extend(motif_programs(rng))
            self.pool.extend(random_program(rng, int(rng.integers(4, 12))) for _ in range(6))
            while self.pool_size and len(self.pool) < self.pool_size:
                self.pool.extend(motif_programs(rng) if len(self.pool) % 2 else attention_programs(rng, 4))
            self.pool = self.pool[:self.pool_size] if self.pool_size else self.pool
            # last, so only rules the others left unexercised reach them; their own generator, so the
            # checker's draws (the inputs of every program) stay what they were without them
            self.pool.extend(sibling_programs(np.random.default_rng(len(self.pool))))
            self.pool.extend(owned_programs(np.random.default_rng(len(self.pool))))  # a softmax on a middle axis
            self.pool.extend(chained_gemm_programs(np.random.default_rng(len(self.pool))))  # GEMM -> GEMM
            self.pool.extend(attention_programs(np.random.default_rng(len(self.pool)), 6, DType.fp32))  # fp32 P
            # first, P^T V: a dot summed over P's rows, where the normaliser varies (a rule matching attention
            # shapes meets the shapes its guards must refuse before it meets the ones they accept)
            self.pool[:0] = [q for p in (DType.fp32, None) for q in attention_programs(rng, 1, p, rows=True)]
        for prog in self.pool:
            if v.fired >= self.cases or v.unsound:
                break
            inputs = {n.arg["tensor_id"]: tricky(tuple(int(d) for d in n.shape), n.dtype.value, self.rng)
                      for n in prog.inputs}
            more = tuple(draw_inputs([(n.arg["tensor_id"], n.shape, n.dtype.value) for n in prog.inputs], self.rng, r)
                         for r in POOL_REDRAWS)
            self.programs += 1
            for cuts in (default_cuts(prog), set(), all_cuts(prog)):
                got = self.run_pool(name, v.rule, prog, cuts, inputs, more)
                if got is None:
                    continue
                if self._record(name, v, got[0], False):
                    res, v0, val0, drawn = got
                    v.counterexample = counterexample(res, v0, val0, drawn, roots=0,  # the cone: 'before' below
                                                      source="a random-pool program rewritten by the other rules "
                                                             "first, cut down to the rewritten value's cone")
                break


def _inputs(inst, rng: np.random.Generator, regime: str) -> dict:
    return draw_inputs([(t.args[0], t.shape, t.dtype) for t in inst.tensors], rng, regime)


def _unbuildable(q) -> str:
    b = Builder(q, np.random.default_rng(0))
    try:
        for r in q.roots:
            b.term(r)
    except Reject as e:
        return str(e)
    except Exception as e:  # noqa: BLE001 — reported as the reason, not raised
        return f"{type(e).__name__}: {e}"
    return "its side conditions never held on random draws" if q.roots else "the rule matches no term"


def check_rules(dirs=None, cases: "int | None" = None, builtin: bool = True, seed: "int | None" = None,
                only=None, budget: int = 12, max_programs: "int | None" = None, isolate: bool = False) -> CheckReport:
    """Check the rules of rules/ (unless builtin=False) and of dirs, or only those named by ``only``
    (rule names, file names or paths; every file stays loaded as context). Never raises for a bad
    rule file: its diagnostics are in the report. budget: instances of each rule's left-hand side;
    max_programs: size of the random pool (default 28: attention, motif and random programs); isolate: the
    checked rules are never context for each other's pool programs (mutants of one rule, bench/rule_mutants.py:
    each is checked with only the unchecked rules, the shipped ones, rewriting its programs)."""
    t0 = time.perf_counter()
    cases = knobs.check_cases() if cases is None else cases
    rep = CheckReport(cases=cases)
    files = []
    for path in discover(dirs, builtin):
        try:
            rf = parse_file(path)
            validate(files + [rf])
            files.append(rf)
        except PolysatError as e:
            rep.errors.extend(e.diagnostics)
    if rep.errors and not files:
        return rep
    ck = Checker(files, knobs.check_seed() if seed is None else seed, cases)
    ck.pool_size = max_programs
    todo = [(name, RuleVerdict(rule)) for name, rule in ck.by_set.items() if not only or _selected(rule, list(only))]
    rep.verdicts = [v for _, v in todo]
    if isolate:
        ck.no_context.update(name for name, _ in todo)  # never context: as a rule found unsound is not
    for o in only or ():
        if not any(_selected(v.rule, [o]) for _, v in todo) and not any(o in d.at for d in rep.errors):
            rep.errors.append(diag("FileNotFound", o, f"--only {o}: no loaded rule, rule file or rules folder has this "
                                   "name", "Name a rule (`polysat rules` lists them), a .egg file or a --rules folder."))
    for k, phase in enumerate((lambda n, v: ck.check_patterns(n, v, max(budget, 3 * cases)), ck.check_pool)):
        for name, v in todo:  # every rule's own instances first: the pool's context then omits unsound rules
            if v.error:
                continue
            ck.reseed(v.rule, k)
            t1 = time.perf_counter()  # reported per rule, never deciding a verdict
            try:
                phase(name, v)
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as e:  # noqa: BLE001 — a checker failure is reported, never a pass
                v.error = f"the checker failed on this rule: {type(e).__name__}: {e}"
            v.seconds += time.perf_counter() - t1
    rep.programs = ck.programs
    rep.seconds = time.perf_counter() - t0
    return rep
