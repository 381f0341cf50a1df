"""Conv2D as implicit GEMM (docs/DESIGN.md §Backend): ConvSpec's numpy meaning and the im2col address/predicate helper
(polysat::im2col_coord, compiled for the host with nvcc).

* conv_reference (per-group im2col + gemm_reference) equals a direct 7-loop conv (groups, depthwise
  included) and the Tiny IR evaluator's playback of examples/conv3x3_s2_silu.json;
* im2col_coord, run on the host, gathers exactly numpy's im2col (zero outside the input) for generated
  geometries: stride 1/2, pad 0/1/asymmetric, dilation 2, odd sizes.
"""
import os
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from polysat.backend.common.render import TEMPLATES
from polysat.backend.conv.reference import reference as conv_reference, im2col
from polysat.backend.conv.spec import ConvSpec
from polysat.backend.common.spec import EpilogueOp
from polysat.backend.common.nvcc import nvcc_path
from polysat.ir.diagnostics import PolysatError
from polysat.ir.dtypes import DType, round_to

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "conv3x3_s2_silu.json")


def _direct_conv(spec: ConvSpec, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    ho, wo = spec.out_hw
    (sh, sw), (dh, dw), (pt, _, pl, _) = spec.stride, spec.dilation, spec.pad
    cg, cog = spec.cin // spec.groups, spec.co // spec.groups
    y = np.zeros((spec.n, spec.co, ho, wo), np.float64)
    for n in range(spec.n):
        for i in range(ho):
            for j in range(wo):
                for r in range(spec.kh):
                    for s in range(spec.kw):
                        hi, wi = i * sh + r * dh - pt, j * sw + s * dw - pl
                        if 0 <= hi < spec.h and 0 <= wi < spec.w:
                            for g in range(spec.groups):
                                y[n, g * cog:(g + 1) * cog, i, j] += (w[g * cog:(g + 1) * cog, :, r, s].astype(np.float64)
                                                                      @ x[n, g * cg:(g + 1) * cg, hi, wi].astype(np.float64))
    return y


convs = st.builds(
    lambda n, c, h, w, co, kh, kw, st_, pad, dil: (n, c, h, w, co, kh, kw, st_, pad, dil),
    st.integers(1, 2), st.integers(1, 5), st.integers(5, 11), st.integers(5, 11), st.integers(1, 6),
    st.integers(1, 3), st.integers(1, 3), st.sampled_from([(1, 1), (2, 2), (1, 2)]),
    st.sampled_from([(0, 0, 0, 0), (1, 1, 1, 1), (0, 1, 1, 0), (2, 1, 0, 2)]), st.sampled_from([(1, 1), (2, 2), (2, 1)]))


def _spec(t, epilogue=(), groups=1) -> ConvSpec:
    n, c, h, w, co, kh, kw, stride, pad, dil = t
    return ConvSpec("conv", n, c * groups, h, w, co * groups, kh, kw, stride=stride, pad=pad, dilation=dil,
                    groups=groups, epilogue=epilogue)


@settings(max_examples=25, deadline=None)
@given(convs, st.integers(0, 2**31 - 1), st.sampled_from([1, 1, 2, 3]))
def test_conv_reference_equals_direct_convolution(t, seed, groups):
    spec = _spec(t, (EpilogueOp("bias", "b", dtype=DType.fp16), EpilogueOp("relu")), groups)
    rng = np.random.default_rng(seed)
    x = round_to(rng.uniform(-1, 1, spec.shapes()["X"]), DType.fp16)
    w = round_to(rng.uniform(-1, 1, spec.shapes()["W"]), DType.fp16)
    b = round_to(rng.uniform(-1, 1, (spec.co,)), DType.fp16)
    want = np.maximum(_direct_conv(spec, x, w) + b.astype(np.float64)[None, :, None, None], 0.0)
    got = conv_reference(spec, {"X": x, "W": w, "b": b})
    assert got.shape == spec.shapes()["Y"] and got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-3, atol=1e-3)


def test_conv_reference_equals_playback_of_example():
    from polysat.frontend import load_model
    from polysat.ir.evaluate import evaluate
    spec = ConvSpec("conv3x3_s2_silu", 1, 16, 32, 32, 32, 3, 3, stride=(2, 2), pad=(1, 1, 1, 1),
                    epilogue=(EpilogueOp("bias", "bias", dtype=DType.fp16), EpilogueOp("silu")))
    rng = np.random.default_rng(7)
    ins = {k: round_to(rng.uniform(-1, 1, s) * (0.25 if k != "bias" else 1.0), DType.fp16)
           for k, s in spec.shapes().items() if k != "Y"}
    want = evaluate(load_model(EXAMPLE), ins)["Y"]
    got = conv_reference(spec, ins)
    assert got.shape == want.shape == (1, 32, 16, 16)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-3, atol=1e-3)


