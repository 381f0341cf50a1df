"""An e-graph holding one Tiny IR program: schema, rule helpers, analyses, rule files, and the
program loaded flat (docs/DESIGN.md §E-graph: one node per action, unioned into ``N(i)``,
sent in chunks, so loading is linear in the program size).
"""
from __future__ import annotations

import pathlib
import pickle
from contextlib import contextmanager
from dataclasses import dataclass, field

import cloudpickle
from egglog import EGraph

from ..ir.diagnostics import fail
from ..ir.tiny import GroupOp, Ops, Program, UOp
from . import encode as E
from .boundaries import default_cuts, movement_args
from .ixfns import prelude
from . import siblings as _siblings  # noqa: F401 — registers the helpers of rules/siblings.egg
from ..knobs import load_chunk
from .rulefiles import check_rulesets, egg_error, form_texts
from .schema import SCHEMA

LOAD = "program-load"  # the ruleset whose query-less rules load a program (load_program)
ANALYSIS = pathlib.Path(__file__).resolve().parent / "analysis.egg"
NEUTRAL = {"SUM": "0", "MAX": "-inf", "MIN": "inf"}
# a Tiny IR movement op -> its e-graph constructor (egraph/schema.py; egraph/totiny.py reads it back)
MOVE_NAMES = {Ops.RESHAPE: "Reshape", Ops.PERMUTE: "Permute", Ops.EXPAND: "Expand", Ops.PAD: "Pad",
              Ops.SHRINK: "Shrink", Ops.FLIP: "Flip", Ops.VIEW: "View"}


_CLOUD_DUMPS = cloudpickle.dumps
FAST_STR = 8192  # characters: a str pickled within one frame either way (at most 4 bytes a character, under 64 KiB)


def _dumps(obj, protocol=None, buffer_callback=None) -> bytes:
    """cloudpickle.dumps, a short str pickled by the C pickler directly: the same bytes (cloudpickle's Pickler is
    the C one, and a str never reaches its reducer_override; one frame either way), without cloudpickle's Python
    wrapper (a Pickler and a buffer a call: ~6 us against ~0.6 us). egglog keys every PyObject by its pickle: each
    ``py-from-string`` in a rule, and each helper's answer (egraph/ixfns.py), is one (LLaMA L1 fp32: 6,700)."""
    if type(obj) is str and protocol is None and buffer_callback is None and len(obj) < FAST_STR:
        return pickle.dumps(obj, cloudpickle.DEFAULT_PROTOCOL)
    return _CLOUD_DUMPS(obj, protocol=protocol, buffer_callback=buffer_callback)


def run_text(eg: EGraph, text: str, filename: str = "<polysat>") -> list:
    """text run in eg, with ``_dumps`` as cloudpickle's dumps while it runs (egglog looks the function up on every
    PyObject it makes), the one before restored after."""
    g = eg._egraph  # noqa: SLF001 — raw programs are how rule files run
    cmds = g.parse_program(text, filename=filename)
    before, cloudpickle.dumps = cloudpickle.dumps, _dumps
    try:
        return g.run_program(*cmds)
    finally:
        cloudpickle.dumps = before


def run_forms(eg: EGraph, text: str, filename: str) -> None:
    """text run one top-level form at a time (an egglog program's parse grows faster than its length: the rule
    files and the analysis, 0.13 s whole, 0.07 s so)."""
    for _, form, _ in form_texts(filename, text):
        run_text(eg, form, filename)


def base_egraph() -> EGraph:
    """Schema, helper globals and the analysis ruleset; no rules, no program."""
    eg = EGraph()
    run_text(eg, SCHEMA, "<schema>")
    run_forms(eg, prelude(), "<ixfns prelude>")
    run_forms(eg, ANALYSIS.read_text(encoding="utf-8"), str(ANALYSIS))
    run_text(eg, f"(ruleset {LOAD})")
    return eg


def add_rule_files(eg: EGraph, files: list) -> None:
    """Run each file into eg, form by form; an egglog error is E1403 naming file:line and rule (eg is then
    unusable)."""
    for rf in files:
        for _, form, line in form_texts(rf.path, rf.text):
            try:
                run_text(eg, form, rf.path)
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as e:  # noqa: BLE001 — pyo3 PanicException is a BaseException
                raise egg_error(rf, e, line) from None


_VALID: set = set()  # (path, text) tuples of file lists already validated in this process


def validate(files: list, eg: "EGraph | None" = None) -> None:
    """Lint the files and load them into ``eg`` (default: a scratch e-graph), so a bad file never reaches
    an e-graph that is kept: ``eg`` is one that a failure discards. Files validated before (in this process)
    are only loaded."""
    check_rulesets(files)
    key = tuple((rf.path, rf.text) for rf in files)
    if key not in _VALID:
        from .rule_lint import lint_files, raise_if_any
        raise_if_any(lint_files(files))
    if key not in _VALID or eg is not None:
        add_rule_files(base_egraph() if eg is None else eg, files)
    _VALID.add(key)


