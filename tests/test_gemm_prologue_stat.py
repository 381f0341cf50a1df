"""A GEMM whose A prologue takes a per-row statistic the kernel computes (backend/gemm/prologue.py ``stat``):
an fp16 RMSNorm (transformers' form: cast up, mean of squares, ``1 / sqrt(. + eps)``, the scaled row cast back
to fp16, then times the fp16 weight) fused into the projection that reads it binds the tensor-core GEMM kind, the
statistic ``post(sum_K pre(x))`` recognised from the region's inner reduction; the spec's numpy meaning equals
CPU playback of the region and onnxruntime on the same bytes; the statistic survives the spec's JSON and bad
ones are refused; the kernel builds for sm_80 and sm_90a with no spills (no GPU needed). The same with the norm
fused into the paired gate/up GEMM of a SwiGLU MLP (``SiLU(h W_gate) * (h W_up)``, backend/gemm/paired.py).
In an fp32 model the same norm fuses into the fp32 GEMM (3xTF32): its prologue computes A in fp32, no rounding.
"""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

from polysat.backend.gemm.prologue import Prologue, Source, check
from polysat.backend.gemm.spec import GemmSpec
from polysat.backend.gemm.prologue import in_loop
from polysat.backend.kinds import bind
from polysat.ir.dtypes import DType
from polysat.ir.playback import bind_region_symbols, playback

_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)

S, D, N = 16, 256, 256


def _rmsnorm_proj(s: int = S, d: int = D, n: int = N, dtype: str = "fp16"):
    """ONNX bytes: x [1, s, d] fp16 -> RMSNorm (fp32 inside, weight in fp16) -> @ W [d, n] fp16 (or all fp32)."""
    from onnx import TensorProto, helper
    from polysat.bench.corpora.scale_models import WeightFree
    g = WeightFree(dtype)
    g.op("Identity", [g.matmul(g.rmsnorm("x", d), d, n)])
    g.nodes[-1].output[0] = "y"
    m = g.built([helper.make_tensor_value_info("x", g.elem, [1, s, d])], "y", [1, s, n], "rmsproj")
    return m.SerializeToString()


def _rmsnorm_gated(dtype: str = "fp16", s: int = 4 * S):
    """ONNX bytes: x [1, s, D] fp16 -> h = RMSNorm(x) -> SiLU(h @ W_gate) * (h @ W_up), W_* [D, F] fp16 (or all
    fp32)."""
    from onnx import helper
    from polysat.bench.corpora.scale_models import WeightFree
    g = WeightFree(dtype)
    h = g.rmsnorm("x", D)
    gate, up = g.matmul(h, D, 2 * D), g.matmul(h, D, 2 * D)
    g.op("Identity", [g.op("Mul", [g.op("Mul", [gate, g.op("Sigmoid", [gate])]), up])])
    g.nodes[-1].output[0] = "y"
    m = g.built([helper.make_tensor_value_info("x", g.elem, [1, s, D])], "y", [1, s, 2 * D], "rmsgated")
    return m.SerializeToString()


@pytest.fixture(scope="module")
def compiled():
    return oracle.onnx_compiled(_rmsnorm_proj(), "rmsproj.onnx")


@pytest.fixture(scope="module")
def compiled32():
    return oracle.onnx_compiled(_rmsnorm_proj(1024, D, 4 * N, "fp32"), "rmsproj32.onnx")  # 3xTF32 priced cheaper


@pytest.fixture(scope="module")
def gated():
    return oracle.onnx_compiled(_rmsnorm_gated(), "rmsgated.onnx")


def _fused(regions):
    return oracle.the_region(regions, 2)  # the norm's row sum and the contraction


