// polysat's flash-attention skeleton (issue 7, seed 000 §15.3), hand-written like polysat_gemm.cuh; the
// jinja2 template (attention.cu.j2) only fills in the parameters. One skeleton, two branches: arch
// (sm80 / sm90) and tail (row / key predication); head dims, dtypes, causality and the softmax
// algorithm are template parameters.
//
//   O[b, i, :] = sum_j P[b, i, j] V[b, j, :],  P = softmax_j(scale * Q[b, i, :] . K[b, j, :]) over the
//   visible keys: j < N and, causal, j <= i + (N - M) (bottom-right aligned). Q [B, M, D], K [B, N, D],
//   V [B, N, DV], O [B, M, DV], packed row-major; the batch dims are flattened into B.
//
//   sm80 (FA2-style): CTA = BM query rows, one warp per 16 rows. Q is loaded once (cp.async) and kept
//     as mma.sync A fragments; K/V tiles of BN keys stream through a cp.async ring of STAGES slots;
//     S = Q K^T (ldmatrix of K = B operand), the softmax runs on the m16n8 accumulators (quad shuffles),
//     P is repacked in registers into A fragments and O += P V (ldmatrix.trans of V = B operand).
//   sm90 (FA3-style): one producer warpgroup (one thread issues every TMA load into an mbarrier ring)
//     and NC consumer warpgroups of 64 rows: S = wgmma(Q smem, K smem) (SS form), softmax on the wgmma
//     accumulators, O += P V with the RS form (P from registers, V N-major from smem).
//
// Scores live in the log2 domain: c = |scale| * log2(e), p = exp2(c * t - c * m) with t = sign(scale) * s
// (SIGN = +1, -1, or 0 for scale == 0, where every visible score is 0). Algorithms:
//   online (TWO_PASS = false): running max m and sum l per row, O rescaled when m grows, O / l at the end;
//   streaming_softmax_2pass: pass 1 streams K only for m and l; pass 2 recomputes S and accumulates
//     P = round(exp2(c t - c m) / l) V, with P normalised before its rounding exactly like the reference.
// Causal CTAs visit only the key blocks below their last row's diagonal; only blocks that hold a masked
// (row, key) pair (the diagonal and the key tail) evaluate the mask. Rows that see no key produce NaN
// (0 / 0), as in the reference.
//   STORE_P (softmax_scores, the two-region form of attention: P written to device memory, P V left to a
//     GEMM kernel): the sm80 skeleton with TWO_PASS, V never loaded; pass 2 stores each normalised P tile
//     (fragment -> P[b, i, j], predicated on the M and N tails, pairs when N is even) instead of the P V
//     MMA, and the key blocks no stored row sees are written as 0 (NaN for a row without a visible key).
#pragma once
#include "polysat_gemm.cuh"

