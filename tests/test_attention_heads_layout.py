"""The transformer block's attention and output projection on tensor-core kinds: packed views of head
splits and merges (ir/region_squeeze.py ``packed_view``), the attention output stored in the order the
projection reads it (ir/region_layout.py), the attention kind reading and writing heads interleaved
(``AttentionSpec.heads``).

* packed views against hand-worked addresses, and the cases that have none;
* a small block (d 128, 2 heads of 64, symbolic S): the attention region binds to ``attention`` with
  heads interleaved, the projection to ``gemm`` with the residual epilogue; for S 32 to 80 (tails of the
  64-row tiles) every kernel's numpy meaning equals playback of its region, the whole block on the host
  runtime equals the reference evaluator, and the layout changes no value of playback;
* the interleaved spec's meaning equals the packed spec's on the transposed tensors;
* the generated kernels build with nvcc for sm_80 and sm_90a without spills, with mma.sync / wgmma.
"""
from __future__ import annotations

import copy
import dataclasses
import importlib.util
import pathlib

import numpy as np
import pytest

from polysat.backend import kinds
from polysat.backend.attention.reference import reference
from polysat.backend.attention.render import render
from polysat.backend.attention.plan import choose_plan
from polysat.backend.attention.spec import AttentionSpec
from polysat.backend.scores.plan import choose_plan as choose_scores_plan
from polysat.backend.common.gpu import tma_strides
from polysat.backend.common.nvcc import missing_instructions
from polysat.bench.models import transformer
from polysat.cli import random_inputs
from polysat.ir.evaluate import evaluate
from polysat.ir.diagnostics import PolysatError
from polysat.ir.expr import Expr
from polysat.ir.playback import playback
from polysat.ir.region import R
from polysat.ir.region_layout import store_for_readers
from polysat.ir.region_squeeze import packed_view
from polysat.pipeline import Compilation
from polysat.runtime.host import host_runtime
from polysat.runtime.model import parameter_names

HERE = pathlib.Path(__file__).parent
_spec = importlib.util.spec_from_file_location("polysat_test_oracle", HERE / "oracle.py")
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)

S, E, H = Expr.var("S"), Expr.var("e"), Expr.var("h")


def test_packed_views_of_head_splits_and_merges():
    sizes = {"s": S, "h": 12, "d": 64, "e": 768, "j": 32}
    s, h, d, e = (Expr.var(a) for a in "shde")
    assert packed_view((s, 64 * h + d), (S, 768), sizes) == ((S, 12, 64), (s, h, d))  # the head split
    assert packed_view((0, s, e.floordiv(64), e.mod(64)), (1, S, 12, 64), sizes) == ((S, 768), (s, e))  # merge
    assert packed_view((s, e), (S, 768), sizes) == ((S, 768), (s, e))  # already plain
    assert packed_view((e.floordiv(64), s, e.mod(64)), (12, S, 64), sizes) is None  # heads outside the rows
    assert packed_view((s, 64 * h + d + 1), (S, 768), sizes) is None  # an offset
    assert packed_view((s, Expr.var("j")), (S, 768), sizes) is None  # a part of each row
    assert packed_view((s, h + d), (S, 768), sizes) is None  # two axes with one stride


def _block():
    return Compilation(transformer(blocks=1, d_model=128, heads=2, d_ff=256), cost="model")


@pytest.fixture(scope="module")
def block():
    return _block()


def _by_kind(c):
    return [(r, *kinds.bind(r)) for r in c.regions]


