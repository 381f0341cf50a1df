"""The sm80 skeleton's index logic, run on the CPU against a model of the hardware (no GPU needed).

polysat_gemm.cuh keeps every index computation of the sm80 path in ``__host__ __device__`` helpers
(tile_origin, copy_coord, swz_offset, frag_coord, b_pick, acc_coord). This test compiles a host
program that calls exactly those helpers and models only what the hardware does, from the PTX ISA:
cp.async (zero-fill when predicated off), ldmatrix.x4 (.trans), and mma.m16n8k16.row.col fragment
layouts; it also checks that every ldmatrix phase is free of bank conflicts. Small integer data make every sum exact, so the emulated GEMM must equal the true product
bit for bit, for both operand majors, several tiles and warp grids, every vector width and odd shapes.
"""
import os
import subprocess

from polysat.backend.common.render import TEMPLATES
from polysat.backend.common.nvcc import nvcc_path

EMULATOR = r"""
#include "polysat_gemm.cuh"
#include "mma_host_model.cuh"
#include <cstdio>
#include <cstdlib>
#include <vector>
using namespace polysat;

// one 8x8 matrix row as ldmatrix sees it: 8 consecutive elements at a 16-byte aligned smem address
struct Regs { float v[4][2]; };

template <bool TRANS>
static void ldmatrix_x4(const std::vector<float>& smem, const int (&addr)[32], Regs (&out)[32]) {
  // each 8x8 matrix is one shared-memory phase: its 8 rows of 16 bytes must hit 8 distinct bank groups
  for (int j = 0; j < 4; ++j) {
    int seen = 0;
    for (int r = 0; r < 8; ++r) seen |= 1 << ((addr[8 * j + r] * 2 / 16) % 8);
    if (seen != 0xff) { std::printf("FAIL ldmatrix bank conflict (groups %02x)\n", seen); std::exit(1); }
  }
  for (int t = 0; t < 32; ++t)
    for (int j = 0; j < 4; ++j)
      for (int e = 0; e < 2; ++e) {
        int row, col;  // element (row, col) of matrix j as stored: row r comes from lane 8j + r
        if (TRANS) { row = 2 * (t % 4) + e; col = t / 4; } else { row = t / 4; col = 2 * (t % 4) + e; }
        if (addr[8 * j + row] % 8) { std::printf("FAIL unaligned ldmatrix row\n"); std::exit(1); }
        out[t].v[j][e] = smem[addr[8 * j + row] + col];
      }
}


// the kernel's cp.async / plain copies of one [ROWS][COLS] tile, thread by thread
template <int ROWS, int COLS, int VEC, int THREADS, bool KMAJOR>
static void load(std::vector<float>& tile, const std::vector<float>& g, int mn0, int k0, int MN, int K) {
  long long ld; int r0, c0, rl, cl;
  tile_origin<KMAJOR>(mn0, k0, MN, K, ld, r0, c0, rl, cl);
  tile.assign(ROWS * COLS, -999.0f);
  for (int tid = 0; tid < THREADS; ++tid)
    for (int i = 0; i < ROWS * (COLS / VEC) / THREADS; ++i) {
      int r, c;
      copy_coord<COLS, VEC>(tid + i * THREADS, r, c);
      const int gr = r0 + r, gc = c0 + c;
      const bool ok = gr < rl && gc < cl;
      const int dst = swz_offset<COLS>(r, c);
      for (int e = 0; e < VEC; ++e) tile[dst + e] = ok ? g[gr * ld + gc + e] : 0.0f;
    }
}

// one BK step of the CTA tile: every warp's ldmatrix + mma over the staged tiles sA, sB
template <int BM, int BN, int BK, int WM, int WN, bool AK, bool BKM>
static void mma_step(const std::vector<float>& sA, const std::vector<float>& sB,
                     float (&acc)[WM * WN][BM / WM / 16][BN / WN / 8][32][4]) {
  constexpr int WTM = BM / WM, WTN = BN / WN, MI = WTM / 16, NI = WTN / 8;
  constexpr int A_COLS = AK ? BK : BM, B_COLS = BKM ? BK : BN;
  for (int w = 0; w < WM * WN; ++w) {
    const int wm = w / WN, wn = w % WN;
    for (int kk = 0; kk < BK; kk += 16) {
      Regs af[MI][32], bf[NI / 2][32];
      int addr[32];
      for (int i = 0; i < MI; ++i) {
        for (int l = 0; l < 32; ++l) { int r, c; frag_coord<AK>(l, wm * WTM + i * 16, kk, r, c); addr[l] = swz_offset<A_COLS>(r, c); }
        ldmatrix_x4<!AK>(sA, addr, af[i]);
      }
      for (int j = 0; j < NI / 2; ++j) {
        for (int l = 0; l < 32; ++l) { int r, c; frag_coord<BKM>(l, wn * WTN + j * 16, kk, r, c); addr[l] = swz_offset<B_COLS>(r, c); }
        ldmatrix_x4<!BKM>(sB, addr, bf[j]);
      }
      for (int i = 0; i < MI; ++i)
        for (int j = 0; j < NI; ++j) {
          float a[32][4][2], b[32][2][2];
          for (int t = 0; t < 32; ++t) {
            for (int x = 0; x < 4; ++x) for (int e = 0; e < 2; ++e) a[t][x][e] = af[i][t].v[x][e];
            const float* q[4] = {bf[j >> 1][t].v[0], bf[j >> 1][t].v[1], bf[j >> 1][t].v[2], bf[j >> 1][t].v[3]};
            const float *b0, *b1;
            b_pick(j, q, b0, b1);
            for (int e = 0; e < 2; ++e) { b[t][0][e] = b0[e]; b[t][1][e] = b1[e]; }
          }
          mma16816(acc[w][i][j], a, b);
        }
    }
  }
}

// the CTA tile (m0, n0) of the accumulators into row-major C [M, N] (each element written once)
template <int BM, int BN, int WM, int WN>
static void store_tile(const float (&acc)[WM * WN][BM / WM / 16][BN / WN / 8][32][4], std::vector<float>& C,
                       int m0, int n0, int M, int N) {
  constexpr int WTM = BM / WM, WTN = BN / WN, MI = WTM / 16, NI = WTN / 8;
  for (int w = 0; w < WM * WN; ++w)
    for (int i = 0; i < MI; ++i)
      for (int j = 0; j < NI; ++j)
        for (int t = 0; t < 32; ++t) {
          int m, n;
          acc_coord<WTM, WTN>(w / WN, w % WN, i, j, t, m, n);
          const int rows[4] = {m, m, m + 8, m + 8}, cols[4] = {n, n + 1, n, n + 1};
          for (int x = 0; x < 4; ++x) {
            const int gm = m0 + rows[x], gn = n0 + cols[x];
            if (gm < M && gn < N) {
              if (C[gm * N + gn] != -777.0f) { std::printf("FAIL (%d,%d) written twice\n", gm, gn); std::exit(1); }
              C[gm * N + gn] = acc[w][i][j][t][x];
            }
          }
        }
}

template <int BM, int BN, int BK, int WM, int WN, bool AK, bool BKM, int VA, int VB>
static void run(int M, int N, int K) {
  constexpr int THREADS = WM * WN * 32, MI = BM / WM / 16, NI = BN / WN / 8;
  constexpr int A_ROWS = AK ? BM : BK, A_COLS = AK ? BK : BM, B_ROWS = BKM ? BN : BK, B_COLS = BKM ? BK : BN;
  std::vector<float> A(M * K), B(K * N), C(M * N, -777.0f);
  srand(M * 7 + N * 13 + K);
  for (auto& x : A) x = float(rand() % 7 - 3);
  for (auto& x : B) x = float(rand() % 7 - 3);
  auto a_at = [&](int m, int k) { return AK ? A[m * K + k] : A[k * M + m]; };
  auto b_at = [&](int k, int n) { return BKM ? B[n * K + k] : B[k * N + n]; };
  std::vector<float> sA, sB;
  for (int m0 = 0; m0 < M; m0 += BM)
    for (int n0 = 0; n0 < N; n0 += BN) {
      static float acc[WM * WN][MI][NI][32][4];
      for (auto& w : acc) for (auto& x : w) for (auto& y : x) for (auto& z : y) for (float& v : z) v = 0.0f;
      for (int k0 = 0; k0 < K; k0 += BK) {
        load<A_ROWS, A_COLS, VA, THREADS, AK>(sA, A, m0, k0, M, K);
        load<B_ROWS, B_COLS, VB, THREADS, BKM>(sB, B, n0, k0, N, K);
        mma_step<BM, BN, BK, WM, WN, AK, BKM>(sA, sB, acc);
      }
      store_tile<BM, BN, WM, WN>(acc, C, m0, n0, M, N);
    }
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      float s = 0.0f;
      for (int k = 0; k < K; ++k) s += a_at(m, k) * b_at(k, n);
      if (C[m * N + n] != s) {
        std::printf("FAIL BM=%d BN=%d BK=%d W=%dx%d AK=%d BK=%d VA=%d VB=%d M=%d N=%d K=%d at (%d,%d): %g != %g\n",
                    BM, BN, BK, WM, WN, AK, BKM, VA, VB, M, N, K, m, n, C[m * N + n], s);
        std::exit(1);
      }
    }
}

int main() {
  run<64, 64, 32, 2, 2, true, false, 8, 8>(130, 72, 80);      // A row-major, B row-major ([K, N])
  run<64, 64, 64, 2, 2, false, true, 8, 8>(72, 136, 136);     // A col-major, B col-major
  run<128, 128, 32, 2, 2, true, true, 8, 8>(200, 136, 40);    // 64x64 warp tiles
  run<128, 128, 64, 2, 4, false, false, 8, 8>(136, 264, 72);  // 64x32 warp tiles
  run<128, 64, 32, 2, 2, true, false, 2, 4>(131, 100, 98);    // 4- and 8-byte copies
  run<64, 128, 32, 2, 2, false, false, 1, 1>(77, 93, 101);    // scalar copies, nothing aligned
  run<64, 64, 32, 2, 2, true, true, 1, 1>(5, 3, 7);           // a fraction of one tile
  std::printf("OK\n");
  return 0;
}
"""


def test_sm80_index_logic_matches_hardware_model(tmp_path):
    exe = nvcc_path()
    assert exe, "nvcc is needed to build the host emulator"
    src = tmp_path / "emulate.cu"
    src.write_text(EMULATOR)
    binary = tmp_path / "emulate"
    build = subprocess.run([exe, "-std=c++17", "-O1", "-I", TEMPLATES, "-I", os.path.dirname(__file__),
                            "-o", str(binary), str(src)],
                           capture_output=True, text=True, check=False)
    assert build.returncode == 0, build.stderr[-4000:]
    run = subprocess.run([str(binary)], capture_output=True, text=True, check=False, timeout=300,
                         env={**os.environ, "LC_ALL": "C"})
    assert run.returncode == 0 and run.stdout.strip() == "OK", run.stdout + run.stderr
