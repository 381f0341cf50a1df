"""Sibling GEMMs (rules/siblings.egg): contractions that read one operand get the alternative of one
materialized concatenation along N whose slices are the original values; the rules are sound, fire
on sibling_gemms and on the bench transformer's Q/K/V, and the merged partition computes what the
reference evaluator computes."""
from __future__ import annotations

import numpy as np

from polysat.bench.models import sibling_gemms, transformer
from polysat.egraph import check_rules
from polysat.egraph.cost import SizeCost
from polysat.egraph.extract import extract_classes
from polysat.egraph.graph import export
from polysat.egraph.region_synth import synthesize
from polysat.egraph.totiny import to_tiny
from polysat.ir.evaluate import evaluate
from polysat.ir.playback import playback
from polysat.ir.region_narrow import narrow_boundaries
from polysat.pipeline import Compilation


def _concats(view) -> dict:
    """Mat class of each concatenation the rules made -> the value classes holding a slice of it."""
    def is_cat(c):
        return any(n.op == "View" and any(b.op == "Binary" and b.args[0] == "ADD" for b in view.classes[n.children[0]])
                   for n in view.classes[c])
    out: dict = {}
    for cid, ns in view.classes.items():
        for n in ns:
            if n.op == "Read":
                mem = view.classes[n.children[0]]
                if any(m.op == "Mat" and is_cat(m.children[0]) for m in mem):
                    out.setdefault(n.children[0], set()).add(cid)
    return out


class _Merged(SizeCost):
    """Size, with every other spelling of a sibling's value priced out: the merged partition."""
    name = "merged-siblings"

    def __init__(self, view, cats: dict):
        self.slices = {c for cs in cats.values() for c in cs}
        self.mats = set(cats)
        self.view = view

    def enode_cost(self, node, view) -> float:
        if node.eclass in self.slices and not (node.op == "Read" and node.children[0] in self.mats):
            return 1e6
        return super().enode_cost(node, view)


def _merged_partition(doc: dict):
    c = Compilation(doc, cost="model")
    st, report = c.saturated
    view = export(st)
    cats = _concats(view)
    roots = [view.by_index[st.index[nid]] for _, nid in st.program.outputs]
    chosen, _ = extract_classes(view, roots, _Merged(view, cats))
    prog, part = to_tiny(st, view, chosen, roots)
    return c, report, cats, prog, part


def _inputs(program, rng) -> dict:
    return {n.arg["tensor_id"]: (rng.standard_normal(tuple(int(d) for d in n.shape)) * 0.5).astype(np.float16)
            for n in program.inputs}


def _check_playback(c, prog, part, rng) -> None:
    xs = _inputs(c.program, rng)
    want = evaluate(c.program, xs)
    got = playback(narrow_boundaries(synthesize(prog, part)), xs)
    for name, _ in c.program.outputs:
        np.testing.assert_allclose(np.asarray(got[name], np.float32), np.asarray(want[name], np.float32), rtol=1e-3, atol=1e-3)


def test_the_sibling_rules_are_sound_and_exercised():
    rep = check_rules(cases=3, seed=5, budget=3, only=["siblings"])
    assert rep.exit_status == 0, rep.format()
    assert {v.rule.name for v in rep.verdicts} == {"mark-sibling-gemm", "sibling-gemms-concat2", "sibling-gemms-concat3"}


def test_two_sibling_gemms_become_one_kernel_reading_x_once():
    c, report, cats, prog, part = _merged_partition(sibling_gemms(tokens=8, width=32))
    assert report.rules["sibling-gemms-concat2"].matches >= 1
    assert len(cats) == 1 and len(next(iter(cats.values()))) == 2  # Ya and Yb are slices of one buffer
    gemm = [k for k in part.kernels if sum(prog[i].op.name == "REDUCE" for i in k.nodes) == 2]
    assert len(gemm) == 1 and list(gemm[0].inputs).count("X") == 1  # one kernel computes both, X read once
    _check_playback(c, prog, part, np.random.default_rng(0))


def test_q_k_v_of_the_transformer_concatenate_into_one_gemm():
    c, report, cats, prog, part = _merged_partition(transformer(1, d_model=64, heads=2, d_ff=128, seq=16))
    assert report.rules["sibling-gemms-concat3"].matches >= 1
    assert report.rules["sibling-gemms-concat2"].matches == 0  # the group of three is concatenated once, whole
    assert report.stop.value == "saturated"
    (slices,) = cats.values()  # one concatenation; Q, K, V and their consumers' views read slices of it
    assert len(slices) >= 3
    weights = {"b0_Wq", "b0_Wk", "b0_Wv"}
    gemms = [k for k in part.kernels if weights & set(k.inputs)]
    assert len(gemms) == 1 and weights <= set(gemms[0].inputs)  # one kernel computes Q, K and V
    (out,) = gemms[0].outputs
    assert tuple(prog[out].shape) == (16, 3 * 64)  # ... into one [S, 3 d_model] buffer
    _check_playback(c, prog, part, np.random.default_rng(1))
