"""Fusion legality decided by rules (rules/fusion.egg, docs/DESIGN.md §Fusion): every partition the
e-graph gives under a decision set the rules' conflicts allow (search/legality.py violations) is legal
by the independent Python check (illegal_fusions, kept as this cross-check), and a user's rule file can
make a fusion legal or illegal."""
from __future__ import annotations

import json
import math
import pathlib

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as hs

from polysat.bench.models import conv_relu_conv, mlp_stack, softmax_axis
from polysat.egraph.extract import solve
from polysat.egraph.graph import export
from polysat.commands.partition_legality import illegal_fusions
from polysat.search.legality import violations
from polysat.egraph.boundaries import all_cuts
from polysat.search.model import ModelCost, saturate_unfused
from polysat.search.sites import Masked, chosen_terms, sites, stream_sites
from polysat.search.sites import masks
from polysat.checker.randprog import motif_programs, random_program
from polysat.egraph.saturate import OPT_IN, default_schedule, rule_files, run
from polysat.egraph.state import new_state
from polysat.egraph.totiny import to_tiny
from polysat.frontend import load_model

EX = pathlib.Path(__file__).resolve().parent.parent / "examples"


def _partitions(st, rng, count: int, legal: bool = True):
    """(program, partition) extracted from the e-graph under `count` random fuse/cut decisions per site
    (every site fused and every site cut among them), those the rules' conflicts forbid left out
    unless ``legal`` is False."""
    view = export(st)
    roots = [view.by_index[st.index[nid]] for _, nid in st.program.outputs]
    st_ = sites(view)
    streams = frozenset(stream_sites(view))
    keys = sorted(st_)
    choices = [frozenset(keys), frozenset()] + [frozenset(k for k in keys if rng.random() < 0.5) for _ in range(count)] + \
        [frozenset(keys) - {k} for k in keys]  # every site fused but one
    for fused in choices:
        excl, hard, kept = masks(view, st_, streams, fused)
        best, _ = solve(view, Masked(excl, hard))
        if not all(r in best and best[r].total < math.inf for r in roots):
            continue
        chosen = chosen_terms(best, roots)
        if legal and violations(view, fused, chosen):
            continue
        yield to_tiny(st, view, chosen, roots, kept)


def _unfused(program):
    """The model cost's saturation of the whole program (one kernel per op loaded, the opt-in rulesets
    run), without cutting it into repeated segments: legality is the rules' on any program."""
    st = new_state(program, rule_files(), cuts=all_cuts(program))
    run(st, default_schedule(st.rulesets, OPT_IN))
    return st


def _assert_all_legal(program, rng, count: int = 6):
    st = _unfused(program)
    n = 0
    for prog, part in _partitions(st, rng, count):
        assert illegal_fusions(prog, part) == [], [k.nodes for k in part.kernels]
        n += 1
    assert n >= 1


def test_every_partition_of_the_examples_and_bench_models_is_legal():
    rng = np.random.default_rng(0)
    models = [str(p) for p in sorted(EX.glob("*.json"))] + [mlp_stack(2, 64), conv_relu_conv(4, 8),
                                                            softmax_axis([2, 6, 3], 1), softmax_axis([3, 4, 5], 0)]
    for m in models:
        _assert_all_legal(load_model(m), rng)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hs.integers(min_value=0, max_value=2**31 - 1))
def test_every_partition_of_random_programs_is_legal(seed):
    rng = np.random.default_rng(seed)
    progs = [random_program(rng, int(rng.integers(3, 10)))] + motif_programs(rng)[:2]
    for p in progs:
        _assert_all_legal(p, rng, count=3)


# ---- a user's rule file changes legality ------------------------------------------------------------

NO_REDUCE_FUSION = """\
; law: bookkeeping only: a reduction is never computed in the kernel that reads it
(rule ((= e (Read (Mat x) s m)) (= x (Reduce f ax i dt y)))
      ((set (fuse-veto e) 1)) :ruleset fusion-search :name "user-no-reduce-fusion")
"""

PREFIX_CONFLICT = """\
; law: bookkeeping only: a reduction read at a prefix of its reader's loop order is not fused (a conflict)
(rule ((reduce-read r s m ax "prefix") (eval-at r s m ax p) (= p (Site z q))) ((fuse-conflict p r))
      :ruleset fusion-conflicts :name "user-prefix-conflict")
"""

