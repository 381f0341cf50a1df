// Conv2D as implicit GEMM on polysat's one MMA skeleton, and Conv + epilogue + MaxPool2D in one kernel by
// compute-at (issue 7; seed 000 §6.8.1, seed 003). Included after polysat_gemm.cuh.
//
// The GEMM: row m = (n, ho, wo) (wo fastest), column = output channel co inside the group, k = (c, r, s)
// (s fastest) over the group's C/G input channels. A = im2col(X) is never materialized: the im2col
// producer gathers A[m, k] = X[n, g*C/G + c, ho*SH + r*DH - PT, wo*SW + s*DW - PL] (zero outside X, the
// pad predicate) straight into the MN-major smem tile ([BK][BM], m contiguous) the skeleton reads;
// B = W viewed as [Co/G, K] per group (K-major: plain tiles on sm80, TMA on sm90). Groups are the GEMM's
// batch dimension (grid z on sm80, the tile index on sm90). NCHW makes consecutive m (not k) contiguous
// in X, so the gather pairs two consecutive m per thread (coalesced along wo for SW = 1).
//
// Every index computation is __host__ __device__ (tests/test_backend_conv_emulate.py runs them on the
// CPU against numpy): the row maps, the (c, r, s) decomposition, the producer itself (its smem image
// for the sm80 xor-16B tile and for the sm90 128B-swizzled wgmma tile) and the pool.
#pragma once

