"""The saturation driver: stop reasons, limits, per-rule reports, conflicts."""
from __future__ import annotations

import pathlib

import pytest

from polysat.egraph import Phase, StopReason, format_report, limits, saturate
from polysat.egraph.saturate import run
from polysat.frontend import load_model
from polysat.ir.builder import Builder
from polysat.ir.diagnostics import PolysatError
from polysat.ir.dtypes import DType
from polysat.ir.tiny import Ops

ROOT = pathlib.Path(__file__).resolve().parent.parent
GEMM = str(ROOT / "examples" / "gemm_bias_relu.json")

EXPLODE = """
(ruleset explode)
; law: a + b = b + a
(rewrite (Binary "ADD" a b) (Binary "ADD" b a) :ruleset explode :name "x-comm")
; law: (a + b) + c = a + (b + c)
(birewrite (Binary "ADD" (Binary "ADD" a b) c) (Binary "ADD" a (Binary "ADD" b c)) :ruleset explode :name "x-assoc")
"""


def _sum_chain(n: int):
    b = Builder()
    xs = [b.input(f"x{k}", DType.fp32, (2,), at="t") for k in range(n)]
    y = xs[0]
    for x in xs[1:]:
        y = b.add(Ops.ADD, [y, x], at="t")
    return b.program([("y", y)])


def test_builtin_rules_saturate_within_limits_and_report_every_rule():
    st, rep = saturate(load_model(GEMM))
    assert rep.stop == StopReason.saturated
    assert rep.nodes <= rep.limits.nodes and rep.iterations
    assert rep.rules["read-expand"].matches > 0 and rep.rules["read-expand"].file.endswith("movement.egg")
    assert all(it.nodes > 0 for it in rep.iterations)
    text = format_report(rep)
    assert "saturated" in text and "read-expand" in text
    assert rep.to_json()["stop"] == "saturated"


def test_exploding_rules_stop_at_the_node_limit_and_stay_within_it(tmp_path):
    (tmp_path / "explode.egg").write_text(EXPLODE)
    lim = limits(nodes=3000, iterations=100, seconds=60)
    st, rep = saturate(_sum_chain(10), rules_dirs=[str(tmp_path)], limits=lim, builtin=False)
    assert rep.stop == StopReason.node_limit
    assert rep.nodes <= 3000  # the iteration that crossed the limit was rolled back
    assert st.enodes() == rep.nodes
    assert max(it.nodes for it in rep.iterations) > 3000


def test_a_rollback_to_the_phase_snapshot_is_the_e_graph_of_the_iterations_before_the_crossing(tmp_path, monkeypatch):
    """One snapshot a phase (push), the phase's iterations since then run again after the pop: the e-graph is the
    one a run stopped by its iteration limit just before the crossing iteration holds, table for table."""
    import importlib
    sat = importlib.import_module("polysat.egraph.saturate")
    redone = []
    monkeypatch.setattr(sat, "_redo", lambda st, lim, phases, _f=sat._redo: redone.append(len(phases)) or _f(st, lim, phases))
    (tmp_path / "explode.egg").write_text(EXPLODE)
    # 54, 170, 1,024, 8,753 e-nodes (snapshot: past 50,000 / 8), 41,048, then 57,543: rolled back to the 41,048
    st, rep = saturate(_sum_chain(10), rules_dirs=[str(tmp_path)], limits=limits(nodes=50000, iterations=100, seconds=60),
                       builtin=False)
    assert rep.stop == StopReason.node_limit and redone and redone[0] >= 1 and st.pushes == 0
    kept = len(rep.iterations) - 1
    ref, rref = saturate(_sum_chain(10), rules_dirs=[str(tmp_path)], limits=limits(nodes=10**6, iterations=kept, seconds=60),
                         builtin=False)
    assert rref.stop == StopReason.iter_limit and rref.nodes == rep.nodes
    assert _tables(st) == _tables(ref)


def _tables(st) -> dict:
    fz = st.eg._egraph.freeze().functions  # noqa: SLF001
    return {name: [(tuple(r.inputs), r.output) for r in f.rows] for name, f in fz.items()}


def test_iteration_and_time_limits_give_their_stop_reasons(tmp_path):
    (tmp_path / "explode.egg").write_text(EXPLODE)
    st, rep = saturate(_sum_chain(8), rules_dirs=[str(tmp_path)], builtin=False,
                       limits=limits(nodes=10**6, iterations=2, seconds=60))
    assert rep.stop == StopReason.iter_limit and len(rep.iterations) == 2
    st, rep = saturate(_sum_chain(8), rules_dirs=[str(tmp_path)], builtin=False,
                       limits=limits(nodes=10**6, iterations=100, seconds=0))
    assert rep.stop == StopReason.time_limit


def test_limits_come_from_environment_variables(monkeypatch):
    monkeypatch.setenv("POLYSAT_EGRAPH_NODES", "1234")
    monkeypatch.setenv("POLYSAT_EGRAPH_ITERS", "7")
    assert limits().nodes == 1234 and limits().iterations == 7


def test_a_rule_that_equates_different_shapes_is_reported_unsound(tmp_path):
    (tmp_path / "bad.egg").write_text("""
(ruleset wrong)
; law: (false) a reduce equals its body
(rewrite (Reduce f ax i dt x) x :ruleset wrong :name "reduce-is-body")
""")
    with pytest.raises(PolysatError) as e:
        saturate(load_model(GEMM), rules_dirs=[str(tmp_path)], builtin=False)
    d = e.value.diagnostics[0]
    assert d.kind == "UnsoundRule" and "reduce-is-body" in d.at


def test_an_unknown_ruleset_in_a_schedule_is_a_diagnostic_not_a_panic():
    st, _ = saturate(load_model(GEMM), builtin=False)
    with pytest.raises(PolysatError) as e:
        run(st, (Phase("p", ("nope",)),))
    assert e.value.diagnostics[0].code == "E1403"
    assert st.enodes() > 0  # the e-graph is still usable
