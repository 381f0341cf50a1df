"""Fusion legality as rules (rules/fusion.egg) and its post-check on extracted kernels (docs/DESIGN.md §Fusion):
the read classes, which boundaries get a fused alternative in the e-graph, many-to-many never, and
the rules' soundness."""
from __future__ import annotations

import pathlib

from hypothesis import given, settings, strategies as hs

from polysat.checker import check_rules
from polysat.egraph import list_rules
from polysat.egraph.graph import export
from polysat.egraph.ixfns import read_kind
from polysat.commands.partition_legality import illegal_fusions
from polysat.egraph.boundaries import all_cuts
from polysat.search.model import ModelCost, saturate_unfused
from polysat.egraph.partition import Kernel, Partition
from polysat.egraph.rulefiles import RULES_DIR
from polysat.frontend import load_model
from polysat.ir.tiny import GroupOp, Ops

EX = pathlib.Path(__file__).resolve().parent.parent / "examples"


def _t(dtype, shape):
    return {"dtype": dtype, "shape": shape}


GEMM_GEMM = {  # fp32 so that no cast sits between the two contractions
    "signature": {"inputs": [{"tensor": "X"}, {"tensor": "W1", "role": "param"}, {"tensor": "W2", "role": "param"}],
                  "outputs": [{"tensor": "Y"}]},
    "tensors": {"X": _t("fp32", [64, 32]), "W1": _t("fp32", [32, 48]), "W2": _t("fp32", [48, 16]), "H": {"dtype": "fp32"},
                "Y": _t("fp32", [64, 16])},
    "graph": [{"op": "GEMM", "name": "g1", "inputs": ["X", "W1"], "outputs": ["H"]},
              {"op": "GEMM", "name": "g2", "inputs": ["H", "W2"], "outputs": ["Y"]}]}


# ---- the read classes --------------------------------------------------------------------------

def test_read_kind_by_hand():
    assert read_kind("[1, 32, 17, 17, 2, 2]", "(i0, i1, 2*i2 + i4, 2*i3 + i5)") == "halo"  # maxpool window
    assert read_kind("[R, C]", "(i0, i1)") == "halo"  # one-to-one
    assert read_kind("[R, C]", "(i0)") == "prefix"  # a row statistic (softmax max)
    # GEMM2 reads GEMM1's output by a projection: "owned" for the rules; the loop order of the
    # contraction (its reduced axis i2 inner) cannot own i1, which the post-check below rejects
    assert read_kind("[T, 1024, 256]", "(i0, i2)") == "owned"
    assert read_kind("[T, 1024, 256]", "(i0 + 1, i2)") == "broadcast"  # shifted: no tile owns the rest
    assert read_kind("[B, H, M, N]", "(i0, i1, i2, 0)") == "prefix"


@settings(max_examples=25, deadline=None)
@given(hs.permutations(range(4)), hs.integers(min_value=1, max_value=2))
def test_every_axis_moving_is_halo_and_dropping_a_middle_axis_is_owned(perm, drop):
    s = "[5, 6, 7, 8]"
    assert read_kind(s, "(" + ", ".join(f"i{k}" for k in perm) + ")") == "halo"
    kept = [k for k in range(4) if k != drop]
    assert read_kind(s, "(" + ", ".join(f"i{k}" for k in kept) + ")") == "owned"
    assert read_kind(s, "(" + ", ".join(f"i{k}" for k in kept) + " + 1)") == "broadcast"
    assert read_kind(s, "(" + ", ".join(f"i{k}" for k in range(drop)) + ")") == "prefix"


# ---- fused and unfused alternatives in one e-graph ---------------------------------------------

def _classes_with_cut_reads(st):
    view = export(st)
    out = []
    for c, ns in view.classes.items():
        for n in ns:
            if n.op == "Read" and any(m.op == "Mat" for m in view.classes[n.children[0]]):
                x = next(m for m in view.classes[n.children[0]] if m.op == "Mat").children[0]
                out.append((c, n, x, view))
    return out


def test_window_read_of_conv_gets_a_fused_alternative_and_the_load_is_one_kernel_per_op():
    p = load_model(str(EX / "conv_relu_maxpool.json"))
    st, _ = saturate_unfused(p)
    reads = _classes_with_cut_reads(st)
    assert reads
    windows = [(c, n, x, v) for c, n, x, v in reads if read_kind(n.args[0], n.args[1]) == "halo"
               and any(m.op == "Reduce" for m in v.classes[x])]
    assert windows, "the pool's window read of the conv (a reduce) must be a cut read"
    # the loaded reads get their fused alternative; a read a recomputation made (fuse-recompute-unary:
    # relu recomputed in the pool over the conv read from memory) stays a cut read
    fused = [c for c, n, x, v in windows if any(m.op == "View" and m.children == (x,) for m in v.classes[c])]
    assert len(fused) >= len(windows) - 1 and fused, "no fused alternative"
    s = ModelCost().search(st)
    assert len(s.baseline.priced) > len(s.best.priced) == 1


