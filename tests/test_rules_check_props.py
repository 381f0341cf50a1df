"""Properties of the soundness checker's parts: rule-directed instances are well typed and match their
rule, e-class values agree with the reference evaluator, the structural diff finds nothing new when
nothing changed, and the ulp tolerance separates a rounding from a changed value."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polysat.egraph.boundaries import default_cuts
from polysat.egraph.graph import export
from polysat.checker.randprog import motif_programs, random_program
from polysat.egraph.rulefiles import discover, parse_file
from polysat.checker.check import Checker, _facts_only
from polysat.checker.diff import check_step, class_map
from polysat.checker.instance import instantiate
from polysat.checker.bounds import Val, exact
from polysat.checker.numerics import EPS, tricky
from polysat.checker.tolerance import agree
from polysat.egraph.rule_pattern import read_query
from polysat.checker.values import Valuer
from polysat.egraph.state import load_program
from polysat.ir.dtypes import DType, round_to
from polysat.ir.evaluate import evaluate


@pytest.fixture(scope="module")
def checker():
    return Checker([parse_file(p) for p in discover()], 0, 1)


def _pattern_rules(ck):
    # a join of facts alone has no term to build; a bookkeeping rule (facts only, no union: the legality
    # facts of rules/fusion.egg, read from the facts' fixpoint) is exercised on programs, not instances
    return [(k, r) for k, r in ck.by_set.items() if "softmax" not in r.name and not _facts_only(r.text)
            and read_query(r.text, r.line, r.name).patterns]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), pick=st.integers(0, 10**6))
def test_rule_directed_instances_are_well_typed_and_valued(checker, seed, pick):
    rules = _pattern_rules(checker)
    name, rule = rules[pick % len(rules)]
    rng = np.random.default_rng(seed)
    inst = instantiate(read_query(rule.text, rule.line, rule.name), rng)
    assert inst is not None, rule.name
    inputs = {t.args[0]: tricky(t.shape, t.dtype, rng) for t in inst.tensors}
    checker._run("(push)")
    try:
        checker._run("\n".join(f"(union (N {k}) {r.sexp()})" for k, r in enumerate(inst.roots)))
        v0 = export(checker._st())
        val = Valuer(v0, inputs)
        val.value_all()
        assert len(val.vals) == len(v0.classes), (rule.name, [r.sexp() for r in inst.roots], val.errors)
        for k, r in enumerate(inst.roots):
            assert val.vals[v0.by_index[k]].v.shape == r.shape
    finally:
        checker._run("(pop)")


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_class_values_of_a_loaded_program_are_the_reference_evaluators(checker, seed):
    rng = np.random.default_rng(seed)
    prog = random_program(rng, int(rng.integers(3, 10))) if seed % 2 else motif_programs(rng)[seed % 8]
    inputs = {n.arg["tensor_id"]: tricky(tuple(int(d) for d in n.shape), n.dtype.value, rng) for n in prog.inputs}
    ref = evaluate(prog, inputs, keep_all=True)
    checker._run("(push)")
    try:
        st_ = checker._st(prog)
        load_program(st_, default_cuts(prog))
        v0 = export(st_)
        val = Valuer(v0, inputs)
        val.value_all()
        for nid, i in st_.index.items():
            got = val.vals[v0.by_index[i]].v
            assert got.dtype == ref[nid].dtype and np.array_equal(got, ref[nid], equal_nan=True), nid
        # nothing ran: the structural diff finds every class again and no new e-node
        v1 = export(st_)
        f = class_map(v0, v1)
        assert set(f) == set(v0.classes)
        res = check_step(v0, val, v1, inputs)
        assert res.new_nodes == 0 and not res.findings
    finally:
        checker._run("(pop)")


@given(x=st.floats(-6e4, 6e4, allow_nan=False, width=32), dt=st.sampled_from(["fp32", "fp16", "bf16"]))
def test_one_rounding_agrees_and_a_changed_value_does_not(x, dt):
    a = round_to(np.array([x], np.float32), DType(dt)).astype(np.float32)
    bound = {dt: EPS[dt] * np.abs(a.astype(np.float64))}  # one rounding into dt on each side
    assert agree(Val(a, bound), Val(a, bound)).all()
    nudged = round_to(a * np.float32(1 + EPS[dt] / 2), DType(dt)).astype(np.float32)
    moved_ok = agree(Val(a, bound), Val(nudged, {dt: EPS[dt] * np.abs(nudged.astype(np.float64))})).all()
    # a rounding moved by one ulp agrees, in bf16 too (a reassociation within rounding passes)
    assert moved_ok
    if abs(x) > 1e-3:
        moved = a * np.float32(1 + 8 * EPS[dt])
        assert not agree(Val(a, bound), Val(moved, bound)).any()
        assert not agree(exact(a), Val(nudged, bound)).all() or np.array_equal(a, nudged)  # a rounding one side adds


@given(seed=st.integers(0, 2**31 - 1), dt=st.sampled_from(["fp32", "fp16", "bf16"]))
def test_tricky_inputs_are_values_of_their_dtype(seed, dt):
    a = tricky((64,), dt, np.random.default_rng(seed))
    assert a.dtype == DType(dt).np
    assert np.array_equal(round_to(a, DType(dt)), a, equal_nan=True)
    assert (a < 0).any()
