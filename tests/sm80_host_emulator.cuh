// The sm80 skeleton's data movement and MMAs on the host, through the skeleton's own __host__ index helpers
// (polysat_gemm.cuh: tile_origin, copy_coord, swz_offset, frag_coord, b_pick, acc_coord, elem_offset; for fp32
// operands swz_offset32, frag_tf32, split_tf32) and a model of what the hardware does (cp.async zero-fill,
// ldmatrix.x4 (.trans) with its bank check, 4-byte shared loads with theirs, mma.m16n8k16, mma.m16n8k8 .tf32):
// shared by tests/test_backend_emulate.py, tests/test_gemm_strided.py and tests/test_gemm_tf32_emulate.py.
#pragma once
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


// the kernel's cp.async / plain copies of one [ROWS][COLS] tile, thread by thread, from the matrix at
// element `base` of g with row stride ld_arg (0: packed, as TileProducer derives it); EB: element bytes (4: the
// fp32 tiles of the 3xTF32 path, swizzled by swz_offset32)
template <int ROWS, int COLS, int VEC, int THREADS, bool KMAJOR, int EB = 2>
static void load(std::vector<float>& tile, const std::vector<float>& g, long long base, long long ld_arg, int mn0,
                 int k0, int MN, int K) {
  long long ld; int r0, c0, rl, cl;
  tile_origin<KMAJOR>(mn0, k0, MN, K, ld, r0, c0, rl, cl);
  if (ld_arg > 0) ld = ld_arg;
  tile.assign(ROWS * COLS, -999.0f);
  for (int tid = 0; tid < THREADS; ++tid)
    for (int i = 0; i < ROWS * (COLS / VEC) / THREADS; ++i) {
      int r, c;
      copy_coord<COLS, VEC>(tid + i * THREADS, r, c);
      const int gr = r0 + r, gc = c0 + c;
      const bool ok = gr < rl && gc < cl;
      const int dst = EB == 4 ? swz_offset32<COLS>(r, c) : swz_offset<COLS>(r, c);
      for (int e = 0; e < VEC; ++e) tile[dst + e] = ok ? g[base + elem_offset(0, 0, gr, ld, gc) + e] : 0.0f;
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

// one 4-byte shared load of the 32 lanes (the fp32 fragments): 32 distinct banks
static void lds_banks(const int (&addr)[32]) {
  unsigned seen = 0;
  for (int l = 0; l < 32; ++l) seen |= 1u << (addr[l] % 32);
  if (seen != 0xffffffffu) { std::printf("FAIL 4-byte fragment load bank conflict (banks %08x)\n", seen); std::exit(1); }
}

// every lane's fp32 fragment (frag_tf32) of the k8 slice at (mn0, k0), split (split_tf32), each register's 32 loads
// checked for bank conflicts
template <bool KMAJOR, int COLS, int REGS>
static void split_frag_host(const std::vector<float>& tile, int mn0, int k0, float (&big)[32][REGS],
                            float (&small)[32][REGS]) {
  for (int r = 0; r < REGS; ++r) {
    int addr[32];
    for (int l = 0; l < 32; ++l) {
      int off[REGS];
      frag_tf32<KMAJOR, COLS>(l, mn0, k0, off);
      addr[l] = off[r];
      split_tf32(tile[off[r]], big[l][r], small[l][r]);
    }
    lds_banks(addr);
  }
}

// one BK step of the CTA tile on fp32 tiles, as mma_step_tf32 runs it: per k8 slice every warp's fragments
// (frag_tf32), split into big + small (split_tf32), three m16n8k8 tf32 MMAs per fragment pair, small terms first
template <int BM, int BN, int BK, int WM, int WN, bool AK, bool BKM>
static void mma_step_f32(const std::vector<float>& sA, const std::vector<float>& sB,
                         float (&acc)[WM * WN][BM / WM / 16][BN / WN / 8][32][4]) {
  constexpr int WTM = BM / WM, WTN = BN / WN, MI = WTM / 16, NI = WTN / 8;
  constexpr int A_COLS = AK ? BK : BM, B_COLS = BKM ? BK : BN;
  for (int w = 0; w < WM * WN; ++w) {
    const int wm = w / WN, wn = w % WN;
    for (int kk = 0; kk < BK; kk += 8) {
      static float ab[MI][32][4], as[MI][32][4], bb[NI][32][2], bs[NI][32][2];
      for (int i = 0; i < MI; ++i) split_frag_host<AK, A_COLS>(sA, wm * WTM + i * 16, kk, ab[i], as[i]);
      for (int j = 0; j < NI; ++j) split_frag_host<BKM, B_COLS>(sB, wn * WTN + j * 8, kk, bb[j], bs[j]);
      for (int i = 0; i < MI; ++i)
        for (int j = 0; j < NI; ++j) {
          mma1688_tf32(acc[w][i][j], as[i], bb[j]);
          mma1688_tf32(acc[w][i][j], ab[i], bs[j]);
          mma1688_tf32(acc[w][i][j], ab[i], bb[j]);
        }
    }
  }
}

// the CTA tile (m0, n0) of batch b of the accumulators into C, row stride ldc, batch stride cbs (each
// element written once)
template <int BM, int BN, int WM, int WN>
static void store_tile(const float (&acc)[WM * WN][BM / WM / 16][BN / WN / 8][32][4], std::vector<float>& C,
                       int b, long long cbs, long long ldc, int m0, int n0, int M, int N) {
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
              float& out = C[elem_offset(b, cbs, gm, ldc, gn)];
              if (out != -777.0f) { std::printf("FAIL (%d,%d,%d) written twice\n", b, gm, gn); std::exit(1); }
              out = acc[w][i][j][t][x];
            }
          }
        }
}

