"""The fusion legality facts (rules/fusion.egg ``fusion-facts``) stay small on the graphs that made them blow up:
a walk is rooted only where a kernel can start, a path is one fact whatever spelling of a read it crossed, and a
concatenation of many pieces is a balanced sum (docs/DESIGN.md §Fusion; frontend/lower_gather.py)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from polysat.bench.corpora.scale_models import WeightFree, _io
from polysat.frontend import program_from_doc, with_parameters
from polysat.frontend.onnx import import_onnx
from polysat.ir.evaluate import evaluate
from polysat.ir.tiny import Ops
from polysat.pipeline import Compilation


def _dense_block(layers: int) -> dict:
    """A DenseNet block: each layer's conv-BN-ReLU output concatenated to everything before it."""
    g = WeightFree()
    x, cin = "image", 16
    for _ in range(layers):
        x = g.op("Concat", [x, g.conv_bn(x, cin, 8, 3)], axis=1)
        cin += 8
    g.op("Identity", [x])
    g.nodes[-1].output[0] = "out"
    return import_onnx(g.built([_io("image", [1, 16, 8, 8])], "out", [1, cin, 8, 8], "dense"))


def _facts(doc) -> tuple:
    """(eval-at rows, the e-graph's frozen tables, the search's stop) of a --cost model compile."""
    c = Compilation(doc, cost="model")
    st, rep = c.saturated
    assert rep.stop.value == "saturated", rep.stop
    fz = st.eg._egraph.freeze().functions  # noqa: SLF001
    return len(fz["eval-at"].rows), fz, c


def test_a_dense_block_keeps_its_facts_polynomial_and_roots_walks_only_where_kernels_start():
    """Each layer's conv reads every concatenation below it through a read of its own spelling per layer: one
    fact a path, not one per spelling (45,282 eval-at rows at 6 layers when the read was recorded, 2,493 now);
    a walk starts only at a materialized value or a program output."""
    n4, _, _ = _facts(_dense_block(4))
    n8, fz, c = _facts(_dense_block(8))
    assert n8 < 6000 and n8 < 4 * n4, (n4, n8)  # quadratic in the layers at most (exponential: 9,776 at 4)
    mats = {r.inputs[0] for r in fz["Mat"].rows}
    outs = {r.inputs[0] for r in fz["program-out"].rows}
    tops = [r.inputs[0] for r in fz["Top"].rows]
    assert tops and all(t in mats or t in outs for t in tops)
    assert c.search.best.total < c.search.baseline.total  # and the search ran on those facts


def test_a_wide_concatenation_is_a_balanced_sum_and_means_what_onnxruntime_computes():
    """13 pieces concatenated: ceil(log2 13) = 4 adds from the result to any piece, the same values as
    onnxruntime's Concat (each element one piece's value plus zeros)."""
    k = 13
    ins = [helper.make_tensor_value_info(f"x{j}", TensorProto.FLOAT, [2, j % 3 + 1]) for j in range(k)]
    width = sum(j % 3 + 1 for j in range(k))
    g = helper.make_graph([helper.make_node("Concat", [f"x{j}" for j in range(k)], ["y"], axis=1)], "cat", ins,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, width])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    rng = np.random.default_rng(0)
    feeds = {f"x{j}": rng.standard_normal((2, j % 3 + 1)).astype(np.float32) for j in range(k)}
    feeds["x0"][0, 0] = -0.0
    doc = import_onnx(m)
    p = program_from_doc(doc)
    depth: dict = {}
    for n in p.nodes:
        depth[n.id] = max((depth[s] for s in n.src), default=0) + (n.op == Ops.ADD)
    (_, out), = p.outputs
    assert depth[out] == 4, depth[out]
    got = evaluate(p, with_parameters(doc, feeds))["y"]
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_array_equal(got, want)