namespace polysat {

using u16 = unsigned short;

// fp32 <-> storage conversions usable on the host too (the pool's smem tile in the host emulation)
POLYSAT_HD float hd_to_f32(float x) { return x; }
POLYSAT_HD float hd_to_f32(__half x) { return __half2float(x); }
POLYSAT_HD float hd_to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T> POLYSAT_HD T hd_from_f32(float x);
template <> POLYSAT_HD float hd_from_f32<float>(float x) { return x; }
template <> POLYSAT_HD __half hd_from_f32<__half>(float x) { return __float2half_rn(x); }
template <> POLYSAT_HD __nv_bfloat16 hd_from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// a read-only 16-bit element of X, or 0 where pred is false (nothing is read then). On the device an
// asm volatile load: it stays where the producer's fetch() put it, before the MMAs, instead of sinking
// to its use in land() (which would keep every tap's address alive across the MMAs).
POLYSAT_HD u16 load_u16(const u16* p, bool pred) {
#if defined(__CUDA_ARCH__)
  u16 v;
  asm volatile("{\n.reg .pred q;\nsetp.ne.b32 q, %2, 0;\nmov.u16 %0, 0;\n@q ld.global.nc.u16 %0, [%1];\n}\n"
               : "=h"(v) : "l"(p), "r"((int)pred));
  return v;
#else
  return pred ? *p : (u16)0;
#endif
}

// the 128-byte swizzle TMA applies (CU_TENSOR_MAP_SWIZZLE_128B) and wgmma's descriptors expect:
// 16-byte chunk bits [4,7) ^= row bits [7,10) of the byte offset from a 1024-byte aligned base
POLYSAT_HD int swizzle128(int a) { return a ^ (((a >> 7) & 7) << 4); }

// ---- geometry ------------------------------------------------------------------------------------
// The conv window, known when the kernel is generated (the plan specialises on it).
template <int KH_, int KW_, int SH_, int SW_, int DH_, int DW_, int PT_, int PL_>
struct ConvWin {
  static constexpr int KH = KH_, KW = KW_, SH = SH_, SW = SW_, DH = DH_, DW = DW_, PT = PT_, PL = PL_;
};

// Sizes given at launch. Cg = C / groups input channels and Cog = Co / groups output channels per group;
// K = Cg * KH * KW is the GEMM's reduction length.
struct ConvDims {
  int N, C, H, W, Co, Ho, Wo, Cg, Cog, K;
};

// column k = (c, r, s) of the implicit GEMM, s fastest
template <class Win>
POLYSAT_HD void k_coord(int k, int& c, int& r, int& s) {
  c = k / (Win::KH * Win::KW);
  const int rs = k - c * (Win::KH * Win::KW);
  r = rs / Win::KW;
  s = rs - r * Win::KW;
}

// element offset of Y[n, g*Cog + co, ho, wo] (NCHW) for GEMM row m = (n, ho, wo) of group g
POLYSAT_HD long long conv_out_offset(int g, int m, int co, int HoWo, int Co, int Cog) {
  const int img = m / HoWo;
  return ((long long)img * Co + (long long)g * Cog + co) * HoWo + (m - img * HoWo);
}

// Row maps: the output pixel (n, ho, wo) behind row q of CTA tile tm; false when the row computes
// nothing (outside the output): its A row is zero and its results are never stored.
// ConvRows: the plain conv, m = tm * BM + q over (n, ho, wo), wo fastest.
struct ConvRows {
  int M, Ho, Wo;
  POLYSAT_HD bool pixel(int tm, int bm, int q, int& n, int& ho, int& wo) const {
    const int m = tm * bm + q;
    n = ho = wo = 0;
    if (m >= M) return false;
    wo = m % Wo;
    const int t = m / Wo;
    ho = t % Ho;
    n = t / Ho;
    return true;
  }
};

// The pool by compute-at: a CTA owns TPH x TPW pool outputs of one image; the conv rows it computes are
// the pre-image of that tile under the pool window: TCH x TCW conv pixels from (ph0*PSH - PPT,
// pw0*PSW - PPL), halo included (recomputed by neighbouring CTAs, never written to device memory).
template <int TPH_, int TPW_, int PKH_, int PKW_, int PSH_, int PSW_, int PDH_, int PDW_, int PPT_, int PPL_>
struct PoolWin {
  static constexpr int TPH = TPH_, TPW = TPW_, PKH = PKH_, PKW = PKW_, PSH = PSH_, PSW = PSW_, PDH = PDH_,
                       PDW = PDW_, PPT = PPT_, PPL = PPL_;
  static constexpr int TCH = (TPH - 1) * PSH + (PKH - 1) * PDH + 1;
  static constexpr int TCW = (TPW - 1) * PSW + (PKW - 1) * PDW + 1;
  static constexpr int ROWS = TCH * TCW;  // conv rows per CTA tile (<= BM)
};

// PoolRows: tile tm = (n, tph, tpw) with tpw fastest over tiles_ph x tiles_pw pool tiles per image.
template <class PW>
struct PoolRows {
  int tiles_ph, tiles_pw, Ho, Wo;
  POLYSAT_HD void origin(int tm, int& n, int& ph0, int& pw0) const {
    const int tpw = tm % tiles_pw, t = tm / tiles_pw;
    ph0 = (t % tiles_ph) * PW::TPH;
    pw0 = tpw * PW::TPW;
    n = t / tiles_ph;
  }
  POLYSAT_HD bool pixel(int tm, int, int q, int& n, int& ho, int& wo) const {
    int ph0, pw0;
    origin(tm, n, ph0, pw0);
    const int qh = q / PW::TCW, qw = q - qh * PW::TCW;
    ho = ph0 * PW::PSH - PW::PPT + qh;
    wo = pw0 * PW::PSW - PW::PPL + qw;
    return q < PW::ROWS && ho >= 0 && ho < Ho && wo >= 0 && wo < Wo;
  }
};

// ---- the im2col producer ---------------------------------------------------------------------------
// Byte offset of A element (k row, m column) in one ring slot of the MN-major A tile:
// sm80: the [BK][BM] xor-16B tile ldmatrix.trans reads (swz_offset); sm90: 64-column boxes of 64 k rows,
// 128B-swizzled, 8192 bytes apart (exactly where the TMA would put a [K, M] operand, backend/layouts.py).
// Both swizzles repeat every 8 k rows: offset(k + 8, m) = offset(k, m) + 8 * kRowBytes.
template <int BM>
struct PlaceSm80 {
  static constexpr int kRowBytes = 2 * BM;
  static POLYSAT_HD int offset(int k, int m) { return 2 * swz_offset<BM>(k, m); }
};
struct PlaceSm90 {
  static constexpr int kRowBytes = 128;
  static POLYSAT_HD int offset(int k, int m) { return (m >> 6) * 8192 + swizzle128((k << 7) + ((m & 63) << 1)); }
};

// a 32-bit shared-memory store at byte offset off of tile (st.shared on the device, memcpy in the host emulation)
POLYSAT_HD void store_u32(unsigned char* tile, int off, u32 v) {
#if defined(__CUDA_ARCH__)
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(smem_u32(tile) + off), "r"(v) : "memory");
#else
  unsigned char* p = tile + off;
  for (int i = 0; i < 4; ++i) p[i] = (unsigned char)(v >> (8 * i));
#endif
}