GEMM_INTO_GEMM = """\
; law: bookkeeping only: any sum may be computed inside its reader's kernel (GEMM -> GEMM recomputed)
(rule ((reduce-read r s m ax k) (= r (Reduce "SUM" rax i dt y))) ((set (fusable r s m ax) 1))
      :ruleset fusion-facts :name "user-fuse-any-sum")
"""


def _kernels(model, rules_dir=None) -> int:
    st, _ = saturate_unfused(load_model(model), [str(rules_dir)] if rules_dir else None)
    return len(ModelCost().search(st).best.priced)


def test_a_user_rule_that_forbids_fusing_reductions_splits_softmax(tmp_path):
    (tmp_path / "no_reduce.egg").write_text(NO_REDUCE_FUSION)
    softmax = str(EX / "softmax.json")
    assert _kernels(softmax) == 1
    assert _kernels(softmax, tmp_path) > 1


def test_a_user_rule_that_adds_a_conflict_makes_a_legal_fusion_illegal(tmp_path):
    # softmax is one kernel by the shipped rules (legal-prefix); the user's rule file states the prefix
    # read of its max and sum a conflict, and the search then keeps them in kernels of their own
    (tmp_path / "prefix_conflict.egg").write_text(PREFIX_CONFLICT)
    softmax = str(EX / "softmax.json")
    st, rep = saturate_unfused(load_model(softmax), [str(tmp_path)])
    assert rep.rules["user-prefix-conflict"].matches >= 1 and export(st).conflicts
    assert _kernels(softmax) == 1
    assert _kernels(softmax, tmp_path) > 1


def _gemm_gemm() -> dict:
    t = lambda s: {"dtype": "fp32", "shape": s}  # noqa: E731
    return {"signature": {"inputs": [{"tensor": "X"}, {"tensor": "W1", "role": "param"}, {"tensor": "W2", "role": "param"}],
                          "outputs": [{"tensor": "Y"}]},
            "tensors": {"X": t([8, 4]), "W1": t([4, 6]), "W2": t([6, 2]), "H": {"dtype": "fp32"}, "Y": t([8, 2])},
            "graph": [{"op": "GEMM", "name": "g1", "inputs": ["X", "W1"], "outputs": ["H"]},
                      {"op": "GEMM", "name": "g2", "inputs": ["H", "W2"], "outputs": ["Y"]}]}


def test_a_user_rule_can_allow_a_fusion_the_shipped_rules_do_not(tmp_path):
    st, rep = saturate_unfused(load_model(_gemm_gemm()))
    assert rep.rules["many-to-many"].matches >= 1 and export(st).conflicts  # GEMM1 inside GEMM2: a conflict
    fused = [(p, k) for p, k in _partitions(st, np.random.default_rng(0), 0, legal=False) if len(k.kernels) == 1]
    assert fused and illegal_fusions(*fused[0]), "the one-kernel GEMM -> GEMM is many-to-many"
    assert [k for _, k in _partitions(st, np.random.default_rng(0), 0) if len(k.kernels) == 1] == []
    (tmp_path / "gemm_gemm.egg").write_text(GEMM_INTO_GEMM)
    st, _ = saturate_unfused(load_model(_gemm_gemm()), [str(tmp_path)])
    assert not export(st).conflicts, "the user's rule allows GEMM1 computed inside GEMM2's body"
    assert [k for _, k in _partitions(st, np.random.default_rng(0), 0) if len(k.kernels) == 1]


def test_the_rules_report_names_the_conflict():
    st, rep = saturate_unfused(load_model(_gemm_gemm()))
    search = ModelCost().search(st)
    assert any("many-to-many" in r.why for r in search.rejected), [r.why for r in search.rejected]
    json.dumps(rep.to_json())


def test_a_size_one_axis_is_not_an_axis_the_kernel_must_own():
    """$fusion-class: LayerNorm's row mean of x [1, S, D] read at (i0, i1) in the row's kernel is owned
    (the ONNX importer's batch axis of size one is read at 0, no tile's); a read along an axis no
    tile owns stays a broadcast."""
    from polysat.egraph.ixfns import fusion_class
    assert fusion_class("[1, 16, 64]", "(i0, i1)", "()") == "owned"
    assert fusion_class("[1, 16, 64, 64]", "(i0, i1)", "(3)") == "owned"
    assert fusion_class("[1, 16, 64, 64]", "(0, (i3)//16, i1, i3 - 16*((i3)//16))", "()") == "broadcast"