def _meaning_is_playbacks(r, dtype: str = "fp16"):
    """The spec's numpy meaning against playback. The statistic's fp32 sum runs in another order (playback
    contracts x . x; the spec sums pairwise), so its r may differ in the last bit and a 16-bit A = fp16(fp16(x r) g)
    round the other way: one fp16 ulp inside the kernel, carried to the output with its gain (the normwise bound
    of oracle.assert_close_chained, one 16-bit intermediate); in fp32 only the sums' order differs."""
    kind, b = bind(r)
    rng = np.random.default_rng(0)
    x = {buf.name: rng.uniform(-3, 3, buf.memref.shape).astype(oracle.NP_DTYPES[dtype]) for buf in r.inputs}
    env = bind_region_symbols([r], x)
    want = playback([r], x, keep_all=True)[r.outputs[0].name]
    got = np.asarray(kind.reference(b.spec, b.arrays(x, env), env)).reshape(want.shape)
    if dtype == "fp32":
        oracle.assert_close(got, want.astype(np.float64), "fp32", r.name)
    else:
        oracle.assert_close_chained(got, want.astype(np.float64), dtype, oracle.ulp_at_one(dtype), r.name)


def _factored_is_playbacks(r):
    """The order an in-loop statistic's kernel computes an fp32 GEMM in (``prologue.in_loop``): A' = f with the
    statistic read as 1, the sum of A' B, then each row times its statistic, in fp32 numpy, against playback of
    the region (x r g summed with B), to fp32 tolerance."""
    from polysat.backend.common import epilogue_fn
    from polysat.backend.gemm import prologue as pro_
    kind, b = bind(r)
    spec, rng = b.spec, np.random.default_rng(1)
    x = {buf.name: rng.uniform(-3, 3, buf.memref.shape).astype(np.float32) for buf in r.inputs}
    env = bind_region_symbols([r], x)
    want = playback([r], x, keep_all=True)[r.outputs[0].name]
    arrays, p, m, k = b.arrays(x, env), spec.a_prologue, spec.m, spec.k
    assert in_loop(p, spec.in_dtype) >= 0 and not spec.epilogue
    (st,) = p.stats
    ins = tuple(np.asarray(arrays[s.tensor], np.float32).reshape(m, s.ld)[:, s.col:s.col + k] if s.role == "mk" else
                np.ones((m, 1), np.float32) if s.role == "stat" else np.asarray(arrays[s.tensor], np.float32)[None, :]
                for s in p.sources)
    h = epilogue_fn.evaluate(p.steps, np.zeros((m, k), np.float32), ins)
    rs = pro_.statistic(st, np.asarray(arrays[st.tensor], np.float32).reshape(m, st.ld), k)
    got = rs[:, None] * (h @ np.asarray(arrays[spec.b], np.float32).reshape(k, spec.n))
    oracle.assert_close(got.reshape(want.shape), want.astype(np.float64), "fp32", r.name)


def test_rmsnorm_into_the_projection_binds_a_statistic_prologue_with_playbacks_meaning(compiled):
    r = _fused(compiled[2].regions)
    kind, b = bind(r)
    assert kind.name == "gemm", r.name
    pro = b.spec.a_prologue
    assert pro is not None and sorted(s.role for s in pro.sources) == ["k", "mk", "stat"]
    (st,) = pro.stats
    assert [op for op, _ in st.pre] == ["mul"] and [op for op, _ in st.post] == ["div", "add", "sqrt", "reciprocal"]
    assert [op for op, _ in pro.steps].count("round_fp16") == 2  # x * r cast to fp16, then * g in fp16
    assert in_loop(pro, DType.fp16) == -1  # x * r rounded before * g: not r times a function of x and g
    _meaning_is_playbacks(r)


def test_fp32_rmsnorm_into_the_projection_binds_an_fp32_prologue(compiled32):
    """The fp32 model's norm and projection in one GEMM kernel of fp32 operands (3xTF32, at 1024 tokens, where the
    prices put the contraction on tensor cores): the prologue computes x * r * g in fp32 (no rounding step), its
    statistic as the 16-bit one; the spec's meaning is playback's (fp32: the sum's order alone differs) and the
    compiled graph equals onnxruntime."""
    (r,) = compiled32[2].regions
    kind, b = bind(r)
    assert kind.name == "gemm" and b.spec.in_dtype == DType.fp32, r.name
    pro = b.spec.a_prologue
    assert pro is not None and sorted(s.role for s in pro.sources) == ["k", "mk", "stat"]
    assert not any(op.startswith("round") for op, _ in pro.steps) and all(s.dtype == DType.fp32 for s in pro.sources)
    assert in_loop(pro, DType.fp32) == 0  # linear in r: summed over x (the first chunked source) in the main loop
    _meaning_is_playbacks(r, "fp32")
    _factored_is_playbacks(r)
    rt = oracle.targets_equal_onnxruntime(compiled32, lambda name, shape, rng: rng.uniform(-3, 3, shape) * (
        1 if name == "x" else 0.1), dtype="fp32")
    assert any(not st.on_cpu and st.kind.name == "gemm" for st in rt.steps)
    oracle.region_builds_for_both_skeletons(r, "fp32 statistic prologue GEMM", "static constexpr int LIN = 0;")


