"""Property: for random Tiny IR programs, load -> saturate -> extract -> evaluate equals the
reference evaluator on the original program (rtol = atol = 1e-3)."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from polysat.egraph import extract, saturate
from polysat.tests.numeric import bind_env, random_inputs, same_outputs
from polysat.checker.randprog import motif_programs, random_program
from polysat.ir.printer import format_program


def _roundtrip(p, seed):
    sat, rep = saturate(p)
    q, part, _ = extract(sat)
    part.check(q)
    rng = np.random.default_rng(seed)
    ok, name, err = same_outputs(p, q, random_inputs(p, rng, bind_env(p, rng)))
    assert ok, f"output {name} off by {err}\n{format_program(p)}\n--- extracted ---\n{format_program(q)}"


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(3, 14))
def test_random_programs_keep_their_value_through_the_egraph(seed, size):
    _roundtrip(random_program(np.random.default_rng(seed), size), seed)


@settings(max_examples=3, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_motif_programs_keep_their_value_through_the_egraph(seed):
    for p in motif_programs(np.random.default_rng(seed)):
        _roundtrip(p, seed)