// Each of THREADS threads owns the pair of tile rows (m, m+1) = 2 * (tid % PER_ROW) and every RPP-th
// k row from tid / PER_ROW: PASSES loads of two 16-bit elements per k tile, packed into one 32-bit smem
// store (a warp writes 128 contiguous bytes of one k row: no bank conflicts). setup() resolves the
// pair's pixels once per CTA tile; fetch() loads CHUNK passes into registers (zero where the pad
// predicate or a tail says so), land() packs and stores them.
constexpr int kNoRow = -(1 << 29);  // hi0 of a row outside the output: every tap fails the bounds test

template <int BM, int BK, int THREADS, class Win, class Rows, class Place, int CHUNK>
struct Im2col {
  static constexpr int PER_ROW = BM / 2;
  static constexpr int RPP = THREADS / PER_ROW;
  static constexpr int PASSES = BK / RPP;
  static_assert(BM % 2 == 0 && THREADS % PER_ROW == 0 && BK % RPP == 0 && PASSES % CHUNK == 0,
                "the im2col tile must divide evenly among the threads");
  const u16* x;       // X, NCHW, as raw 16-bit elements
  ConvDims d;
  Rows rows;
  const u16* px[2];   // X + (n*C + g*Cg)*H*W: the image and group of rows m, m+1
  int hi0[2], wi0[2]; // ho*SH - PT, wo*SW - PL (kNoRow: the row computes nothing)
  u16 raw[CHUNK][2];

  POLYSAT_HD void setup(int tm, int g, int tid) {
    const int col = 2 * (tid % PER_ROW);
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      int n, ho, wo;
      const bool ok = rows.pixel(tm, BM, col + e, n, ho, wo);
      px[e] = x + ((long long)n * d.C + (long long)g * d.Cg) * d.H * d.W;
      hi0[e] = ok ? ho * Win::SH - Win::PT : kNoRow;
      wi0[e] = wo * Win::SW - Win::PL;
    }
  }
  // passes [p0, p0 + CHUNK) of k tile k0
  POLYSAT_HD void fetch(int k0, int tid, int p0) {
    const int row0 = tid / PER_ROW;
#pragma unroll
    for (int p = 0; p < CHUNK; ++p) {
      const int k = k0 + row0 + (p0 + p) * RPP;
      int c, r, s;
      k_coord<Win>(k, c, r, s);
      const bool kin = k < d.K;
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int hi = hi0[e] + r * Win::DH, wi = wi0[e] + s * Win::DW;
        const bool in = kin && (unsigned)hi < (unsigned)d.H && (unsigned)wi < (unsigned)d.W;
        raw[p][e] = load_u16(px[e] + (c * d.H + hi) * d.W + wi, in);
      }
    }
  }
  // pass p stores k row row0 + p*RPP; the swizzle repeats every 8 rows, so only the first P8 passes'
  // offsets are computed, the others are those plus a multiple of 8 rows (immediates after unrolling)
  static constexpr int P8 = RPP >= 8 ? 1 : 8 / RPP;
  static_assert(RPP >= 8 ? RPP % 8 == 0 : 8 % RPP == 0, "k rows per pass must divide (or be a multiple of) 8");
  POLYSAT_HD void land(unsigned char* tile, int tid, int p0) const {
    const int row0 = tid / PER_ROW, col = 2 * (tid % PER_ROW);
    int o[P8];
#pragma unroll
    for (int j = 0; j < P8; ++j) o[j] = Place::offset(row0 + j * RPP, col);
#pragma unroll
    for (int p = 0; p < CHUNK; ++p) {
      const int q = p0 + p;
      store_u32(tile, o[q % P8] + (q / P8) * (P8 * RPP) * Place::kRowBytes, (u32)raw[p][0] | ((u32)raw[p][1] << 16));
    }
  }
};

