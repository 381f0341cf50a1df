"""The conv kernels' index logic, run on the CPU against numpy (no GPU needed).

polysat_conv.cuh keeps everything the conv and conv + pool kernels compute about indices in
``__host__ __device__`` code: the row maps (ConvRows, PoolRows), the (c, r, s) decomposition, the im2col
producer itself (setup / fetch / land, thread by thread, with the pad predicate and every tail), the
NCHW output offsets and the pool (PoolOut::put / pool). These tests compile host programs that call
exactly that code with nvcc and compare what it produces with independent models:

* the smem image the producer leaves for every (group, CTA tile, k tile) equals numpy's im2col of the
  group (conv_spec.im2col, zero outside X and in the tails) placed the way the skeleton reads A:
  sm80 -- the [BK][BM] xor-16B tile of the GEMM's MN-major A operand (swz_offset, whose ldmatrix.trans
  reads test_backend_emulate.py checks); sm90 -- the 128B-swizzled 64-row boxes a TMA would write for
  a [K, M] operand (the model of test_backend_layouts.py, whose wgmma reads it checks);
* conv_out_offset is the NCHW offset of (n, g*Cog + co, ho, wo);
* conv + pool end to end: the producer's tiles (pool-tile row map, halo included), an exact GEMM read
  from them, the epilogue into the smem conv tile and the pool, against conv_pool_reference.
X holds distinct 16-bit ids (which element landed where) or small integers (exact sums).
"""
from __future__ import annotations

import importlib.util
import math
import pathlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from polysat.backend.conv_pool.reference import reference as conv_pool_reference
from polysat.backend.conv_pool.spec import ConvPoolSpec
from polysat.backend.conv.reference import im2col
from polysat.backend.conv.plan import SM90_CHUNK
from polysat.backend.conv.spec import ConvSpec
from polysat.backend.common.spec import EpilogueOp
from polysat.backend.common.layouts import swizzle128
from polysat.ir.dtypes import DType

_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)