namespace polysat {
namespace attn {

template <bool B> struct bool_c { static constexpr bool value = B; };

// =============================================================================================
// index and fragment helpers (__host__ too: tests/test_attention_emulate.py runs them on the CPU)
// =============================================================================================
POLYSAT_HD int floor_div(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// Key blocks (BN keys each) a CTA of query rows [m0, m0 + rows) visits: blocks [0, count) hold every
// key visible to one of its stored rows (rows >= M are never stored); blocks >= first_masked hold a
// (row, key) pair that is masked (a key >= N, or a key above row m0's diagonal) and evaluate the mask.
struct KeyRange {
  int count;
  int first_masked;
};
POLYSAT_HD KeyRange key_range(int m0, int rows, int bn, int M, int N, bool causal) {
  const int nb = (N + bn - 1) / bn;
  const int full = N / bn;  // blocks without a key >= N
  KeyRange r{nb, full};
  if (causal) {
    const int last = (m0 + rows < M ? m0 + rows : M) - 1;  // last stored row
    const int hi = last + N - M;                           // its last visible key
    const int cnt = hi < 0 ? 0 : hi / bn + 1;
    r.count = cnt < nb ? cnt : nb;
    const int fm = floor_div(m0 + N - M + 1, bn);  // first block with a key beyond row m0's diagonal
    r.first_masked = fm < 0 ? 0 : (fm < full ? fm : full);
  }
  if (r.first_masked > r.count) r.first_masked = r.count;
  return r;
}

// Where batch entry b of an operand of `rows` rows of dim elements starts and how far apart its rows lie:
// packed [batch][rows][dim] (ld == 0), or head b the column window [off + b*hs, off + b*hs + dim) of a
// row-major [rows][ld] matrix (a [tokens, heads * dim] projection, or one piece of a fused Q/K/V one;
// docs/DESIGN.md §Backend)
struct RowsAt {
  long long base, ld;
};
POLYSAT_HD RowsAt rows_at(int b, int rows, int dim, long long off, long long ld, long long hs) {
  return ld ? RowsAt{off + (long long)b * hs, ld} : RowsAt{(long long)b * rows * dim, dim};
}

// whether key j is visible to query i
POLYSAT_HD bool visible(int i, int j, int M, int N, bool causal) { return j < N && (!causal || j <= i + (N - M)); }

// The CTA for block index bid: batch entry b, row tile tm. Consecutive CTAs share one batch entry (its
// K and V stay in L2); causal grids start each entry with its longest row tile (the last).
template <bool CAUSAL>
POLYSAT_HD void tile_of_block(int bid, int tiles_m, int& tm, int& b) {
  b = bid / tiles_m;
  const int r = bid % tiles_m;
  tm = CAUSAL ? tiles_m - 1 - r : r;
}

// Element e (0..3) of n8-tile j of one warp's 16-row fp32 accumulator: row r (of 16), column c. This
// is the mma.m16n8k16 C/D layout and, per warp w of a warpgroup (rows 16w..16w+15), the wgmma
// m64nNk16 D layout, d[4j + e].
POLYSAT_HD void acc_rc(int lane, int j, int e, int& r, int& c) {
  r = (lane >> 2) + 8 * (e >> 1);
  c = 8 * j + 2 * (lane & 3) + (e & 1);
}

// The A fragment of k16-step kk (keys 16kk..16kk+15) of P = the accumulator pairs it is packed from:
// register q holds accumulator elements (j, e) (low half) and (j, e + 1) (high half). Same thread, so
// no data moves between lanes (the mma.m16n8k16 A layout, and the wgmma A-in-registers layout per warp).
POLYSAT_HD void a_src(int kk, int q, int& j, int& e) {
  j = 2 * kk + (q >> 1);
  e = 2 * (q & 1);
}

// two values rounded to T, packed as one .f16x2 / .bf16x2 register (lo in the low 16 bits)
template <class T> POLYSAT_HD u32 pack2(float lo, float hi);
template <> POLYSAT_HD u32 pack2<__half>(float lo, float hi) {
#if defined(__CUDA_ARCH__)
  const __half2 h = __floats2half2_rn(lo, hi);  // one cvt.rn.f16x2.f32
  return *reinterpret_cast<const u32*>(&h);
#else
  return u32(__half_raw(__float2half_rn(lo)).x) | (u32(__half_raw(__float2half_rn(hi)).x) << 16);
#endif
}
template <> POLYSAT_HD u32 pack2<__nv_bfloat16>(float lo, float hi) {
#if defined(__CUDA_ARCH__)
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const u32*>(&h);
#else
  return u32(__nv_bfloat16_raw(__float2bfloat16_rn(lo)).x) | (u32(__nv_bfloat16_raw(__float2bfloat16_rn(hi)).x) << 16);
#endif
}

// =============================================================================================
// per-thread softmax math on a warp's 16 x (8 NT) score fragment s[NT][4]; index 0/1 of the
// per-row arrays is row lane/4 / lane/4 + 8. Cross-lane steps (quad_max, quad_sum) come between.
// =============================================================================================
POLYSAT_HD float fast_exp2(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);
#endif
}

// c * m, or 0 for a row that has seen no key yet (m = -inf), so that exp2(c t - c m) stays 0, not NaN
POLYSAT_HD float row_offset(float m, float c) { return m == neg_inf() ? 0.0f : m * c; }

// No Q/K prologue, score program or mask tensor (the generated kernel's structs take their place: at(row, h, c)
// is the operand's value, f(v) the score of the sum v, keep(i, j) whether query i sees key j)
struct NoPro {
  static constexpr bool on = false;
  POLYSAT_HD float at(int, int, int) const { return 0.0f; }
};
struct NoFn {
  static constexpr bool on = false;
  POLYSAT_HD static float f(float v) { return v; }
};
struct NoMask {
  static constexpr bool on = false;
  POLYSAT_HD bool keep(int, int) const { return true; }
};

// signed scores t (masked: -inf) in place, and this thread's share of each row's max of t; FN (a score
// program) first maps each sum, MK (a mask tensor) hides the keys it says (rows >= M read no mask)
template <int NT, int SIGN, bool MASK, bool CAUSAL, class FN = NoFn, class MK = NoMask>
POLYSAT_HD void scores(float (&s)[NT][4], float (&mx)[2], int lane, int row0, int col0, int M, int N,
                       const MK& mk = MK{}) {
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float v = FN::on ? FN::f(s[j][e]) : s[j][e];
      float t = SIGN > 0 ? v : (SIGN < 0 ? -v : 0.0f);
      if (MASK) {
        int r, c;
        acc_rc(lane, j, e, r, c);
        if (!visible(row0 + r, col0 + c, M, N, CAUSAL) || (MK::on && !(row0 + r < M && mk.keep(row0 + r, col0 + c))))
          t = neg_inf();
      }
      s[j][e] = t;
      mx[e >> 1] = fmaxf(mx[e >> 1], t);
    }
}

// online softmax step: fold the block's row max mx into m, alpha = exp2(c m_old - c m_new) rescales l
// (and O, by the caller); s becomes p = exp2(c t - c m_new) (fp32), whose sum joins l
template <int NT>
POLYSAT_HD void online_step(float (&s)[NT][4], const float (&mx)[2], float (&m)[2], float (&l)[2], float (&alpha)[2],
                            float c) {
  float off[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float mn = fmaxf(m[r], mx[r]);
    off[r] = row_offset(mn, c);
    alpha[r] = fast_exp2(m[r] * c - off[r]);
    m[r] = mn;
    l[r] *= alpha[r];
  }
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float p = fast_exp2(fmaf(s[j][e], c, -off[e >> 1]));
      s[j][e] = p;
      l[e >> 1] += p;
    }
}

// pass 1 of streaming_softmax_2pass: the same running max and sum, no P, no O
template <int NT>
POLYSAT_HD void stats_step(const float (&s)[NT][4], const float (&mx)[2], float (&m)[2], float (&l)[2], float c) {
  float off[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float mn = fmaxf(m[r], mx[r]);
    off[r] = row_offset(mn, c);
    l[r] *= fast_exp2(m[r] * c - off[r]);
    m[r] = mn;
  }
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) l[e >> 1] += fast_exp2(fmaf(s[j][e], c, -off[e >> 1]));
}

// pass 2 of streaming_softmax_2pass: s becomes the normalised P = exp2(c t - c m) / l (rounded by pack_p)
template <int NT>
POLYSAT_HD void normalized_p(float (&s)[NT][4], const float (&m)[2], const float (&inv_l)[2], float c) {
  const float off[2] = {row_offset(m[0], c), row_offset(m[1], c)};
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[j][e] = fast_exp2(fmaf(s[j][e], c, -off[e >> 1])) * inv_l[e >> 1];
}

template <int NO>
POLYSAT_HD void rescale(float (&o)[NO][4], const float (&alpha)[2]) {
#pragma unroll
  for (int j = 0; j < NO; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[j][e] *= alpha[e >> 1];
}

// P (fp32 accumulator layout) -> the A fragments of the P V MMAs, rounded to T
template <class T, int NT>
POLYSAT_HD void pack_p(const float (&s)[NT][4], u32 (&pa)[NT / 2][4]) {
#pragma unroll
  for (int kk = 0; kk < NT / 2; ++kk)
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      int j, e;
      a_src(kk, q, j, e);
      pa[kk][q] = pack2<T>(s[j][e], s[j][e + 1]);
    }
}