def test_attention_and_projection_bind_to_tensor_core_kinds(block):
    bound = _by_kind(block)
    attn = [(r, b) for r, k, b in bound if k.name == "attention"]
    assert len(attn) == 1
    r, b = attn[0]
    assert b.spec.batch == (2,) and (b.spec.d, b.spec.dv) == (64, 64) and b.spec.causal
    assert b.spec.cols[3] == (0, 128, 64)  # O [S, 2 heads * 64]
    assert all(ld >= 2 * 64 and hs == 64 for _, ld, hs in b.spec.cols[:3])
    assert b.spec.scale == pytest.approx(1 / 8)
    out = r.outputs[0].name
    readers = [(x, k, bb) for x, k, bb in bound if any(i.name == out for i in x.inputs)]
    assert [k.name for _, k, _ in readers] == ["gemm"]
    (_, _, g), = readers
    assert [op.kind for op in g.spec.epilogue] == ["cast", "residual"] and g.spec.k == 128  # (P rounded) + X
    # the attention output is stored [rows, heads, head dim]: the projection reads a [S, 128] matrix
    lets = r.let_map
    assert lets[r.yields[0].src].op == R.TRANSPOSE
    assert store_for_readers(block.regions) == block.regions  # laid out once: nothing left to gain
    assert store_for_readers(_as_synthesized(block).regions) == block.regions


def _as_synthesized(c):
    """c's regions without the layout pass (the extraction reused)."""
    import polysat.ir.region_layout as layout
    plain = copy.copy(c)
    plain._cache = {k: v for k, v in c._cache.items() if k != "region"}
    keep = layout.store_for_readers
    layout.store_for_readers = lambda regions: regions
    try:
        plain.regions
    finally:
        layout.store_for_readers = keep
    return plain


@pytest.mark.parametrize("s", [32, 47, 64, 80])
def test_small_block_kernels_equal_playback_and_the_reference(block, s):
    """Per kernel (its kind's numpy meaning of the spec on the region's arrays in the spec's shapes, as the
    runtime hands them) against playback of its region on the same inputs: within the fp16 output rounding.
    Whole block, one arena (runtime/host.py): against the reference evaluator within 1e-2 (a 128-wide
    block of fp16 kernels: the per-kernel roundings, e.g. P rounded at the running max, add up through
    the LayerNorm). Playback of the laid-out regions is bit for bit that of the regions as synthesized."""
    prog, env = block.program, {"S": s}
    ins = {k: v * 0.25 for k, v in random_inputs(prog, env, s).items()}
    vals = {**ins, **playback(block.regions, ins, keep_all=True)}
    for r, kind, b in _by_kind(block):
        got = kind.reference(b.spec, b.arrays({x.name: vals[x.name] for x in r.inputs}, env), env)
        want = vals[r.outputs[0].name]
        oracle.assert_close(np.asarray(got).reshape(want.shape), want, "fp16", f"{r.name} ({kind.name}), S={s}")
    synthesized = playback(_as_synthesized(block).regions, ins)
    ref = evaluate(prog, ins)
    rt = host_runtime(block.regions, parameter_names(block.doc), playback_only=False)
    got = rt.run(ins)
    assert sum(not st.on_cpu and st.kind.name == "attention" for st in rt.steps) == 1
    for k in ref:
        np.testing.assert_array_equal(vals[k], synthesized[k])
        np.testing.assert_allclose(got[k].astype(np.float64), ref[k], rtol=1e-2, atol=1e-2, err_msg=f"S={s}")


def test_column_windows_mean_the_packed_attention_of_the_windows():
    """Q the second piece of [m, 64 + 3*64], K and V the pieces of one fused [n, 2*3*64] matrix."""
    rng = np.random.default_rng(1)
    m, n, h, d = 37, 45, 3, 64
    q = rng.uniform(-1, 1, (m, 64 + h * d)).astype(np.float16)
    kv = rng.uniform(-1, 1, (n, 2 * h * d)).astype(np.float16)
    cols = ((64, 64 + h * d, d), (0, 2 * h * d, d), (h * d, 2 * h * d, d), (0, h * d, d))
    win = AttentionSpec("a", m, n, d, d, batch=(h,), causal=True, scale=0.125, cols=cols)
    packed = AttentionSpec("a", m, n, d, d, batch=(h,), causal=True, scale=0.125)
    got = reference(win, {"Q": q, "K": kv, "V": kv})

    def heads(x, off):
        return np.stack([x[:, off + i * d: off + (i + 1) * d] for i in range(h)])
    want = reference(packed, {"Q": heads(q, 64), "K": heads(kv, 0), "V": heads(kv, h * d)})
    assert got.shape == (m, h * d)
    np.testing.assert_array_equal(got.reshape(m, h, d), want.swapaxes(0, 1))
    assert AttentionSpec.from_json(win.to_json()) == win
    with pytest.raises(PolysatError):  # a window past its row
        AttentionSpec("a", m, n, d, d, batch=(h,), cols=((64, h * d, d), *cols[1:]))


