"""The stages after the search grow with distinct kernels, not kernels: identical kernels (a layer repeated) are
priced and analysed once, through their canonical region (pricing/kernels.canonical: statements S<k>, tensors
T<j>), and what the analysis says is told in each kernel's own names again."""
from __future__ import annotations

from polysat.analyses import polycore
from polysat.analyses.poly_region import Access, PolyRegion, Statement, TensorInfo
from polysat.commands.extract import run_extract
from polysat.ir.dtypes import DType
from polysat.pricing.kernels import canonical, canonical_names, named_back


def _layers(n: int) -> dict:
    """n softmaxes over n inputs of one shape: n identical kernels under any partition."""
    graph = [{"op": "Softmax", "name": f"s{k}", "inputs": [f"x{k}"], "outputs": [f"y{k}"], "attrs": {"axis": -1}}
             for k in range(n)]
    tensors = {f"{p}{k}": {"dtype": "fp32", "shape": [64, 128]} for k in range(n) for p in "xy"}
    return {"signature": {"inputs": [{"tensor": f"x{k}"} for k in range(n)],
                          "outputs": [{"tensor": f"y{k}"} for k in range(n)]}, "tensors": tensors, "graph": graph}


def test_identical_kernels_are_analysed_once():
    polycore._analyze.cache_clear()
    one = run_extract(_layers(1))
    after_one = polycore._analyze.cache_info().currsize
    polycore._analyze.cache_clear()
    four = run_extract(_layers(4))
    assert len(four["regions"]) == 4 * len(one["regions"])
    assert polycore._analyze.cache_info().currsize == after_one  # four layers, the analyses of one
    a = [r["analysis"] for r in four["regions"]]
    assert all(x == a[0] for x in a)


def test_what_the_canonical_analysis_says_is_told_in_the_kernels_own_names():
    f32 = DType("fp32")
    r = PolyRegion("k", [TensorInfo("act", (8,), f32, "input"), TensorInfo("out", (8,), f32, "output")],
                   [Statement("mul_1", "{ mul_1[i] : 0 <= i < 8 }", (Access("act", "{ mul_1[i] -> act[i] }"),),
                              Access("out", "{ mul_1[i] -> out[i] }"))])
    ren = canonical_names(r)
    assert ren == {"mul_1": "S0", "act": "T0", "out": "T1"}
    c = canonical(r)
    text = f"edge {c.statements[0].name}->{c.statements[0].name} holds 4 B of {c.tensors[1].name}; T17 stays"
    assert named_back(text, ren) == "edge mul_1->mul_1 holds 4 B of out; T17 stays"