HEADER = r"""
#include "polysat_gemm.cuh"
#include "polysat_conv.cuh"
#include <cstdio>
#include <vector>
#include <cmath>
#include <algorithm>
using namespace polysat;

static std::vector<u16> ids(long long n) {  // distinct ids: element i holds 1 + i
  std::vector<u16> x(n);
  for (long long i = 0; i < n; ++i) x[i] = (u16)(1 + i);
  return x;
}

// every producer thread of one CTA tile, in turn: setup, then fetch + land CHUNK passes at a time
template <class Im>
static void produce(const Im& proto, std::vector<unsigned char>& smem, int tm, int g, int kt, int bk, int threads) {
  std::fill(smem.begin(), smem.end(), (unsigned char)0xEE);  // 0xEEEE: an element nobody wrote
  for (int tid = 0; tid < threads; ++tid) {
    Im im = proto;
    im.setup(tm, g, tid);
    for (int p0 = 0; p0 < Im::PASSES; p0 += (int)(sizeof(im.raw) / sizeof(im.raw[0]))) {
      im.fetch(kt * bk, tid, p0);
      im.land(smem.data(), tid, p0);
    }
  }
}

// the smem image of every (group, CTA tile, k tile) of a plain conv
template <int BM, int BK, int THREADS, class Win, class Place, int CHUNK>
static void images(const ConvDims& d, int groups) {
  const int M = d.N * d.Ho * d.Wo, tiles_m = (M + BM - 1) / BM, KT = (d.K + BK - 1) / BK;
  std::vector<u16> x = ids((long long)d.N * d.C * d.H * d.W);
  using Im = Im2col<BM, BK, THREADS, Win, ConvRows, Place, CHUNK>;
  const Im proto{x.data(), d, ConvRows{M, d.Ho, d.Wo}};
  std::vector<unsigned char> smem(BM * BK * 2);
  std::printf("images %d %d %d\n", groups, tiles_m, KT);
  for (int g = 0; g < groups; ++g)
    for (int tm = 0; tm < tiles_m; ++tm)
      for (int kt = 0; kt < KT; ++kt) {
        produce(proto, smem, tm, g, kt, BK, THREADS);
        for (int i = 0; i < BM * BK; ++i) std::printf("%d ", smem[2 * i] | (smem[2 * i + 1] << 8));
        std::printf("\n");
      }
}

static void offsets(int groups, int M, int Cog, int HoWo, int Co) {
  std::printf("offsets\n");
  for (int g = 0; g < groups; ++g)
    for (int m = 0; m < M; ++m)
      for (int co = 0; co < Cog; ++co) std::printf("%lld ", conv_out_offset(g, m, co, HoWo, Co, Cog));
  std::printf("\n");
}

// the host stand-in of the generated epilogue: bias along the channels, then ReLU (kept in float)
struct HostEpi {
  using OutT = float;
  float* C;
  int Co, Cog;
  const float* bias;
  float apply(float v, int g, int, int co) const { return std::max(v + bias[g * Cog + co], 0.0f); }
};

// conv + bias + ReLU + max-pool: X and W small integers, every sum exact
template <int BM, int BN, int BK, int THREADS, class Win, class PW>
static void conv_pool(const ConvDims& d, int groups, int Hp, int Wp) {
  std::vector<u16> x((long long)d.N * d.C * d.H * d.W);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (u16)((i * 7 + 3) % 5);
  std::vector<float> w((long long)d.Co * d.K), bias(d.Co), P((long long)d.N * d.Co * Hp * Wp, -12345.0f);
  for (size_t i = 0; i < w.size(); ++i) w[i] = (float)((int)((i * 3 + 1) % 5) - 2);
  for (int i = 0; i < d.Co; ++i) bias[i] = (float)(i % 3 - 1);
  const PoolRows<PW> rows{(Hp + PW::TPH - 1) / PW::TPH, (Wp + PW::TPW - 1) / PW::TPW, d.Ho, d.Wo};
  using Im = Im2col<BM, BK, THREADS, Win, PoolRows<PW>, PlaceSm80<BM>, BK / (THREADS / (BM / 2))>;
  const Im proto{x.data(), d, rows};
  const PoolOut<HostEpi, PW, BM, BN> out{HostEpi{P.data(), d.Co, d.Cog, bias.data()}, rows, Hp, Wp, d.Cog};
  const int tiles_m = d.N * rows.tiles_ph * rows.tiles_pw, tiles_n = (d.Cog + BN - 1) / BN, KT = (d.K + BK - 1) / BK;
  std::vector<unsigned char> smem(BM * BK * 2), scratch(out.kSmemBytes);
  std::vector<float> acc(BM * BN);
  for (int g = 0; g < groups; ++g)
    for (int tm = 0; tm < tiles_m; ++tm)
      for (int tn = 0; tn < tiles_n; ++tn) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int kt = 0; kt < KT; ++kt) {
          produce(proto, smem, tm, g, kt, BK, THREADS);
          for (int q = 0; q < BM; ++q)  // the MMA, exactly: A as the skeleton reads it (PlaceSm80), B = W
            for (int nl = 0; nl < BN; ++nl) {
              const int co = tn * BN + nl;
              for (int k = 0; k < BK; ++k) {
                const int kk = kt * BK + k, off = PlaceSm80<BM>::offset(k, q);
                const float a = (float)(smem[off] | (smem[off + 1] << 8));
                const float b = (co < d.Cog && kk < d.K) ? w[(long long)(g * d.Cog + co) * d.K + kk] : 0.0f;
                acc[q * BN + nl] += a * b;
              }
            }
        }
        for (int q = 0; q < BM; ++q)
          for (int nl = 0; nl < BN; ++nl) out.put(scratch.data(), g, tn, q, nl, acc[q * BN + nl]);
        out.pool(scratch.data(), tm, tn, g, 0, 1);
      }
  std::printf("pool\n");
  for (float v : P) std::printf("%.1f ", v);
  std::printf("\n");
}
"""


def swz_offset(cols: int, row: int, col: int) -> int:
    """The sm80 tile's xor-16B swizzle (polysat::swz_offset), in elements."""
    cpr = cols // 8
    x = (row & 7) if cpr >= 8 else ((row >> 1) & 3) if cpr == 4 else ((row >> 2) & 1) if cpr == 2 else 0
    return row * cols + (((col >> 3) ^ x) << 3) + (col & 7)


def sm90_offset(k: int, m: int) -> int:
    """Byte offset of A element (k, m) as the TMA writes an MN-major [K, M] operand: 64-column boxes
    {64 M, 64 K}, 8192 bytes apart, each row 128 bytes, 128B-swizzled (test_backend_layouts.tma_fill)."""
    j, i = divmod(m, 64)
    return swizzle128(j * 8192 + k * 128 + 2 * i)


def win_args(s: ConvSpec) -> str:
    return ", ".join(map(str, s.window()))


def dims(s: ConvSpec, hw=None) -> str:
    ho, wo = hw or s.out_hw
    return f"ConvDims{{{s.n}, {s.cin}, {s.h}, {s.w}, {s.co}, {ho}, {wo}, {s.cg}, {s.cog}, {s.gemm_sizes()['k']}}}"


def build_and_run(tmp_path, body: str) -> list[str]:
    return oracle.run_host_emulator(HEADER + "int main() {\n" + body + "  return 0;\n}\n", tmp_path, "conv_emulate")


