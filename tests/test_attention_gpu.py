"""Generated flash-attention kernels on a real GPU against the numpy meaning (docs/DESIGN.md §Verification).

Marked ``gpu``: skipped only when no CUDA GPU is visible. Every shape has row and key tails with respect
to every tile the search can pick (BLOCK_M 64/128, BLOCK_N 32/64/128), M != N both ways (causal with M > N
has rows that see no key: NaN, as in the reference), several batch dims, symbolic sizes; both softmax
algorithms; head dims 4 .. 256 (multiples of 8 and padded ones, D != Dv); on an sm90 device also the sm80
skeleton (Hopper's tail branch).

Tolerance (the same reasoning as tests/test_attention_emulate.py): rtol = atol = 1e-3, plus the output
rounding, plus u * max|V| (2-pass: the same rounding point as the reference, up to one-ulp flips) or
2 u * max|V| (online: P is rounded before its normalisation, the reference after), u the unit roundoff
of P's type.
"""
import numpy as np
import pytest

from polysat.backend.common.device_tensors import DeviceArray

from polysat.backend.common.gpu import cuda_available, device
from polysat.backend.attention.reference import reference as attention_reference
from polysat.backend.attention.spec import AttentionSpec
from polysat.ir.dtypes import DType, round_to

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible")]

F16, BF16, F32 = DType.fp16, DType.bf16, DType.fp32
ALGOS = ("online_softmax", "streaming_softmax_2pass")
UNIT = {F16: 2.0 ** -11, BF16: 2.0 ** -8}  # unit roundoff of P's type
OUT_ULP = {F16: 2.0 ** -10, BF16: 2.0 ** -7, F32: 0.0}

CASES = {
    "f16_full_tails": (AttentionSpec("a", 333, 333, 64, 64, batch=(2, 3), scale=0.125), None),
    "bf16_causal_m_lt_n": (AttentionSpec("a", 200, 517, 128, 128, batch=(1, 2), causal=True, scale=128 ** -0.5,
                                         in_dtype=BF16, p_dtype=BF16, out_dtype=BF16), None),
    "f16_causal_m_gt_n": (AttentionSpec("a", 517, 200, 64, 64, batch=(2,), causal=True, scale=0.125), None),
    "symbolic_fp32_out": (AttentionSpec("a", "M", "N", 128, 128, batch=("B", "H"), causal=True, scale=0.09,
                                        out_dtype=F32), {"M": 1000, "N": 1000, "B": 1, "H": 3}),
    "d_ne_dv_neg_scale": (AttentionSpec("a", 129, 65, 64, 128, batch=(4,), scale=-0.2, in_dtype=BF16, p_dtype=BF16,
                                        out_dtype=BF16), None),
    "one_query_one_key": (AttentionSpec("a", 1, 1, 128, 128, batch=(3,), causal=True), None),
}


def random_inputs(spec, env=None, seed=0):
    rng = np.random.default_rng(seed)
    dt = spec.in_dtype
    return {n: np.asarray(round_to(rng.uniform(-1, 1, s).astype(np.float32), dt)).astype(dt.np)
            for n, s in spec.shapes(env).items() if n != spec.o}


def assert_close(got, want, spec, algo, vmax):
    got, want = np.asarray(got).astype(np.float64), np.asarray(want).astype(np.float64)
    assert got.shape == want.shape
    assert np.array_equal(np.isnan(got), np.isnan(want)), "rows without a visible key are NaN, no others"
    ok = ~np.isnan(want)
    slack = (2.0 if algo == "online_softmax" else 1.0) * UNIT[spec.p_dtype] * vmax
    tol = 1e-3 + 1e-3 * np.abs(want) + OUT_ULP[spec.out_dtype] * np.abs(want) + slack
    bad = (np.abs(got - want) > tol) & ok
    assert not bad.any(), f"{bad.sum()} of {ok.sum()} differ; first at {np.argwhere(bad)[0]}: {got[bad][0]} vs {want[bad][0]}"


def _plans(spec, env, algo):
    """The auto plan, plus the sm80 skeleton forced on an sm90 device."""
    from polysat.backend.attention.launch import concrete_spec
    from polysat.backend.attention.plan import search
    plans = [None]
    if device().arch == "sm90":
        plans.append(search(concrete_spec(spec, env), "sm90", skeletons=("sm80",), algos=(algo,)).best)
    return plans


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_attention_matches_numpy(case, algo):
    from polysat.backend.attention.launch import run as run_attention
    spec, env = CASES[case]
    x = random_inputs(spec, env, seed=sorted(CASES).index(case))
    want = attention_reference(spec, x, env)
    vmax = float(np.abs(x[spec.v].astype(np.float32)).max())
    for plan in _plans(spec, env, algo):
        got = run_attention(spec, x, env, plan=plan, algo=None if plan is not None else algo)
        assert_close(got, want, spec, algo, vmax)


