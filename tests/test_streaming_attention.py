"""Attention as ONE streamed region (docs/DESIGN.md §Streaming):
under ``--cost=model`` the streaming rules turn softmax ->
P V into one ``online_softmax_sum`` region (one pass for fp16 P, two passes for bf16 P), chosen because
Poly Core prices it cheaper; CPU playback of it equals the reference evaluator (rtol = atol = 1e-3, plus
half an ulp of the 16-bit output) causal and not, M == N, M < N, M > N (rows that see no key are NaN in
both), symbolic sizes, fp16 and bf16, head dims 64 and 128, N not a multiple of the key block; the backend
recognises it as an AttentionSpec whose numpy meaning equals the playback, and the GEMM recogniser does not.
"""
from __future__ import annotations

import importlib.util
import json
import pathlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from polysat.backend.common.region_match import NoBind
from polysat.backend.attention.bind import bind as attention_binding
from polysat.backend.attention.reference import reference as attention_reference
from polysat.backend.gemm.bind import bind as gemm_binding
from polysat.commands.extract import run_extract
from polysat.egraph.stream import BLOCK, groups
from polysat.ir.evaluate import evaluate
from polysat.ir.playback import playback
from polysat.ir.region import R, walk
from polysat.egraph.region_synth import partition_from_materialized, synthesize
from polysat.analyses.region_validate import validate_regions
from polysat.pipeline import Compilation

_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)

EX = pathlib.Path(__file__).resolve().parent.parent / "examples"


def attention_doc(dt: str, m, n, d: int, dv: int, causal: bool, batch=("B", "H"), scale=None) -> dict:
    attrs = {"causal": causal} if scale is None else {"causal": causal, "scale": scale}
    return oracle.model({"Q": (dt, [*batch, m, d]), "K": (dt, [*batch, n, d]), "V": (dt, [*batch, n, dv])},
                        [oracle.node("Attention", ["Q", "K", "V"], "O", **attrs)], ["O"], {"O": {"dtype": dt}})


_COMPILED: dict = {}


def compiled(dt: str, causal: bool, d: int = 64, dv: int = 64, m="M", n="N", batch=("B", "H")) -> Compilation:
    key = (dt, causal, d, dv, m, n, batch)
    if key not in _COMPILED:
        c = Compilation(attention_doc(dt, m, n, d, dv, causal, batch), cost="model")
        c.regions  # noqa: B018 — compile now: every test below reuses it
        _COMPILED[key] = c
    return _COMPILED[key]


def online_nodes(regions) -> list:
    return [x for r in regions for let in r.lets for x in walk(let.expr) if x.op == R.ONLINE]