// 1 / l (the final O / l of the online algorithm, and pass 2's normaliser); l = 0 gives inf, so a row
// without a visible key ends as 0 * inf = NaN, like the reference's 0 / 0
POLYSAT_HD void inverse(const float (&l)[2], float (&inv)[2]) {
  inv[0] = 1.0f / l[0];
  inv[1] = 1.0f / l[1];
}

// the 2-pass output scale: 1, or NaN (l * 1/l = 0 * inf) for a row without a visible key, which a CTA
// past the diagonal (no key block at all) would otherwise store as 0
POLYSAT_HD void two_pass_scale(const float (&l)[2], const float (&inv)[2], float (&scale)[2]) {
  scale[0] = l[0] > 0.0f ? 1.0f : l[0] * inv[0];
  scale[1] = l[1] > 0.0f ? 1.0f : l[1] * inv[1];
}

// STORE_P: where pair h (elements 2h, 2h + 1) of n8-tile j of a warp's 16-row fragment lands in P [M][N]
// (the warp's rows start at row0, the block's keys at col0): row and col of its first element, and how
// many of the two lie inside P (0: row >= M or col >= N; 1: only col < N; 2: both)
POLYSAT_HD int p_pair(int lane, int j, int h, int row0, int col0, int M, int N, int& row, int& col) {
  int r, c;
  acc_rc(lane, j, 2 * h, r, c);
  row = row0 + r;
  col = col0 + c;
  if (row >= M || col >= N) return 0;
  return col + 1 < N ? 2 : 1;
}
// a pair of k = 2 elements goes out as one vector store only where every row starts on an even element
// (col is even): N even (for O: its row stride and base offset OR-ed, both even); otherwise as two scalar stores
POLYSAT_HD bool p_pair_vector(int k, long long N) { return k == 2 && (N & 1) == 0; }

// ---- head dims (docs/DESIGN.md §Backend, attention): any D, DV in 1..256 -------------------------------
// The smem tiles and the MMAs run on the head dims rounded up to 16 (the mma k16 step; two n8 tiles per
// ldmatrix.x4): the columns past D of Q and K are zero (they add 0 to every score), those past DV of V
// give O columns that are never stored.
POLYSAT_HD constexpr int padded_dim(int d) { return (d + 15) / 16 * 16; }

// elements per global copy: the widest of 8 (16-byte cp.async), 4, 2, 1 that divides x (a row length,
// leading dimension or offset), so that no copy straddles a row end or is misaligned
POLYSAT_HD constexpr int copy_vec(long long x) { return x % 8 == 0 ? 8 : x % 4 == 0 ? 4 : x % 2 == 0 ? 2 : 1; }
POLYSAT_HD constexpr int min_vec(int a, int b) { return a < b ? a : b; }

// smem layout of a [ROWS][COLS] tile (COLS a multiple of 16, contiguous): column panels [ROWS][W], panel p
// at p * ROWS * W, each XOR-swizzled as swz_offset<W>. W = COLS when COLS is 16, 32 or a multiple of 64
// (one panel: the plain swizzled tile), else 32 or 16: every ldmatrix phase (8 rows x 16 bytes of one
// panel) hits 8 distinct 16-byte bank groups whatever the head dim.
template <int COLS>
POLYSAT_HD constexpr int panel_width() { return (COLS % 64 == 0 || COLS <= 32) ? COLS : (COLS % 32 == 0 ? 32 : 16); }
template <int ROWS, int COLS>
POLYSAT_HD int tile_offset(int row, int col) {
  constexpr int W = panel_width<COLS>();
  return (col / W) * (ROWS * W) + swz_offset<W>(row, col % W);
}

// copy idx (VEC elements) of a [ROWS][COLS] smem tile whose first `cols` columns are rows row0.. of a
// global matrix (rows ld apart): its smem offset dst and global offset src; false = it reads nothing and
// zero-fills (a row >= row_lim, or a padding column >= cols)
template <int ROWS, int COLS, int VEC>
POLYSAT_HD bool tile_copy(int idx, long long ld, int row0, int row_lim, int cols, int& dst, long long& src) {
  int r, c;
  copy_coord<COLS, VEC>(idx, r, c);
  const int gr = row0 + r;
  const bool ok = gr < row_lim && c < cols;
  dst = tile_offset<ROWS, COLS>(r, c);
  src = ok ? (long long)gr * ld + c : 0;
  return ok;
}

// STORE_P: the values of a key block no stored row of the CTA sees: 0, or NaN (0 * NaN) for a row
// without any visible key (sc from two_pass_scale)
template <int NT>
POLYSAT_HD void unseen_p(float (&s)[NT][4], const float (&sc)[2]) {
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[j][e] = 0.0f * sc[e >> 1];
}

// =============================================================================================
// device-only pieces: quad reductions (the 4 lanes holding one row), predicated stores of O
// =============================================================================================
__device__ __forceinline__ void quad_max(float (&x)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    x[r] = fmaxf(x[r], __shfl_xor_sync(0xffffffffu, x[r], 1));
    x[r] = fmaxf(x[r], __shfl_xor_sync(0xffffffffu, x[r], 2));
  }
}
__device__ __forceinline__ void quad_sum(float (&x)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    x[r] += __shfl_xor_sync(0xffffffffu, x[r], 1);
    x[r] += __shfl_xor_sync(0xffffffffu, x[r], 2);
  }
}

