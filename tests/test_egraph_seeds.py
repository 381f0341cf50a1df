"""docs/DESIGN.md §RB-SSA: the region bodies come out of extraction from the naive Tiny IR the frontend writes."""
from __future__ import annotations

import pathlib

import numpy as np

from polysat.egraph import extract_full, saturate
from polysat.tests.numeric import bind_env, random_inputs, same_outputs
from polysat.egraph.printer import format_terms
from polysat.frontend import load_model
from polysat.ir.tiny import Ops

EX = pathlib.Path(__file__).resolve().parent.parent / "examples"


def _run(name):
    p = load_model(str(EX / name))
    st, _ = saturate(p)
    x = extract_full(st)
    rng = np.random.default_rng(1)
    ok, out, err = same_outputs(p, x.program, random_inputs(p, rng, bind_env(p, rng)))
    assert ok, (out, err)
    return p, x


def _nodes(x, op):
    return [n for c, n in x.chosen.items() if n.op == op]


def _strip_cast(x, c):
    n = x.chosen[c]
    while n.op == "Cast":
        c = n.children[0]
        n = x.chosen[c]
    return c, n


def _read(x, c):
    c, n = _strip_cast(x, c)
    assert n.op == "Read", f"expected a direct Read, got {n.op}\n{format_terms(x.chosen, x.roots)}"
    mem = x.chosen[n.children[0]]
    return mem.args[0] if mem.op == "Tensor" else mem.op, n.args[1]


def test_gemm_bias_relu_is_a_c_con1_contraction_with_a_broadcast_epilogue():
    p, x = _run("gemm_bias_relu.json")
    (red,) = _nodes(x, "Reduce")
    assert red.args[0] == "SUM" and red.args[1] == "(2)" and red.args[3] == "fp32"
    body = x.chosen[red.children[0]]
    assert body.op == "Binary" and body.args[0] == "MUL"
    reads = sorted(_read(x, c) for c in body.children)
    assert reads == [("A", "(i0, i2)"), ("B", "(i2, i1)")]  # A[m,k], B[k,n]: no broadcast tensor is built
    assert len(x.partition.kernels) == 1
    text = format_terms(x.chosen, x.roots)
    assert "Expand" not in text and "Permute" not in text and "Reshape" not in text


def test_conv_reads_its_input_through_a_select_guard_inside_the_reduce():
    p, x = _run("conv3x3_s2_silu.json")
    (red,) = _nodes(x, "Reduce")
    body = x.chosen[red.children[0]]
    assert body.op == "Binary" and body.args[0] == "MUL"
    kinds = {}
    for c in body.children:
        c, n = _strip_cast(x, c)
        kinds[n.op] = (c, n)
    assert set(kinds) == {"Select", "Read"}
    sel = kinds["Select"][1]
    then, other = x.chosen[sel.children[0]], x.chosen[sel.children[1]]
    assert then.op == "Read" and x.chosen[then.children[0]].args == ("X",)
    assert then.args[1] == "(0, i5, 2*i3 + i6 - 1, 2*i4 + i7 - 1)"  # stride 2, pad 1 folded into the map
    assert other.op == "Const" and float(other.args[0]) == 0.0
    assert sel.args[0] == "2:1:1;3:1:1"  # guarded: 0 <= h < H and 0 <= w < W
    assert len(x.partition.kernels) == 1
    pads = [n for n in x.program.nodes if n.op == Ops.PAD]
    assert len(pads) == 1 and x.program[pads[0].src[0]].op == Ops.INPUT  # padding reads X itself


def test_attention_row_softmax_keeps_max_and_sum_reduces_apart_in_one_region():
    p, x = _run("attention_row_softmax.json")
    ops = sorted(n.args[0] for n in _nodes(x, "Reduce"))
    assert ops == ["MAX", "SUM", "SUM"]  # QK^T sum, row max, row sum: never merged (R4)
    mx = next(n for n in _nodes(x, "Reduce") if n.args[0] == "MAX")
    inner = x.chosen[mx.children[0]]
    assert inner.op == "Reduce" and inner.args[0] == "SUM"  # max over the contraction, not merged into it
    qk = inner
    body = x.chosen[qk.children[0]]
    assert sorted(_read(x, c) for c in body.children) == [("K", "(i0, i1, i3, i4)"), ("Q", "(i0, i1, i2, i4)")]
    assert any(n.op == "Unary" and n.args[0] == "EXP2" for n in x.chosen.values())
    assert len(x.partition.kernels) == 1


def test_attention_materializes_p_before_the_second_contraction():
    p, x = _run("attention.json")
    assert len(x.partition.kernels) == 2
    first, second = x.partition.kernels
    (pv,) = first.outputs
    assert x.program[pv].dtype.value == "fp16"  # P is written in fp16 and re-read by P.V
    assert pv in second.inputs


def test_terms_of_a_chain_deeper_than_the_recursion_limit_print():
    """The term printer walks in post-order: a chain of single-use terms longer than Python's recursion limit
    prints (each term nested in the next)."""
    import sys

    from polysat.egraph.graph import ENode
    from polysat.egraph.printer import format_terms
    n = sys.getrecursionlimit() + 500
    chosen = {0: ENode("Tensor", ("x",), (), 0, 0)}
    for c in range(1, n):
        chosen[c] = ENode("Unary", ("NEG",), (c - 1,), c, c)
    text = format_terms(chosen, (n - 1,))
    assert text.startswith("out0 = NEG(NEG(") and text.count("NEG(") == n - 1 and text.endswith("x" + ")" * (n - 1))
