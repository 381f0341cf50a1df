"""The flat loader (egraph/state.py load_program) sends a program's unions as query-less rules, in batches: the
e-graph it builds is the one egglog's own top-level commands build, one command at a time, row for row in every
table (the exported view numbers the classes in row order), whatever the program interleaves or repeats."""
from __future__ import annotations

import pathlib

import pytest

from polysat.egraph import state as S
from polysat.egraph.boundaries import all_cuts, default_cuts
from polysat.frontend import load_model
from polysat.ir.builder import Builder
from polysat.ir.dtypes import DType
from polysat.ir.tiny import Ops

EXAMPLES = sorted(pathlib.Path(__file__).resolve().parent.parent.glob("examples/*.json"))


def _tables(eg) -> dict:
    g = eg._egraph  # noqa: SLF001
    return {name: [(tuple(r.inputs), r.output) for r in f.rows] for name, f in g.freeze().functions.items()}


def _loaded(p, cuts, by_rules: bool) -> dict:
    st = S.EGraphState(S.base_egraph(), p, ())
    if by_rules:
        S.load_program(st, cuts)
    else:  # the oracle: every action its own top-level command
        for cmd in S.load_commands(st, cuts)[0]:
            st.run(cmd)
    return _tables(st.eg)


def _interleaved():
    """Weights read between the ops that use them, a tensor read twice at one shape (the same term: its two N
    ids merge), a value computed twice (merged), and ops over the merged copies (their rows renamed)."""
    b = Builder()
    x = b.input("x", DType.fp32, (4, 8), at="t")
    y = x
    for k in range(3):
        w = b.input(f"w{k}", DType.fp32, (4, 8), at="t")
        y = b.add(Ops.MUL, [b.add(Ops.ADD, [y, w], at="t"), w], at="t")
        w2 = b.input(f"w{k}", DType.fp32, (4, 8), at="t", nid=f"again{k}")
        y = b.add(Ops.ADD, [y, w2], at="t")
    e1 = b.add(Ops.EXP2, [y], at="t", nid="e1")
    e2 = b.add(Ops.EXP2, [y], at="t", nid="e2")
    s = b.reduce(b.add(Ops.MUL, [e1, e2], at="t"), "SUM", (1,), DType.fp32, at="t")
    z = b.add(Ops.ADD, [b.add(Ops.SQRT, [e2], at="t"), b.input("x", DType.fp32, (4, 8), at="t", nid="x2")], at="t")
    return b.program([("s", s), ("z", z)])


@pytest.mark.parametrize("cut", ["all", "default"])
def test_the_loader_builds_the_tables_the_top_level_commands_build(cut):
    p = _interleaved()
    cuts = all_cuts(p) if cut == "all" else default_cuts(p)
    st = S.EGraphState(S.base_egraph(), p, ())
    cmds, ends = S.load_commands(st, cuts)
    assert len(ends) > 3  # the merges and the re-read weights end batches
    assert _loaded(p, cuts, True) == _loaded(p, cuts, False)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_the_examples_load_to_the_same_tables(path):
    p = load_model(str(path))
    assert _loaded(p, all_cuts(p), True) == _loaded(p, all_cuts(p), False)


def test_a_str_pickles_as_cloudpickle_pickles_it():
    """egglog keys a PyObject by its pickle: the C pickler's bytes for a str (run_text's ``_dumps``) are
    cloudpickle's, byte for byte, or one value would have two keys."""
    import random

    import cloudpickle
    rng = random.Random(7)
    texts = ["", "(i0, i1)", "[4096, 11008]", '"', "\\", "\ud800", "é" * 3000, "漢" * (S.FAST_STR - 1)]
    texts += ["".join(chr(rng.choice((rng.randint(32, 126), rng.randint(0, 0x10FFFF)))) for _ in range(n))
              for n in (1, 7, 60, 500, 4000) for _ in range(40)]
    for t in texts:
        assert S._dumps(t) == cloudpickle.dumps(t)
    assert S._dumps(("a",)) == cloudpickle.dumps(("a",))


def test_run_text_puts_cloudpickle_back():
    import cloudpickle
    before = cloudpickle.dumps
    S.run_text(S.base_egraph(), '(let $x (py-from-string "y"))')
    assert cloudpickle.dumps is before


def test_the_schema_text_declares_every_constructor_with_its_children():
    """egglog takes a term of every constructor of egraph/schema.py, each built with a term at exactly the
    positions CHILDREN names and a string elsewhere; a term at a string position is refused."""
    from egglog.bindings import EggSmolError

    from polysat.egraph.schema import CHILDREN, DECLS
    assert set(CHILDREN) == set(DECLS)
    eg = S.base_egraph()
    S.run_text(eg, '(let $leaf (Tensor "x"))')
    for k, (name, args) in enumerate(DECLS.items()):
        parts = ["$leaf" if j in CHILDREN[name] else '"a"' for j in range(len(args))]
        S.run_text(eg, f"(let $t{k} ({name} {' '.join(parts)}))")
    with pytest.raises(EggSmolError, match="type"):
        S.run_text(eg, '(let $bad (Unary $leaf $leaf))')
