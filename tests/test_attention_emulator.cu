// Host emulator of polysat's flash-attention skeleton (polysat_attention.cuh), built with nvcc as host code
// by tests/test_attention_emulate.py (a .cu, not a test module). It calls the kernel's own __host__ __device__ helpers (key_range,
// tile_of_block, visible, acc_rc, a_src, pack2, the softmax steps, swz_offset / copy_coord / frag_coord /
// b_pick of the sm80 path, kmajor_start / nmajor_start / nmajor_lbo of the sm90 path) and models only
// what the hardware does, from the PTX ISA:
//   cp.async with zero-fill, ldmatrix.x4 (.trans) with a bank-conflict check, mma.m16n8k16.row.col,
//   TMA tile loads with the 128-byte swizzle, wgmma m64nNk16 reading its smem operands through the
//   canonical K-major / MN-major layouts of a descriptor (start, LBO, SBO) and its A operand from the
//   registers of each warp, warp shuffles inside a quad.
// Modes (argv[1]):
//   configs                 the instantiated kernel configurations, one per line
//   maps                    acc_rc and a_src for every lane (checked against the PTX figures in Python)
//   ranges                  key_range over a grid of shapes (checked against brute force in Python)
//   run <in> <out>          emulate one problem: <in> = int32 {config, B, M, N} + float32 c + Q, K, V
//                           (values already rounded to the input type); <out> = float32 O
#include "polysat_attention.cuh"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

using namespace polysat;
using namespace polysat::attn;