@dataclass
class EGraphState:
    """The e-graph of one program. ``index[node id] = i`` names the node's e-class as ``(N i)``."""
    eg: EGraph
    program: Program
    files: tuple  # RuleFile
    index: dict = field(default_factory=dict)
    tensors: dict = field(default_factory=dict)  # tensor id -> N index of its Tensor(...) memory
    cuts: frozenset = frozenset()
    no_facts: str = ""  # why the fusion legality facts are missing (a saturation limit stopped before them); "": complete
    view: object = None  # its EGraphView, kept when the e-graph was given back (``pooled_state``; eg is then None)
    pushes: int = 0  # snapshots (push) taken on eg and not popped

    def push(self) -> None:
        self.run("(push)")
        self.pushes += 1

    def pop(self) -> None:
        self.run("(pop)")
        self.pushes -= 1

    @property
    def rulesets(self) -> list:
        out: list = []
        for rf in self.files:
            out.extend(r for r in rf.rulesets if r not in out)
        return out

    def run(self, text: str) -> list:
        return run_text(self.eg, text)

    def sizes(self) -> dict:
        (out,) = self.run("(print-size)")
        return dict(out.sizes)

    def enodes(self, sizes: "dict | None" = None) -> int:
        """E-nodes of the term language (analysis facts and the N ids excluded); ``sizes``: the tables' rows if
        just read (``sizes()``)."""
        from .schema import CHILDREN
        return sum(n for f, n in (self.sizes() if sizes is None else sizes).items() if f in CHILDREN)


def new_state(program: Program, files: list, cuts: "set | None" = None) -> EGraphState:
    eg = base_egraph()
    validate(files, eg)  # a failure discards eg: no scratch e-graph needed
    st = EGraphState(eg, program, tuple(files))
    load_program(st, default_cuts(program) if cuts is None else cuts)
    return st


_POOL: dict = {}  # rule files key -> an e-graph holding the schema and those files, kept at that base by push/pop


@contextmanager
def pooled_state(program: Program, files: list, cuts: "set | None" = None):
    """``new_state`` without building the schema and rule files again: one e-graph per process holds them,
    ``(push)`` before the program is loaded and ``(pop)`` at exit restore it (egglog's push saves a copy of the
    whole e-graph: ~8 ms against ~120 ms of loading the files). The block takes what it needs before exit
    (``view``): the state's e-graph is then gone (``eg`` None). The e-graph is taken out of the pool while in
    use (a nested use builds its own) and put back only at its base: a failure, or a rollback that rebuilt the
    state (saturate._replay), drops it."""
    key = tuple((rf.path, rf.text) for rf in files)
    eg = _POOL.pop(key, None)
    if eg is None:
        eg = base_egraph()
        validate(files, eg)
    st = EGraphState(eg, program, tuple(files))
    st.push()
    try:
        load_program(st, default_cuts(program) if cuts is None else cuts)
        yield st
    finally:
        mine, st.eg = st.eg is eg, None
    if mine:
        for _ in range(st.pushes):  # the saturation's snapshots left open, then the base's
            run_text(eg, "(pop)")
        _POOL.clear()  # (one file set at a time: a process rarely switches)
        _POOL[key] = eg


def _q(s: str) -> str:
    if '"' in s or "\\" in s:
        fail("InvalidAttribute", "e-graph loader", f"attribute {s!r} contains a quote or backslash")
    return f'"{s}"'


def load_program(st: EGraphState, cuts: set) -> None:
    """Add every node of st.program as one flat union. Only the Tensor buffers get shape and dtype facts; the
    analysis ruleset derives every other class's (and a disagreement with the constructor attributes would
    surface as a conflict).

    The unions are the actions of query-less rules (ruleset ``LOAD``: each fires once, when the ruleset runs),
    ``load_chunk()`` actions a rule: a top-level egglog command costs a rebuild of the whole e-graph, and an egglog
    program's parse grows faster than its length (MoE-32's 1,879 nodes, 200 commands a program: 0.8-0.9 s; as
    rules: 0.2 s). The e-graph is the one the commands build, row for row in every table (the export numbers the
    classes in row order): the rules run in the batches of ``load_commands``. The rules stay in the e-graph (egglog
    drops none), and a snapshot (push) copies them: MoE-32's costs 20-30 ms, not 3-5 (saturate.py takes one a
    phase)."""
    cmds, ends = load_commands(st, cuts)
    step, start, r = load_chunk(), 0, 0
    for end in ends:
        for c in range(start, end, step):
            st.run(f'(rule () ({" ".join(cmds[c:min(c + step, end)])}) :ruleset {LOAD} :name "{LOAD}-{r}")')
            r += 1
        st.run(f"(run-schedule (run {LOAD}))")
        start = end


