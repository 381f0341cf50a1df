"""Loading Tiny IR into the e-graph and extracting it back: values, ids, partitions, diagnostics."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

from polysat.egraph import extract, extract_full, saturate
from polysat.tests.numeric import bind_env, random_inputs, same_outputs
from polysat.tests.work_count import calls_made
from polysat.egraph.partition import Kernel, Partition
from polysat.egraph.state import new_state
from polysat.frontend import load_model
from polysat.ir.builder import Builder
from polysat.ir.diagnostics import PolysatError
from polysat.ir.dtypes import DType
from polysat.ir.tiny import Ops

EXAMPLES = sorted(pathlib.Path(__file__).resolve().parent.parent.glob("examples/*.json"))


def _check_same(p, q, seed=0):
    rng = np.random.default_rng(seed)
    inputs = random_inputs(p, rng, bind_env(p, rng))
    ok, name, err = same_outputs(p, q, inputs)
    assert ok, f"output {name} differs by {err}"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_examples_saturate_and_extract_to_the_same_values(path):
    p = load_model(str(path))
    st, rep = saturate(p)
    q, part, cost = extract(st)
    _check_same(p, q)
    part.check(q)
    assert cost > 0 and rep.stop.value == "saturated"


def test_extraction_without_rules_gives_back_the_program_with_its_ids():
    p = load_model(str(EXAMPLES[0]))
    st, _ = saturate(p, builtin=False)
    q, part, _ = extract(st)
    assert {n.id for n in q.nodes} == {n.id for n in p.nodes}
    assert [n.op for n in q.nodes if n.op != Ops.INPUT] == [p[n.id].op for n in q.nodes if n.op != Ops.INPUT]
    _check_same(p, q)


def _deep_chain(depth: int):
    b = Builder()
    x = b.input("x", DType.fp32, (4,), at="t")
    one = b.const(0.5, DType.fp32, (4,), at="t")
    y = x
    for _ in range(depth):
        y = b.add(Ops.MAX, [b.add(Ops.ADD, [y, one], at="t"), x], at="t")
    return b.program([("y", y)])


def test_loading_a_deep_chain_is_linear_and_extraction_handles_depth():
    """A chain 1,500 deep loads and extracts back whole, and twice the depth at most doubles the Python work of
    loading and extracting (counted calls, give or take 15%; a quadratic step would show as 4x)."""
    half, p = _deep_chain(750), _deep_chain(1500)
    extract(new_state(half, []))  # warm what both share
    got: list = []
    small = calls_made(lambda: extract(new_state(half, [])))
    large = calls_made(lambda: got.append(extract(new_state(p, []))[0]))
    assert large <= 2.3 * small
    (q,) = got
    assert len(q.nodes) == len(p.nodes)
    _check_same(p, q)


def test_unknown_cost_model_is_a_diagnostic():
    st, _ = saturate(load_model(str(EXAMPLES[0])), builtin=False)
    with pytest.raises(PolysatError) as e:
        extract(st, cost="nope")
    assert e.value.diagnostics[0].code == "E1008"


def test_contract_nodes_are_refused_with_a_diagnostic():
    b = Builder()
    a = b.input("a", DType.fp32, (2, 3), at="t")
    w = b.input("w", DType.fp32, (3, 4), at="t")
    c = b.add(Ops.CONTRACT, [a, w], {"lhs_idx": ["m", "k"], "rhs_idx": ["k", "n"], "out_idx": ["m", "n"],
                                    "dtype": "fp32"}, at="t")
    with pytest.raises(PolysatError) as e:
        saturate(b.program([("c", c)]))
    assert e.value.diagnostics[0].kind == "UnknownOp"


def test_partition_check_rejects_a_node_computed_by_two_kernels():
    p = load_model(str(EXAMPLES[0]))
    st, _ = saturate(p)
    q, part, _ = extract(st)
    k = part.kernels[0]
    compute = next(n for n in k.nodes if q[n].op in (Ops.MUL, Ops.ADD, Ops.REDUCE))
    twice = Partition(part.kernels + (Kernel("dup", frozenset({compute}), (compute,), k.inputs),))
    with pytest.raises(PolysatError):
        twice.check(q)


def test_extraction_is_dag_aware_a_shared_subterm_is_paid_once():
    b = Builder()
    x = b.input("x", DType.fp32, (3,), at="t")
    e = b.add(Ops.EXP2, [b.add(Ops.NEG, [x], at="t")], at="t")
    y = b.add(Ops.ADD, [e, e], at="t")
    st, _ = saturate(b.program([("y", y)]), builtin=False)
    x_ = extract_full(st)
    assert x_.cost == 4  # Read, NEG, EXP2, ADD: the shared EXP2 counted once
