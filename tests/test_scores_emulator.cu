// Host emulator of the softmax_scores kernel (scores_sm80 = attention_sm80 in STORE_P mode,
// polysat_attention.cuh), built with nvcc as host code by tests/test_scores_emulate.py. It shares the
// hardware models and the harness of the attention emulator (flash_emulator_host.cuh: cp.async zero-fill,
// ldmatrix.x4, mma.m16n8k16, quad shuffles, S = Q K^T of one warp, the row statistics) and calls the kernel's own __host__ __device__ helpers: key_range, tile_of_block, scores,
// stats_step, inverse, normalized_p, two_pass_scale, unseen_p, p_pair (fragment (lane, register
// pair) -> (row, col) of P with the M / N tail predication) and p_pair_vector (which pairs are one
// vector store: those must start on an even element).
// Modes (argv[1]):
//   configs            the instantiated configurations, one per line
//   run <in> <out>     <in> = int32 {config, B, M, N} + float32 c + Q, K (values already rounded to the input
//                      type); <out> = float32 P [B, M, N]; every element must be stored exactly once
#include "flash_emulator_host.cuh"

template <class T, class PT, int D, int BM, int BN, bool CAUSAL, int SIGN>
static void emulate_scores(Problem& p) {
  constexpr int WARPS = BM / 16, THREADS = 32 * WARPS, NT = BN / 8, DP = padded_dim(D), KQ = DP / 16;
  const int vec = copy_vec(D);
  const int M = p.M, N = p.N, tiles_m = (M + BM - 1) / BM, nb = (N + BN - 1) / BN;
  std::vector<float> sQ, sK;
  static float qf[WARPS][KQ][32][4][2];
  static RowStats st[WARPS];
  static float s[32][NT][4];

  // store_p of one warp: each lane's pairs through p_pair, each element written once
  auto store = [&](int b, int row0, int col0) {
    for (int t = 0; t < 32; ++t)
      for (int j = 0; j < NT; ++j)
        for (int h = 0; h < 2; ++h) {
          int row, col;
          const int k = p_pair(t, j, h, row0, col0, M, N, row, col);
          if (p_pair_vector(k, N) && (((long long)b * M + row) * N + col) % 2) die("misaligned pair store");
          for (int e = 0; e < k; ++e) {
            float& dst = p.o[((long long)b * M + row) * N + col + e];
            if (dst != -777.0f) die("P element written twice");
            dst = round_t<PT>(s[t][j][2 * h + e]);
          }
        }
  };

  for (int bid = 0; bid < tiles_m * p.B; ++bid) {
    int tm, b;
    tile_of_block<CAUSAL>(bid, tiles_m, tm, b);
    const int m0 = tm * BM;
    const KeyRange kr = key_range(m0, BM, BN, M, N, CAUSAL);
    cp_async_tile<BM, DP, THREADS>(sQ, &p.q[(long long)b * M * D], m0, M, D, D, vec);
    q_fragments<BM, DP, WARPS>(sQ, qf);
    for (int w = 0; w < WARPS; ++w) st[w].reset();
    for (int pass = 0; pass < 2; ++pass) {
      if (pass == 1)
        for (int w = 0; w < WARPS; ++w) st[w].finish();
      for (int jb = 0; jb < kr.count; ++jb) {
        cp_async_tile<BN, DP, THREADS>(sK, &p.k[(long long)b * N * D], jb * BN, N, D, D, vec);
        const bool mask = jb >= kr.first_masked;
        for (int w = 0; w < WARPS; ++w) {
          const int row0 = m0 + w * 16;
          qk_sm80<BN, DP, NT>(sK, qf[w], s);
          float mx[32][2];
          for (int t = 0; t < 32; ++t) lane_scores<NT, SIGN, CAUSAL>(mask, s[t], mx[t], t, row0, jb * BN, M, N);
          if (pass == 0) {
            st[w].stats(s, mx, p.c);
          } else {
            for (int t = 0; t < 32; ++t) normalized_p<NT>(s[t], st[w].m[t], st[w].inv_l[t], p.c);
            store(b, row0, jb * BN);
          }
        }
      }
    }
    for (int w = 0; w < WARPS; ++w) {  // the key blocks past the CTA's diagonal
      for (int t = 0; t < 32; ++t) {
        float sc[2];
        two_pass_scale(st[w].l[t], st[w].inv_l[t], sc);
        unseen_p<NT>(s[t], sc);
      }
      for (int jb = kr.count; jb < nb; ++jb) store(b, m0 + w * 16, jb * BN);
    }
  }
}

static const Config SCORES[] = {  // dtype p_dtype d bm bn causal sign
    {"fp16 fp16 64 64 64 1 1", emulate_scores<H, H, 64, 64, 64, true, 1>},
    {"bf16 bf16 128 128 64 1 1", emulate_scores<BF, BF, 128, 128, 64, true, 1>},
    {"fp16 fp16 64 128 128 0 1", emulate_scores<H, H, 64, 128, 128, false, 1>},
    {"bf16 fp32 64 64 128 1 -1", emulate_scores<BF, float, 64, 64, 128, true, -1>},
    {"fp16 bf16 128 64 64 0 0", emulate_scores<H, BF, 128, 64, 64, false, 0>},
    // other head dims: padded to 16 columns in smem (panels of 16 / 32 columns), narrower copies
    {"fp16 fp16 8 64 64 1 1", emulate_scores<H, H, 8, 64, 64, true, 1>},
    {"bf16 bf16 20 128 64 0 1", emulate_scores<BF, BF, 20, 128, 64, false, 1>},
    {"fp16 fp32 96 64 32 1 1", emulate_scores<H, float, 96, 64, 32, true, 1>},
    {"bf16 bf16 256 64 64 1 -1", emulate_scores<BF, BF, 256, 64, 64, true, -1>},
};
static const int NSCORES = sizeof(SCORES) / sizeof(SCORES[0]);

int main(int argc, char** argv) {
  if (argc < 2) die("usage");
  if (!std::strcmp(argv[1], "configs")) return print_configs(SCORES, NSCORES);
  if (std::strcmp(argv[1], "run") || argc != 4) die("unknown mode");
  auto dims = [](const char* text, int& D, int& DV) {
    char dt[8], pt[8];
    std::sscanf(text, "%7s %7s %d", dt, pt, &D);
    DV = 0;  // no V: the output is P [B, M, N]
  };
  return run_problem(argv[2], argv[3], SCORES, NSCORES, dims, "P element never written");
}
