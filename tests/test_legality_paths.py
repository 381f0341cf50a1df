"""The search's reading of the rules' conflicts (search/legality.py) asked many times: the merge search asks
``violations`` for every group it prices, on one extraction. The walk runs once per conflict and per decision
set's part over the sites that conflict's walk asks about, inside the classes it can reach the reduction from,
without recursion; the answer kept equals the answer of a fresh walk."""
from __future__ import annotations

import math

import numpy as np

from polysat.bench.models import conv_relu_conv, mlp_stack, softmax_axis
from polysat.checker.randprog import motif_programs, random_program
from polysat.egraph.boundaries import all_cuts
from polysat.egraph.extract import solve
from polysat.egraph.graph import Conflict, EGraphView, ENode, export
from polysat.egraph.saturate import OPT_IN, default_schedule, rule_files, run
from polysat.egraph.state import new_state
from polysat.frontend import load_model
from polysat.search import legality
from polysat.search.sites import Masked, chosen_terms, masks, sites, stream_sites


def _chain_view(depth: int, unrelated: int):
    """r = Reduce(x); z = Unary(r) materialized at site m; the program root reads m back through ``depth``
    unary ops; ``unrelated`` other sites materialize values of their own. One conflict: fusing m (the
    reduction r read inside its reader's kernel)."""
    classes, order = {}, iter(range(10**9))

    def node(c, op, *children):
        classes[c] = [ENode(op, (), tuple(children), c, next(order))]
    x, r, z, m, rd = 0, 1, 2, 3, 4
    node(x, "Input")
    node(r, "Reduce", x)
    node(z, "Unary", r)
    node(m, "Mat", z)
    node(rd, "Read", m)
    prev = rd
    for i in range(depth):
        node(5 + i, "Unary", prev)
        prev = 5 + i
    top = prev
    others = []
    for j in range(unrelated):
        v, s = top + 1 + 2 * j, top + 2 + 2 * j
        node(v, "Input")
        node(s, "Mat", v)
        others.append(s)
    view = EGraphView(classes, {}, {}, {}, next(order), conflicts=(Conflict(frozenset({m}), None, r),))
    chosen = {c: ns[0] for c, ns in classes.items()}
    return view, chosen, m, others


def test_a_deep_chain_is_walked_once_per_part_that_matters():
    view, chosen, m, others = _chain_view(depth=30_000, unrelated=200)
    rng = np.random.default_rng(0)
    for _ in range(200):
        fused = {m} | {s for s in others if rng.random() < 0.5}
        assert [v[1] for v in legality.violations(view, fused, chosen)] == [[m]]
    assert legality.violations(view, set(others), chosen) == []  # m cut: no conflict
    (_, _, asked, answers), = legality._paths(view, chosen).per.values()  # noqa: SLF001
    assert m in asked and not asked & set(others) and len(answers) == 1


def _programs(rng):
    return [load_model(mlp_stack(2, 64)), load_model(conv_relu_conv(4, 8)), load_model(softmax_axis([2, 6, 3], 1))] \
        + [random_program(rng, int(rng.integers(4, 10))) for _ in range(3)] + motif_programs(rng)[:3]


def test_kept_answers_equal_fresh_walks():
    """Every decision set's verdict on one extraction, asked after many others (the kept answers), equals the
    verdict of a fresh index; some verdicts find a conflict, so a wrong key would show."""
    rng = np.random.default_rng(3)
    found = 0
    for prog in _programs(rng):
        st = new_state(prog, rule_files(), cuts=all_cuts(prog))
        run(st, default_schedule(st.rulesets, OPT_IN))
        view = export(st)
        roots = [view.by_index[st.index[nid]] for _, nid in st.program.outputs]
        st_, streams = sites(view), frozenset(stream_sites(view))
        keys = sorted(st_)
        excl, hard, _ = masks(view, st_, streams, frozenset(keys))
        best, _ = solve(view, Masked(excl, hard))
        if not all(r in best and best[r].total < math.inf for r in roots):
            continue
        chosen = chosen_terms(best, roots)
        decisions = [frozenset(keys)] + [frozenset(k for k in keys if rng.random() < 0.6) for _ in range(30)]
        kept = [legality.violations(view, f, chosen) for f in decisions]
        for f, v in zip(decisions, kept, strict=True):
            view.__dict__.pop("_paths", None)
            assert legality.violations(view, f, chosen) == v
            # the descent's short-circuit: the same verdict, whichever sites it looks at first
            assert legality.violates(view, f, chosen, sorted(f)[-1:]) == legality.violates(view, f, chosen) == bool(v)
            found += bool(v)
    assert found > 0