// rows row0 .. row0+15 of O (a warp's accumulator o[NO][4], times scale[r]) into columns [0, DV) of rows ld
// elements apart from O + base: p_pair says which elements lie inside (rows >= M and the padding columns
// >= DV are not stored), p_pair_vector whether a pair is one aligned 4- or 8-byte store
template <class OutT, int NO, int DV>
__device__ __forceinline__ void store_o(OutT* __restrict__ O, long long base, long long ld, int M, int row0,
                                        const float (&o)[NO][4], const float (&scale)[2], int lane) {
#pragma unroll
  for (int j = 0; j < NO; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int row, col;
      const int k = p_pair(lane, j, h, row0, 0, M, DV, row, col);
      OutT* dst = O + base + (long long)row * ld + col;
      const float x0 = o[j][2 * h] * scale[h], x1 = o[j][2 * h + 1] * scale[h];
      if (p_pair_vector(k, ld | base)) {
        *reinterpret_cast<typename Pair<OutT>::V*>(dst) = Pair<OutT>::make(x0, x1);
      } else if (k > 0) {
        dst[0] = from_f32<OutT>(x0);
        if (k == 2) dst[1] = from_f32<OutT>(x1);
      }
    }
}

// a [ROWS][COLS] smem tile (tile_offset's layout) from rows row0.. of a global matrix (rows ld apart, its
// first cols columns; tile_copy): VEC-element cp.async copies (zero-filled where tile_copy says so), or
// plain loads and shared stores when VEC == 1 (a head dim or window offset that is odd)
template <class T, int ROWS, int COLS, int VEC, int THREADS>
__device__ __forceinline__ void load_rows(T* tile, const T* __restrict__ g, long long ld, int row0, int row_lim, int cols,
                                          int tid) {
  constexpr int TOTAL = ROWS * (COLS / VEC), PER = (TOTAL + THREADS - 1) / THREADS;
  // many narrow copies: a loop (4 at a time), not dozens of address registers
  constexpr int UNROLL = PER <= (VEC == 8 ? 16 : 8) ? PER : 4;
#pragma unroll UNROLL
  for (int i = 0; i < PER; ++i) {
    const int idx = tid + i * THREADS;
    if (TOTAL % THREADS == 0 || idx < TOTAL) {
      int dst;
      long long src;
      const bool ok = tile_copy<ROWS, COLS, VEC>(idx, ld, row0, row_lim, cols, dst, src);
      if constexpr (VEC > 1) {
        cp_async<VEC * 2>(smem_u32(tile + dst), g + src, ok);
      } else {
        tile[dst] = ok ? g[src] : from_f32<T>(0.0f);
      }
    }
  }
}

// a [ROWS][COLS] smem tile (tile_offset's layout) of head h's operand computed by a prologue P (P::at(row, h, c),
// exact in T) for rows row0.. (rows >= row_lim and columns >= cols are 0): plain stores, no cp.async (host
// too: tests/test_attention_prologue_emulate.py runs it per thread on the CPU)
template <class T, int ROWS, int COLS, int THREADS, class P>
POLYSAT_HD void pro_rows(T* tile, const P& p, int h, int row0, int row_lim, int cols, int tid) {
  constexpr int TOTAL = ROWS * COLS;
#pragma unroll 2
  for (int idx = tid; idx < TOTAL; idx += THREADS) {
    const int r = idx / COLS, c = idx % COLS, gr = row0 + r;
    tile[tile_offset<ROWS, COLS>(r, c)] = T(gr < row_lim && c < cols ? p.at(gr, h, c) : 0.0f);  // exact: rounded
  }
}

// ldmatrix.x4 of the four 8x8 blocks at (mn0, k0) of a [ROWS][COLS] tile in tile_offset's layout (load_frag's
// fragment order; a 16-byte row of a block never straddles a panel)
template <class T, bool KMAJOR, int ROWS, int COLS>
__device__ __forceinline__ void load_frag_at(u32 (&r)[4], const T* tile, int mn0, int k0, int lane) {
  int row, col;
  frag_coord<KMAJOR>(lane, mn0, k0, row, col);
  ldmatrix_x4<!KMAJOR>(r, smem_u32(tile + tile_offset<ROWS, COLS>(row, col)));
}

// STORE_P: a warp's 16-row fragment s[NT][4] of P (keys col0 ..) rounded to PT into P [M][N] (one batch
// entry); a pair is one 4- or 8-byte store when both elements are inside and N is even (col is even, so
// the pair is aligned exactly when N is), else element by element
template <class PT, int NT>
__device__ __forceinline__ void store_p(PT* __restrict__ gP, int M, int N, int row0, int col0, const float (&s)[NT][4],
                                        int lane) {
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int row, col;
      const int k = p_pair(lane, j, h, row0, col0, M, N, row, col);
      PT* dst = gP + (long long)row * N + col;
      if (p_pair_vector(k, N)) {
        *reinterpret_cast<typename Pair<PT>::V*>(dst) = Pair<PT>::make(s[j][2 * h], s[j][2 * h + 1]);
      } else if (k > 0) {
        dst[0] = from_f32<PT>(s[j][2 * h]);
        if (k == 2) dst[1] = from_f32<PT>(s[j][2 * h + 1]);
      }
    }
}

// =============================================================================================
// SM80: cp.async ring + ldmatrix + mma.sync.m16n8k16 (FA2-style)
// =============================================================================================
// D and DV are any head dims in 1..256 (the tiles padded to 16 columns, padded_dim; copies VEC elements wide,
// copy_vec). Q_REGS: Q's A fragments stay in registers for the whole key loop (else they are re-read from sQ
// by ldmatrix for every key block: large head dims, where registers are short).
// STORE_P: O is P [batch, M, N] (OutT its type), V is not read (DV only sizes unused registers). HEADS: Q, K,
// V and O lie as rows_at says: (offset, ld, head stride) QO, QL, QH of Q, ... of K and V, O's rows OL apart
// (heads DV apart); ld 0 = packed. QPRO / KPRO: Q's / K's prologue (NoPro: loaded as they lie; else computed
// per element of head b as the tile is filled, pro_rows); FN, MK: the score program and the mask tensor
// (scores; with a mask every key block evaluates the mask). KV_REP: query head b reads K and V head b / KV_REP
// (grouped-query attention, the KV heads read in place)
template <class T, class OutT, int D, int DV, int BM, int BN, int STAGES, bool CAUSAL, bool TWO_PASS, int SIGN,
          bool Q_REGS, bool STORE_P = false, long long QO = 0, long long QL = 0, long long QH = 0, long long KO = 0,
          long long KL = 0, long long KH = 0, long long VO = 0, long long VL = 0, long long VH = 0, long long OL = 0,
          class QPRO = NoPro, class KPRO = NoPro, class FN = NoFn, class MK = NoMask, int KV_REP = 1>
