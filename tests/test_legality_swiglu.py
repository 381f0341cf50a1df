"""Fusion legality of a SiLU-gated MLP (``down(silu(x@Wg) * (x@Wu))``) as the rules decide it (rules/fusion.egg
``many-to-many``, read by search/legality.py ``violations`` on the extraction's own terms).

SiLU x up fused into the down projection's kernel, the gate and up GEMMs each cut (their sums read from
memory), is legal: the down GEMM reads an elementwise function of two materialized values. Fusing the gate GEMM
too recomputes its sum inside the down projection for every output column (a reduction read by broadcast):
many-to-many, never legal. ``--explain`` reports the latter when it flips SiLU x up alone out of the chosen
partition, whose gate/up kernel already holds it: that rejection names the gate's sum, and is right.
"""
from __future__ import annotations

import math

import pytest

M, D, F = 32, 64, 96


def _mlp() -> bytes:
    from onnx import TensorProto as T
    from onnx import helper as h
    nodes = [h.make_node("MatMul", ["x", "wg"], ["g"], name="gate"), h.make_node("MatMul", ["x", "wu"], ["u"], name="up"),
             h.make_node("Sigmoid", ["g"], ["sg"], name="sig"), h.make_node("Mul", ["g", "sg"], ["sx"], name="silu"),
             h.make_node("Mul", ["sx", "u"], ["hh"], name="swiglu"), h.make_node("MatMul", ["hh", "wd"], ["y"], name="down")]
    ins = [h.make_tensor_value_info(n, T.FLOAT, s) for n, s in (("x", [M, D]), ("wg", [D, F]), ("wu", [D, F]), ("wd", [F, D]))]
    g = h.make_graph(nodes, "mlp", ins, [h.make_tensor_value_info("y", T.FLOAT, [M, D])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()


@pytest.fixture(scope="module")
def mlp():
    import onnx
    from polysat.egraph.graph import export
    from polysat.frontend.onnx import import_onnx
    from polysat.pipeline import Compilation
    from polysat.search.sites import sites
    c = Compilation(import_onnx(onnx.load_from_string(_mlp()), origin="mlp.onnx"), cost="model")
    state = c.saturated[0]
    view = export(state)
    st = sites(view)
    value = {n.children[0]: m for m in st for n in view.classes[m] if n.op == "Mat"}
    by_tag: dict = {}  # the user's op -> the Mat sites of the values it computes
    for node in state.program.nodes:
        cl = view.by_index.get(state.index.get(node.id))
        if cl in value and node.tag:
            by_tag.setdefault(node.tag, set()).add(value[cl])
    return state, view, st, by_tag


def _violations(mlp, ops: tuple, every_site_but: bool = False) -> list:
    """The rules' violations of the decision set fusing the sites of ``ops`` (with every_site_but: every site
    but theirs, the gate/up concatenation's included), on that set's own extraction."""
    from polysat.egraph.extract import solve
    from polysat.search.legality import violations
    from polysat.search.sites import Masked, chosen_terms, masks, stream_sites
    state, view, st, by_tag = mlp
    fused = frozenset(m for op in ops for m in by_tag[op])
    if every_site_but:
        fused = frozenset(st) - fused
    excl, hard, _ = masks(view, st, frozenset(stream_sites(view)), fused)
    best, _ = solve(view, Masked(excl, hard))
    roots = [view.by_index[state.index[nid]] for _, nid in state.program.outputs]
    assert all(r in best and best[r].total < math.inf for r in roots)
    return violations(view, fused, chosen_terms(best, roots))


def test_silu_x_up_into_the_down_projection_is_legal_with_gate_and_up_cut(mlp):
    assert {"gate", "up", "sig", "silu", "swiglu"} <= set(mlp[3])
    assert _violations(mlp, ("sig", "silu", "swiglu")) == []


def test_the_gate_gemm_fused_into_the_down_projection_is_many_to_many(mlp):
    """(The gate/up concatenation fused away too: kept cut, it would hold the gate's sum, read in slices.)"""
    gate_sites = mlp[3]["gate"]
    got = _violations(mlp, ("up",), every_site_but=True)  # only the up GEMM cut: the gate's sum in the down kernel
    assert got and all(v[0] == "many-to-many" for v in got)
    assert any(gate_sites & set(v[1]) for v in got)  # the conflict crosses the gate's own site