def test_interleaved_kernels_build_without_spills(block):
    (b,) = [b for _, k, b in _by_kind(block) if k.name == "attention"]
    index = []
    for arch, flag in (("sm80", "sm80"), ("sm90", "sm90")):
        ks = render(b.spec, choose_plan(b.spec, arch))
        assert ks.skeleton == arch
        index.append((f"heads/{arch}", flag, ks))
    for label, arch, ks, rep in oracle.nvcc_builds(index, "interleaved attention kernels"):
        assert rep.ok, f"{label}:\n{rep.log[-3000:]}"
        assert rep.spills == 0 and rep.stack_frame == 0, f"{label} spills:\n{rep.log}"
        assert missing_instructions(rep, ks.skeleton) == [], (label, rep.ptx_counts)
        assert rep.count("wgmma.mma_async" if ks.skeleton == "sm90" else "mma.sync") > 0


def test_interleaved_tensor_maps_stride_rows_over_the_heads():
    cols = ((576, 3 * 576, 64), (0, 3 * 576, 64), (1152, 3 * 576, 64), (0, 192, 64))  # a fused [S, 3*3*64] Q/K/V
    spec = AttentionSpec("a", "S", "S", 64, 64, batch=(3,), cols=cols)
    ks = render(spec, choose_plan(spec, "sm90"))
    sizes = {"d": 64, "dv": 64, "m": 50, "n": 50, "batch": 3}
    for op, (off, ld, hs) in zip(ks.tma, cols):  # (d, rows, batch): rows ld elements apart, heads hs
        assert tma_strides(op, sizes, 2) == [ld * 2, hs * 2] and op.offset == off
    plain = dataclasses.replace(spec, cols=())
    packed = render(plain, choose_plan(plain, "sm90"))
    assert [tma_strides(op, sizes, 2) for op in packed.tma] == [[128, 128 * 50]] * 3


@pytest.fixture(scope="module")
def block_size():
    return Compilation(transformer(blocks=1, d_model=128, heads=2, d_ff=256), cost="size")


def test_size_cost_scores_read_the_projections_heads_and_equal_playback(block_size):
    """--cost size: attention's two-region form; its softmax_scores region reads Q and K as column windows
    of the [S, 128] projections, equals playback of its region, and builds for sm_80 without spills."""
    bound = _by_kind(block_size)
    scores = [(r, k, b) for r, k, b in bound if k.name == "softmax_scores"]
    assert len(scores) == 1
    r, kind, b = scores[0]
    assert b.spec.cols == ((0, 128, 64), (0, 128, 64)) and b.spec.batch == (2,) and b.spec.causal
    for s in (33, 80):
        env = {"S": s}
        ins = {k: v * 0.25 for k, v in random_inputs(block_size.program, env, s).items()}
        vals = {**ins, **playback(block_size.regions, ins, keep_all=True)}
        got = kind.reference(b.spec, b.arrays({x.name: vals[x.name] for x in r.inputs}, env), env)
        want = vals[r.outputs[0].name]
        oracle.assert_close(np.asarray(got).reshape(want.shape), want, "fp16", f"scores, S={s}")
    ks = kind.render(b.spec, choose_scores_plan(b.spec, "sm80"))
    for label, arch, ks, rep in oracle.nvcc_builds([("scores/sm80", "sm80", ks)], "windowed scores kernel"):
        assert rep.ok and rep.spills == 0 and rep.stack_frame == 0, rep.log[-3000:]
        assert rep.count("mma.sync") > 0 and missing_instructions(rep, ks.skeleton) == []