def inputs(batch: tuple, m: int, n: int, d: int, dv: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {"Q": rng.standard_normal((*batch, m, d)).astype(np.float32),
            "K": rng.standard_normal((*batch, n, d)).astype(np.float32),
            "V": rng.standard_normal((*batch, n, dv)).astype(np.float32)}


def check(c: Compilation, ins: dict, dt: str) -> np.ndarray:
    ref = evaluate(c.program, ins)["O"]
    got = playback(c.regions, ins)["O"]
    assert got.dtype == ref.dtype
    oracle.assert_close(got.astype(np.float64), ref.astype(np.float32).astype(np.float64), dt, what="O")
    assert np.array_equal(np.isnan(got.astype(np.float32)), np.isnan(ref.astype(np.float32)))
    return ref


@pytest.mark.parametrize("dt,passes", [("fp16", 1), ("bf16", 2)])
@pytest.mark.parametrize("causal", [True, False])
def test_attention_is_one_streamed_region(dt, causal, passes):
    c = compiled(dt, causal)
    (r,) = c.regions
    (o,) = online_nodes(c.regions)
    assert o.arg[1].value == dt and o.arg[3] == passes
    assert not [x for let in r.lets for x in walk(let.expr) if x.op == R.REDUCE and x.arg[0] == "max"]  # no row max let
    assert [b.name for b in r.inputs] == ["Q", "K", "V"] and [b.name for b in r.outputs] == ["O"]


@settings(max_examples=25, deadline=None)
@given(dt=st.sampled_from(["fp16", "bf16"]), causal=st.booleans(), dims=st.sampled_from([(64, 64), (128, 128)]),
       m=st.integers(1, 160), n=st.integers(1, 200), b=st.integers(1, 2), h=st.integers(1, 2),
       seed=st.integers(0, 2 ** 16))
def test_playback_of_the_streamed_region_equals_the_reference(dt, causal, dims, m, n, b, h, seed):
    """Symbolic B, H, M, N bound from the inputs: one compiled region serves every size; N spans several
    key blocks, with tails; causal M > N leaves the first M - N rows without keys (NaN in both)."""
    d, dv = dims
    c = compiled(dt, causal, d, dv)
    ref = check(c, inputs((b, h), m, n, d, dv, seed), dt)
    if causal and m > n:
        assert np.isnan(ref.astype(np.float32)[..., : m - n, :]).all()


@pytest.mark.parametrize("m,n", [(256, 256), (96, 320)])
def test_static_sizes_stream_too(m, n):
    c = compiled("fp16", True, m=m, n=n, batch=(2, 4))
    assert len(c.regions) == 1 and online_nodes(c.regions)
    check(c, inputs((2, 4), m, n, 64, 64, 0), "fp16")


def test_keys_span_several_blocks_with_a_tail():
    assert 200 % BLOCK and 200 > 3 * BLOCK
    check(compiled("fp16", False), inputs((1, 2), 33, 200, 64, 64, 1), "fp16")


def test_cli_run_playback_equals_reference(tmp_path):
    """`polysat run --target playback --cost=model` on examples/attention.json (causal, symbolic B, H, M, N;
    M > N so some rows are NaN) equals `--target reference`."""
    np.savez(tmp_path / "in.npz", **inputs((1, 2), 70, 50, 64, 64, 3))
    outs = {}
    for target in ("reference", "playback"):
        rc, out, err = oracle.cli(["run", str(EX / "attention.json"), "--cost=model", "--target", target,
                                   "--inputs", str(tmp_path / "in.npz"), "--out", str(tmp_path / f"{target}.npz")])
        assert rc == 0, err
        with np.load(tmp_path / f"{target}.npz") as z:
            outs[target] = z["O"]
    oracle.assert_close(outs["playback"].astype(np.float64), outs["reference"].astype(np.float64), "fp16", what="O")
    assert np.isnan(outs["reference"][..., :20, :]).all()


def test_extract_shows_one_region_and_cost_size_keeps_two():
    r = run_extract(str(EX / "attention.json"), cost="model")
    assert r["total"]["kernels"] == 1 and r["total"]["unfused_kernels"] > 1
    (reg,) = r["regions"]
    assert set(reg["inputs"]) == {"Q", "K", "V"}
    assert len(Compilation(str(EX / "attention.json"), cost="size").regions) == 2  # the two-kernel form stays


def test_streaming_can_be_turned_off_and_the_two_kernel_form_is_still_there(monkeypatch):
    monkeypatch.setenv("POLYSAT_STREAMING", "0")
    r = run_extract(str(EX / "attention.json"), cost="model")
    assert r["total"]["kernels"] == 2


# ---- the backend's view ---------------------------------------------------------------------------------

VARIANTS = [("fp16", True, 64), ("fp16", False, 64), ("bf16", True, 64), ("bf16", False, 128), ("fp16", True, 128)]
SIZES = [(2, 3, 70, 70), (1, 2, 50, 130), (2, 1, 130, 50)]


@pytest.mark.parametrize("dt,causal,d", VARIANTS)
def test_recognised_spec_means_what_the_region_plays_back(dt, causal, d):
    c = compiled(dt, causal, d, d)
    (r,) = c.regions
    b = attention_binding(r)
    s = b.spec
    assert (s.causal, s.d, s.dv, s.in_dtype.value, s.p_dtype.value, s.out_dtype.value) == (causal, d, d, dt, dt, dt)
    assert s.batch == ("B", "H") and (s.m, s.n) == ("M", "N") and s.scale == pytest.approx(d ** -0.5)
    assert b.passes == (1 if dt == "fp16" else 2)
    for k, (bb, h, m, n) in enumerate(SIZES):
        ins = inputs((bb, h), m, n, d, d, k)
        env = {"B": bb, "H": h, "M": m, "N": n}
        want = attention_reference(s, b.arrays(ins, env), env)
        got = playback(c.regions, ins)["O"]
        oracle.assert_close(got.astype(np.float64), want.astype(np.float32).astype(np.float64), dt, what=str(env))


@settings(max_examples=6, deadline=None)
@given(m=st.integers(1, 40), n=st.integers(1, 40), causal=st.booleans(), scale=st.floats(0.01, 2.0),
       seed=st.integers(0, 2 ** 16))
def test_explicit_scale_and_static_batch_are_recognised(m, n, causal, scale, seed):
    """A static batch (8, 16) and a scale attribute; M and N stay symbolic (priced at 256: large enough
    that streaming pays), bound from the inputs at play back."""
    c = Compilation(attention_doc("fp16", "M", "N", 64, 64, causal, batch=(8, 16), scale=scale), cost="model")
    (r,) = c.regions
    b = attention_binding(r, name="attn")
    assert (b.spec.name, b.spec.m, b.spec.n, b.spec.batch, b.spec.causal) == ("attn", "M", "N", (8, 16), causal)
    assert b.spec.scale == pytest.approx(scale, rel=1e-6)
    ins = inputs((8, 16), m, n, 64, 64, seed)
    oracle.assert_close(playback(c.regions, ins)["O"].astype(np.float64),
                        attention_reference(b.spec, b.arrays(ins, {"M": m, "N": n}), {"M": m, "N": n}).astype(np.float64), "fp16")


def test_partitions_that_materialize_the_scores_or_a_running_statistic():
    """Region synthesis streams whatever partition holds a whole group: with S materialized by its own
    kernel the stream reads it (and is not the attention template); with the row max materialized the
    group is no longer whole and the kernels fall back to the two-pass lets. Both play back exactly."""
    c = compiled("fp16", True)
    prog = c.extraction.program
    (g,) = groups(prog).values()
    outs = {nid for _, nid in prog.outputs}
    ins = inputs((1, 2), 40, 90, 64, 64, 7)
    ref = evaluate(prog, ins)["O"]
    for cut, streams in (({g.s}, 1), ({g.s, g.roles["max"]}, 0)):
        regions = synthesize(prog, partition_from_materialized(prog, cut | outs))
        assert validate_regions(regions) == [] and len(regions) == len(cut) + 1
        assert len(online_nodes(regions)) == streams
        got = playback(regions, ins)["O"]
        oracle.assert_close(got.astype(np.float64), ref.astype(np.float32).astype(np.float64), "fp16")
        assert isinstance(attention_binding(regions[-1]), NoBind)


def test_gemm_recogniser_rejects_the_streamed_region():
    (r,) = compiled("fp16", True).regions
    assert isinstance(gemm_binding(r), NoBind)


@pytest.mark.parametrize("example,why", [("attention_row_softmax", "not a streamed softmax-weighted sum"),
                                         ("gemm_bias_relu", "not a streamed softmax-weighted sum"),
                                         ("softmax", "not a streamed softmax-weighted sum")])
def test_other_regions_are_not_attention(example, why):
    for r in Compilation(str(EX / f"{example}.json"), cost="model").regions:
        no = attention_binding(r)
        assert isinstance(no, NoBind) and no.reason.startswith("not an attention region: ") and why in no.reason


def test_two_kernel_regions_are_not_attention():
    for r in Compilation(str(EX / "attention.json"), cost="size").regions:
        assert isinstance(attention_binding(r), NoBind)


def test_a_mask_other_than_bottom_right_causal_is_rejected():
    from polysat.ir.region import region_json
    from polysat.ir.region_load import region_from_json
    (r,) = compiled("fp16", True).regions
    doc = region_json(r)
    text = json.dumps(doc).replace('"-M + N + m - n"', '"m - n"')
    assert text != json.dumps(doc)
    no = attention_binding(region_from_json(json.loads(text)))
    assert isinstance(no, NoBind) and "causal mask" in no.reason