def test_residual_epilogue_is_nchw():
    spec = ConvSpec("c", 2, 3, 6, 7, 4, 3, 3, pad=(1, 1, 1, 1),
                    epilogue=(EpilogueOp("residual", "R", dtype=DType.fp32),), out_dtype=DType.fp32)
    rng = np.random.default_rng(1)
    x, w = (round_to(rng.uniform(-1, 1, spec.shapes()[k]), DType.fp16) for k in ("X", "W"))
    res = rng.uniform(-1, 1, spec.shapes()["Y"]).astype(np.float32)
    got = conv_reference(spec, {"X": x, "W": w, "R": res})
    np.testing.assert_allclose(got, _direct_conv(spec, x, w) + res, rtol=1e-3, atol=1e-3)


def test_depthwise_reference_is_a_per_channel_correlation():
    spec = ConvSpec("dw", 2, 3, 7, 6, 3, 3, 3, pad=(1, 1, 1, 1), groups=3)
    rng = np.random.default_rng(3)
    x, w = (round_to(rng.uniform(-1, 1, spec.shapes()[k]), DType.fp16) for k in ("X", "W"))
    got = conv_reference(spec, {"X": x, "W": w}).astype(np.float64)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = sum(xp[:, :, r:r + 7, s:s + 6] * w[None, :, 0, r, s, None, None] for r in range(3) for s in range(3))
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("bad, code", [(dict(groups=3), "E1006"), (dict(stride=(0, 1)), None),
                                       (dict(kh=40), None), (dict(pad=(-1, 0, 0, 0)), None)])
def test_bad_conv_is_a_coded_diagnostic(bad, code):
    args = dict(name="c", n=1, cin=4, h=8, w=8, co=4, kh=3, kw=3) | bad
    with pytest.raises(PolysatError) as e:
        ConvSpec(**args)
    if code:
        assert e.value.diagnostics[0].code == code


def test_conv_missing_or_misshapen_input_is_diagnosed():
    spec = ConvSpec("c", 1, 2, 5, 5, 3, 3, 3)
    with pytest.raises(PolysatError):
        conv_reference(spec, {"X": np.zeros((1, 2, 5, 5), np.float16)})
    with pytest.raises(PolysatError):
        conv_reference(spec, {"X": np.zeros((1, 2, 5, 4), np.float16), "W": np.zeros((3, 2, 3, 3), np.float16)})


# ---- the A-producer's address logic, run on the host ------------------------------------------------
HOST = r"""
#include "polysat_gemm.cuh"
#include <cstdio>
using namespace polysat;
int main() {
  int nconv; if (std::scanf("%d", &nconv) != 1) return 2;
  for (int q = 0; q < nconv; ++q) {
    ConvGeom g; int M, K;
    std::scanf("%d %d %d %d %d %d %d %d %d %d %d %d %d %d %d", &g.C, &g.H, &g.W, &g.Kh, &g.Kw, &g.Ho, &g.Wo,
               &g.sh, &g.sw, &g.pt, &g.pl, &g.dh, &g.dw, &M, &K);
    for (int m = 0; m < M; ++m)
      for (int k = 0; k < K; ++k) {
        long long off;
        const bool ok = im2col_coord(g, m, k, off);
        std::printf("%lld ", ok ? off : -1LL);
      }
    std::printf("\n");
  }
  return 0;
}
"""


@pytest.fixture(scope="module")
def im2col_host(tmp_path_factory):
    nvcc = nvcc_path()
    if nvcc is None:
        pytest.fail("nvcc is required to compile the host emulation of im2col_coord")
    d = tmp_path_factory.mktemp("im2col")
    src = d / "im2col.cu"
    src.write_text(HOST)
    exe = d / "im2col"
    subprocess.run([nvcc, "-std=c++17", "-O1", "-I", TEMPLATES, "-o", str(exe), str(src)], check=True,
                   capture_output=True, timeout=120)
    return exe


FIXED = [(2, 3, 9, 7, 2, 3, 3, (2, 2), (1, 1, 1, 1), (2, 2)), (1, 2, 7, 9, 3, 3, 3, (1, 2), (0, 1, 1, 0), (1, 1)),
         (1, 3, 11, 5, 2, 2, 3, (2, 1), (2, 1, 0, 2), (2, 1)), (2, 1, 5, 5, 1, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1))]


@settings(max_examples=2, deadline=None)
@given(st.lists(convs, min_size=10, max_size=10))
def test_im2col_coord_gathers_numpy_im2col(im2col_host, ts):
    specs = [_spec(t) for t in FIXED + ts]
    lines = [str(len(specs))]
    for s in specs:
        g = s.gemm_sizes()
        lines.append(" ".join(map(str, (*s.geometry(), g["m"], g["k"]))))
    out = subprocess.run([str(im2col_host)], input="\n".join(lines) + "\n", capture_output=True, text=True,
                         check=True, timeout=60).stdout.strip().split("\n")
    assert len(out) == len(specs)
    for s, line in zip(specs, out):
        g = s.gemm_sizes()
        offs = np.array(line.split(), dtype=np.int64).reshape(g["m"], g["k"])
        x = np.arange(1, s.n * s.cin * s.h * s.w + 1, dtype=np.float64).reshape(s.shapes()["X"])  # value = offset + 1
        gathered = np.where(offs >= 0, offs + 1, 0).astype(np.float64)
        np.testing.assert_array_equal(gathered, im2col(s, x))