// sm80: the A producer of mainloop_sm80, register-staged (fetch before the MMAs, land after them).
template <class T, int BM, int BK, int THREADS, class Win, class Rows>
struct Im2colSm80 {
  Im2col<BM, BK, THREADS, Win, Rows, PlaceSm80<BM>, BK / (THREADS / (BM / 2))> im;
  __device__ __forceinline__ void fetch(T*, int kt, int tid) { im.fetch(kt * BK, tid, 0); }
  __device__ __forceinline__ void land(T* tile, int tid) const { im.land(reinterpret_cast<unsigned char*>(tile), tid, 0); }
};

// sm90: the gathered A operand of ws_sm90 (the producer warpgroup's 128 threads), CHUNK passes at a time.
template <int BM, class Win, class Rows, int CHUNK>
struct Im2colSm90 {
  static constexpr bool kGather = true;
  static constexpr int kTmaBytes = 0;
  Im2col<BM, 64, 128, Win, Rows, PlaceSm90, CHUNK> im;
  __device__ __forceinline__ void issue(unsigned char*, u64*, int, int, int) const {}
  __device__ __forceinline__ void gather(unsigned char* dst, int tm, int k0, int g, int tid) {
    if (k0 == 0) im.setup(tm, g, tid);
#pragma unroll
    for (int p0 = 0; p0 < im.PASSES; p0 += CHUNK) {
      im.fetch(k0, tid, p0);
      im.land(dst, tid, p0);
    }
  }
};

// ---- outputs -----------------------------------------------------------------------------------------
// The plain conv stores through the generated Epi::store2 (NCHW offsets): StoreOut / store_acc_sm80.
//
// PoolOut: Conv + epilogue + MaxPool2D. The CTA's accumulators go through the epilogue (Epi::apply: bias,
// activation...) into a smem tile [BN][LD] of OutT (rounding commutes with max, so storing the output
// type is exact), then the pool reads it: max over the window of the conv pixels inside the conv output
// (pool padding is -inf, as the frontend lowers MaxPool2D), written as NCHW P[n, g*Cog + co, ph, pw].
template <class Epi, class PW, int BM, int BN>
struct PoolOut {
  using OutT = typename Epi::OutT;
  static constexpr int LD = BM + 8;  // padded row: the accumulator writes of a warp spread over banks
  static constexpr int kSmemBytes = BN * LD * (int)sizeof(OutT);
  Epi epi;
  PoolRows<PW> rows;
  int Hp, Wp, Cog;