def test_rmsnorm_into_the_paired_gate_up_gemm_binds_with_playbacks_meaning(gated):
    """One kernel: the norm's statistic and A in the prologue, gate and up interleaved in B, SiLU(g) u in the
    epilogue (the concatenation's guards over each piece's cone folded)."""
    (r,) = gated[2].regions
    kind, b = bind(r)
    assert kind.name == "gemm" and len(b.spec.b_pieces) == 2 and b.spec.pair, r.name
    assert b.spec.a_prologue is not None and len(b.spec.a_prologue.stats) == 1
    _meaning_is_playbacks(r)
    oracle.targets_equal_onnxruntime(gated, lambda name, shape, rng: rng.uniform(-3, 3, shape) * (
        1 if name == "x" else 0.1))


def test_the_compiled_graph_equals_onnxruntime(compiled):
    rt = oracle.targets_equal_onnxruntime(compiled, lambda name, shape, rng: rng.uniform(-3, 3, shape) * (
        1 if name == "x" else 0.1))
    assert any(not st.on_cpu and st.kind.name == "gemm" and bind(st.region)[1].spec.a_prologue is not None
               and bind(st.region)[1].spec.a_prologue.stats for st in rt.steps)


def test_the_statistic_survives_json_and_bad_ones_are_refused():
    stat = Source("x", "stat", DType.fp16, 256, 0, (("mul", (("v",), ("v",))),),
                  (("div", (("v",), ("c", 256.0))), ("add", (("s", 0), ("c", 1e-6))), ("sqrt", (("s", 1),)),
                   ("reciprocal", (("s", 2),))))
    pro = Prologue((Source("x", "mk", DType.fp16, 256, 0), stat, Source("g", "k", DType.fp16)),
                   (("mul", (("x", 0), ("x", 1))), ("round_fp16", (("s", 0),)), ("mul", (("s", 1), ("x", 2))),
                    ("round_fp16", (("s", 2),))))
    spec = GemmSpec("p", 16, 64, 256, a_prologue=pro)
    assert GemmSpec.from_json(spec.to_json()) == spec
    assert spec.inputs == ("x", "g", "B") and spec.shapes()["x"] == (16, 256)
    assert check(pro, 16, 256, DType.fp16) is None
    bad = Prologue((pro.sources[0], Source("x", "stat", DType.fp16, 256, 0, (), stat.post), pro.sources[2]), pro.steps)
    assert "statistic over 'x'" in check(bad, 16, 256, DType.fp16)
    wide = Prologue((pro.sources[0], Source("x", "stat", DType.fp16, 256, 128, stat.pre, stat.post), pro.sources[2]),
                    pro.steps)
    assert "exceed its row" in check(wide, 16, 256, DType.fp16)
    fp32 = Prologue((pro.sources[0], Source("x", "stat", DType.fp32, 256, 0, stat.pre, stat.post), pro.sources[2]),
                    pro.steps)
    assert "operand type" in check(fp32, 16, 256, DType.fp16)


def test_the_statistic_gemm_builds_for_both_skeletons(compiled):
    oracle.region_builds_for_both_skeletons(_fused(compiled[2].regions), "statistic prologue GEMM", "PrologueStats<")


def test_the_paired_statistic_gemm_builds_for_both_skeletons(gated):
    oracle.region_builds_for_both_skeletons(gated[2].regions[0], "paired statistic prologue GEMM", "NST = 1")