def test_prefix_read_of_a_reduction_gets_a_fused_alternative():
    st, _ = saturate_unfused(load_model(str(EX / "softmax.json")))
    prefix = [(c, x, v) for c, n, x, v in _classes_with_cut_reads(st)
              if read_kind(n.args[0], n.args[1]) == "prefix" and any(m.op == "Reduce" for m in v.classes[x])]
    assert prefix
    assert all(any(m.op == "View" for m in v.classes[c]) for c, x, v in prefix)


def test_many_to_many_is_never_taken():
    # GEMM2 reads GEMM1's result by a projection (i0, i2) inside its body, whose loop order keeps the
    # reduced axis i2 inner, so no tile owns i1: rule many-to-many (rules/fusion.egg) makes fusing
    # GEMM1's site a conflict, and no partition the search takes fuses it
    st, _ = saturate_unfused(load_model(GEMM_GEMM))
    owned = [(n.children[0], v) for c, n, x, v in _classes_with_cut_reads(st)
             if read_kind(n.args[0], n.args[1]) == "owned" and any(m.op == "Reduce" for m in v.classes[x])]
    assert owned, "GEMM2 must read GEMM1's result through a cut projection read"
    site, v = owned[0]
    assert any(k.sites == frozenset({site}) for k in v.conflicts), (v.conflicts, site)
    s = ModelCost().search(st)
    assert len(s.best.priced) == 2
    assert illegal_fusions(s.best.extraction.program, s.best.extraction.partition) == []


# ---- the legality post-check on extracted kernels ----------------------------------------------

def _one_kernel(p):
    nodes = frozenset(n.id for n in p.nodes if n.op != Ops.INPUT)
    outs = tuple(nid for _, nid in p.outputs)
    return Partition((Kernel("k0", nodes, outs, tuple(n.id for n in p.inputs)),))


def test_post_check_rejects_gemm_into_gemm_and_accepts_row_reductions_and_windows():
    bad = illegal_fusions(*(lambda p: (p, _one_kernel(p)))(load_model(GEMM_GEMM)))
    assert bad and all("many-to-many" in b[3] for b in bad)
    for name in ("softmax", "layernorm", "conv_relu_maxpool", "gemm_bias_relu"):
        p = load_model(str(EX / f"{name}.json"))
        assert illegal_fusions(p, _one_kernel(p)) == [], name


def test_all_cuts_cut_every_compute_edge_outside_contractions():
    p = load_model(str(EX / "layernorm.json"))
    cuts = all_cuts(p)
    compute = [n for n in p.nodes if n.op not in GroupOp.Movement and n.op not in GroupOp.Leaf]
    assert len(cuts) >= len(compute) - len(p.outputs) - 2
    g = load_model(str(EX / "gemm_bias_relu.json"))
    red = next(n for n in g.nodes if n.op == Ops.REDUCE)
    assert all(e[0] != red.id for e in all_cuts(g)), "the contraction's MUL stays with its REDUCE"


# ---- the rules themselves ----------------------------------------------------------------------

def test_fusion_rules_are_named_with_laws_and_sound():
    rules = [r for r in list_rules() if pathlib.Path(r[0]).name == "fusion.egg"]
    names = {r[1] for r in rules}
    assert {"fuse-halo", "fuse-prefix", "fuse-recompute", "many-to-many", "fuse-materialized-read",
            "split-reduce-before-broadcast"} <= names
    assert all(r[3] for r in rules)
    rep = check_rules([str(RULES_DIR / "fusion.egg")], cases=1, builtin=False, seed=0)
    assert not rep.errors and not any(v.unsound or v.error for v in rep.verdicts), \
        [(v.rule.name, v.counterexample) for v in rep.verdicts if v.unsound] + rep.errors
    # the pieces of a materialized view exist only where rules/siblings.egg concatenates sibling GEMMs:
    # the full check (tests/test_rules_check.py) exercises those with it
    concat = {"piece-operand", "want-piece-view-of", "piece-view-of", "want-eval-cut-read-view", "eval-cut-read-view"}
    assert [v.rule.name for v in rep.verdicts if v.fired < 1] == sorted(concat, key=[v.rule.name for v in rep.verdicts].index)