// packed operands and a packed [M, N] C (row stride N, one batch)
template <int ROWS, int COLS, int VEC, int THREADS, bool KMAJOR>
static void load(std::vector<float>& tile, const std::vector<float>& g, int mn0, int k0, int MN, int K) {
  load<ROWS, COLS, VEC, THREADS, KMAJOR>(tile, g, 0, 0, mn0, k0, MN, K);
}
template <int BM, int BN, int WM, int WN>
static void store_tile(const float (&acc)[WM * WN][BM / WM / 16][BN / WN / 8][32][4], std::vector<float>& C,
                       int m0, int n0, int M, int N) {
  store_tile<BM, BN, WM, WN>(acc, C, 0, 0, N, m0, n0, M, N);
}

// the whole GEMM, CTA tile by CTA tile, as gemm_sm80 runs it: st = {a_ld, a_bstride, b_ld, b_bstride, c_ld,
// c_bstride} in elements, the sm80 kernel's stride arguments (ld 0: packed; batch stride 0: broadcast); an
// operand reading a run of the batch dims reads matrix batch_index(b, div, mod); F32: fp32 operands (3xTF32)
template <int BM, int BN, int BK, int WM, int WN, bool AK, bool BKM, int VA, int VB, bool F32 = false>
static void gemm_tiles(const std::vector<float>& A, const std::vector<float>& B, std::vector<float>& C, int M, int N,
                       int K, int batch, const long long (&st)[6], int a_div = 1, int a_mod = 0, int b_div = 1,
                       int b_mod = 0) {
  constexpr int THREADS = WM * WN * 32, MI = BM / WM / 16, NI = BN / WN / 8;
  constexpr int A_ROWS = AK ? BM : BK, A_COLS = AK ? BK : BM, B_ROWS = BKM ? BN : BK, B_COLS = BKM ? BK : BN;
  std::vector<float> sA, sB;
  for (int b = 0; b < batch; ++b)
    for (int m0 = 0; m0 < M; m0 += BM)
      for (int n0 = 0; n0 < N; n0 += BN) {
        static float acc[WM * WN][MI][NI][32][4];
        for (auto& w : acc) for (auto& x : w) for (auto& y : x) for (auto& z : y) for (float& v : z) v = 0.0f;
        for (int k0 = 0; k0 < K; k0 += BK) {
          constexpr int EB = F32 ? 4 : 2;
          load<A_ROWS, A_COLS, VA, THREADS, AK, EB>(sA, A, elem_offset(batch_index(b, a_div, a_mod), st[1], 0, 0, 0), st[0], m0, k0, M, K);
          load<B_ROWS, B_COLS, VB, THREADS, BKM, EB>(sB, B, elem_offset(batch_index(b, b_div, b_mod), st[3], 0, 0, 0), st[2], n0, k0, N, K);
          if constexpr (F32) mma_step_f32<BM, BN, BK, WM, WN, AK, BKM>(sA, sB, acc);
          else mma_step<BM, BN, BK, WM, WN, AK, BKM>(sA, sB, acc);
        }
        store_tile<BM, BN, WM, WN>(acc, C, b, st[5], st[4], m0, n0, M, N);
      }
}
