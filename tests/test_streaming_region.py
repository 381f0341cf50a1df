"""The RB-SSA streaming construct ``online_softmax_sum`` (docs/DESIGN.md §Streaming) on its own: JSON round trip, the
validators' diagnostics, and CPU playback running it key block by key block, checked against the
two-kernel softmax written out in numpy (rows fully masked included) for random shapes and blocks."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from polysat.ir import region as rg
from polysat.ir.diagnostics import PolysatError
from polysat.ir.dtypes import DType, round_to
from polysat.ir.expr import Expr
from polysat.ir.playback import playback
from polysat.ir.region import Buffer, Let, MemRef, Region, Yield, region_json
from polysat.ir.region_load import region_from_json
from polysat.analyses.region_validate import validate_regions

F32 = np.float32
LOG2E = F32(1.4426950408889634)
AXES = ("i", "d", "j")


def attention_region(m, n, dv, p=DType.fp16, block=64, passes=1, masked=False, key="j", dtype=DType.fp32) -> Region:
    """O[i, d] = online_softmax_sum<j>(S[i, j] (or -inf where M[i, j] is false), V[j, d])."""
    names = ("i", "d", key)
    s = rg.read("S", [Expr.var("i"), Expr.var(key)], DType.fp32, names)
    if masked:
        s = rg.select(rg.read("K", [Expr.var("i"), Expr.var(key)], DType.bool, names), s,
                      rg.const(-math.inf, DType.fp32), DType.fp32)
    v = rg.read("V", [Expr.var(key), Expr.var("d")], DType.fp32, names)
    o = rg.online_softmax_sum((key,), s, v, p, block, passes, axis_order=names)
    if dtype != o.dtype:
        o = rg.RNode(rg.R.ONLINE, o.src, o.arg, dtype, o.axes)
    inputs = [Buffer("S", MemRef((m, n), DType.fp32)), Buffer("V", MemRef((n, dv), DType.fp32))]
    if masked:
        inputs.append(Buffer("K", MemRef((m, n), DType.bool)))
    return Region("attn", (("i", m), ("d", dv)), ((key, n),), tuple(inputs),
                  (Buffer("O", MemRef((m, dv), DType.fp32), "gmem", True),), (Let("o", o),),
                  (Yield("o", "O", DType.fp32, ("i", "d")),))


def two_kernel(s, v, p, passes):
    """The meaning, as the reference evaluator computes the frontend's softmax then P V (fp32)."""
    with np.errstate(all="ignore"):
        m = s.max(axis=-1, keepdims=True)
        e = np.exp2((s - m) * LOG2E).astype(F32)
        total = e.sum(axis=-1, keepdims=True, dtype=F32)
        if passes == 2:
            return round_to(e / total, p).astype(F32) @ v
        return (round_to(e, p).astype(F32) @ v) / total


def test_json_round_trips_and_prints():
    r = attention_region(5, 130, 8, DType.bf16, block=32, passes=2, masked=True)
    assert region_from_json(region_json(r)) == r
    doc = region_json(r)["region"]["lets"][0]["expr"]
    assert set(doc["online_softmax_sum"]) == {"axes", "p_dtype", "block", "passes", "scores", "values"}
    assert doc["online_softmax_sum"]["passes"] == 2 and doc["dtype"] == "fp32"
    assert "online_softmax_sum<j; p=bf16; block=32; passes=2; fp32>" in rg.format_region(r)
    assert validate_regions([r]) == []


@pytest.mark.parametrize("bad,kind,why", [
    (dict(key="q"), "AxisAlignmentMismatch", "not declared"),
    (dict(passes=3), "InvalidAttribute", "once or twice"),
    (dict(block=0), "InvalidAttribute", "positive number of keys"),
    (dict(dtype=DType.fp16), "AccDtypeMissing", "fp32"),
    (dict(p=DType.i32), "DtypeMismatch", "float type"),
])
def test_validator_names_what_is_wrong(bad, kind, why):
    r = attention_region(4, 9, 3, **bad)
    if "key" in bad:  # the key axis is used but the region declares j, not q
        r = Region(r.name, r.iters, (("j", 9),), r.inputs, r.outputs, r.lets, r.yields)
    diags = [d for d in validate_regions([r]) if d.is_error]
    assert any(d.kind == kind and why in d.why for d in diags), [str(d) for d in diags]


