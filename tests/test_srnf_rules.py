"""SRNF is decided by the rules of rules/srnf.egg firing in the e-graph (docs/DESIGN.md §RB-SSA, SRNF).

Every SRNF rule fires on a shipped example program: examples/channel_pool.json (a CBAM-style channel
pooling head: relu, then a mean over W then H and a max over W then H) under the default schedule and
under the unfused (`--cost model`) load, and examples/conv_relu_maxpool.json under the unfused load
(the pool's max over a fused relu). The regions then hold the merged, hoisted form the rules produced,
playback equals the numpy reference, and `polysat rules --check --only srnf.egg` passes.
"""
from __future__ import annotations

import json
import pathlib

import numpy as np

from polysat.egraph.api import extract
from polysat.search.model import saturate_unfused
from polysat.egraph.region_synth import synthesize
from polysat.egraph.rulefiles import list_rules
from polysat.egraph.saturate import saturate
from polysat.checker.check import check_rules
from polysat.frontend import load_model
from polysat.ir.evaluate import evaluate
from polysat.ir.playback import playback
from polysat.ir.region import R, walk

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def example(name: str):
    return load_model(json.loads((EXAMPLES / f"{name}.json").read_text()))


def srnf_matches(rep) -> dict:
    return {r.name: r.matches for r in rep.rules.values() if r.ruleset == "srnf"}


def test_every_srnf_rule_fires_on_a_named_example():
    pool, conv = example("channel_pool"), example("conv_relu_maxpool")
    default = srnf_matches(saturate(pool)[1])
    unfused = srnf_matches(saturate_unfused(pool)[1])
    conv_unfused = srnf_matches(saturate_unfused(conv)[1])
    assert {n: default[n] > 0 for n in ("srnf-merge-sum", "srnf-merge-max-min", "srnf-hoist-div-const",
                                        "srnf-epilogue-max-relu")} == dict.fromkeys(
        ("srnf-merge-sum", "srnf-merge-max-min", "srnf-hoist-div-const", "srnf-epilogue-max-relu"), True), default
    assert {n: unfused[n] > 0 for n in ("srnf-merge-fused", "srnf-hoist-div-const-fused",
                                        "srnf-epilogue-max-relu-fused")} == dict.fromkeys(
        ("srnf-merge-fused", "srnf-hoist-div-const-fused", "srnf-epilogue-max-relu-fused"), True), unfused
    assert conv_unfused["srnf-epilogue-max-relu-fused"] > 0, conv_unfused
    shipped = {name for f, name, rs, _ in list_rules() if rs == "srnf"}
    fired = {n for d in (default, unfused, conv_unfused) for n, c in d.items() if c}
    assert shipped and shipped == fired, shipped - fired


def test_regions_read_the_normal_form_the_rules_produced():
    p = example("channel_pool")
    st, _ = saturate(p)
    q, part, _ = extract(st)
    regions = synthesize(q, part)
    reduces = [n for r in regions for lt in r.lets for n in walk(lt.expr) if n.op == R.REDUCE]
    # R0: one Reduce per pooling (over H and W together); R3: the max reads X, the relu is its epilogue;
    # R1: the means' divisions sit after the sum
    assert sorted((n.arg[0], len(n.arg[1])) for n in reduces) == [("max", 2), ("sum", 2)], reduces
    mx = next(n for n in reduces if n.arg[0] == "max")
    assert not [n for n in walk(mx.src[0]) if n.op == R.UNARY and n.arg == "relu"]
    sm = next(n for n in reduces if n.arg[0] == "sum")
    assert not [n for n in walk(sm.src[0]) if n.op == R.BINARY and n.arg == "div"]
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 64, 7, 7)).astype(np.float16)
    want = evaluate(p, {"X": x})["Y"]
    got = playback(regions, {"X": x})["Y"]
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-3, atol=1e-3)


def test_srnf_rules_check_sound_and_exercised():
    rep = check_rules(cases=2, only=["srnf.egg"], seed=11, budget=4)
    assert rep.exit_status == 0 and len(rep.verdicts) == 7, rep.format()