__device__ __forceinline__ void attention_sm80(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                                               OutT* __restrict__ O, int M, int N, int batch, float c,
                                               unsigned char* smem, const QPRO& qp = QPRO{}, const KPRO& kp = KPRO{},
                                               const MK& mk = MK{}) {
  constexpr int WARPS = BM / 16, THREADS = 32 * WARPS, DP = padded_dim(D), DVP = padded_dim(DV);
  constexpr int NT = BN / 8, NO = DVP / 8, KQ = DP / 16, KP = BN / 16;
  // Q from smem: S = Q K^T unrolled by two k16 steps only, so that the K fragments in flight stay few
  constexpr int KQ_UNROLL = Q_REGS ? KQ : 2;
  constexpr int VEC = min_vec(min_vec(copy_vec(D), copy_vec(DV)),
                              min_vec(copy_vec(QO | QL | QH), min_vec(copy_vec(KO | KL | KH), copy_vec(VO | VL | VH))));
  static_assert(D >= 1 && D <= 256 && DV >= 1 && DV <= 256 && BN % 16 == 0 && BM % 16 == 0 && STAGES >= 2,
                "attention tile");
  static_assert(!STORE_P || TWO_PASS, "P is stored normalised: two passes");
  T* sQ = reinterpret_cast<T*>(smem);
  T* sK = sQ + BM * DP;
  T* sV = sK + STAGES * BN * DP;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int tiles_m = (M + BM - 1) / BM;
  int tm, b;
  tile_of_block<CAUSAL>(blockIdx.x, tiles_m, tm, b);
  (void)batch;
  const int m0 = tm * BM;
  static_assert(!STORE_P || OL == 0, "P is stored packed");
  const RowsAt aq = rows_at(b, M, D, QO, QL, QH), ak = rows_at(b / KV_REP, N, D, KO, KL, KH),
               av = rows_at(b / KV_REP, N, DV, VO, VL, VH),
               ao = rows_at(b, M, DV, 0, OL, DV);
  const T* gQ = Q + aq.base;
  const T* gK = K + ak.base;
  const T* gV = STORE_P ? V : V + av.base;
  const KeyRange kr = key_range(m0, BM, BN, M, N, CAUSAL);
  const int row0 = m0 + warp * 16;  // this warp's first query row

  // Q joins cp.async group 0 (with the first K/V tile); rows >= M read zero
  if constexpr (QPRO::on) pro_rows<T, BM, DP, THREADS>(sQ, qp, b, m0, M, D, tid);
  else load_rows<T, BM, DP, VEC, THREADS>(sQ, gQ, aq.ld, m0, M, D, tid);

  u32 qf[Q_REGS ? KQ : 1][4];
  float o[NO][4];
#pragma unroll
  for (int j = 0; j < NO; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[j][e] = 0.0f;
  float m[2] = {neg_inf(), neg_inf()}, l[2] = {0.0f, 0.0f}, inv_l[2] = {1.0f, 1.0f};

  // tile jb of K (and V) into ring slot `slot`; keys >= N read zero
  auto load_kv = [&](int slot, int jb, bool with_v) {
    if constexpr (KPRO::on) pro_rows<T, BN, DP, THREADS>(sK + slot * BN * DP, kp, b, jb * BN, N, D, tid);
    else load_rows<T, BN, DP, VEC, THREADS>(sK + slot * BN * DP, gK, ak.ld, jb * BN, N, D, tid);
    if (with_v) load_rows<T, BN, DVP, VEC, THREADS>(sV + slot * BN * DVP, gV, av.ld, jb * BN, N, DV, tid);
  };

  // S = Q K^T for the tile in `slot`: K is [BN][DP] (DP contiguous), the K-major B operand
  auto qk = [&](int slot, float (&s)[NT][4]) {
    const T* tK = sK + slot * BN * DP;
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;
#pragma unroll KQ_UNROLL
    for (int kk = 0; kk < KQ; ++kk) {
      u32 qa[4];
      if constexpr (Q_REGS) {
#pragma unroll
        for (int q = 0; q < 4; ++q) qa[q] = qf[Q_REGS ? kk : 0][q];
      } else {
        load_frag_at<T, true, BM, DP>(qa, sQ, warp * 16, kk * 16, lane);
      }
#pragma unroll
      for (int jj = 0; jj < NT / 2; ++jj) {
        u32 kf[4], b0, b1;
        load_frag_at<T, true, BN, DP>(kf, tK, jj * 16, kk * 16, lane);
        b_pick(0, kf, b0, b1);
        mma_16816<T>(s[2 * jj], qa, b0, b1);
        b_pick(1, kf, b0, b1);
        mma_16816<T>(s[2 * jj + 1], qa, b0, b1);
      }
    }
  };

  // O += P V for the tile in `slot`: V is [BN][DVP] (DVP contiguous), the N-major B operand (ldmatrix.trans)
  auto pv = [&](int slot, const u32 (&pa)[KP][4]) {
    const T* tV = sV + slot * BN * DVP;
#pragma unroll
    for (int kk = 0; kk < KP; ++kk)
#pragma unroll
      for (int jj = 0; jj < NO / 2; ++jj) {
        u32 vf[4], b0, b1;
        load_frag_at<T, false, BN, DVP>(vf, tV, jj * 16, kk * 16, lane);
        b_pick(0, vf, b0, b1);
        mma_16816<T>(o[2 * jj], pa[kk], b0, b1);
        b_pick(1, vf, b0, b1);
        mma_16816<T>(o[2 * jj + 1], pa[kk], b0, b1);
      }
  };

  // one block of keys; `pass` 0 of the 2-pass algorithm only gathers m and l
  auto block = [&](auto mask_tag, int slot, int jb, int pass) {
    constexpr bool MASK = decltype(mask_tag)::value;
    float s[NT][4], mx[2] = {neg_inf(), neg_inf()};
    qk(slot, s);
    scores<NT, SIGN, MASK, CAUSAL, FN, MK>(s, mx, lane, row0, jb * BN, M, N, mk);
    if (TWO_PASS && pass == 0) {
      quad_max(mx);
      stats_step<NT>(s, mx, m, l, c);
      return;
    }
    if (TWO_PASS) {
      normalized_p<NT>(s, m, inv_l, c);
    } else {
      quad_max(mx);
      float alpha[2];
      online_step<NT>(s, mx, m, l, alpha, c);
      rescale<NO>(o, alpha);
    }
    if constexpr (STORE_P) {
      store_p<OutT, NT>(O + (long long)b * M * N, M, N, row0, jb * BN, s, lane);
    } else {  // not instantiated in the P-store mode: it has no V tile
      u32 pa[KP][4];
      pack_p<T, NT>(s, pa);
      pv(slot, pa);
    }
  };

  // the cp.async ring over the visible key blocks (TokLoad jb = commit group jb)
  auto stream = [&](int pass, bool with_v) {
    const int count = kr.count;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (s < count) load_kv(s, s, with_v);
      cp_async_commit();
    }
    if (pass == 0 && count > 0) {  // Q landed with group 0 (Q_REGS: its A fragments stay in registers)
      cp_async_wait<STAGES - 2>();
      __syncthreads();
      if constexpr (Q_REGS) {
#pragma unroll
        for (int kk = 0; kk < KQ; ++kk) load_frag_at<T, true, BM, DP>(qf[Q_REGS ? kk : 0], sQ, warp * 16, kk * 16, lane);
      }
    }
    for (int jb = 0; jb < count; ++jb) {
      cp_async_wait<STAGES - 2>();  // Wait(TokLoad jb)
      __syncthreads();              // every thread's copies landed; slot (jb-1) % STAGES is free
      const int pre = jb + STAGES - 1;
      if (pre < count) load_kv(pre % STAGES, pre, with_v);
      cp_async_commit();
      if (MK::on || jb >= kr.first_masked) block(bool_c<true>{}, jb % STAGES, jb, pass);
      else block(bool_c<false>{}, jb % STAGES, jb, pass);
    }
    cp_async_wait<0>();
    __syncthreads();  // the ring is free for the next pass
  };

  if (TWO_PASS) {
    stream(0, false);
    quad_sum(l);
    inverse(l, inv_l);
    stream(1, !STORE_P);
    float sc[2];
    two_pass_scale(l, inv_l, sc);
    if constexpr (STORE_P) {  // key blocks past the CTA's diagonal: no stored row sees them
      float s[NT][4];
      unseen_p<NT>(s, sc);
      for (int jb = kr.count; jb < (N + BN - 1) / BN; ++jb)
        store_p<OutT, NT>(O + (long long)b * M * N, M, N, row0, jb * BN, s, lane);
    } else {
      store_o<OutT, NO, DV>(O, ao.base, ao.ld, M, row0, o, sc, lane);
    }
  } else {
    stream(0, true);
    quad_sum(l);
    inverse(l, inv_l);
    store_o<OutT, NO, DV>(O, ao.base, ao.ld, M, row0, o, inv_l, lane);
  }
}