def test_validator_rejects_scores_that_do_not_run_along_the_key_axis():
    r = attention_region(4, 9, 3)
    s = rg.read("S", [Expr.var("i"), Expr.const(0)], DType.fp32, AXES)
    o = rg.online_softmax_sum(("j",), s, r.lets[0].expr.src[1], DType.fp16, axis_order=AXES)
    r = Region(r.name, r.iters, r.reduce_axes, r.inputs, r.outputs, (Let("o", o),), r.yields)
    assert any("do not run along its key axis" in d.why for d in validate_regions([r]))


def test_unguarded_read_inside_the_scores_is_caught():
    r = attention_region(4, 9, 3)
    s = rg.read("S", [Expr.var("i"), Expr.var("j") + 1], DType.fp32, AXES)
    o = rg.online_softmax_sum(("j",), s, r.lets[0].expr.src[1], DType.fp16, axis_order=AXES)
    r = Region(r.name, r.iters, r.reduce_axes, r.inputs, r.outputs, (Let("o", o),), r.yields)
    assert any(d.kind == "UnguardedAccess" for d in validate_regions([r]))


@settings(max_examples=40, deadline=None)
@given(m=st.integers(1, 9), n=st.integers(1, 200), dv=st.integers(1, 9), block=st.sampled_from([1, 7, 16, 64, 256]),
       p=st.sampled_from([DType.fp16, DType.bf16]), passes=st.sampled_from([1, 2]), masked=st.booleans(),
       seed=st.integers(0, 2 ** 16))
def test_playback_walks_key_blocks_and_equals_the_two_kernel_softmax(m, n, dv, block, p, passes, masked, seed):
    """Blocks of any size (1 key, a tail, the whole row at once) give the two-kernel value of the same
    passes, rtol = atol = 1e-3; a row whose keys are all masked is NaN, like the reference; scores
    larger than the running max arriving late exercise the rescaling."""
    rng = np.random.default_rng(seed)
    s = (rng.standard_normal((m, n)) * 4 + np.linspace(0, 8, n)).astype(F32)  # later keys tend to be larger
    v = rng.standard_normal((n, dv)).astype(F32)
    inputs = {"S": s, "V": v}
    if masked:
        keep = rng.random((m, n)) < 0.7
        keep[0] = False  # one row sees no key at all
        inputs["K"] = keep
        s = np.where(keep, s, F32(-np.inf))
    got = playback([attention_region(m, n, dv, p, block, passes, masked)], inputs)["O"]
    want = two_kernel(s, v, p, passes)
    assert np.allclose(got, want, rtol=1e-3, atol=1e-3, equal_nan=True), np.nanmax(np.abs(got - want))
    assert np.array_equal(np.isnan(got), np.isnan(want))
    if masked:
        assert np.isnan(got[0]).all()


def test_one_pass_rounds_p_at_the_running_max_not_after_normalising():
    """fp16 P: the one-pass value is (sum round(e) v) / l, which differs (slightly) from rounding e / l;
    the two-pass value is exactly the latter (same rounding point as the frontend's softmax)."""
    rng = np.random.default_rng(0)
    s = rng.standard_normal((6, 100)).astype(F32)
    v = rng.standard_normal((100, 5)).astype(F32)
    one = playback([attention_region(6, 100, 5, passes=1, block=100)], {"S": s, "V": v})["O"]
    two = playback([attention_region(6, 100, 5, passes=2, block=100)], {"S": s, "V": v})["O"]
    assert np.allclose(one, two_kernel(s, v, DType.fp16, 1), rtol=1e-6, atol=1e-6)
    assert np.allclose(two, two_kernel(s, v, DType.fp16, 2), rtol=1e-6, atol=1e-6)
    assert not np.array_equal(one, two) and np.allclose(one, two, rtol=1e-3, atol=1e-3)


def test_nested_streams_over_one_key_axis_are_an_error():
    r = attention_region(3, 5, 2)
    inner = r.lets[0].expr
    o = rg.online_softmax_sum(("j",), rg.reduce("sum", ("d",), inner, DType.fp32), inner.src[1], DType.fp16,
                              axis_order=AXES)
    bad = Region(r.name, r.iters, r.reduce_axes, r.inputs, r.outputs, (Let("o", o),), r.yields)
    with pytest.raises(PolysatError):
        playback([bad], {"S": np.zeros((3, 5), F32), "V": np.zeros((5, 2), F32)})
