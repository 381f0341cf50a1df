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
//   run <in> <out> [cols]   emulate one problem: <in> = int32 {config, B, M, N} + float32 c + Q, K, V
//                           (values already rounded to the input type); <out> = float32 O; cols: 12 ints,
//                           (offset, ld, head stride) of Q, K, V, O: column windows (rows_at)
#include "flash_emulator_host.cuh"  // the sm80 hardware models, Problem, RowStats, the run harness

// per-lane state of one warp (16 query rows)
template <int NT, int NO>
struct Warp : RowStats {
  float o[32][NO][4];
  // the softmax of one key block on this warp's masked scores s (row maxima mx): pass 1 of the two-pass
  // algorithm keeps statistics only (false: nothing to multiply by V); otherwise P in s, O rescaled
  template <bool TWO_PASS>
  bool softmax(float (&s)[32][NT][4], float (&mx)[32][2], int pass, float c) {
    if (TWO_PASS && pass == 0) {
      stats(s, mx, c);
      return false;
    }
    if (TWO_PASS) {
      for (int t = 0; t < 32; ++t) normalized_p<NT>(s[t], m[t], inv_l[t], c);
    } else {
      quad_max_host(mx);
      for (int t = 0; t < 32; ++t) {
        float alpha[2];
        online_step<NT>(s[t], mx[t], m[t], l[t], alpha, c);
        rescale<NO>(o[t], alpha);
      }
    }
    return true;
  }
  // the epilogue: O / l (or the two-pass scale) of the warp's rows from row0, rounded, each element once;
  // as store_o: p_pair keeps the rows < M and the columns < DV (the padding columns are not stored),
  // p_pair_vector's pairs must be aligned
  template <class OutT, bool TWO_PASS, int DV>
  void store_o(Problem& p, int b, int row0) const {
    const RowsAt ao = rows_at(b, p.M, DV, p.cols[3][0], p.cols[3][1], p.cols[3][2]);
    for (int t = 0; t < 32; ++t)
      for (int j = 0; j < NO; ++j)
        for (int h = 0; h < 2; ++h) {
          int row, col;
          const int k = p_pair(t, j, h, row0, 0, p.M, DV, row, col);
          const long long at = ao.base + row * ao.ld + col;
          if (p_pair_vector(k, ao.ld | ao.base) && at % 2) die("misaligned pair store");
          float tp[2];
          two_pass_scale(l[t], inv_l[t], tp);
          const float sc = TWO_PASS ? tp[h] : inv_l[t][h];
          for (int e = 0; e < k; ++e) {
            float& dst = p.o[at + e];
            if (dst != -777.0f) die("O element written twice");
            dst = round_t<OutT>(o[t][j][2 * h + e] * sc);
          }
        }
  }
};