// softmax_scores: P [batch, M, N] = softmax_j(scale * Q K^T, masked) rounded to PT, two passes over the keys;
// Q and K packed or column windows (rows_at)
template <class T, class PT, int D, int BM, int BN, int STAGES, bool CAUSAL, int SIGN, bool Q_REGS, long long QO = 0,
          long long QL = 0, long long QH = 0, long long KO = 0, long long KL = 0, long long KH = 0>
__device__ __forceinline__ void scores_sm80(const T* __restrict__ Q, const T* __restrict__ K, PT* __restrict__ P, int M,
                                            int N, int batch, float c, unsigned char* smem) {
  attention_sm80<T, PT, D, 64, BM, BN, STAGES, CAUSAL, true, SIGN, Q_REGS, true, QO, QL, QH, KO, KL, KH>(Q, K, nullptr, P, M, N,
                                                                                                batch, c, smem);
}

// =============================================================================================
// SM90: TMA + mbarrier ring + wgmma (FA3-style: producer warpgroup, NC consumer warpgroups)
// =============================================================================================
// wgmma wrappers: SS (A and B K-major from smem, scale-d a runtime predicate) and RS (A = four f16x2 /
// bf16x2 registers per thread, B N-major from smem: imm-trans-b = 1). Written out once by a short loop.
__device__ __forceinline__ void wgmma_ss_m64n64k16_f16(float (&d)[32], u64 da, u64 db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_rs_m64n64k16_f16(float (&d)[32], const u32 (&a)[4], u64 db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_ss_m64n64k16_bf16(float (&d)[32], u64 da, u64 db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_rs_m64n64k16_bf16(float (&d)[32], const u32 (&a)[4], u64 db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_ss_m64n128k16_f16(float (&d)[64], u64 da, u64 db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_rs_m64n128k16_f16(float (&d)[64], const u32 (&a)[4], u64 db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_ss_m64n128k16_bf16(float (&d)[64], u64 da, u64 db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_rs_m64n128k16_bf16(float (&d)[64], const u32 (&a)[4], u64 db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

template <class T, int N>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 8][4], u64 da, u64 db, int scale_d) {
  constexpr bool F16 = same_type<T, __half>::value;
  float(&f)[N / 2] = *reinterpret_cast<float(*)[N / 2]>(&d[0][0]);
  if constexpr (N == 64) { if constexpr (F16) wgmma_ss_m64n64k16_f16(f, da, db, scale_d); else wgmma_ss_m64n64k16_bf16(f, da, db, scale_d); }
  else { static_assert(N == 128, "wgmma N is 64 or 128 here"); if constexpr (F16) wgmma_ss_m64n128k16_f16(f, da, db, scale_d); else wgmma_ss_m64n128k16_bf16(f, da, db, scale_d); }
}
template <class T, int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 8][4], const u32 (&a)[4], u64 db, int scale_d) {
  constexpr bool F16 = same_type<T, __half>::value;
  float(&f)[N / 2] = *reinterpret_cast<float(*)[N / 2]>(&d[0][0]);
  if constexpr (N == 64) { if constexpr (F16) wgmma_rs_m64n64k16_f16(f, a, db, scale_d); else wgmma_rs_m64n64k16_bf16(f, a, db, scale_d); }
  else { static_assert(N == 128, "wgmma N is 64 or 128 here"); if constexpr (F16) wgmma_rs_m64n128k16_f16(f, a, db, scale_d); else wgmma_rs_m64n128k16_bf16(f, a, db, scale_d); }
}

// smem layout of one tile of R rows x W columns (W = D or DV, a multiple of 64; 2-byte elements), as TMA
// writes it with the 128-byte swizzle: W/64 column chunks of R rows x 128 bytes, chunk ch at ch*R*128.
// Byte offsets of the wgmma descriptor starts (tile bases are 1024-aligned):
//   K-major operand (Q as A, K as B of S = Q K^T), k16-step kk of rows [r0, r0 + 64 or BN):
//     chunk kk/4, +32 bytes per k16 inside a 128-byte row, + r0 * 128; LBO unused (16), SBO = 1024.
//   N-major operand (V as B of O += P V), k16-step kk = keys [16kk, 16kk + 16):
//     +16 rows * 128 bytes = 2048 per step; LBO = R * 128 (next 64 columns), SBO = 1024 (next 8 keys).
POLYSAT_HD int kmajor_start(int rows, int kk, int r0) { return (kk >> 2) * rows * 128 + r0 * 128 + (kk & 3) * 32; }
POLYSAT_HD int nmajor_start(int kk) { return kk * 2048; }
POLYSAT_HD int nmajor_lbo(int rows) { return rows * 128; }
enum : int { SW128_SBO = 1024 };  // descriptor SBO of 128-byte swizzled tiles: next 8 rows

// Ring slot s holds K and V tiles of one key block. full_k[s] / full_v[s] complete when their TMA bytes
// landed (TokLoad); empty_k[s] when every consumer warp's S = Q K^T that read it completed, empty_v[s]
// when its O += P V completed (TokCompute), so K of block j+2 can land while P V of block j still reads
// V. Every barrier completes exactly one phase per use of its slot (pass 1 of the 2-pass algorithm
// loads no V: the producer arrives on full_v and the consumers on empty_v without it), so the parity
// of use `it` is (it / STAGES) & 1 everywhere.
//
// Consumer schedule of the pass that accumulates O (FA3-style intra-warpgroup overlap, the same
// arithmetic in the same order as one block at a time):
//   S_0 = Q K_0^T; softmax_0 -> P_0
//   for j >= 1: issue S_j = Q K_j^T and O += P_{j-1} V_{j-1}; wait S_j; softmax_j (O and P_{j-1} untouched
//               while the P V wgmma runs); wait P V; O *= alpha_j; P_j -> A fragments
//   O += P_{n-1} V_{n-1}
template <class T, class OutT, int D, int DV, int BN, int NC, int STAGES, bool CAUSAL, bool TWO_PASS, int SIGN,
          long long OL = 0>
__device__ __forceinline__ void attention_sm90(const void* tmQ, const void* tmK, const void* tmV, OutT* __restrict__ O,
                                               int M, int N, int batch, float c, unsigned char* smem_raw) {
  constexpr int BM = 64 * NC, NT = BN / 8, NO = DV / 8, KQ = D / 16, KP = BN / 16;
  constexpr int Q_BYTES = BM * D * 2, K_BYTES = BN * D * 2, V_BYTES = BN * DV * 2;
  constexpr int STAGE_BYTES = K_BYTES + V_BYTES;
  constexpr int PASSES = TWO_PASS ? 2 : 1;
  static_assert(D % 64 == 0 && DV % 64 == 0 && (BN == 64 || BN == 128) && (DV == 64 || DV == 128), "attention tile");
  static_assert(Q_BYTES % 1024 == 0 && K_BYTES % 1024 == 0 && V_BYTES % 1024 == 0, "1024-byte swizzle alignment");
  (void)batch;

  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<u64>(smem_raw) + 1023) & ~u64(1023));
  unsigned char* sQ = smem;
  unsigned char* ring = smem + Q_BYTES;
  u64* full_q = reinterpret_cast<u64*>(ring + STAGES * STAGE_BYTES);
  u64* full_k = full_q + 1;
  u64* full_v = full_k + STAGES;
  u64* empty_k = full_v + STAGES;
  u64* empty_v = empty_k + STAGES;

  const int tid = threadIdx.x, wg = tid / 128, lane = tid & 31;
  if (tid == 0) {
    mbar_init(full_q, 1);
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full_k[s], 1);
      mbar_init(&full_v[s], 1);
      mbar_init(&empty_k[s], NC * 4);  // one arrive per consumer warp
      mbar_init(&empty_v[s], NC * 4);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  }
  __syncthreads();

  const int tiles_m = (M + BM - 1) / BM;
  int tm, b;
  tile_of_block<CAUSAL>(blockIdx.x, tiles_m, tm, b);
  const int m0 = tm * BM;
  const KeyRange kr = key_range(m0, BM, BN, M, N, CAUSAL);

  if (wg == 0) {
    // ---------------- producer warpgroup: one thread issues every TMA load ----------------
    if constexpr (NC >= 2) setmaxnreg_dec<24>();
    if (tid == 0) {
      mbar_expect_tx(full_q, Q_BYTES);
#pragma unroll
      for (int ch = 0; ch < D / 64; ++ch) tma_load_3d(sQ + ch * BM * 128, tmQ, full_q, 64 * ch, m0, b);
      int it = 0;
      for (int pass = 0; pass < PASSES; ++pass)
        for (int jb = 0; jb < kr.count; ++jb, ++it) {
          const int s = it % STAGES;
          const u32 released = ((it / STAGES) + 1) & 1;  // the previous use of slot s
          unsigned char* sk = ring + s * STAGE_BYTES;
          if (it >= STAGES) mbar_wait(&empty_k[s], released);
          mbar_expect_tx(&full_k[s], K_BYTES);
#pragma unroll
          for (int ch = 0; ch < D / 64; ++ch) tma_load_3d(sk + ch * BN * 128, tmK, &full_k[s], 64 * ch, jb * BN, b);
          if (it >= STAGES) mbar_wait(&empty_v[s], released);
          if (pass == PASSES - 1) {
            mbar_expect_tx(&full_v[s], V_BYTES);
#pragma unroll
            for (int ch = 0; ch < DV / 64; ++ch)
              tma_load_3d(sk + K_BYTES + ch * BN * 128, tmV, &full_v[s], 64 * ch, jb * BN, b);
          } else {
            mbar_arrive(&full_v[s]);
          }
        }
    }
  } else {
    // ---------------- consumer warpgroups: 64 query rows each ----------------
    if constexpr (NC >= 2) setmaxnreg_inc<240>();
    const int cw = wg - 1, wq = (tid & 127) >> 5;
    const int row0 = m0 + 64 * cw + 16 * wq;  // this warp's first query row
    float o[NO][4], s[NT][4];
#pragma unroll
    for (int j = 0; j < NO; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[j][e] = 0.0f;
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;
    u32 pa[KP][4];
    float m[2] = {neg_inf(), neg_inf()}, l[2] = {0.0f, 0.0f}, inv_l[2] = {1.0f, 1.0f}, alpha[2] = {1.0f, 1.0f};
    fence_operands(o);  // the zeroing stays before the first wgmma reads O and S
    fence_operands(s);
    mbar_wait(full_q, 0);

    auto arrive = [&](u64* bar) {
      __syncwarp();
      if (lane == 0) mbar_arrive(bar);
    };
    // S = Q K^T of ring position `it` (issued and committed, not waited for)
    auto issue_s = [&](int it) {
      const int st = it % STAGES;
      mbar_wait(&full_k[st], (it / STAGES) & 1);  // Wait(TokLoad K)
      __syncwarp();  // wgmma.*.sync.aligned needs the warp converged after the spin loop
      const unsigned char* sk = ring + st * STAGE_BYTES;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < KQ; ++kk) {
        const u64 da = smem_desc(sQ + kmajor_start(BM, kk, 64 * cw), 16, SW128_SBO);
        const u64 db = smem_desc(sk + kmajor_start(BN, kk, 0), 16, SW128_SBO);
        wgmma_ss<T, BN>(s, da, db, kk > 0);
      }
      wgmma_commit();
    };
    // O += P V of ring position `it` (issued and committed)
    auto issue_pv = [&](int it) {
      const int st = it % STAGES;
      mbar_wait(&full_v[st], (it / STAGES) & 1);  // Wait(TokLoad V)
      __syncwarp();
      const unsigned char* sv = ring + st * STAGE_BYTES + K_BYTES;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < KP; ++kk) {
        const u64 dv = smem_desc(sv + nmajor_start(kk), nmajor_lbo(BN), SW128_SBO);
        wgmma_rs<T, DV>(o, pa[kk], dv, 1);
      }
      wgmma_commit();
    };
    // the softmax of block jb on s (masked scores; pass 1: statistics only; else P in s, alpha for O)
    auto softmax = [&](int jb, int pass) {
      float mx[2] = {neg_inf(), neg_inf()};
      if (jb >= kr.first_masked) scores<NT, SIGN, true, CAUSAL>(s, mx, lane, row0, jb * BN, M, N);
      else scores<NT, SIGN, false, CAUSAL>(s, mx, lane, row0, jb * BN, M, N);
      if (TWO_PASS && pass == 0) {
        quad_max(mx);
        stats_step<NT>(s, mx, m, l, c);
      } else if (TWO_PASS) {
        normalized_p<NT>(s, m, inv_l, c);
      } else {
        quad_max(mx);
        online_step<NT>(s, mx, m, l, alpha, c);
      }
    };

    int it = 0;
    if (TWO_PASS) {  // pass 1: S and the row statistics, block by block
      for (int jb = 0; jb < kr.count; ++jb, ++it) {
        issue_s(it);
        wgmma_wait<0>();  // TokCompute S
        fence_operands(s);  // no softmax arithmetic on S is hoisted above the wait
        arrive(&empty_v[it % STAGES]);  // no V in pass 1 (released after S's wait, as in pass 2)
        arrive(&empty_k[it % STAGES]);
        softmax(jb, 0);
      }
      quad_sum(l);
      inverse(l, inv_l);
    }
    const int n = kr.count;
    if (n > 0) {
      issue_s(it);
      wgmma_wait<0>();
      fence_operands(s);
      arrive(&empty_k[it % STAGES]);
      softmax(0, PASSES - 1);
      pack_p<T, NT>(s, pa);
      for (int jb = 1; jb < n; ++jb) {
        issue_s(it + jb);
        issue_pv(it + jb - 1);
        wgmma_wait<1>();  // TokCompute S_jb (P V of jb-1 still running)
        fence_operands(s);
        arrive(&empty_k[(it + jb) % STAGES]);
        softmax(jb, PASSES - 1);
        wgmma_wait<0>();  // TokCompute O (block jb-1)
        fence_operands(o);  // O's rescale and P's repacking stay after the P V that reads them
        fence_operands(pa);
        arrive(&empty_v[(it + jb - 1) % STAGES]);
        if (!TWO_PASS) rescale<NO>(o, alpha);
        pack_p<T, NT>(s, pa);
      }
      issue_pv(it + n - 1);
      wgmma_wait<0>();
      fence_operands(o);
      arrive(&empty_v[(it + n - 1) % STAGES]);
    }
    const RowsAt ao = rows_at(b, M, DV, 0, OL, DV);  // Q, K and V: their tensor maps say how they lie
    float sc[2];
    if (TWO_PASS) {
      two_pass_scale(l, inv_l, sc);
    } else {
      quad_sum(l);
      inverse(l, sc);
    }
    store_o<OutT, NO, DV>(O, ao.base, ao.ld, M, row0, o, sc, lane);
  }
}

}  // namespace attn
}  // namespace polysat