# head dims other than 64 / 128: multiples of 8 (8 .. 256: the sm80 skeleton on the dims padded to 16, Q
# from smem at 256), dims that are not (4, 20, 100: narrower copies; 7 / 5: plain loads and scalar stores),
# D != Dv across smem panel widths
HEAD_DIMS = [(8, 8), (32, 32), (96, 96), (160, 160), (256, 256), (4, 4), (20, 20), (100, 100), (96, 160), (7, 5)]


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("d,dv", HEAD_DIMS)
def test_head_dims_match_numpy(d, dv, algo):
    from polysat.backend.attention.launch import run as run_attention
    dt = BF16 if d >= 160 else F16
    spec = AttentionSpec("hd", 131, 203, d, dv, batch=(2,), causal=d % 2 == 0, scale=d ** -0.5, in_dtype=dt,
                         p_dtype=dt, out_dtype=F32 if dv == 160 else dt)
    x = random_inputs(spec, seed=d + dv)
    want = attention_reference(spec, x)
    vmax = float(np.abs(x[spec.v].astype(np.float32)).max())
    for plan in _plans(spec, None, algo):
        got = run_attention(spec, x, plan=plan, algo=None if plan is not None else algo)
        assert_close(got, want, spec, algo, vmax)


def test_device_tensors_and_relaunch():
    from polysat.backend.attention.launch import prepare as prepare_attention, run as run_attention
    spec = AttentionSpec("dev", 300, 300, 64, 64, batch=(2, 2), causal=True, scale=0.125)
    x = random_inputs(spec, seed=3)
    want = attention_reference(spec, x)
    dev = {k: DeviceArray.from_numpy(v) for k, v in x.items()}
    out = DeviceArray(spec.shapes()["O"], np.float16)
    launch = prepare_attention(spec, {**dev, "O": out})
    launch()
    first = out.numpy()
    launch()
    assert_close(first, want, spec, launch.kernel.plan.algo, 1.0)
    np.testing.assert_array_equal(out.numpy(), first)
    res = run_attention(spec, dev)
    assert isinstance(res, DeviceArray)
    np.testing.assert_array_equal(res.numpy(), first)


def test_torch_tensors_match_sdpa():
    """bf16 torch tensors through DLPack; the kernel agrees with torch's own scaled_dot_product_attention."""
    import torch
    import torch.nn.functional as F
    from polysat.backend.attention.launch import run as run_attention

    b, h, s, d = 2, 4, 777, 128
    spec = AttentionSpec("t", s, s, d, d, batch=(b, h), causal=True, scale=d ** -0.5, in_dtype=BF16, p_dtype=BF16,
                         out_dtype=BF16)
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.rand(b, h, s, d, device="cuda", generator=g, dtype=torch.float32).mul_(2).sub_(1).bfloat16()
               for _ in range(3))
    out = torch.empty_like(q)
    run_attention(spec, {"Q": q, "K": k, "V": v}, out=out)
    torch.cuda.synchronize()
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    assert (out.float() - ref).abs().max().item() < 2e-2


@pytest.mark.parametrize("dt", ["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True])
def test_streamed_region_on_the_gpu_equals_cpu_playback(dt, causal):
    """`polysat run --target cuda` path: the streamed attention region (rules/streaming.egg, --cost=model) as
    one kernel, against CPU playback of the same region (M != N, tails, batch dims)."""
    import importlib.util
    import pathlib

    from polysat.runtime import regions as device_run
    from polysat.ir.playback import playback
    from polysat.pipeline import Compilation

    spec_ = importlib.util.spec_from_file_location("oracle", pathlib.Path(__file__).with_name("oracle.py"))
    oracle = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(oracle)
    d = 64
    doc = oracle.model({"Q": (dt, ["B", "H", "M", d]), "K": (dt, ["B", "H", "N", d]), "V": (dt, ["B", "H", "N", d])},
                       [oracle.node("Attention", ["Q", "K", "V"], "O", causal=causal)], ["O"], {"O": {"dtype": dt}})
    regions = Compilation(doc, cost="model").regions
    rng = np.random.default_rng(1)
    dtype = DType(dt)
    x = {n: np.asarray(round_to(rng.uniform(-1, 1, (2, 3, s, d)).astype(np.float32), dtype)).astype(dtype.np)
         for n, s in (("Q", 333), ("K", 517), ("V", 517))}
    got = device_run.run_cuda(regions, x)["O"]
    want = playback(regions, x)["O"]
    spec = AttentionSpec("r", 333, 517, d, d, batch=(2, 3), causal=causal, in_dtype=dtype, p_dtype=dtype,
                         out_dtype=dtype)
    # the kernel rounds P where the region does (one pass: at a running max, whose blocks may differ from
    # the kernel's BLOCK_N; two passes: after the division), so the online slack bounds both
    assert_close(got, want, spec, "online_softmax", 1.0)
