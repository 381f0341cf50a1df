"""The pooled e-graph (egraph/state.py pooled_state): each segment saturated in one e-graph that holds the
schema and rule files, pushed and popped, gives what a fresh e-graph gives, and the pool is back at its base."""
from __future__ import annotations

import importlib

import pytest

from polysat.bench.models import mlp_stack, transformer
from polysat.egraph import state as S
from polysat.egraph.graph import export
from polysat.egraph.saturate import default_limits, rule_files
from polysat.frontend import program_from_doc
from polysat.search.model import _saturate_one, _saturate_pooled
from polysat.search.segment import segment


def _segments(doc: dict) -> list:
    out: dict = {}
    for sg in segment(program_from_doc(doc, "model")):
        out.setdefault(sg.key, sg.program)
    return list(out.values())


def _sizes(eg) -> dict:
    (out,) = S.run_text(eg, "(print-size)")
    return dict(out.sizes)


def _same(pooled: tuple, fresh: tuple) -> None:
    (a, ra), (b, rb) = pooled, fresh
    assert a.eg is None and a.view is not None  # the pooled state kept its view and gave its e-graph back
    v, w = a.view, export(b)
    assert v.classes == w.classes and v.shape == w.shape and v.dtype == w.dtype and v.by_index == w.by_index
    assert (v.nodes, v.vetoed, v.conflicts) == (w.nodes, w.vetoed, w.conflicts)
    assert (ra.stop, ra.nodes, [(i.phase, i.nodes) for i in ra.iterations]) == \
        (rb.stop, rb.nodes, [(i.phase, i.nodes) for i in rb.iterations])
    assert a.no_facts == b.no_facts


def _base_sizes() -> dict:
    eg = S.base_egraph()
    S.validate(rule_files(None, True), eg)
    return _sizes(eg)


def test_pooled_segments_saturate_as_fresh_e_graphs_and_the_pool_returns_to_its_base():
    progs = _segments(transformer(2, d_model=32, heads=2, d_ff=64, seq=8, dtype="fp32")) + \
        _segments(mlp_stack(2, width=32, tokens=16, dtype="fp32"))
    assert len(progs) >= 2
    for p in progs + progs[:1]:  # (the first again: after others, the pool gives the same)
        _same(_saturate_pooled(p, None, None, True), _saturate_one(p, None, None, True))
    (pool,) = S._POOL.values()  # noqa: SLF001
    assert _sizes(pool) == _base_sizes()  # no segment's terms or facts left behind


def test_a_limit_stopped_pooled_saturation_pops_its_own_snapshots_too():
    p = _segments(transformer(2, d_model=32, heads=2, d_ff=64, seq=8, dtype="fp32"))[0]
    full = _saturate_one(p, None, None, True)[1]
    lim = default_limits(nodes=full.nodes - 1)  # the saturation snapshots each iteration (push) and stops
    pooled = _saturate_pooled(p, None, lim, True)
    assert pooled[1].stop.value == "node_limit" and pooled[0].no_facts
    assert pooled[0].pushes > 1  # snapshots of the iterations before the stop were left open: all popped
    _same(pooled, _saturate_one(p, None, lim, True))
    (pool,) = S._POOL.values()  # noqa: SLF001
    assert _sizes(pool) == _base_sizes()


def test_a_failure_inside_drops_the_pooled_e_graph_and_a_nested_use_builds_its_own():
    p, q = _segments(mlp_stack(2, width=32, tokens=16, dtype="fp32"))[:1] * 2
    files = rule_files(None, True)
    with pytest.raises(ValueError):
        with S.pooled_state(p, files) as st:
            with S.pooled_state(q, files) as inner:
                assert inner.eg is not st.eg  # the pooled e-graph is in use: the nested one is its own
                nested = inner.eg
            raise ValueError("inside")
    (pool,) = S._POOL.values()  # noqa: SLF001
    assert st.eg is None and pool is nested  # the nested one put back (at its base); the failed one dropped
    assert _sizes(pool) == _base_sizes()
    _same(_saturate_pooled(p, None, None, True), _saturate_one(p, None, None, True))


def test_a_small_e_graph_saturated_in_fewer_egglog_calls_is_the_one_a_call_per_ruleset_gives(monkeypatch):
    """On a small e-graph (egraph/saturate.py GROWTH) an iteration's rulesets and the analysis's first chunk run in
    one egglog call: the same e-graph, row for row, and the same iterations as one call per ruleset."""
    SA = importlib.import_module("polysat.egraph.saturate")
    p = _segments(transformer(2, d_model=32, heads=2, d_ff=64, seq=8, dtype="fp32"))[0]
    calls = []
    real = SA._Driver._call  # noqa: SLF001

    def counting(self, sched):
        calls.append(sched)
        return real(self, sched)
    monkeypatch.setattr(SA._Driver, "_call", counting)  # noqa: SLF001
    few = _saturate_pooled(p, None, None, True)
    n = len(calls)
    monkeypatch.setattr(SA, "GROWTH", 10 ** 12)  # no e-graph is small: a call per ruleset, the analysis apart
    _same(few, _saturate_one(p, None, None, True))
    assert len(calls) - n > n  # (the other run: more calls than the small graph's)
