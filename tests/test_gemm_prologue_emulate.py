"""The A prologue's producer (polysat_gemm.cuh ``PrologueTile``) and the paired GEMM's column maps, run on the
host. Every thread of one CTA, in turn, fetches and lands its passes of each (M tile, K tile) as the sm80 and
sm90 skeletons do, and the shared tile it writes is numpy's A = f(gate, up) = 2 gate + up (exact in fp16 and
fp32 for small integers) of the sources read at (m, col + k) of a [M, ld] tensor, 0 outside the matrix (M and K
tails), placed where the skeleton reads it: sm80 the [BM][BK] xor-16B tile ldmatrix reads (``swz_offset``), or
for fp32 operands (3xTF32) the tile the tf32 fragments read (``swz_offset32``, 4 elements per 16-byte chunk),
sm90 128-byte rows, 128B-swizzled (the layout a K-major TMA box writes). No GPU needed: nvcc builds the header
for the host.
"""
from __future__ import annotations

import importlib.util
import math
import pathlib

import numpy as np

from polysat.backend.common.layouts import swizzle128

_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)

SOURCE = r"""
#include "polysat_gemm.cuh"
#include <cstdio>
#include <vector>
using namespace polysat;

template <class T>
struct Fn {  // A = 2 gate + up, rounded to fp16 (as a generated 16-bit prologue's program ends); fp32 as it is
  static constexpr int NS = 2;
  const T* src[NS];
  long long ld[NS];
  int col[NS];
  static constexpr int NST = 0;  // no per-row statistic (PrologueStats: STATS_SOURCE below)
  static constexpr int LIN = -1;  // nor an in-loop one (LIN_SOURCE below)
  POLYSAT_HD float f(const float (&x)[NS], int, const float*) const { return round_to_host(2.0f * x[0] + x[1]); }
  static POLYSAT_HD float round_to_host(float v) { return sizeof(T) == 4 ? v : __half2float(__float2half_rn(v)); }
};

// the element bits of v as T (fp16 bits for __half)
static unsigned bits_of(float v, __half) { return __half_as_ushort(__float2half_rn(v)); }
static unsigned bits_of(float v, float) { union { float f; unsigned u; } x{v}; return x.u; }

template <class T, int ROWS, int BK, int THREADS, int CHUNK, class Place>
static void images(int M, int K, int F) {
  const int ld = 2 * F + 8;
  std::vector<T> gu((size_t)M * ld);
  for (int m = 0; m < M; ++m)
    for (int j = 0; j < ld; ++j) gu[(size_t)m * ld + j] = T((float)((m * 7 + j) % 61));
  const T* base = gu.data();
  Fn<T> fn{{base, base}, {ld, ld}, {0, F}};
  const int tiles_m = (M + ROWS - 1) / ROWS, kts = (K + BK - 1) / BK;
  std::printf("images %d %d\n", tiles_m, kts);
  std::vector<unsigned char> smem(ROWS * BK * sizeof(T));
  for (int tm = 0; tm < tiles_m; ++tm)
    for (int kt = 0; kt < kts; ++kt) {
      std::fill(smem.begin(), smem.end(), (unsigned char)0xEE);
      for (int tid = 0; tid < THREADS; ++tid) {
        PrologueTile<T, Fn<T>, ROWS, BK, THREADS, CHUNK, Place> t{fn, tm * ROWS, M, K};
        for (int p0 = 0; p0 < t.PASSES; p0 += CHUNK) {
          t.fetch(kt * BK, tid, p0);
          t.land(smem.data(), kt * BK, tid, p0);
        }
      }
      for (int i = 0; i < ROWS * BK; ++i) {
        unsigned v = 0;
        for (int b = 0; b < (int)sizeof(T); ++b) v |= (unsigned)smem[sizeof(T) * i + b] << (8 * b);
        std::printf("%u ", v);
      }
      std::printf("\n");
    }
}
"""