def test_fp32_rmsnorm_into_the_gate_up_pair_sums_its_statistic_in_the_loop():
    """The fp32 norm, gate/up and SiLU(g) u in one paired 3xTF32 GEMM (64 tokens) whose statistic is summed in the
    main loop: marked so for the price, equal to onnxruntime, and built for both skeletons with no spill (the pair's
    accumulators scaled by the row's statistic before ``Epi::pair``)."""
    c = oracle.onnx_compiled(_rmsnorm_gated("fp32", 64), "rmsgated32.onnx")
    (p,) = c[2].priced
    assert p.region.mma_path == "tf32x3" and p.region.stat_in_loop
    (r,) = c[2].regions
    kind, b = bind(r)
    assert kind.name == "gemm" and b.spec.pair and in_loop(b.spec.a_prologue, b.spec.in_dtype) == 0
    oracle.targets_equal_onnxruntime(c, lambda name, shape, rng: rng.uniform(-3, 3, shape) * (
        1 if name == "x" else 0.1), dtype="fp32")
    oracle.region_builds_for_both_skeletons(r, "fp32 paired in-loop statistic GEMM", "static constexpr int LIN = 0;")


@pytest.mark.gpu
def test_the_statistic_gemm_on_the_gpu_matches_its_reference(compiled):
    """Both skeletons run the bound spec against its numpy meaning (when a GPU is lent)."""
    oracle.gemm_on_gpu_matches_reference(bind(_fused(compiled[2].regions))[1].spec)


@pytest.mark.gpu
def test_the_paired_statistic_gemm_on_the_gpu_matches_its_reference(gated):
    oracle.gemm_on_gpu_matches_reference(bind(gated[2].regions[0])[1].spec)


@pytest.mark.gpu
def test_the_fp32_in_loop_statistic_gemms_on_the_gpu_match_their_reference(compiled32):
    """The statistic summed in the loop and the accumulators' rows scaled, plain and paired (3xTF32, sm80 skeleton)."""
    (r,) = compiled32[2].regions
    oracle.gemm_on_gpu_matches_reference(bind(r)[1].spec)
    (g,) = oracle.onnx_compiled(_rmsnorm_gated("fp32", 64), "rmsgated32.onnx")[2].regions
    oracle.gemm_on_gpu_matches_reference(bind(g)[1].spec)


def test_the_prices_decide_where_the_norm_runs():
    """LLaMA-7B's first norm and projections (128 tokens, d 4096, fp16, sm90; analyses/prologue_cone.py): at the
    Q/K/V width (N 12288) the fused kernel prices as the GEMM alone (the producer's work and round trips fit under
    the weight stream) and one kernel is chosen; at N 4096 each tile's 64 A stages and statistic pass outlast its
    shorter weight stream and the norm stays a row kernel. The fused kernel's values never reach device memory
    (its bytes are its inputs' and output's)."""
    from polysat.analyses.prologue_cone import cone
    got = {}
    for n in (12288, 4096):
        got[n] = oracle.onnx_compiled(_rmsnorm_proj(128, 4096, n), "rmsproj7b.onnx")[2].priced
    assert len(got[4096]) == 2 and len(got[12288]) == 1, {n: [p.kernel.name for p in ps] for n, ps in got.items()}
    (fused,) = got[12288]
    pc = cone(fused.region)
    assert pc is not None and len(pc.reductions) == 1 and pc.k == 4096
    assert fused.cost.bytes == (128 * 4096 + 4096 + 4096 * 12288 + 128 * 12288) * 2  # x, g, W in; y out
    assert all(cone(p.region) is None for p in got[4096])  # the plain GEMM: no prologue