def load_commands(st: EGraphState, cuts: set) -> tuple:
    """(the loader's egglog actions, the ends of its batches). A rebuild (after each command, or after a run of
    rules) moves a row whose class a union renamed to the end of its table: a batch ends after an input's read
    (unioned with its N id: its row moves) that a new read nested in a later node's operands would pass, and after
    a node whose term was built before (its N id merges into that term's class, renaming rows built since)."""
    p, cmds, ends = st.program, [], []
    st.cuts = frozenset(cuts)
    k = 0
    for n in p.nodes:
        if n.op == Ops.INPUT:
            tid = n.arg["tensor_id"]
            if tid not in st.tensors:
                st.tensors[tid] = k
                cmds.append(f"(union (N {k}) (Tensor {_q(tid)}))")
                cmds.append(f"(has-shape (N {k}) {_q(E.shape(n.shape))}) (has-dtype (N {k}) {_q(n.dtype.value)})")
                k += 1
    for n in p.nodes:
        st.index[n.id] = k
        k += 1
    seen, canon, reads, moved = {}, {}, set(), None  # term -> N id; N id -> the class it merged into
    for n in p.nodes:
        i = st.index[n.id]
        term = _term(st, n)
        key = _term(st, n, canon) if canon else term
        cut = {canon.get(st.index[s], st.index[s]) for pos, s in enumerate(n.src) if (n.id, pos) in st.cuts}
        if moved is not None and cut - reads:  # a new nested read row would land before the moved one
            ends.append(moved)
            moved = None
        if key in seen:
            canon[i] = seen[key]
            ends.append(len(cmds) + 1)
            moved = None
        else:
            seen[key] = i
            if n.op == Ops.INPUT:
                moved = len(cmds) + 1
        reads |= cut
        cmds.append(f"(union (N {i}) {term})")
    cmds.extend(f"(program-out (N {st.index[nid]}))" for nid in dict.fromkeys(nid for _, nid in p.outputs))
    return cmds, sorted(set(ends) | {len(cmds)})


def _src(st: EGraphState, n: UOp, pos: int, canon: dict) -> str:
    s = st.program[n.src[pos]]
    i = st.index[s.id]
    ref = f"(N {canon.get(i, i)})"
    if (n.id, pos) in st.cuts:
        return f"(Read (Mat {ref}) {_q(E.shape(s.shape))} {_q(E.identity_map(s.ndim))})"
    return ref


def _term(st: EGraphState, n: UOp, canon: "dict | None" = None) -> str:
    """n's term over the N ids of its operands (each renamed by canon: the class it merged into)."""
    a, canon = n.arg, canon or {}
    if n.op == Ops.INPUT:
        return f"(Read (N {st.tensors[a['tensor_id']]}) {_q(E.shape(n.shape))} {_q(E.identity_map(n.ndim))})"
    if n.op == Ops.CONST:
        return f"(Const {_q(E.value(a['value']))} {_q(n.dtype.value)} {_q(E.shape(n.shape))})"
    if n.op in GroupOp.Movement:
        kind, x, y = movement_args(n)
        args = [_q(x)]
        if n.op == Ops.VIEW:
            args.append(_q(y))
        if n.op == Ops.PAD:
            args.append(_q(E.value(a["value"])))
        return f"({MOVE_NAMES[n.op]} {_src(st, n, 0, canon)} {' '.join(args)})"
    if n.op == Ops.CAST:
        return f"(Cast {_q(n.dtype.value)} {_src(st, n, 0, canon)})"
    if n.op in GroupOp.Unary:
        return f"(Unary {_q(n.op.value)} {_src(st, n, 0, canon)})"
    if n.op in GroupOp.Binary:
        return f"(Binary {_q(n.op.value)} {_src(st, n, 0, canon)} {_src(st, n, 1, canon)})"
    if n.op == Ops.WHERE:
        return f"(Where {_src(st, n, 0, canon)} {_src(st, n, 1, canon)} {_src(st, n, 2, canon)})"
    if n.op == Ops.REDUCE:
        return (f"(Reduce {_q(a['op'])} {_q(E.tup(a['axes']))} {_q(NEUTRAL[a['op']])} {_q(a['dtype'].value)} "
                f"{_src(st, n, 0, canon)})")
    fail("UnknownOp", n.id, f"the e-graph has no term for {n.op.name}",
         "Give contractions in their naive MUL -> REDUCE(SUM) form.")