# Every path from a root, recorded at every value on the way (the walk before `to-reduce`, `cross` and `step`), as a
# user's rule file: the oracle for the facts the shipped walk keeps where it matters, at the reductions.
EVERY_PATH = """\
(relation every-at (Term String String String Sites))
; law: bookkeeping only: a materialized value is a kernel's root
(rule ((has-shape x s) (= mz (Mat x))) ((every-at x s (py-to-string (py-call $identity-map (py-from-string s))) "()" (Top x)))
      :ruleset fusion-facts :name "every-root")
; law: bookkeeping only: a program output is a kernel's root
(rule ((has-shape x s) (program-out x)) ((every-at x s (py-to-string (py-call $identity-map (py-from-string s))) "()" (Top x)))
      :ruleset fusion-facts :name "every-root-output")
; law: bookkeeping only: a Reduce's body is evaluated in its loop order
(rule ((= x (Reduce f ax i dt y)) (has-shape y s)) ((every-at y s (py-to-string (py-call $identity-map (py-from-string s))) ax (Root x)))
      :ruleset fusion-facts :name "every-reduce-body")
; law: bookkeeping only: an elementwise operand, where its consumer is
(rule ((every-at x s m ax p) (operand x y)) ((every-at y s m ax p)) :ruleset fusion-facts :name "every-operand")
; law: bookkeeping only: a view's operand, at the view's map
(rule ((every-at x s m ax p) (view-of x y f)) ((want-reach f m)) :ruleset fusion-facts :name "every-want-view")
; law: bookkeeping only: (the composed map)
(rule ((every-at x s m ax p) (view-of x y f) (= c (reach f m))) ((every-at y s c ax p)) :ruleset fusion-facts :name "every-view")
; law: bookkeeping only: across a cut read
(rule ((every-at e s m ax p) (= e (Read (Mat z) s2 m2)) (computed z) (!= e z)) ((want-reach m2 m))
      :ruleset fusion-facts :name "every-want-cut-read")
; law: bookkeeping only: (the composed map)
(rule ((every-at e s m ax p) (= e (Read (Mat z) s2 m2)) (computed z) (!= e z) (= c (reach m2 m)))
      ((every-at z s c ax (Site (Mat z) p))) :ruleset fusion-facts :name "every-cut-read")
; law: bookkeeping only: across a fused read
(rule ((every-at e s m ax p) (= e (View z s2 m2)) (= mz (Mat z)) (!= e z)) ((want-reach m2 m))
      :ruleset fusion-facts :name "every-want-fused-read")
; law: bookkeeping only: (the composed map)
(rule ((every-at e s m ax p) (= e (View z s2 m2)) (= mz (Mat z)) (!= e z) (= c (reach m2 m)))
      ((every-at z s c ax (Site mz p))) :ruleset fusion-facts :name "every-fused-read")
"""


def test_the_walk_keeps_every_path_to_a_reduction_and_only_those(tmp_path, monkeypatch):
    """A soft mixture of experts (erf-GELU MLPs: long elementwise chains over cut reads, softmaxes, a concatenation):
    the facts at the reductions, which every conflict is made of, are those of a walk that records every path at
    every value (a user's rule file, EVERY_PATH); the shipped walk keeps a third of its rows or fewer (the paths
    to values no reduction lies below, and the operands that are only reads, hold none). Saturated whole (its
    experts side by side are otherwise parallel segments, search/branches.py)."""
    from polysat.bench.corpora.scale_models import soft_moe
    from polysat.egraph.graph import export
    from polysat.search import branches
    from polysat.search.model import saturate_unfused
    monkeypatch.setattr(branches, "parallel", lambda prog: None)
    (tmp_path / "every_path.egg").write_text(EVERY_PATH)
    p = program_from_doc(import_onnx(soft_moe(2, tokens=8, d=16, hidden=32)))
    st, rep = saturate_unfused(p, [str(tmp_path)])
    assert rep.stop.value == "saturated", rep.stop
    fz = st.eg._egraph.freeze().functions  # noqa: SLF001
    reductions = {r.output for r in fz["Reduce"].rows}

    def at_reductions(table: str) -> set:
        return {tuple(r.inputs) for r in fz[table].rows if r.inputs[0] in reductions}
    kept, every = at_reductions("eval-at"), at_reductions("every-at")
    assert every and kept == every, (len(kept), len(every), len(every - kept))
    assert 3 * len(fz["eval-at"].rows) <= len(fz["every-at"].rows), (len(fz["eval-at"].rows), len(fz["every-at"].rows))
    assert export(st).conflicts  # GEMM -> GELU -> GEMM: conflicts, made of those facts