def swz_offset(cols: int, row: int, col: int) -> int:
    """The sm80 tile's xor-16B swizzle (polysat::swz_offset), in elements."""
    cpr = cols // 8
    x = (row & 7) if cpr >= 8 else ((row >> 1) & 3) if cpr == 4 else ((row >> 2) & 1) if cpr == 2 else 0
    return row * cols + (((col >> 3) ^ x) << 3) + (col & 7)


def swz_offset32(cols: int, row: int, col: int) -> int:
    """The sm80 tile of 4-byte elements (polysat::swz_offset32), in elements."""
    x = ((row & 3) << 1) | ((row >> 2) & 1)
    return row * cols + (((col >> 2) ^ x) << 2) + (col & 3)


# (rows, bk, threads, chunk, placement): sm80 tiles the plan search keeps, and the sm90 producer warpgroup's; fp32
# operands: sm80 tiles (3xTF32 runs on the sm80 skeleton), 4-element chunks
TILES = [(64, 32, 128, 2, "sm80"), (128, 64, 256, 4, "sm80"), (64, 64, 128, 1, "sm90"), (128, 64, 128, 2, "sm90"),
         (64, 32, 128, 4, "sm80_f32"), (128, 32, 256, 2, "sm80_f32")]
SIZES = (77, 200, 200)  # M (a tail), K (a tail: a multiple of 8), F (up at column F of each row)