  // conv value v of tile row q, column nl (output channel tn*BN + nl of group g) after the epilogue
  POLYSAT_HD void put(unsigned char* scratch, int g, int tn, int q, int nl, float v) const {
    const int co = tn * BN + nl;
    if (co < Cog) reinterpret_cast<OutT*>(scratch)[nl * LD + q] = hd_from_f32<OutT>(epi.apply(v, g, q, co));
  }
  // pool outputs idx = first, first + step, ... of the tile (pw fastest, then ph, then channel)
  POLYSAT_HD void pool(const unsigned char* scratch, int tm, int tn, int g, int first, int step) const {
    const OutT* ct = reinterpret_cast<const OutT*>(scratch);
    int n, ph0, pw0;
    rows.origin(tm, n, ph0, pw0);
    const int hq0 = ph0 * PW::PSH - PW::PPT, wq0 = pw0 * PW::PSW - PW::PPL;
    for (int idx = first; idx < BN * PW::TPH * PW::TPW; idx += step) {
      const int pw = idx % PW::TPW, t = idx / PW::TPW, ph = t % PW::TPH, nl = t / PW::TPH;
      const int co = tn * BN + nl;
      if (co >= Cog || ph0 + ph >= Hp || pw0 + pw >= Wp) continue;
      float v = neg_inf();  // the pool padding value
#pragma unroll
      for (int i = 0; i < PW::PKH; ++i)
#pragma unroll
        for (int j = 0; j < PW::PKW; ++j) {
          const int qh = ph * PW::PSH + i * PW::PDH, qw = pw * PW::PSW + j * PW::PDW;
          const int ho = hq0 + qh, wo = wq0 + qw;
          if (ho >= 0 && ho < rows.Ho && wo >= 0 && wo < rows.Wo) v = fmaxf(v, hd_to_f32(ct[nl * LD + qh * PW::TCW + qw]));
        }
      epi.C[(((long long)n * epi.Co + (long long)g * Cog + co) * Hp + ph0 + ph) * Wp + pw0 + pw] = hd_from_f32<OutT>(v);
    }
  }
  // sm90 consumers (NC warpgroups): named barrier 1 keeps the tile from being overwritten while the
  // previous one is pooled, and the pool from reading before every consumer stored its rows
  template <int BM_, int BN_, int NC>
  __device__ __forceinline__ void tile(const float (&d)[BN_ / 2], int tm, int tn, int g, int c, unsigned char* scratch) const {
    const int tid = threadIdx.x, wq = (tid & 127) >> 5, lane = tid & 31, gq = lane >> 2, t = lane & 3;
    named_bar_sync(1, NC * 128);
    const int q = c * 64 + wq * 16 + gq;
#pragma unroll
    for (int i = 0; i < BN_ / 8; ++i) {
      const int nl = i * 8 + 2 * t;
      put(scratch, g, tn, q, nl, d[4 * i + 0]);
      put(scratch, g, tn, q, nl + 1, d[4 * i + 1]);
      put(scratch, g, tn, q + 8, nl, d[4 * i + 2]);
      put(scratch, g, tn, q + 8, nl + 1, d[4 * i + 3]);
    }
    named_bar_sync(1, NC * 128);
    pool(scratch, tm, tn, g, tid - 128, NC * 128);
  }
};

// ---- kernel bodies -----------------------------------------------------------------------------------
// sm80 conv: grid (ceil(Cog/BN), ceil(M/BM), groups); A by the register-staged im2col producer, B = W.
template <class T, int BM, int BN, int BK, int WM, int WN, int STAGES, int VEC_B, class Win, class Epi>
__device__ __forceinline__ void conv_sm80(const T* __restrict__ X, const T* __restrict__ Wt, const Epi& epi,
                                          const ConvDims& d, unsigned char* smem) {
  constexpr int THREADS = WM * WN * 32;
  const int g = blockIdx.z, tm = blockIdx.y, m0 = tm * BM, n0 = blockIdx.x * BN;
  Im2colSm80<T, BM, BK, THREADS, Win, ConvRows> pa{{reinterpret_cast<const u16*>(X), d, ConvRows{d.N * d.Ho * d.Wo, d.Ho, d.Wo}}};
  pa.im.setup(tm, g, threadIdx.x);
  TileProducer<T, true, BN, BK, VEC_B, THREADS, BK> pb{Wt + (long long)g * d.Cog * d.K, n0, d.Cog, d.K};
  float acc[BM / WM / 16][BN / WN / 8][4];
  mainloop_sm80<T, BM, BN, BK, WM, WN, STAGES, false, true>(pa, pb, d.K, smem, acc);
  store_acc_sm80<BM, BN, WM, WN>(epi, acc, g, m0, n0);
}