static void die(const char* what) {
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
// cp.async copies of a [ROWS][COLS] tile (COLS contiguous, leading dimension ld) as load_tile issues them
template <int ROWS, int COLS, int THREADS>
static void cp_async_tile(std::vector<float>& tile, const float* g, int row0, int row_lim) {
  tile.assign(ROWS * COLS, -999.0f);
  for (int tid = 0; tid < THREADS; ++tid)
    for (int i = 0; i < ROWS * (COLS / 8) / THREADS; ++i) {
      int r, c;
      copy_coord<COLS, 8>(tid + i * THREADS, r, c);
      const int gr = row0 + r;
      const bool ok = gr < row_lim && c < COLS;
      const int dst = swz_offset<COLS>(r, c);
      for (int e = 0; e < 8; ++e) tile[dst + e] = ok ? g[(long long)gr * COLS + c + e] : 0.0f;
    }
  for (float v : tile)
    if (v == -999.0f) die("tile element never written");
}

// ldmatrix.x4 (.trans): matrix j's row r is the 16 bytes at lane 8j + r's address; lane t receives
// (row t/4, cols 2(t%4), +1) of each matrix, transposed: (rows 2(t%4), +1, col t/4)
template <int COLS, bool KMAJOR>
static void ldmatrix_x4(const std::vector<float>& tile, int mn0, int k0, float (&out)[32][4][2]) {
  int addr[32];
  for (int l = 0; l < 32; ++l) {
    int r, c;
    frag_coord<KMAJOR>(l, mn0, k0, r, c);
    addr[l] = swz_offset<COLS>(r, c);
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

// mma.m16n8k16.row.col f32 (PTX ISA 9.7.14.5.8): a[t][reg][half], b[t][reg][half], d[t][4]
static void mma16816(float (&d)[32][4], const float (&a)[32][4][2], const float (&b)[32][2][2]) {
  float A[16][16], B[16][8], D[16][8];
  for (int t = 0; t < 32; ++t) {
    const int g = t / 4, q = t % 4;
    for (int e = 0; e < 2; ++e) {
      A[g][2 * q + e] = a[t][0][e];
      A[g + 8][2 * q + e] = a[t][1][e];
      A[g][2 * q + 8 + e] = a[t][2][e];
      A[g + 8][2 * q + 8 + e] = a[t][3][e];
      B[2 * q + e][g] = b[t][0][e];
      B[2 * q + 8 + e][g] = b[t][1][e];
    }
    D[g][2 * q] = d[t][0]; D[g][2 * q + 1] = d[t][1]; D[g + 8][2 * q] = d[t][2]; D[g + 8][2 * q + 1] = d[t][3];
  }
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      float s = D[i][j];
      for (int k = 0; k < 16; ++k) s += A[i][k] * B[k][j];
      D[i][j] = s;
    }
  for (int t = 0; t < 32; ++t) {
    const int g = t / 4, q = t % 4;
    d[t][0] = D[g][2 * q]; d[t][1] = D[g][2 * q + 1]; d[t][2] = D[g + 8][2 * q]; d[t][3] = D[g + 8][2 * q + 1];
  }
}

struct Problem {
  int B, M, N, D, DV;
  float c;
  std::vector<float> q, k, v;
  std::vector<float> o;
};

// per-lane state of one warp (16 query rows)
template <int NT, int NO>
struct Warp {
  float o[32][NO][4];
  float m[32][2], l[32][2], inv_l[32][2];
};

template <class T, class OutT, int D, int DV, int BM, int BN, bool CAUSAL, bool TWO_PASS, int SIGN>
static void emulate_sm80(Problem& p) {
  constexpr int WARPS = BM / 16, THREADS = 32 * WARPS, NT = BN / 8, NO = DV / 8, KQ = D / 16, KP = BN / 16;
  const int M = p.M, N = p.N, tiles_m = (M + BM - 1) / BM;
  std::vector<float> sQ, sK, sV;
  static Warp<NT, NO> wst[WARPS];
  static float qf[WARPS][KQ][32][4][2];
  for (int bid = 0; bid < tiles_m * p.B; ++bid) {
    int tm, b;
    tile_of_block<CAUSAL>(bid, tiles_m, tm, b);
    const int m0 = tm * BM;
    const KeyRange kr = key_range(m0, BM, BN, M, N, CAUSAL);
    cp_async_tile<BM, D, THREADS>(sQ, &p.q[(long long)b * M * D], m0, M);
    for (int w = 0; w < WARPS; ++w) {
      for (int kk = 0; kk < KQ; ++kk) ldmatrix_x4<D, true>(sQ, w * 16, kk * 16, qf[w][kk]);
      for (int t = 0; t < 32; ++t) {
        for (int j = 0; j < NO; ++j) for (int e = 0; e < 4; ++e) wst[w].o[t][j][e] = 0.0f;
        for (int r = 0; r < 2; ++r) { wst[w].m[t][r] = neg_inf(); wst[w].l[t][r] = 0.0f; wst[w].inv_l[t][r] = 1.0f; }
      }
    }
    for (int pass = 0; pass < (TWO_PASS ? 2 : 1); ++pass) {
      if (TWO_PASS && pass == 1)
        for (int w = 0; w < WARPS; ++w) {
          quad_sum_host(wst[w].l);
          for (int t = 0; t < 32; ++t) inverse(wst[w].l[t], wst[w].inv_l[t]);
        }
      const bool with_v = !TWO_PASS || pass == 1;
      for (int jb = 0; jb < kr.count; ++jb) {
        cp_async_tile<BN, D, THREADS>(sK, &p.k[(long long)b * N * D], jb * BN, N);
        if (with_v) cp_async_tile<BN, DV, THREADS>(sV, &p.v[(long long)b * N * DV], jb * BN, N);
        const bool mask = jb >= kr.first_masked;
        for (int w = 0; w < WARPS; ++w) {
          Warp<NT, NO>& W = wst[w];
          const int row0 = m0 + w * 16;
          static float s[32][NT][4];
          for (auto& x : s) for (auto& y : x) for (float& z : y) z = 0.0f;
          for (int kk = 0; kk < KQ; ++kk)
            for (int jj = 0; jj < NT / 2; ++jj) {
              float kf[32][4][2];
              ldmatrix_x4<D, true>(sK, jj * 16, kk * 16, kf);
              for (int h = 0; h < 2; ++h) {
                float bb[32][2][2], acc[32][4];
                for (int t = 0; t < 32; ++t) {
                  const float* q4[4] = {kf[t][0], kf[t][1], kf[t][2], kf[t][3]};
                  const float *b0, *b1;
                  b_pick(h, q4, b0, b1);
                  for (int e = 0; e < 2; ++e) { bb[t][0][e] = b0[e]; bb[t][1][e] = b1[e]; }
                  for (int e = 0; e < 4; ++e) acc[t][e] = s[t][2 * jj + h][e];
                }
                mma16816(acc, qf[w][kk], bb);
                for (int t = 0; t < 32; ++t) for (int e = 0; e < 4; ++e) s[t][2 * jj + h][e] = acc[t][e];
              }
            }
          float mx[32][2];
          for (int t = 0; t < 32; ++t) {
            mx[t][0] = mx[t][1] = neg_inf();
            if (mask) scores<NT, SIGN, true, CAUSAL>(s[t], mx[t], t, row0, jb * BN, M, N);
            else scores<NT, SIGN, false, CAUSAL>(s[t], mx[t], t, row0, jb * BN, M, N);
          }
          if (TWO_PASS && pass == 0) {
            quad_max_host(mx);
            for (int t = 0; t < 32; ++t) stats_step<NT>(s[t], mx[t], W.m[t], W.l[t], p.c);
            continue;
          }
          if (TWO_PASS) {
            for (int t = 0; t < 32; ++t) normalized_p<NT>(s[t], W.m[t], W.inv_l[t], p.c);
          } else {
            quad_max_host(mx);
            for (int t = 0; t < 32; ++t) {
              float alpha[2];
              online_step<NT>(s[t], mx[t], W.m[t], W.l[t], alpha, p.c);
              rescale<NO>(W.o[t], alpha);
            }
          }
          static u32 pa[32][KP][4];
          for (int t = 0; t < 32; ++t) pack_p<T, NT>(s[t], pa[t]);
          for (int kk = 0; kk < KP; ++kk) {
            float a[32][4][2];
            for (int t = 0; t < 32; ++t)
              for (int q = 0; q < 4; ++q)
                for (int h = 0; h < 2; ++h) a[t][q][h] = half_of<T>(pa[t][kk][q], h);
            for (int jj = 0; jj < NO / 2; ++jj) {
              float vf[32][4][2];
              ldmatrix_x4<DV, false>(sV, jj * 16, kk * 16, vf);
              for (int h = 0; h < 2; ++h) {
                float bb[32][2][2], acc[32][4];
                for (int t = 0; t < 32; ++t) {
                  const float* q4[4] = {vf[t][0], vf[t][1], vf[t][2], vf[t][3]};
                  const float *b0, *b1;
                  b_pick(h, q4, b0, b1);
                  for (int e = 0; e < 2; ++e) { bb[t][0][e] = b0[e]; bb[t][1][e] = b1[e]; }
                  for (int e = 0; e < 4; ++e) acc[t][e] = W.o[t][2 * jj + h][e];
                }
                mma16816(acc, a, bb);
                for (int t = 0; t < 32; ++t) for (int e = 0; e < 4; ++e) W.o[t][2 * jj + h][e] = acc[t][e];
              }
            }
          }
        }
      }
    }
    for (int w = 0; w < WARPS; ++w) {
      Warp<NT, NO>& W = wst[w];
      if (!TWO_PASS) {
        quad_sum_host(W.l);
        for (int t = 0; t < 32; ++t) inverse(W.l[t], W.inv_l[t]);
      }
      for (int t = 0; t < 32; ++t)
        for (int j = 0; j < NO; ++j)
          for (int e = 0; e < 4; ++e) {
            int r, c;
            acc_rc(t, j, e, r, c);
            const int row = m0 + w * 16 + r;
            if (row >= M) continue;
            float tp[2];
            two_pass_scale(W.l[t], W.inv_l[t], tp);
            const float sc = TWO_PASS ? tp[e >> 1] : W.inv_l[t][e >> 1];
            float& dst = p.o[((long long)b * M + row) * DV + c];
            if (dst != -777.0f) die("O element written twice");
            dst = round_t<OutT>(W.o[t][j][e] * sc);
          }
    }
  }
}

// ---- sm90 hardware models ---------------------------------------------------------------------------
static int swizzle128(int addr) { return addr ^ (((addr >> 7) & 7) << 4); }

// TMA tile load, 128-byte swizzle, box {64, rows} per 64-column chunk of a [rows][W] tile; rows beyond
// row_lim read zero (out-of-bounds fill). smem is indexed by byte address / 2.
static void tma_tile(std::vector<float>& smem, int base, const float* g, int W, int row0, int rows, int row_lim) {
  for (int ch = 0; ch < W / 64; ++ch)
    for (int o = 0; o < rows; ++o)
      for (int i = 0; i < 64; ++i) {
        const int gr = row0 + o;
        smem[swizzle128(base + ch * rows * 128 + o * 128 + 2 * i) / 2] = gr < row_lim ? g[(long long)gr * W + 64 * ch + i] : 0.0f;
      }
}

// operand element (mn, k) of one wgmma k16 step through the canonical layouts (PTX ISA 9.7.15.5.1.2)
static float wgmma_read(const std::vector<float>& smem, int start, int lbo, int sbo, bool kmajor, int mn, int k) {
  if (start % 16) die("descriptor start not 16-byte aligned");
  int off;
  if (kmajor) off = (mn % 8) * 64 + (mn / 8) * (sbo / 2) + k;
  else off = mn % 64 + (mn / 64) * (lbo / 2) + (k % 8) * 64 + (k / 8) * (sbo / 2);
  return smem[swizzle128(start + 2 * off) / 2];
}

template <class T, class OutT, int D, int DV, int BN, int NC, bool CAUSAL, bool TWO_PASS, int SIGN>
static void emulate_sm90(Problem& p) {
  constexpr int BM = 64 * NC, NT = BN / 8, NO = DV / 8, KQ = D / 16, KP = BN / 16;
  constexpr int Q_BYTES = BM * D * 2, K_BYTES = BN * D * 2, V_BYTES = BN * DV * 2;
  const int M = p.M, N = p.N, tiles_m = (M + BM - 1) / BM;
  std::vector<float> smem((Q_BYTES + K_BYTES + V_BYTES) / 2, -999.0f);
  const int qb = 0, kb = Q_BYTES, vb = Q_BYTES + K_BYTES;  // each a multiple of 1024
  static Warp<NT, NO> wst[NC][4];
  static float S[64][BN], Dl[64][DV];
  for (int bid = 0; bid < tiles_m * p.B; ++bid) {
    int tm, b;
    tile_of_block<CAUSAL>(bid, tiles_m, tm, b);
    const int m0 = tm * BM;
    const KeyRange kr = key_range(m0, BM, BN, M, N, CAUSAL);
    tma_tile(smem, qb, &p.q[(long long)b * M * D], D, m0, BM, M);
    for (int cw = 0; cw < NC; ++cw)
      for (int w = 0; w < 4; ++w)
        for (int t = 0; t < 32; ++t) {
          for (int j = 0; j < NO; ++j) for (int e = 0; e < 4; ++e) wst[cw][w].o[t][j][e] = 0.0f;
          for (int r = 0; r < 2; ++r) { wst[cw][w].m[t][r] = neg_inf(); wst[cw][w].l[t][r] = 0.0f; wst[cw][w].inv_l[t][r] = 1.0f; }
        }
    for (int pass = 0; pass < (TWO_PASS ? 2 : 1); ++pass) {
      if (TWO_PASS && pass == 1)
        for (int cw = 0; cw < NC; ++cw)
          for (int w = 0; w < 4; ++w) {
            quad_sum_host(wst[cw][w].l);
            for (int t = 0; t < 32; ++t) inverse(wst[cw][w].l[t], wst[cw][w].inv_l[t]);
          }
      const bool with_v = !TWO_PASS || pass == 1;
      for (int jb = 0; jb < kr.count; ++jb) {
        tma_tile(smem, kb, &p.k[(long long)b * N * D], D, jb * BN, BN, N);
        if (with_v) tma_tile(smem, vb, &p.v[(long long)b * N * DV], DV, jb * BN, BN, N);
        const bool mask = jb >= kr.first_masked;
        for (int cw = 0; cw < NC; ++cw) {
          // S = Q K^T: wgmma SS, m64nBNk16 per k16 step, scale-d = 0 on the first step
          for (int kk = 0; kk < KQ; ++kk) {
            const int sa = qb + kmajor_start(BM, kk, 64 * cw), sbk = kb + kmajor_start(BN, kk, 0);
            for (int i = 0; i < 64; ++i)
              for (int n = 0; n < BN; ++n) {
                float acc = kk > 0 ? S[i][n] : 0.0f;
                for (int k = 0; k < 16; ++k)
                  acc += wgmma_read(smem, sa, 16, SW128_SBO, true, i, k) * wgmma_read(smem, sbk, 16, SW128_SBO, true, n, k);
                S[i][n] = acc;
              }
          }
          // the D fragments (wgmma m64nNk16 D layout) -> each lane's s[NT][4], then the kernel's softmax
          static u32 pa[4][32][KP][4];
          for (int w = 0; w < 4; ++w) {
            Warp<NT, NO>& W = wst[cw][w];
            const int row0 = m0 + 64 * cw + 16 * w;
            float s[32][NT][4], mx[32][2];
            for (int t = 0; t < 32; ++t) {
              for (int i = 0; i < NT * 4; ++i) {
                const int j = i / 4, e = i % 4;
                const int row = 16 * w + (t >> 2) + 8 * ((i >> 1) & 1), col = (i >> 2) * 8 + 2 * (t & 3) + (i & 1);
                s[t][j][e] = S[row][col];
              }
              mx[t][0] = mx[t][1] = neg_inf();
              if (mask) scores<NT, SIGN, true, CAUSAL>(s[t], mx[t], t, row0, jb * BN, M, N);
              else scores<NT, SIGN, false, CAUSAL>(s[t], mx[t], t, row0, jb * BN, M, N);
            }
            if (TWO_PASS && pass == 0) {
              quad_max_host(mx);
              for (int t = 0; t < 32; ++t) stats_step<NT>(s[t], mx[t], W.m[t], W.l[t], p.c);
              continue;
            }
            if (TWO_PASS) {
              for (int t = 0; t < 32; ++t) normalized_p<NT>(s[t], W.m[t], W.inv_l[t], p.c);
            } else {
              quad_max_host(mx);
              for (int t = 0; t < 32; ++t) {
                float alpha[2];
                online_step<NT>(s[t], mx[t], W.m[t], W.l[t], alpha, p.c);
                rescale<NO>(W.o[t], alpha);
              }
            }
            for (int t = 0; t < 32; ++t) pack_p<T, NT>(s[t], pa[w][t]);
          }
          if (TWO_PASS && pass == 0) continue;
          // O += P V: wgmma RS, A = P from each warp's registers (per warp the m16n8k16 A layout, rows
          // 16w..16w+15), B = V N-major through its descriptor
          for (int i = 0; i < 64; ++i) for (int n = 0; n < DV; ++n) Dl[i][n] = 0.0f;
          for (int kk = 0; kk < KP; ++kk) {
            float A[64][16];
            for (int w = 0; w < 4; ++w)
              for (int t = 0; t < 32; ++t)
                for (int i = 0; i < 8; ++i) {
                  const int row = 16 * w + (t >> 2) + 8 * ((i >> 1) & 1), col = 2 * (t & 3) + (i & 1) + 8 * (i >> 2);
                  A[row][col] = half_of<T>(pa[w][t][kk][i >> 1], i & 1);
                }
            const int sv = vb + nmajor_start(kk);
            for (int i = 0; i < 64; ++i)
              for (int n = 0; n < DV; ++n) {
                float acc = Dl[i][n];
                for (int k = 0; k < 16; ++k) acc += A[i][k] * wgmma_read(smem, sv, nmajor_lbo(BN), SW128_SBO, false, n, k);
                Dl[i][n] = acc;
              }
          }
          for (int w = 0; w < 4; ++w)
            for (int t = 0; t < 32; ++t)
              for (int i = 0; i < NO * 4; ++i) {
                const int row = 16 * w + (t >> 2) + 8 * ((i >> 1) & 1), col = (i >> 2) * 8 + 2 * (t & 3) + (i & 1);
                wst[cw][w].o[t][i / 4][i % 4] += Dl[row][col];
              }
        }
      }
    }
    for (int cw = 0; cw < NC; ++cw)
      for (int w = 0; w < 4; ++w) {
        Warp<NT, NO>& W = wst[cw][w];
        if (!TWO_PASS) {
          quad_sum_host(W.l);
          for (int t = 0; t < 32; ++t) inverse(W.l[t], W.inv_l[t]);
        }
        for (int t = 0; t < 32; ++t)
          for (int j = 0; j < NO; ++j)
            for (int e = 0; e < 4; ++e) {
              int r, c;
              acc_rc(t, j, e, r, c);
              const int row = m0 + 64 * cw + 16 * w + r;
              if (row >= M) continue;
              float tp[2];
            two_pass_scale(W.l[t], W.inv_l[t], tp);
            const float sc = TWO_PASS ? tp[e >> 1] : W.inv_l[t][e >> 1];
              float& dst = p.o[((long long)b * M + row) * DV + c];
              if (dst != -777.0f) die("O element written twice");
              dst = round_t<OutT>(W.o[t][j][e] * sc);
            }
      }
  }
}

// ---- the instantiated configurations ------------------------------------------------------------------
struct Config {
  const char* text;  // skeleton dtype out D DV BM BN causal algo sign
  void (*run)(Problem&);
};
using H = __half;
using BF = __nv_bfloat16;
static const Config CONFIGS[] = {
    {"sm80 fp16 fp16 64 64 64 64 1 online 1", emulate_sm80<H, H, 64, 64, 64, 64, true, false, 1>},
    {"sm80 fp16 fp32 64 64 128 128 0 2pass 1", emulate_sm80<H, float, 64, 64, 128, 128, false, true, 1>},
    {"sm80 bf16 bf16 128 128 64 64 1 2pass 1", emulate_sm80<BF, BF, 128, 128, 64, 64, true, true, 1>},
    {"sm80 bf16 fp32 64 128 64 64 1 online -1", emulate_sm80<BF, float, 64, 128, 64, 64, true, false, -1>},
    {"sm80 fp16 fp16 128 64 128 64 0 online 0", emulate_sm80<H, H, 128, 64, 128, 64, false, false, 0>},
    {"sm90 fp16 fp16 64 64 64 64 1 online 1", emulate_sm90<H, H, 64, 64, 64, 1, true, false, 1>},
    {"sm90 bf16 bf16 128 128 128 128 1 2pass 1", emulate_sm90<BF, BF, 128, 128, 128, 2, true, true, 1>},
    {"sm90 fp16 fp32 128 64 128 128 0 online -1", emulate_sm90<H, float, 128, 64, 128, 2, false, false, -1>},
    {"sm90 bf16 fp32 64 128 64 128 0 2pass 1", emulate_sm90<BF, float, 64, 128, 64, 1, false, true, 1>},
    {"sm90 fp16 fp16 128 128 128 64 1 online 1", emulate_sm90<H, H, 128, 128, 64, 2, true, false, 1>},
};
static const int NCONFIGS = sizeof(CONFIGS) / sizeof(CONFIGS[0]);

int main(int argc, char** argv) {
  if (argc < 2) die("usage");
  const char* mode = argv[1];
  if (!std::strcmp(mode, "configs")) {
    for (int i = 0; i < NCONFIGS; ++i) std::printf("%d %s\n", i, CONFIGS[i].text);
    return 0;
  }
  if (!std::strcmp(mode, "maps")) {
    for (int t = 0; t < 32; ++t)
      for (int j = 0; j < 8; ++j)
        for (int e = 0; e < 4; ++e) {
          int r, c;
          acc_rc(t, j, e, r, c);
          std::printf("acc %d %d %d %d %d\n", t, j, e, r, c);
        }
    for (int kk = 0; kk < 4; ++kk)
      for (int q = 0; q < 4; ++q) {
        int j, e;
        a_src(kk, q, j, e);
        std::printf("asrc %d %d %d %d\n", kk, q, j, e);
      }
    // pack2 puts its first argument in the low half (the lower column of an A-fragment pair)
    const u32 h = pack2<__half>(1.0f, 2.0f), bf = pack2<__nv_bfloat16>(1.0f, 2.0f);
    std::printf("pack %g %g %g %g\n", half_of<__half>(h, 0), half_of<__half>(h, 1), half_of<BF>(bf, 0), half_of<BF>(bf, 1));
    return 0;
  }
  if (!std::strcmp(mode, "ranges")) {  // every (M, N) up to 40, row tiles of 16/64, key blocks of 16/64
    for (int causal = 0; causal < 2; ++causal)
      for (int rows : {16, 64})
        for (int bn : {16, 64})
          for (int M = 1; M <= 40; ++M)
            for (int N = 1; N <= 40; ++N)
              for (int m0 = 0; m0 < M; m0 += rows) {
                const KeyRange kr = key_range(m0, rows, bn, M, N, causal != 0);
                std::printf("%d %d %d %d %d %d %d %d\n", causal, rows, bn, M, N, m0, kr.count, kr.first_masked);
              }
    return 0;
  }
  if (!std::strcmp(mode, "run") && argc == 4) {
    FILE* f = std::fopen(argv[2], "rb");
    if (!f) die("cannot open input");
    int hdr[4];
    Problem p;
    if (std::fread(hdr, 4, 4, f) != 4 || std::fread(&p.c, 4, 1, f) != 1) die("short header");
    const int cfg = hdr[0];
    if (cfg < 0 || cfg >= NCONFIGS) die("bad config");
    int D, DV;
    char sk[8], dt[8], ot[8];
    std::sscanf(CONFIGS[cfg].text, "%7s %7s %7s %d %d", sk, dt, ot, &D, &DV);
    p.B = hdr[1]; p.M = hdr[2]; p.N = hdr[3]; p.D = D; p.DV = DV;
    p.q.resize((size_t)p.B * p.M * D); p.k.resize((size_t)p.B * p.N * D); p.v.resize((size_t)p.B * p.N * DV);
    if (std::fread(p.q.data(), 4, p.q.size(), f) != p.q.size() || std::fread(p.k.data(), 4, p.k.size(), f) != p.k.size() ||
        std::fread(p.v.data(), 4, p.v.size(), f) != p.v.size())
      die("short input");
    std::fclose(f);
    p.o.assign((size_t)p.B * p.M * DV, -777.0f);
    CONFIGS[cfg].run(p);
    for (float x : p.o)
      if (x == -777.0f) die("O element never written");
    FILE* g = std::fopen(argv[3], "wb");
    std::fwrite(p.o.data(), 4, p.o.size(), g);
    std::fclose(g);
    std::printf("OK\n");
    return 0;
  }
  die("unknown mode");
}