template <class T, class OutT, int D, int DV, int BM, int BN, bool CAUSAL, bool TWO_PASS, int SIGN>
static void emulate_sm80(Problem& p) {
  constexpr int WARPS = BM / 16, THREADS = 32 * WARPS, DP = padded_dim(D), DVP = padded_dim(DV);
  constexpr int NT = BN / 8, NO = DVP / 8, KQ = DP / 16, KP = BN / 16;
  const int M = p.M, N = p.N, tiles_m = (M + BM - 1) / BM;
  int vec = min_vec(copy_vec(D), copy_vec(DV));  // the kernel's VEC: its column windows are template constants
  for (int t = 0; t < 3; ++t) vec = min_vec(vec, copy_vec(p.cols[t][0] | p.cols[t][1] | p.cols[t][2]));
  std::vector<float> sQ, sK, sV;
  static Warp<NT, NO> wst[WARPS];
  static float qf[WARPS][KQ][32][4][2];
  for (int bid = 0; bid < tiles_m * p.B; ++bid) {
    int tm, b;
    tile_of_block<CAUSAL>(bid, tiles_m, tm, b);
    const int m0 = tm * BM;
    const KeyRange kr = key_range(m0, BM, BN, M, N, CAUSAL);
    const RowsAt aq = rows_at(b, M, D, p.cols[0][0], p.cols[0][1], p.cols[0][2]),
                 ak = rows_at(b, N, D, p.cols[1][0], p.cols[1][1], p.cols[1][2]),
                 av = rows_at(b, N, DV, p.cols[2][0], p.cols[2][1], p.cols[2][2]);
    cp_async_tile<BM, DP, THREADS>(sQ, &p.q[aq.base], m0, M, aq.ld, D, vec);
    q_fragments<BM, DP, WARPS>(sQ, qf);
    for (int w = 0; w < WARPS; ++w) {
      wst[w].reset();
      for (int t = 0; t < 32; ++t)
        for (int j = 0; j < NO; ++j) for (int e = 0; e < 4; ++e) wst[w].o[t][j][e] = 0.0f;
    }
    for (int pass = 0; pass < (TWO_PASS ? 2 : 1); ++pass) {
      if (TWO_PASS && pass == 1)
        for (int w = 0; w < WARPS; ++w) wst[w].finish();
      const bool with_v = !TWO_PASS || pass == 1;
      for (int jb = 0; jb < kr.count; ++jb) {
        cp_async_tile<BN, DP, THREADS>(sK, &p.k[ak.base], jb * BN, N, ak.ld, D, vec);
        if (with_v) cp_async_tile<BN, DVP, THREADS>(sV, &p.v[av.base], jb * BN, N, av.ld, DV, vec);
        const bool mask = jb >= kr.first_masked;
        for (int w = 0; w < WARPS; ++w) {
          Warp<NT, NO>& W = wst[w];
          const int row0 = m0 + w * 16;
          static float s[32][NT][4];
          qk_sm80<BN, DP, NT>(sK, qf[w], s);
          float mx[32][2];
          for (int t = 0; t < 32; ++t) lane_scores<NT, SIGN, CAUSAL>(mask, s[t], mx[t], t, row0, jb * BN, M, N);
          if (!W.template softmax<TWO_PASS>(s, mx, pass, p.c)) continue;
          static u32 pa[32][KP][4];
          for (int t = 0; t < 32; ++t) pack_p<T, NT>(s[t], pa[t]);
          for (int kk = 0; kk < KP; ++kk) {
            float a[32][4][2];
            for (int t = 0; t < 32; ++t)
              for (int q = 0; q < 4; ++q)
                for (int h = 0; h < 2; ++h) a[t][q][h] = half_of<T>(pa[t][kk][q], h);
            for (int jj = 0; jj < NO / 2; ++jj) {
              float vf[32][4][2];
              ldmatrix_x4<BN, DVP, false>(sV, jj * 16, kk * 16, vf);
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
      if (!TWO_PASS) W.finish();
      W.template store_o<OutT, TWO_PASS, DV>(p, b, m0 + w * 16);
    }
  }
}

// ---- sm90 hardware models ---------------------------------------------------------------------------
static int swizzle128(int addr) { return addr ^ (((addr >> 7) & 7) << 4); }

// TMA tile load, 128-byte swizzle, box {64, rows} per 64-column chunk of a [rows][W] tile (rows ld apart); rows
// beyond row_lim read zero (out-of-bounds fill). smem is indexed by byte address / 2.
static void tma_tile(std::vector<float>& smem, int base, const float* g, int W, int row0, int rows, int row_lim,
                     long long ld) {
  for (int ch = 0; ch < W / 64; ++ch)
    for (int o = 0; o < rows; ++o)
      for (int i = 0; i < 64; ++i) {
        const int gr = row0 + o;
        smem[swizzle128(base + ch * rows * 128 + o * 128 + 2 * i) / 2] = gr < row_lim ? g[(long long)gr * ld + 64 * ch + i] : 0.0f;
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
    const RowsAt aq = rows_at(b, M, D, p.cols[0][0], p.cols[0][1], p.cols[0][2]),
                 ak = rows_at(b, N, D, p.cols[1][0], p.cols[1][1], p.cols[1][2]),
                 av = rows_at(b, N, DV, p.cols[2][0], p.cols[2][1], p.cols[2][2]);
    tma_tile(smem, qb, &p.q[aq.base], D, m0, BM, M, aq.ld);
    for (int cw = 0; cw < NC; ++cw)
      for (int w = 0; w < 4; ++w) {
        wst[cw][w].reset();
        for (int t = 0; t < 32; ++t)
          for (int j = 0; j < NO; ++j) for (int e = 0; e < 4; ++e) wst[cw][w].o[t][j][e] = 0.0f;
      }
    for (int pass = 0; pass < (TWO_PASS ? 2 : 1); ++pass) {
      if (TWO_PASS && pass == 1)
        for (int cw = 0; cw < NC; ++cw)
          for (int w = 0; w < 4; ++w) wst[cw][w].finish();
      const bool with_v = !TWO_PASS || pass == 1;
      for (int jb = 0; jb < kr.count; ++jb) {
        tma_tile(smem, kb, &p.k[ak.base], D, jb * BN, BN, N, ak.ld);
        if (with_v) tma_tile(smem, vb, &p.v[av.base], DV, jb * BN, BN, N, av.ld);
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
              lane_scores<NT, SIGN, CAUSAL>(mask, s[t], mx[t], t, row0, jb * BN, M, N);
            }
            if (!W.template softmax<TWO_PASS>(s, mx, pass, p.c)) continue;
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
        if (!TWO_PASS) W.finish();
        W.template store_o<OutT, TWO_PASS, DV>(p, b, m0 + 64 * cw + 16 * w);
      }
  }
}

// ---- the instantiated configurations ------------------------------------------------------------------
static const Config CONFIGS[] = {  // skeleton dtype out D DV BM BN causal algo sign
    {"sm80 fp16 fp16 64 64 64 64 1 online 1", emulate_sm80<H, H, 64, 64, 64, 64, true, false, 1>},
    {"sm80 fp16 fp32 64 64 128 128 0 2pass 1", emulate_sm80<H, float, 64, 64, 128, 128, false, true, 1>},
    {"sm80 bf16 bf16 128 128 64 64 1 2pass 1", emulate_sm80<BF, BF, 128, 128, 64, 64, true, true, 1>},
    {"sm80 bf16 fp32 64 128 64 64 1 online -1", emulate_sm80<BF, float, 64, 128, 64, 64, true, false, -1>},
    {"sm80 fp16 fp16 128 64 128 64 0 online 0", emulate_sm80<H, H, 128, 64, 128, 64, false, false, 0>},
    // head dims other than 64 / 128: padded to 16 columns in smem, panels of 16 / 32 columns, narrower copies
    {"sm80 fp16 fp16 8 8 64 64 1 online 1", emulate_sm80<H, H, 8, 8, 64, 64, true, false, 1>},
    {"sm80 bf16 bf16 32 32 128 64 0 2pass 1", emulate_sm80<BF, BF, 32, 32, 128, 64, false, true, 1>},
    {"sm80 fp16 fp32 20 20 64 64 1 online -1", emulate_sm80<H, float, 20, 20, 64, 64, true, false, -1>},
    {"sm80 bf16 fp32 96 160 64 32 1 online 1", emulate_sm80<BF, float, 96, 160, 64, 32, true, false, 1>},
    {"sm80 fp16 fp16 256 256 64 32 0 online 1", emulate_sm80<H, H, 256, 256, 64, 32, false, false, 1>},
    {"sm80 bf16 bf16 7 5 64 64 1 2pass 1", emulate_sm80<BF, BF, 7, 5, 64, 64, true, true, 1>},
    {"sm80 fp16 fp16 100 100 64 64 0 online 1", emulate_sm80<H, H, 100, 100, 64, 64, false, false, 1>},
    {"sm90 fp16 fp16 64 64 64 64 1 online 1", emulate_sm90<H, H, 64, 64, 64, 1, true, false, 1>},
    {"sm90 bf16 bf16 128 128 128 128 1 2pass 1", emulate_sm90<BF, BF, 128, 128, 128, 2, true, true, 1>},
    {"sm90 fp16 fp32 128 64 128 128 0 online -1", emulate_sm90<H, float, 128, 64, 128, 2, false, false, -1>},
    {"sm90 bf16 fp32 64 128 64 128 0 2pass 1", emulate_sm90<BF, float, 64, 128, 64, 1, false, true, 1>},
    {"sm90 fp16 fp16 128 128 128 64 1 online 1", emulate_sm90<H, H, 128, 128, 64, 2, true, false, 1>},
    {"sm90 bf16 bf16 256 128 128 64 1 online 1", emulate_sm90<BF, BF, 256, 128, 64, 2, true, false, 1>},
};
static const int NCONFIGS = sizeof(CONFIGS) / sizeof(CONFIGS[0]);

int main(int argc, char** argv) {
  if (argc < 2) die("usage");
  const char* mode = argv[1];
  if (!std::strcmp(mode, "configs")) return print_configs(CONFIGS, NCONFIGS);
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
  if (!std::strcmp(mode, "run") && (argc == 4 || argc == 16)) {
    auto dims = [](const char* text, int& D, int& DV) {
      char sk[8], dt[8], ot[8];
      std::sscanf(text, "%7s %7s %7s %d %d", sk, dt, ot, &D, &DV);
    };
    return run_problem(argv[2], argv[3], CONFIGS, NCONFIGS, dims, "O element never written",
                       argc == 16 ? argv + 4 : nullptr);
  }
  die("unknown mode");
}