# (bm, bk, threads, placement, chunk): the sm80 tiles the plan search keeps, and the sm90 producer's
TILES = [(64, 32, 128, "sm80", 8), (128, 32, 256, "sm80", 8), (64, 64, 256, "sm80", 8),
         (64, 64, 128, "sm90", SM90_CHUNK), (128, 64, 128, "sm90", SM90_CHUNK), (128, 64, 128, "sm90", 8)]


def expected_images(s: ConvSpec, bm: int, bk: int, placement: str) -> list[np.ndarray]:
    x = (1 + np.arange(s.n * s.cin * s.h * s.w, dtype=np.int64)).astype(np.uint16).astype(np.int64)
    x = x.reshape(s.shapes()[s.x])
    m_all, k_all = s.gemm_sizes()["m"], s.gemm_sizes()["k"]
    tiles_m, kt_n = math.ceil(m_all / bm), math.ceil(k_all / bk)
    out = []
    for g in range(s.groups):
        a = im2col(s, x[:, g * s.cg:(g + 1) * s.cg])  # [M, K] ids, 0 outside X
        ap = np.zeros((tiles_m * bm, kt_n * bk), np.int64)
        ap[:m_all, :k_all] = a
        for tm in range(tiles_m):
            for kt in range(kt_n):
                img = np.full(bm * bk, -1, np.int64)
                for k in range(bk):
                    for m in range(bm):
                        v = ap[tm * bm + m, kt * bk + k]
                        if placement == "sm80":
                            img[swz_offset(bm, k, m)] = v
                        else:
                            img[sm90_offset(k, m) // 2] = v
                out.append(img)
    return out


def geometry(n, cin, h, w, co_per_group, groups, kh, kw, stride, pad, dil) -> ConvSpec | None:
    try:
        return ConvSpec("c", n, cin * groups, h, w, co_per_group * groups, kh, kw, stride=stride, pad=pad,
                        dilation=dil, groups=groups)
    except Exception:  # noqa: BLE001 - a window that does not fit: not a conv
        return None


geometries = st.builds(
    geometry, st.integers(1, 2), st.integers(1, 5), st.integers(3, 12), st.integers(3, 12), st.integers(1, 3),
    st.sampled_from([1, 2, 3]), st.integers(1, 3), st.integers(1, 3), st.sampled_from([(1, 1), (2, 2), (1, 2), (3, 1)]),
    st.sampled_from([(0, 0, 0, 0), (1, 1, 1, 1), (0, 1, 2, 0), (2, 0, 1, 1)]),
    st.sampled_from([(1, 1), (2, 2), (1, 3)])).filter(lambda s: s is not None and s.n * s.out_hw[0] * s.out_hw[1] <= 300)

FIXED = [ConvSpec("c3s2", 1, 3, 9, 11, 4, 3, 3, stride=(2, 2), pad=(1, 1, 1, 1)),
         ConvSpec("dw", 2, 6, 7, 5, 6, 3, 3, pad=(1, 1, 1, 1), groups=6),               # depthwise
         ConvSpec("dil", 1, 4, 10, 9, 4, 3, 2, stride=(1, 2), pad=(2, 1, 0, 1), dilation=(2, 3), groups=2),
         ConvSpec("big_k", 1, 12, 6, 6, 2, 3, 3, pad=(1, 1, 1, 1))]                      # K = 108: k tails


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(st.lists(geometries, min_size=3, max_size=3), st.permutations(range(len(TILES))))
def test_im2col_producer_writes_numpys_im2col_where_the_skeleton_reads_it(tmp_path_factory, specs, order):
    tmp = tmp_path_factory.mktemp("im2col")
    cases = [(s, TILES[order[i % len(TILES)]]) for i, s in enumerate(FIXED + specs)]
    body = ""
    for s, (bm, bk, threads, placement, chunk) in cases:
        place = f"PlaceSm80<{bm}>" if placement == "sm80" else "PlaceSm90"
        body += f"  images<{bm}, {bk}, {threads}, ConvWin<{win_args(s)}>, {place}, {chunk}>({dims(s)}, {s.groups});\n"
    small = FIXED[2]
    body += f"  offsets({small.groups}, {small.gemm_sizes()['m']}, {small.cog}, {small.out_hw[0] * small.out_hw[1]}, {small.co});\n"
    lines = iter(build_and_run(tmp, body))
    for s, (bm, bk, threads, placement, chunk) in cases:
        head = next(lines).split()
        assert head[0] == "images"
        want = expected_images(s, bm, bk, placement)
        assert [int(v) for v in head[1:]] == [s.groups, math.ceil(s.gemm_sizes()["m"] / bm), math.ceil(s.gemm_sizes()["k"] / bk)]
        for i, exp in enumerate(want):
            got = np.array(next(lines).split(), dtype=np.int64)
            assert got.shape == exp.shape
            bad = np.flatnonzero(got != exp)
            assert bad.size == 0, (f"{s.name} {s.to_json()} tile {bm}x{bk}/{threads} {placement}, image {i}: "
                                   f"{bad.size} elements differ, first at {bad[0]}: {got[bad[0]]} != {exp[bad[0]]}")
    assert next(lines) == "offsets"
    got = np.array(next(lines).split(), dtype=np.int64)
    ho, wo = small.out_hw
    g, m, co = np.meshgrid(np.arange(small.groups), np.arange(small.gemm_sizes()["m"]), np.arange(small.cog), indexing="ij")
    n_, pix = m // (ho * wo), m % (ho * wo)
    want = np.ravel_multi_index((n_, g * small.cog + co, pix // wo, pix % wo), small.shapes()[small.y])
    np.testing.assert_array_equal(got, want.ravel())


POOLS = [
    # conv, pool (kernel, stride, pad, dilation), pool tile, (bm, bn, bk, threads)
    (ConvSpec("crp", 1, 3, 10, 10, 5, 3, 3, pad=(1, 1, 1, 1)), ((2, 2), (2, 2), (0, 0), (1, 1)), (4, 4), (64, 32, 32, 128)),
    (ConvSpec("resnet_stem", 2, 2, 13, 11, 3, 3, 3, stride=(2, 2), pad=(1, 1, 1, 1)), ((3, 3), (2, 2), (1, 1), (1, 1)), (3, 3),
     (64, 32, 32, 128)),
    (ConvSpec("grouped", 1, 4, 12, 9, 4, 3, 1, pad=(1, 1, 0, 0), groups=2, dilation=(2, 1)), ((2, 3), (1, 2), (1, 1), (1, 1)),
     (5, 2), (64, 16, 32, 128)),
    (ConvSpec("dilated_pool", 1, 2, 9, 9, 3, 2, 2), ((2, 2), (3, 2), (0, 1), (2, 2)), (2, 3), (64, 32, 32, 128)),
    (ConvSpec("wide", 1, 2, 7, 20, 2, 3, 3, pad=(1, 1, 1, 1)), ((3, 3), (1, 1), (1, 1), (1, 1)), (2, 10), (128, 32, 32, 256)),
]


@pytest.mark.parametrize("case", range(len(POOLS)), ids=[p[0].name for p in POOLS])
def test_conv_pool_on_the_host_equals_numpy(tmp_path, case):
    conv, (k, stv, pad, dil), tile, (bm, bn, bk, threads) = POOLS[case]
    conv = ConvSpec(conv.name, conv.n, conv.cin, conv.h, conv.w, conv.co, conv.kh, conv.kw, conv.stride, conv.pad,
                    conv.dilation, conv.groups, out_dtype=DType.fp32,
                    epilogue=(EpilogueOp("bias", "b", dtype=DType.fp32), EpilogueOp("relu")))
    spec = ConvPoolSpec(conv, conv.out_hw, k, stv, pad, dil)
    rh, rw = spec.pre_image(tile)
    assert rh * rw <= bm
    hp, wp = spec.out_hw
    pool = f"PoolWin<{tile[0]}, {tile[1]}, {k[0]}, {k[1]}, {stv[0]}, {stv[1]}, {dil[0]}, {dil[1]}, {pad[0]}, {pad[1]}>"
    body = (f"  conv_pool<{bm}, {bn}, {bk}, {threads}, ConvWin<{win_args(conv)}>, {pool}>({dims(conv)}, {conv.groups}, "
            f"{hp}, {wp});\n")
    lines = build_and_run(tmp_path, body)
    assert lines[0] == "pool"
    got = np.array(lines[1].split(), dtype=np.float64).reshape(spec.shapes()[spec.c])
    n_x = conv.n * conv.cin * conv.h * conv.w
    x = ((np.arange(n_x) * 7 + 3) % 5).astype(np.float32).reshape(conv.shapes()[conv.x])
    n_w = conv.co * conv.gemm_sizes()["k"]
    w = (((np.arange(n_w) * 3 + 1) % 5) - 2).astype(np.float32).reshape(conv.shapes()[conv.wt])
    b = (np.arange(conv.co) % 3 - 1).astype(np.float32)
    want = conv_pool_reference(spec, {conv.x: x, conv.wt: w, "b": b}).astype(np.float64)
    assert len(np.unique(want)) > 3 and (want > 0).mean() > 0.3  # the data exercise the max, not a constant
    np.testing.assert_array_equal(got, want)
