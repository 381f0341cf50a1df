// Host harness shared by the flash-skeleton emulators (tests/test_attention_emulator.cu and
// tests/test_scores_emulator.cu, built with nvcc as host code): the hardware models of the sm80 path, from the
// PTX ISA (cp.async with zero-fill, ldmatrix.x4 (.trans) with a bank-conflict check, mma.m16n8k16.row.col,
// warp shuffles inside a quad), the per-warp pieces both kernels run through the kernel's own
// __host__ __device__ helpers (S = Q K^T of one warp, masked scores, the row statistics), the problem and
// the `configs` / `run` modes.
#pragma once
#include "polysat_attention.cuh"
#include "mma_host_model.cuh"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

using namespace polysat;
using namespace polysat::attn;
using H = __half;
using BF = __nv_bfloat16;

[[noreturn]] static void die(const char* what) {
  std::printf("FAIL %s\n", what);
  std::exit(1);
}

// ---- element types on the host ----------------------------------------------------------------
template <class T> static float round_t(float x);
template <> float round_t<__half>(float x) { return __half2float(__float2half_rn(x)); }
template <> float round_t<__nv_bfloat16>(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
template <> float round_t<float>(float x) { return x; }

template <class T> static float half_of(u32 reg, int h);  // element h (0 = low 16 bits) of a packed pair
template <> float half_of<__half>(u32 reg, int h) {
  const unsigned short bits = (unsigned short)(h ? reg >> 16 : reg & 0xffffu);
  __half x;
  std::memcpy(&x, &bits, 2);
  return __half2float(x);
}
template <> float half_of<__nv_bfloat16>(u32 reg, int h) {
  const unsigned short bits = (unsigned short)(h ? reg >> 16 : reg & 0xffffu);
  __nv_bfloat16 x;
  std::memcpy(&x, &bits, 2);
  return __bfloat162float(x);
}

static void quad_max_host(float (&x)[32][2]) {
  for (int q = 0; q < 8; ++q)
    for (int r = 0; r < 2; ++r) {
      float v = x[4 * q][r];
      for (int i = 1; i < 4; ++i) v = std::fmax(v, x[4 * q + i][r]);
      for (int i = 0; i < 4; ++i) x[4 * q + i][r] = v;
    }
}
static void quad_sum_host(float (&x)[32][2]) {  // shfl.xor 1 then 2: (a + b) + (c + d) in every lane
  for (int q = 0; q < 8; ++q)
    for (int r = 0; r < 2; ++r) {
      const float a = x[4 * q][r], b = x[4 * q + 1][r], c = x[4 * q + 2][r], d = x[4 * q + 3][r];
      for (int i = 0; i < 4; ++i) x[4 * q + i][r] = (i < 2) ? (a + b) + (c + d) : (c + d) + (a + b);
    }
}

// ---- sm80 hardware models ---------------------------------------------------------------------------
// the copies of a [ROWS][COLS] smem tile (COLS = the padded head dim) from the first `cols` columns of rows
// row0.. of a global matrix (leading dimension ld) as load_rows issues them: tile_copy places each copy of
// VEC elements (cp.async with zero-fill, or one plain element when VEC is 1)
template <int ROWS, int COLS, int VEC>
static void copies(std::vector<float>& tile, const float* g, int row0, int row_lim, long long ld, int cols) {
  if (ld % VEC || cols % VEC) die("copy vector does not divide the row");
  for (int idx = 0; idx < ROWS * (COLS / VEC); ++idx) {
    int dst;
    long long src;
    const bool ok = tile_copy<ROWS, COLS, VEC>(idx, ld, row0, row_lim, cols, dst, src);
    if ((dst * 2) % (2 * VEC)) die("misaligned copy destination");
    for (int e = 0; e < VEC; ++e) tile[dst + e] = ok ? g[src + e] : 0.0f;
  }
}
template <int ROWS, int COLS, int THREADS>
static void cp_async_tile(std::vector<float>& tile, const float* g, int row0, int row_lim, long long ld = COLS,
                          int cols = COLS, int vec = 8) {
  tile.assign(ROWS * COLS, -999.0f);
  switch (vec) {
    case 8: copies<ROWS, COLS, 8>(tile, g, row0, row_lim, ld, cols); break;
    case 4: copies<ROWS, COLS, 4>(tile, g, row0, row_lim, ld, cols); break;
    case 2: copies<ROWS, COLS, 2>(tile, g, row0, row_lim, ld, cols); break;
    default: copies<ROWS, COLS, 1>(tile, g, row0, row_lim, ld, cols);
  }
  for (float v : tile)
    if (v == -999.0f) die("tile element never written");
}

// ldmatrix.x4 (.trans): matrix j's row r is the 16 bytes at lane 8j + r's address; lane t receives
// (row t/4, cols 2(t%4), +1) of each matrix, transposed: (rows 2(t%4), +1, col t/4)
template <int ROWS, int COLS, bool KMAJOR>
static void ldmatrix_x4(const std::vector<float>& tile, int mn0, int k0, float (&out)[32][4][2]) {
  int addr[32];
  for (int l = 0; l < 32; ++l) {
    int r, c;
    frag_coord<KMAJOR>(l, mn0, k0, r, c);
    addr[l] = tile_offset<ROWS, COLS>(r, c);
  }
  for (int j = 0; j < 4; ++j) {
    int seen = 0;
    for (int r = 0; r < 8; ++r) seen |= 1 << ((addr[8 * j + r] * 2 / 16) % 8);
    if (seen != 0xff) die("ldmatrix bank conflict");
    for (int r = 0; r < 8; ++r)
      if (addr[8 * j + r] % 8) die("unaligned ldmatrix row");
  }
  for (int t = 0; t < 32; ++t)
    for (int j = 0; j < 4; ++j)
      for (int e = 0; e < 2; ++e) {
        int row, col;
        if (!KMAJOR) { row = 2 * (t % 4) + e; col = t / 4; } else { row = t / 4; col = 2 * (t % 4) + e; }
        out[t][j][e] = tile[addr[8 * j + row] + col];
      }
}


struct Problem {
  int B, M, N, D, DV;  // DV = 0: no V (softmax_scores), the output is P [B, M, N]; else O [B, M, DV]
  long long cols[4][3] = {};  // (offset, ld, head stride) of Q, K, V, O as rows_at takes them; ld 0: packed
  float c;
  std::vector<float> q, k, v;
  std::vector<float> o;
};

// row statistics of one warp's lanes (16 query rows: each lane holds 2)
struct RowStats {
  float m[32][2], l[32][2], inv_l[32][2];
  void reset() {
    for (int t = 0; t < 32; ++t)
      for (int r = 0; r < 2; ++r) { m[t][r] = neg_inf(); l[t][r] = 0.0f; inv_l[t][r] = 1.0f; }
  }
  void finish() {  // the row sums complete: quad sum, then 1 / l
    quad_sum_host(l);
    for (int t = 0; t < 32; ++t) inverse(l[t], inv_l[t]);
  }
  template <int NT>
  void stats(float (&s)[32][NT][4], float (&mx)[32][2], float c) {  // pass 1 of the two-pass softmax
    quad_max_host(mx);
    for (int t = 0; t < 32; ++t) stats_step<NT>(s[t], mx[t], m[t], l[t], c);
  }
};

// the Q A-fragments of each warp of a CTA (Q tile [BM][DP] in sQ, K-major; Q_REGS or not, the kernel's
// ldmatrix reads the same fragments: once, or once per key block)
template <int BM, int DP, int WARPS>
static void q_fragments(const std::vector<float>& sQ, float (&qf)[WARPS][DP / 16][32][4][2]) {
  for (int w = 0; w < WARPS; ++w)
    for (int kk = 0; kk < DP / 16; ++kk) ldmatrix_x4<BM, DP, true>(sQ, w * 16, kk * 16, qf[w][kk]);
}

// S = Q K^T of one warp (sm80: ldmatrix of the [BN][DP] K tile in sK, mma.m16n8k16 over the padded head dim)
template <int BN, int DP, int NT>
static void qk_sm80(const std::vector<float>& sK, const float (&qf)[DP / 16][32][4][2], float (&s)[32][NT][4]) {
  for (auto& x : s) for (auto& y : x) for (float& z : y) z = 0.0f;
  for (int kk = 0; kk < DP / 16; ++kk)
    for (int jj = 0; jj < NT / 2; ++jj) {
      float kf[32][4][2];
      ldmatrix_x4<BN, DP, true>(sK, jj * 16, kk * 16, kf);
      for (int h = 0; h < 2; ++h) {
        float bb[32][2][2], acc[32][4];
        for (int t = 0; t < 32; ++t) {
          const float* q4[4] = {kf[t][0], kf[t][1], kf[t][2], kf[t][3]};
          const float *b0, *b1;
          b_pick(h, q4, b0, b1);
          for (int e = 0; e < 2; ++e) { bb[t][0][e] = b0[e]; bb[t][1][e] = b1[e]; }
          for (int e = 0; e < 4; ++e) acc[t][e] = s[t][2 * jj + h][e];
        }
        mma16816(acc, qf[kk], bb);
        for (int t = 0; t < 32; ++t) for (int e = 0; e < 4; ++e) s[t][2 * jj + h][e] = acc[t][e];
      }
    }
}

// scale, mask and row max of one lane's scores (mask: the key block needs the causal / tail mask)
template <int NT, int SIGN, bool CAUSAL>
static void lane_scores(bool mask, float (&s)[NT][4], float (&mx)[2], int t, int row0, int col0, int M, int N) {
  mx[0] = mx[1] = neg_inf();
  if (mask) scores<NT, SIGN, true, CAUSAL>(s, mx, t, row0, col0, M, N);
  else scores<NT, SIGN, false, CAUSAL>(s, mx, t, row0, col0, M, N);
}

// ---- the modes --------------------------------------------------------------------------------------
struct Config {
  const char* text;  // the configuration's parameters, as the Python side parses them
  void (*run)(Problem&);
};

static int print_configs(const Config* configs, int n) {
  for (int i = 0; i < n; ++i) std::printf("%d %s\n", i, configs[i].text);
  return 0;
}

// run <in> <out>: <in> = int32 {config, B, M, N} + float32 c + Q, K (+ V when DV > 0), values already rounded
// to the input type; dims(config, D, DV) reads a configuration's head dims; <out> = float32 O [B, M, DV]
// (DV > 0) or P [B, M, N] (DV = 0), every element written exactly once
template <class Dims>
static int run_problem(const char* in, const char* out, const Config* configs, int n, Dims dims, const char* unwritten,
                       char** cols = nullptr) {
  FILE* f = std::fopen(in, "rb");
  if (!f) die("cannot open input");
  int hdr[4];
  Problem p;
  if (std::fread(hdr, 4, 4, f) != 4 || std::fread(&p.c, 4, 1, f) != 1) die("short header");
  const int cfg = hdr[0];
  if (cfg < 0 || cfg >= n) die("bad config");
  dims(configs[cfg].text, p.D, p.DV);
  p.B = hdr[1]; p.M = hdr[2]; p.N = hdr[3];
  long long size[4] = {(long long)p.B * p.M * p.D, (long long)p.B * p.N * p.D, (long long)p.B * p.N * p.DV,
                       (long long)p.B * p.M * (p.DV > 0 ? p.DV : p.N)};
  for (int t = 0; cols && t < 4; ++t) {
    for (int e = 0; e < 3; ++e) p.cols[t][e] = std::atoll(cols[3 * t + e]);
    if (p.cols[t][1]) size[t] = (long long)(t == 0 || t == 3 ? p.M : p.N) * p.cols[t][1];
  }
  p.q.resize((size_t)size[0]); p.k.resize((size_t)size[1]); p.v.resize((size_t)size[2]);
  if (std::fread(p.q.data(), 4, p.q.size(), f) != p.q.size() || std::fread(p.k.data(), 4, p.k.size(), f) != p.k.size() ||
      std::fread(p.v.data(), 4, p.v.size(), f) != p.v.size())
    die("short input");
  std::fclose(f);
  p.o.assign((size_t)size[3], -777.0f);
  configs[cfg].run(p);
  for (float x : p.o)
    if (x == -777.0f) die(unwritten);
  FILE* g = std::fopen(out, "wb");
  std::fwrite(p.o.data(), 4, p.o.size(), g);
  std::fclose(g);
  std::printf("OK\n");
  return 0;
}