def test_a_read_merged_into_its_value_after_its_crossing_was_recorded_walks_no_cycle():
    """A crossing (`cross`, `step`) is a fact: when the read it was recorded for later joins its value's class (an
    identity read equals its value, and the checker's pool runs rewrites between rounds of the facts), the walk
    asks again whether the read is still a boundary, as the old per-node rules did; the stale crossing walked round
    that class forever, one more site a round (the checker's pool never settled: piece-operand never fired)."""
    from polysat.egraph.boundaries import all_cuts
    from polysat.egraph.saturate import rule_files
    from polysat.egraph.state import new_state
    from polysat.ir.builder import Builder
    from polysat.ir.dtypes import DType
    b = Builder("cycle")
    x = b.input("X", DType.fp32, (3, 4), at="t")
    z = b.reduce(x, "SUM", (1,), DType.fp32, at="t")
    p = b.program([("w", b.add(Ops.EXP2, [z], at="t"))])
    st = new_state(p, rule_files(), cuts=all_cuts(p))
    facts = "(seq (saturate (run analysis)) (run fusion-facts))"
    st.run(f"(run-schedule (saturate (run analysis)) (saturate (run fusion-search)) (saturate {facts}))")
    fz = st.eg._egraph.freeze().functions  # noqa: SLF001
    assert fz["cross"].rows and fz["step"].rows  # the exp's operand read crosses into the reduction
    zi = st.index[z.id]
    st.run(f'(union (Read (Mat (N {zi})) "[3]" "(i0)") (N {zi}))')
    st.run(f"(run-schedule (repeat 8 {facts}))")
    rows = len(st.eg._egraph.freeze().functions["eval-at"].rows)  # noqa: SLF001
    st.run(f"(run-schedule (repeat 8 {facts}))")
    assert len(st.eg._egraph.freeze().functions["eval-at"].rows) == rows  # noqa: SLF001 — a fixpoint, not a cycle


def test_a_cycle_through_one_site_is_walked_once_round():
    """An e-graph cycle through a site: the value holds a view of its own read back (z = reshape(read of z as
    [3, 1]), as Swin's window partition and its inverse land in one class). No extraction's terms visit z twice,
    so no path crosses the site it crossed last (`last-of`): the facts reach their fixpoint, every path's sites distinct; a
    walk round the cycle added a site a round (Swin's facts ran into the 20 s limit)."""
    from polysat.egraph.boundaries import all_cuts
    from polysat.egraph.saturate import rule_files
    from polysat.egraph.state import new_state
    from polysat.ir.builder import Builder
    from polysat.ir.dtypes import DType
    b = Builder("cycle")
    x = b.input("X", DType.fp32, (3, 4), at="t")
    z = b.reduce(x, "SUM", (1,), DType.fp32, at="t")
    p = b.program([("w", b.add(Ops.EXP2, [z], at="t"))])
    st = new_state(p, rule_files(), cuts=all_cuts(p))
    zi = st.index[z.id]
    st.run(f'(union (N {zi}) (Reshape (Read (Mat (N {zi})) "[3, 1]" "(i0)") "[3]"))')
    facts = "(seq (saturate (run analysis)) (run fusion-facts))"
    st.run(f"(run-schedule (saturate (run analysis)) (saturate (run fusion-search)) (repeat 30 {facts}))")
    fz = st.eg._egraph.freeze().functions  # noqa: SLF001
    rows = len(fz["eval-at"].rows)
    st.run(f"(run-schedule (repeat 8 {facts}))")
    fz = st.eg._egraph.freeze().functions  # noqa: SLF001
    assert len(fz["eval-at"].rows) == rows  # a fixpoint
    site = {r.output: r.inputs for r in fz["Site"].rows}

    def sites(q) -> list:
        out = []
        while q in site:
            out.append(site[q][0])
            q = site[q][1]
        return out
    paths = [sites(r.inputs[4]) for r in fz["eval-at"].rows]
    assert any(paths) and all(len(set(s)) == len(s) for s in paths)