def test_the_sm80_statistic_is_summed_in_the_loop_or_priced_as_a_serial_pass(compiled32):
    """On the sm80 skeleton (which runs the fp32 GEMM's 3xTF32 on sm90 too). A = x r g is linear in its statistic, so
    the region is marked ``stat_in_loop`` (pricing/kernels.py ``as_emitted``): the statistic is summed as A's tiles
    land, with no pass and no serial term (analyses/prologue_cone.py ``producer``). Priced with a pass instead, every
    CTA of a wave takes it before its main loop, re-reading its rows over all of K: at least its MMAs, its launch and
    that pass's L2 bytes at the device's whole L2 rate, one after the other, not the pass's bytes hidden under the
    MMAs."""
    from dataclasses import replace

    from polysat.analyses.footprint import make_tile, normalize_tile
    from polysat.analyses.price import on_path, price
    from polysat.analyses.price_facts import facts
    from polysat.analyses.prologue_cone import cone, first_pass_l2, producer
    (p,) = compiled32[2].priced
    r = p.region
    dev = on_path(r, "sm90")
    assert r.mma_path == "tf32x3" and dev.arch != "sm90" and r.stat_in_loop  # the sm80 skeleton's device
    b = r.bind()
    t = make_tile(b, normalize_tile(b, dict(p.cost.tile)))
    args = (cone(r), b, t, facts(r).live, {}, dev, 1e13, 1e12, p.cost.ctas_per_sm)
    assert first_pass_l2(b, cone(r), t) == 0 and producer(*args, 0.0)[1] == 0.0
    r = replace(r, stat_in_loop=False)  # the statistic's pass before the main loop
    cost = price(r, "sm90")
    b = r.bind()
    t = make_tile(b, normalize_tile(b, dict(cost.tile)))
    first = first_pass_l2(b, cone(r), t)
    terms = dict(cost.terms)
    assert first > 0 and cost.time_est_us > p.cost.time_est_us
    assert cost.time_est_us >= terms["mma"] + terms["launch"] + first / (dev.l2_tbps * 1e12) * 1e6
    # the serial term: the pass's round trips, or its bytes' time where longer (a long K: LLaMA-7B's 4096)
    args = (cone(r), b, t, facts(r).live, {}, dev, 1e13, 1e12, cost.ctas_per_sm)
    trips = producer(*args, 0.0)[1]
    assert trips > 0 and producer(*args, trips / 2)[1] == trips and producer(*args, 10 * trips)[1] == 10 * trips


def test_a_prologue_is_in_loop_only_where_linear_in_its_one_statistic():
    """``epilogue_fn.linear_in``: the statistic reaches A only through products with values free of it, quotients by
    them, negations, sums and selects of such terms; not through a rounding, a sum with a term free of it, a
    square, a division by it or another function. ``prologue.in_loop`` takes only fp32 operands and the one
    statistic summed over a chunked source at its columns."""
    from polysat.backend.common.epilogue_fn import linear_in
    from polysat.backend.gemm.prologue import Prologue, Source
    x, r, g = ("x", 0), ("x", 1), ("x", 2)
    yes = [(("mul", (x, r)), ("mul", (("s", 0), g))),
           (("mul", (x, g)), ("mul", (r, ("s", 0))), ("neg", (("s", 1),))),
           (("div", (r, g)), ("mul", (("s", 0), x)), ("add", (("s", 1), ("s", 1)))),
           (("cmplt", (x, g)), ("mul", (x, r)), ("mul", (g, r)), ("select", (("s", 0), ("s", 1), ("s", 2))))]
    no = [(("mul", (x, r)), ("round_fp16", (("s", 0),)), ("mul", (("s", 1), g))),
          (("mul", (x, r)), ("add", (("s", 0), g))),
          (("mul", (x, r)), ("mul", (("s", 0), r))),
          (("div", (x, r)),),
          (("mul", (x, r)), ("relu", (("s", 0),))),
          (("mul", (x, g)),),
          (("mul", (x, r)), ("mul", (("s", 0), g)), ("round_fp16", (("s", 1),)))]
    assert [linear_in(p, 1) for p in yes] == [True] * len(yes)
    assert [linear_in(p, 1) for p in no] == [False] * len(no)
    post = (("add", (("v",), ("c", 1e-6))), ("rsqrt", (("v",),)))
    xs, st, gs = (Source("x", "mk", DType.fp32, 256, 0), Source("x", "stat", DType.fp32, 256, 0, (("mul", (("v",), ("v",))),), post),
                  Source("g", "k", DType.fp32))
    assert in_loop(Prologue((xs, st, gs), yes[0]), DType.fp32) == 0
    assert in_loop(Prologue((gs, st, xs), (("mul", (("x", 2), r)), ("mul", (("s", 0), ("x", 0))))),
                   DType.fp32) == 1  # x the second chunked source
    assert in_loop(Prologue((xs, st, gs), yes[0]), DType.fp16) == -1  # a 16-bit A: not factored
    other = Source("x", "stat", DType.fp32, 256, 4, st.pre, post)  # summed over other columns than A reads
    assert in_loop(Prologue((xs, other, gs), yes[0]), DType.fp32) == -1
    assert in_loop(Prologue((xs, st, gs), no[2]), DType.fp32) == -1