def _expected(rows: int, bk: int, placement: str) -> list[np.ndarray]:
    m_all, k_all, f = SIZES
    ld = 2 * f + 8
    gu = ((np.arange(m_all)[:, None] * 7 + np.arange(ld)[None]) % 61).astype(np.float32)
    a = 2 * gu[:, :k_all] + gu[:, f:f + k_all]  # exact: small integers
    a = a.astype(np.float32 if placement == "sm80_f32" else np.float16)
    bits = np.uint32 if placement == "sm80_f32" else np.uint16
    out = []
    for tm in range(math.ceil(m_all / rows)):
        for kt in range(math.ceil(k_all / bk)):
            img = np.zeros(rows * bk, np.int64)
            for r in range(rows):
                for k in range(bk):
                    m, kk = tm * rows + r, kt * bk + k
                    v = a[m, kk].view(bits) if m < m_all and kk < k_all else 0
                    at = (swz_offset(bk, r, k) if placement == "sm80" else swz_offset32(bk, r, k)
                          if placement == "sm80_f32" else swizzle128(r * 128 + 2 * k) // 2)
                    img[at] = v
            out.append(img)
    return out


def test_the_prologue_tile_is_numpys_a_where_the_skeleton_reads_it(tmp_path):
    place = {"sm80": "__half, KPlaceSm80<__half, {bk}>", "sm80_f32": "float, KPlaceSm80<float, {bk}>",
             "sm90": "__half, KPlaceSm90"}
    body = "".join(f"  images<{place[placement].split(', ', 1)[0]}, {rows}, {bk}, {threads}, {chunk}, "
                   f"{place[placement].split(', ', 1)[1].format(bk=bk)}>({', '.join(map(str, SIZES))});\n"
                   for rows, bk, threads, chunk, placement in TILES)
    lines = iter(oracle.run_host_emulator(SOURCE + "int main() {\n" + body + "  return 0;\n}\n", tmp_path,
                                          "prologue_emulate"))
    for rows, bk, threads, chunk, placement in TILES:
        assert next(lines).split()[0] == "images"
        for i, want in enumerate(_expected(rows, bk, placement)):
            got = np.array(next(lines).split(), dtype=np.int64)
            bad = np.flatnonzero(got != want)
            assert bad.size == 0, (f"{rows}x{bk}/{threads} {placement}, image {i}: {bad.size} differ, first at "
                                   f"{bad[0]}: {got[bad[0]]} != {want[bad[0]]}")


PAIR_SOURCE = r"""
#include "polysat_gemm.cuh"
#include <cstdio>
using namespace polysat;
// for each tile column c of an N tile: the (piece, piece column) the B producer loads there, and for the first
// piece's columns the output column the epilogue writes (sm80 fragment n, n + 8; sm90 group i, i + 8)
int main() {
  const int BN = 256, tn = 3, n0h = tn * BN / 2;
  for (int c = 0; c < BN; ++c) {
    int p80, p90;
    const int col80 = pair_col_sm80(c, n0h, p80);
    const int col90 = pair_col_sm90(c / 64, n0h, p90) + c % 64;
    std::printf("%d %d %d %d\n", p80, col80, p90, col90);
  }
  return 0;
}
"""


def test_pair_tiles_hold_column_j_of_both_pieces_where_the_epilogue_pairs_them(tmp_path):
    """The paired GEMM (backend/gemm/paired.py): the epilogue combines tile column n of the first piece with
    n + 8 (sm80: the next n8 fragment of the same warp) or n + 64 (sm90: accumulator group i + 8), so the B
    producer must have loaded the same piece column of the second piece there, and every piece column of the
    tile's half must appear exactly once per piece."""
    rows = np.array([line.split() for line in oracle.run_host_emulator(PAIR_SOURCE, tmp_path, "pair_emulate") if line],
                    dtype=np.int64)
    bn, n0h = 256, 3 * 128
    for piece, col, partner in ((rows[:, 0], rows[:, 1], 8), (rows[:, 2], rows[:, 3], 64)):
        for p in (0, 1):
            assert sorted(col[piece == p]) == list(range(n0h, n0h + bn // 2))  # each piece column once
        first = [c for c in range(bn) if piece[c] == 0]
        assert all(piece[c + partner] == 1 and col[c + partner] == col[c] for c in first)


STATS_SOURCE = r"""
#include "polysat_gemm.cuh"
#include <cmath>
#include <cstdio>
#include <vector>
using namespace polysat;

struct Fn {  // RMSNorm's statistic over columns col .. col + K of x: 1 / sqrt(sum(x^2) / K + eps)
  static constexpr int NST = 1;
  const __half* st_src[1];
  long long st_ld[1];
  int st_col[1];
  float inv_k;
  POLYSAT_HD float pre(int, float v) const { return v * v; }
  POLYSAT_HD float post(int, float v) const { return 1.0f / std::sqrt(v * inv_k + 1e-6f); }
};

// every thread's partials, then (the barrier) every thread's finish, for each M tile; one line per tile
template <int ROWS, int THREADS, int U>
static void stats(const Fn& fn, int M, int K) {
  using RS = PrologueStats<__half, Fn, ROWS, THREADS, U>;
  std::vector<float> part(RS::NST * RS::PART, NAN), st(ROWS * RS::NST, NAN);
  for (int m0 = 0; m0 < M; m0 += ROWS) {
    for (int tid = 0; tid < THREADS; ++tid) RS::partials(fn, part.data(), m0, M, K, tid);
    for (int tid = 0; tid < THREADS; ++tid) RS::finish(fn, part.data(), st.data(), tid);
    for (int r = 0; r < ROWS; ++r) std::printf("%.9e ", m0 + r < M ? st[r] : 0.0f);
    std::printf("\n");
  }
}

int main() {
  const int M = 77, K = 200, ld = 264, col = 48;
  std::vector<unsigned short> x((size_t)M * ld);
  for (int m = 0; m < M; ++m)
    for (int j = 0; j < ld; ++j)
      x[(size_t)m * ld + j] = __half_as_ushort(__float2half_rn((float)((m * 13 + j * 7) % 23 - 11) / 4.0f));
  const Fn fn{{reinterpret_cast<const __half*>(x.data())}, {ld}, {col}, 1.0f / K};
  stats<64, 128, 16>(fn, M, K);  // sm90 producer, BM 64 (one consumer warpgroup): two threads a row
  stats<128, 128, 4>(fn, M, K);  // sm90 producer, BM 128: one thread a row
  stats<192, 128, 4>(fn, M, K);  // sm90, BM 192: rows tid and tid + 128
  stats<64, 256, 16>(fn, M, K);  // sm80, 8 warps: four threads a row, 16 loads in flight
  stats<32, 128, 16>(fn, M, K);  // sm80, 4 warps, BM 32: four threads a row, more loads than a row has
  return 0;
}
"""


def test_the_row_statistic_is_numpys_over_the_rows_columns(tmp_path):
    """PrologueStats (the per-row statistic a prologue computes before its first A tile: RMSNorm's 1 / sqrt(mean(x^2) +
    eps) over K columns from col of a [M, ld] fp16 tensor), every thread's partials then every thread's finish, as
    the sm90 producer warpgroup (BM 64, 128, 192) and an sm80 CTA (8 or 4 warps, 16 loads in flight) run it, against numpy in fp64 to
    fp32 rounding (the kernel sums in its own order), M and K not multiples of the tile or of the threads' chunks."""
    m_all, k_all, ld, col = 77, 200, 264, 48
    x = ((np.arange(m_all)[:, None] * 13 + np.arange(ld)[None] * 7) % 23 - 11) / 4.0
    want = 1.0 / np.sqrt((x[:, col:col + k_all] ** 2).sum(axis=1) / k_all + 1e-6)
    lines = [ln for ln in oracle.run_host_emulator(STATS_SOURCE, tmp_path, "stats_emulate") if ln.strip()]
    at = 0
    for rows in (64, 128, 192, 64, 32):
        got = []
        for _ in range(math.ceil(m_all / rows)):
            got += [float(v) for v in lines[at].split()]
            at += 1
        got = np.array(got[:m_all])
        np.testing.assert_allclose(got, want, rtol=4e-7 * 8, err_msg=f"{rows} rows")
    assert at == len(lines)


LIN_SOURCE = r"""
#include "polysat_gemm.cuh"
#include <cmath>
#include <cstdio>
#include <vector>
using namespace polysat;

template <class T>
struct Fn {  // A = x r g, linear in RMSNorm's r (LIN 0: summed over source 0, x, as A's tiles land); g along K
  static constexpr int NS = 2, NST = 1, LIN = 0;
  const T* src[NS];
  long long ld[NS];
  int col[NS];
  float inv_k;
  POLYSAT_HD float pre(int, float v) const { return v * v; }
  POLYSAT_HD float post(int, float v) const { return 1.0f / std::sqrt(v * inv_k + 1e-6f); }
  POLYSAT_HD float f(const float (&x)[NS], int, const float*) const { return x[0] * 1.0f * x[1]; }  // r read as 1
};

// every thread lands its passes of every K tile of each M tile (as mainloop_sm80 does), then publishes; after the
// barrier finish_rows; one line of the M tile's statistics, then one line per warp tile row check of scale_rows_sm80
template <class T, int ROWS, int BK, int WM, int WN>
static void lin(const Fn<T>& fn, int M, int K) {
  constexpr int THREADS = WM * WN * 32;
  using Tile = PrologueTile<T, Fn<T>, ROWS, BK, THREADS, ROWS * (BK / kEpc<T>) / THREADS, KPlaceSm80<T, BK>>;
  std::vector<unsigned char> smem(ROWS * BK * sizeof(T));
  std::vector<float> part(ROWS * Tile::CPR, NAN), st(ROWS, NAN);
  for (int m0 = 0; m0 < M; m0 += ROWS) {
    std::vector<Tile> ts(THREADS, Tile{fn, m0, M, K});
    for (int k0 = 0; k0 < K; k0 += BK)
      for (int tid = 0; tid < THREADS; ++tid) {
        ts[tid].fetch(k0, tid, 0);
        ts[tid].land(smem.data(), k0, tid, 0);
      }
    for (int tid = 0; tid < THREADS; ++tid) ts[tid].publish(part.data(), tid);
    for (int tid = 0; tid < THREADS; ++tid) finish_rows<Fn<T>, ROWS, THREADS, Tile::CPR, 1>(fn, part.data(), st.data(), tid);
    for (int r = 0; r < ROWS; ++r) std::printf("%.9e ", m0 + r < M ? st[r] : 0.0f);
    std::printf("\n");
  }
  // scale_rows_sm80 on accumulators holding 1 + their tile row m: each must become (1 + m) * scale[m]
  constexpr int BN = 64, MI = ROWS / WM / 16, NI = BN / WN / 8, WTM = ROWS / WM, WTN = BN / WN;
  std::vector<float> scale(ROWS);
  for (int r = 0; r < ROWS; ++r) scale[r] = 0.5f + r;
  int bad = 0;
  for (int tid = 0; tid < THREADS; ++tid) {
    float acc[MI][NI][4];
    for (int i = 0; i < MI; ++i)
      for (int j = 0; j < NI; ++j) {
        int m, n;
        acc_coord<WTM, WTN>((tid >> 5) / WN, (tid >> 5) % WN, i, j, tid & 31, m, n);
        for (int c = 0; c < 4; ++c) acc[i][j][c] = 1.0f + m + (c >= 2 ? 8 : 0);
      }
    scale_rows_sm80<ROWS, BN, WM, WN>(acc, scale.data(), tid);
    for (int i = 0; i < MI; ++i)
      for (int j = 0; j < NI; ++j)
        for (int c = 0; c < 4; ++c) {
          int m, n;
          acc_coord<WTM, WTN>((tid >> 5) / WN, (tid >> 5) % WN, i, j, tid & 31, m, n);
          const int row = m + (c >= 2 ? 8 : 0);
          bad += acc[i][j][c] != (1.0f + row) * scale[row];
        }
  }
  std::printf("scaled %d\n", bad);
}

template <class T>
static void run(int M, int K, int ld, int col) {
  std::vector<T> x((size_t)M * ld), g(K);
  for (int m = 0; m < M; ++m)
    for (int j = 0; j < ld; ++j) x[(size_t)m * ld + j] = T((float)((m * 13 + j * 7) % 23 - 11) / 4.0f);
  for (int k = 0; k < K; ++k) g[k] = T(1.0f);
  const Fn<T> fn{{x.data(), g.data()}, {ld, 0}, {col, 0}, 1.0f / K};
  if constexpr (sizeof(T) == 4) {
    lin<T, 64, 32, 2, 2>(fn, M, K);   // fp32 (3xTF32), 4 warps: 8 chunks a row, 4 passes a thread
    lin<T, 128, 32, 2, 4>(fn, M, K);  // 8 warps
  } else {
    lin<T, 128, 64, 2, 4>(fn, M, K);  // fp16, 8 warps, BK 64
    lin<T, 64, 32, 2, 2>(fn, M, K);   // BK 32: 4 chunks a row
  }
}

int main() {
  run<float>(77, 200, 264, 48);
  run<__half>(77, 200, 264, 48);
  return 0;
}
"""


def test_an_in_loop_statistic_is_numpys_and_scales_the_accumulators_rows(tmp_path):
    """An A prologue linear in its one statistic (``prologue.in_loop``: RMSNorm's x r g) on the sm80 skeleton: each
    thread adds pre(x) of every element it lands to its rows' partials, over all K tiles (K 200: the last tile's
    columns past K add nothing; M 77: rows past M none), publishes them, and ``finish_rows`` gives numpy's
    1 / sqrt(mean(x^2) + eps) (fp64, to fp32 rounding of a sum in the kernel's own order); ``scale_rows_sm80`` then
    multiplies every accumulator of tile row m, in every thread's fragments, by scale[m]. fp32 and fp16, 4 and 8
    warps, 4 and 8 chunks a row."""
    m_all, k_all, ld, col = 77, 200, 264, 48
    x = ((np.arange(m_all)[:, None] * 13 + np.arange(ld)[None] * 7) % 23 - 11) / 4.0
    want = 1.0 / np.sqrt((x[:, col:col + k_all] ** 2).sum(axis=1) / k_all + 1e-6)
    lines = iter(ln for ln in oracle.run_host_emulator(LIN_SOURCE, tmp_path, "lin_emulate") if ln.strip())
    for rows in (64, 128, 128, 64):
        got = []
        for _ in range(math.ceil(m_all / rows)):
            got += [float(v) for v in next(lines).split()]
        np.testing.assert_allclose(np.array(got[:m_all]), want, rtol=4e-7 * 8, err_msg=f"{rows} rows")
        assert next(lines) == "scaled 0", rows
    assert next(lines, None) is None