// sm80 conv + pool: grid (ceil(Cog/BN), N * tiles_ph * tiles_pw, groups); after the mainloop the ring's
// smem holds the conv tile.
template <class T, int BM, int BN, int BK, int WM, int WN, int STAGES, int VEC_B, class Win, class PW, class Epi>
__device__ __forceinline__ void conv_pool_sm80(const T* __restrict__ X, const T* __restrict__ Wt, const Epi& epi,
                                               const ConvDims& d, int Hp, int Wp, unsigned char* smem) {
  constexpr int THREADS = WM * WN * 32;
  constexpr int WTM = BM / WM, WTN = BN / WN, MI = WTM / 16, NI = WTN / 8;
  static_assert(PW::ROWS <= BM, "the pool tile's conv pre-image must fit the CTA's rows");
  const int g = blockIdx.z, tm = blockIdx.y, tn = blockIdx.x;
  const PoolRows<PW> rows{(Hp + PW::TPH - 1) / PW::TPH, (Wp + PW::TPW - 1) / PW::TPW, d.Ho, d.Wo};
  Im2colSm80<T, BM, BK, THREADS, Win, PoolRows<PW>> pa{{reinterpret_cast<const u16*>(X), d, rows}};
  pa.im.setup(tm, g, threadIdx.x);
  TileProducer<T, true, BN, BK, VEC_B, THREADS, BK> pb{Wt + (long long)g * d.Cog * d.K, tn * BN, d.Cog, d.K};
  float acc[MI][NI][4];
  mainloop_sm80<T, BM, BN, BK, WM, WN, STAGES, false, true>(pa, pb, d.K, smem, acc);
  const PoolOut<Epi, PW, BM, BN> out{epi, rows, Hp, Wp, d.Cog};
  __syncthreads();  // every warp is done with the ring: it becomes the conv tile
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warp_m = warp / WN, warp_n = warp % WN;
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j) {
      int m, n;
      acc_coord<WTM, WTN>(warp_m, warp_n, i, j, lane, m, n);
      out.put(smem, g, tn, m, n, acc[i][j][0]);
      out.put(smem, g, tn, m, n + 1, acc[i][j][1]);
      out.put(smem, g, tn, m + 8, n, acc[i][j][2]);
      out.put(smem, g, tn, m + 8, n + 1, acc[i][j][3]);
    }
  __syncthreads();
  out.pool(smem, tm, tn, g, threadIdx.x, THREADS);
}

// sm90 conv: the warp-specialized skeleton with A gathered by the producer warpgroup, B = W by TMA
// ([Co, K] or, grouped, [G, Cog, K]), tiles (m fastest, then n, then group). PREGS / CREGS: the
// gathering producer's and the consumers' setmaxnreg budgets (backend/conv/plan.py SM90_REGS); CHUNK: the gather
// passes the producer keeps in flight (SM90_CHUNK).
template <class T, int BM, int BN, int STAGES, int NC, bool W_RANK3, class LA, class LB, class Win, int PREGS, int CREGS,
          int CHUNK, class Epi>
__device__ __forceinline__ void conv_sm90(const void* tmW, const T* __restrict__ X, const Epi& epi, const ConvDims& d,
                                          int groups, unsigned char* smem) {
  Im2colSm90<BM, Win, ConvRows, CHUNK> pa{{reinterpret_cast<const u16*>(X), d, ConvRows{d.N * d.Ho * d.Wo, d.Ho, d.Wo}}};
  TmaOperand<true, W_RANK3, LB, BN> pb{tmW};
  const StoreOut<Epi> out{epi};
  const int M = d.N * d.Ho * d.Wo;
  ws_sm90<T, BM, BN, STAGES, NC, false, true, LA, LB, PREGS, CREGS>(pa, pb, out, (M + BM - 1) / BM, (d.Cog + BN - 1) / BN,
                                                              groups, d.K, smem);
}

template <class T, int BM, int BN, int STAGES, int NC, bool W_RANK3, class LA, class LB, class Win, class PW, int PREGS,
          int CREGS, int CHUNK, class Epi>
__device__ __forceinline__ void conv_pool_sm90(const void* tmW, const T* __restrict__ X, const Epi& epi,
                                               const ConvDims& d, int groups, int Hp, int Wp, unsigned char* smem) {
  static_assert(PW::ROWS <= BM, "the pool tile's conv pre-image must fit the CTA's rows");
  const PoolRows<PW> rows{(Hp + PW::TPH - 1) / PW::TPH, (Wp + PW::TPW - 1) / PW::TPW, d.Ho, d.Wo};
  Im2colSm90<BM, Win, PoolRows<PW>, CHUNK> pa{{reinterpret_cast<const u16*>(X), d, rows}};
  TmaOperand<true, W_RANK3, LB, BN> pb{tmW};
  const PoolOut<Epi, PW, BM, BN> out{epi, rows, Hp, Wp, d.Cog};
  ws_sm90<T, BM, BN, STAGES, NC, false, true, LA, LB, PREGS, CREGS>(pa, pb, out, d.N * rows.tiles_ph * rows.tiles_pw,
                                                              (d.Cog + BN - 1) / BN, groups, d.K, smem);
}

}  // namespace polysat
