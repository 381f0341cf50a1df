// polysat's one MMA skeleton (seed 000 §9, seed 001 §6-§8), hand-written; the jinja2 template only
// fills in the parameters and the epilogue op list.
//
//   sm80: cp.async -> commit/wait -> ldmatrix -> mma.sync -> epilogue on acc -> st.global.v2
//   sm90: TMA -> mbarrier ring (producer warpgroup / consumer warpgroups) -> wgmma -> epilogue -> st.global.v2
// The operand producers are template parameters of the mainloops (mainloop_sm80, ws_sm90): plain tiles
// (cp.async / TMA) for the GEMM, the im2col gather of polysat_conv.cuh for the implicit-GEMM conv.
//
// Conventions: C[b, m, n] = sum_k A[b, m, k] * B[b, k, n], fp32 accumulation, then the epilogue.
// Operand X (A or B) is "K-major" when K is its contiguous axis (A row-major [M,K], B col-major [N,K])
// and "MN-major" otherwise (A col-major [K,M], B row-major [K,N]). All tails (M, N, K) are predicated:
// out-of-range loads read zero, out-of-range stores are skipped.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#if defined(__CUDACC_RTC__)
struct alignas(64) CUtensorMap_st { unsigned long long opaque[16]; };  // same size/alignment as cuda.h's
typedef CUtensorMap_st CUtensorMap;
#else
#include <cuda.h>
#endif
namespace polysat {
using u32 = unsigned int;        // no <cstdint>: NVRTC compiles this header without the C++ library
using u64 = unsigned long long;
}  // namespace polysat
#include "polysat_wgmma.cuh"

namespace polysat {

template <class A, class B> struct same_type { static constexpr bool value = false; };
template <class A> struct same_type<A, A> { static constexpr bool value = true; };

// ---------------------------------------------------------------------------------------------
// scalar helpers: every epilogue op works on fp32 values (seed 001 §8: the acc stays fp32)
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// round through a narrower type and back (the `cast` epilogue op)
template <class T> __device__ __forceinline__ float round_to(float x) { return to_f32(from_f32<T>(x)); }

__device__ __forceinline__ float act_relu(float x) { return fmaxf(x, 0.0f); }
__device__ __forceinline__ float act_sigmoid(float x) { return 1.0f / (1.0f + __expf(-x)); }
__device__ __forceinline__ float act_silu(float x) { return x / (1.0f + __expf(-x)); }
__device__ __forceinline__ float act_gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
__device__ __forceinline__ float act_gelu_tanh(float x) {
  const float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}

// a pair of adjacent outputs (n, n+1) of row m, stored as one vector when both are in range and aligned
template <class OutT> struct Pair;
template <> struct Pair<float> { using V = float2; static __device__ __forceinline__ V make(float a, float b) { return make_float2(a, b); } };
template <> struct Pair<__half> { using V = __half2; static __device__ __forceinline__ V make(float a, float b) { return __floats2half2_rn(a, b); } };
template <> struct Pair<__nv_bfloat16> { using V = __nv_bfloat162; static __device__ __forceinline__ V make(float a, float b) { return __floats2bfloat162_rn(a, b); } };

// Epi (generated) provides: OutT, `float apply(float v, int b, int m, int n) const`, the output pointer
// `C` with its sizes M, N, its row stride ldc and batch stride cbs (N and M*N when packed; a transposed
// output, heads interleaved, has others); store_pair applies the epilogue to two accumulators and stores them.
// element offset of (row, col) of matrix b in a tensor with row stride ld and batch stride bstride (elements);
// __host__ too, so the host emulators address strided operands as the kernels do
// the batch index an operand reads at flat batch index t when it reads a run of C's batch dims: (t / div) % mod
// (mod 0: every batch dim, t itself)
__host__ __device__ __forceinline__ int batch_index(int t, int div, int mod) { return mod ? (t / div) % mod : t; }
__host__ __device__ __forceinline__ long long elem_offset(int b, long long bstride, int row, long long ld, int col) {
  return (long long)b * bstride + (long long)row * ld + col;
}

template <class Epi>
__device__ __forceinline__ void store_pair(const Epi& e, int b, int m, int n, float v0, float v1) {
  using OutT = typename Epi::OutT;
  if (m >= e.M || n >= e.N) return;
  v0 = e.apply(v0, b, m, n);
  OutT* row = e.C + elem_offset(b, e.cbs, m, e.ldc, 0);
  if (n + 1 < e.N) {
    v1 = e.apply(v1, b, m, n + 1);
    if (((e.N | e.ldc | e.cbs) & 1) == 0) {  // n is even, so the pair is aligned when N and the strides are
      *reinterpret_cast<typename Pair<OutT>::V*>(row + n) = Pair<OutT>::make(v0, v1);
    } else {
      row[n] = from_f32<OutT>(v0);
      row[n + 1] = from_f32<OutT>(v1);
    }
  } else {
    row[n] = from_f32<OutT>(v0);
  }
}

__device__ __forceinline__ u32 smem_u32(const void* p) { return static_cast<u32>(__cvta_generic_to_shared(p)); }

// =============================================================================================
// SM80: cp.async multistage pipeline + ldmatrix + mma.sync.m16n8k16
// =============================================================================================

// ---- index helpers: __host__ too, so tests/test_backend_emulate.py runs them against a CPU model ----
#define POLYSAT_HD __host__ __device__ __forceinline__

// an fp32's bits and back (no intrinsics: the host emulators call the helpers that use them)
union F32Bits {
  float f;
  u32 u;
};
POLYSAT_HD u32 f32_bits(float x) {
  F32Bits v;
  v.f = x;
  return v.u;
}
POLYSAT_HD float bits_f32(u32 u) {
  F32Bits v;
  v.u = u;
  return v.f;
}

POLYSAT_HD float neg_inf() { return bits_f32(0xff800000u); }  // no compiler builtins: NVRTC has none of them

// XOR swizzle of 16-byte chunks inside a [ROWS][COLS] tile (COLS contiguous, in elements of 2 bytes):
// the 8 rows one ldmatrix phase reads land in 8 distinct bank groups.
template <int COLS>
POLYSAT_HD int swz_offset(int row, int col) {
  constexpr int CPR = COLS / 8;  // 16-byte chunks per row
  const int chunk = col >> 3;
  int x;
  if constexpr (CPR >= 8) x = row & 7;
  else if constexpr (CPR == 4) x = (row >> 1) & 3;
  else if constexpr (CPR == 2) x = (row >> 2) & 1;
  else x = 0;
  return row * COLS + ((chunk ^ x) << 3) + (col & 7);
}

// The same for a tile of 4-byte elements (the fp32 operands of the 3xTF32 path): 4 elements per 16-byte chunk,
// chunk c of row r stored at c ^ x(r), x(r) = 2 (r & 3) + ((r >> 2) & 1). The m16n8k8 fragment reads (frag_tf32)
// touch 8 consecutive rows at one chunk (K-major tiles) or 4 consecutive rows at two adjacent chunks (MN-major):
// x takes 8 distinct values on the first and 4 distinct even (or odd) ones on the second, so the 32 lanes of a
// read hit 32 distinct banks.
template <int COLS>
POLYSAT_HD int swz_offset32(int row, int col) {
  static_assert(COLS % 32 == 0, "a 4-byte tile row holds at least 8 chunks");
  const int x = ((row & 3) << 1) | ((row >> 2) & 1);
  return row * COLS + (((col >> 2) ^ x) << 2) + (col & 3);
}

// the swizzled offset of (row, col) in a [ROWS][COLS] tile of T
template <class T, int COLS>
POLYSAT_HD int swz_elem(int row, int col) {
  if constexpr (sizeof(T) == 4) return swz_offset32<COLS>(row, col);
  else return swz_offset<COLS>(row, col);
}

// copy number idx of a [ROWS][COLS] tile moves VEC elements starting at (r, c)
template <int COLS, int VEC>
POLYSAT_HD void copy_coord(int idx, int& r, int& c) {
  constexpr int PER_ROW = COLS / VEC;
  r = idx / PER_ROW;
  c = (idx % PER_ROW) * VEC;
}

// the smem (row, col) whose 16 bytes lane provides to ldmatrix.x4 for the four 8x8 blocks at (mn0, k0):
// block j = lane/8 is (mn0 + 8*(j&1), k0 + 8*(j>>1)); K-major tiles are [MN][K], MN-major [K][MN]
template <bool KMAJOR>
POLYSAT_HD void frag_coord(int lane, int mn0, int k0, int& row, int& col) {
  const int j = lane >> 3, q = lane & 7;
  if constexpr (KMAJOR) { row = mn0 + ((j & 1) << 3) + q; col = k0 + ((j >> 1) << 3); }
  else                  { row = k0 + ((j >> 1) << 3) + q; col = mn0 + ((j & 1) << 3); }
}

// The tf32 m16n8k8 fragments (PTX ISA, mma.m16n8k8 .tf32), g = lane / 4, t = lane % 4, as tile offsets of a
// [MN][K] (K-major) or [K][MN] tile of fp32: A's m16 x k8 block at (mn0, k0) gives reg r the element
// (mn0 + g + 8 (r & 1), k0 + t + 4 (r >> 1)); B's k8 x n8 block gives reg r (n0 + g, k0 + t + 4 r). The
// accumulators are laid out as m16n8k16's (acc_coord).
template <bool KMAJOR, int COLS>
POLYSAT_HD int tf32_at(int mn, int k) { return KMAJOR ? swz_offset32<COLS>(mn, k) : swz_offset32<COLS>(k, mn); }
template <bool KMAJOR, int COLS, int REGS>
POLYSAT_HD void frag_tf32(int lane, int mn0, int k0, int (&off)[REGS]) {
  static_assert(REGS == 4 || REGS == 2, "an A fragment has 4 registers, a B fragment 2");
  const int g = lane >> 2, t = lane & 3;
  for (int r = 0; r < REGS; ++r)
    off[r] = REGS == 4 ? tf32_at<KMAJOR, COLS>(mn0 + g + 8 * (r & 1), k0 + t + 4 * (r >> 1))
                       : tf32_at<KMAJOR, COLS>(mn0 + g, k0 + t + 4 * r);
}

// x rounded to tf32 (10 mantissa bits), to nearest with ties away from zero: cvt.rna.tf32.f32 on the device,
// the same rounding on the host (Inf and NaN kept)
POLYSAT_HD float tf32_rna(float x) {
#ifdef __CUDA_ARCH__
  u32 r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return __uint_as_float(r);
#else
  const u32 u = f32_bits(x);
  return (u & 0x7f800000u) == 0x7f800000u ? x : bits_f32((u + 0x1000u) & 0xffffe000u);
#endif
}
// 3xTF32: x = big + small, both tf32, big * big' + big * small' + small * big' recovers an fp32 product
// (small * small' is below fp32's rounding)
POLYSAT_HD void split_tf32(float x, float& big, float& small) {
  big = tf32_rna(x);
  small = tf32_rna(x - big);
}

// where operand X's CTA tile starts in global memory, as a [rows][cols] tile with cols contiguous:
// K-major X is [MN][K] (leading dimension K), MN-major X is [K][MN] (leading dimension MN)
template <bool KMAJOR>
POLYSAT_HD void tile_origin(int mn0, int k0, int MN, int K, long long& ld, int& row0, int& col0, int& row_lim,
                            int& col_lim) {
  if constexpr (KMAJOR) { ld = K; row0 = mn0; col0 = k0; row_lim = MN; col_lim = K; }
  else                  { ld = MN; row0 = k0; col0 = mn0; row_lim = K; col_lim = MN; }
}

// B concatenated along N from P pieces (sibling GEMMs merged, backend/gemm/concat.py): the piece that
// holds the N tile starting at column n0 (the plan's BN divides every piece), and its first column lo
template <int P>
POLYSAT_HD int b_piece(int n0, const int (&start)[P], int& lo) {
  int j = 0;
  lo = start[0];
#pragma unroll
  for (int q = 1; q < P; ++q)
    if (n0 >= start[q]) { j = q; lo = start[q]; }
  return j;
}

// two sibling GEMMs combined column by column (backend/gemm/paired.py): the piece (0, 1) and the piece column
// of tile column c (sm80: 8-column chunks alternate), of 64-column box q (sm90: boxes alternate);
// n0h = tn * BN / 2, the tile's first piece column
POLYSAT_HD int pair_col_sm80(int c, int n0h, int& piece) {
  piece = (c >> 3) & 1;
  return n0h + (c >> 4) * 8 + (c & 7);
}
POLYSAT_HD int pair_col_sm90(int q, int n0h, int& piece) {
  piece = q & 1;
  return n0h + (q >> 1) * 64;
}

// xs[j] with constant indices only (a select chain, unrolled): no local-memory array
template <int P, class X>
POLYSAT_HD X pick(int j, const X (&xs)[P]) {
  X x = xs[0];
#pragma unroll
  for (int q = 1; q < P; ++q)
    if (j == q) x = xs[q];
  return x;
}

// B fragment of n8-tile j from the ldmatrix.x4 registers of the n16 pair j/2
template <class R>
POLYSAT_HD void b_pick(int j, const R* q, R& b0, R& b1) {
  b0 = (j & 1) ? q[1] : q[0];
  b1 = (j & 1) ? q[3] : q[2];
}

// (m, n) in the CTA tile of accumulators c0/c1 of fragment (i, j); c2/c3 are at row m + 8
template <int WTM, int WTN>
POLYSAT_HD void acc_coord(int warp_m, int warp_n, int i, int j, int lane, int& m, int& n) {
  m = warp_m * WTM + i * 16 + (lane >> 2);
  n = warp_n * WTN + j * 8 + 2 * (lane & 3);
}

// Conv2D as implicit GEMM (backend/conv_spec.py): NCHW input X, GEMM row m = (n, ho, wo) with wo fastest,
// column k = (c, r, s) with s fastest. The A operand is the im2col view of X, never materialized.
struct ConvGeom {
  int C, H, W, Kh, Kw, Ho, Wo, sh, sw, pt, pl, dh, dw;
};

// element offset in X of im2col element (m, k), and whether it lies inside the input (else it reads zero:
// cp.async with src-size 0). Rows m >= M / columns k >= K are the caller's predicate, as for plain tiles.
POLYSAT_HD bool im2col_coord(const ConvGeom& g, int m, int k, long long& off) {
  const int wo = m % g.Wo, t = m / g.Wo, ho = t % g.Ho, n = t / g.Ho;
  const int s = k % g.Kw, t2 = k / g.Kw, r = t2 % g.Kh, c = t2 / g.Kh;
  const int hi = ho * g.sh + r * g.dh - g.pt, wi = wo * g.sw + s * g.dw - g.pl;
  const bool ok = hi >= 0 && hi < g.H && wi >= 0 && wi < g.W;
  off = ok ? (((long long)n * g.C + c) * g.H + hi) * g.W + wi : 0;
  return ok;
}

template <int BYTES>
__device__ __forceinline__ void cp_async(u32 dst, const void* src, bool pred) {
  const int n = pred ? BYTES : 0;  // src-size 0: nothing is read, the destination is zero-filled
  if constexpr (BYTES == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(src), "n"(BYTES), "r"(n));
  }
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// Copy a [ROWS][COLS] tile whose COLS axis is contiguous in global memory (leading dimension ld),
// starting at (row0, col0); rows >= row_lim and cols >= col_lim read zero. VEC elements per copy
// (VEC | ld is guaranteed by the host); VEC == 1 uses plain loads and shared stores.
template <class T, int ROWS, int COLS, int VEC, int THREADS>
__device__ __forceinline__ void load_tile(T* tile, const T* __restrict__ g, long long ld, int row0, int col0,
                                          int row_lim, int col_lim, int tid) {
  constexpr int TOTAL = ROWS * (COLS / VEC);
  static_assert(TOTAL % THREADS == 0, "tile copies must divide evenly among the threads");
#pragma unroll
  for (int i = 0; i < TOTAL / THREADS; ++i) {
    int r, c;
    copy_coord<COLS, VEC>(tid + i * THREADS, r, c);
    const int gr = row0 + r, gc = col0 + c;
    const bool ok = gr < row_lim && gc < col_lim;
    const T* src = ok ? g + elem_offset(0, 0, gr, ld, gc) : g;
    T* dst = tile + swz_elem<T, COLS>(r, c);
    if constexpr (VEC > 1) {
      cp_async<VEC * (int)sizeof(T)>(smem_u32(dst), src, ok);
    } else {
      *dst = ok ? *src : from_f32<T>(0.0f);
    }
  }
}

template <bool TRANS>
__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 addr) {
  if constexpr (TRANS) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
  }
}

// Four 8x8 blocks of operand X at (mn0, k0): r[0] = (mn0, k0), r[1] = (mn0+8, k0), r[2] = (mn0, k0+8),
// r[3] = (mn0+8, k0+8); each thread gets (mn = lane/4, k = 2*(lane%4) .. +1) of every block, which is
// the mma.sync A fragment order and, pairwise, the B fragment order. K-major tiles ([MN][K]) are read
// as stored; MN-major tiles ([K][MN]) through ldmatrix.trans.
template <class T, bool KMAJOR, int TILE_COLS>
__device__ __forceinline__ void load_frag(u32 (&r)[4], const T* tile, int mn0, int k0, int lane) {
  int row, col;
  frag_coord<KMAJOR>(lane, mn0, k0, row, col);
  ldmatrix_x4<!KMAJOR>(r, smem_u32(tile + swz_offset<TILE_COLS>(row, col)));
}

template <class T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  if constexpr (same_type<T, __half>::value) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// fp32 operands: d += a * b on the tensor cores as tf32 (mma.m16n8k8), 3xTF32 by the caller
__device__ __forceinline__ void mma_1688_tf32(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The fp32 fragment (frag_tf32: REGS 4 for A, 2 for B) of the k8 slice at (mn0, k0) of a tile, split into its big and
// small tf32 parts (split_tf32)
template <bool KMAJOR, int COLS, int REGS>
__device__ __forceinline__ void split_frag(const float* tile, int lane, int mn0, int k0, u32 (&big)[REGS],
                                           u32 (&small)[REGS]) {
  int off[REGS];
  frag_tf32<KMAJOR, COLS>(lane, mn0, k0, off);
#pragma unroll
  for (int r = 0; r < REGS; ++r) {
    float b, s;
    split_tf32(tile[off[r]], b, s);
    big[r] = __float_as_uint(b);
    small[r] = __float_as_uint(s);
  }
}

// One BK step of the warp tile on fp32 tiles: each k8 slice's fragments read from shared memory and split
// (split_frag), and three MMAs per fragment pair, the small terms first.
template <int BK, int MI, int NI, int WTM, int WTN, int A_COLS, int B_COLS, bool A_KMAJOR, bool B_KMAJOR>
__device__ __forceinline__ void mma_step_tf32(const float* tA, const float* tB, int warp_m, int warp_n, int lane,
                                              float (&acc)[MI][NI][4]) {
#pragma unroll
  for (int kk = 0; kk < BK; kk += 8) {
    u32 ab[MI][4], as[MI][4], bb[NI][2], bs[NI][2];
#pragma unroll
    for (int i = 0; i < MI; ++i) split_frag<A_KMAJOR, A_COLS>(tA, lane, warp_m * WTM + i * 16, kk, ab[i], as[i]);
#pragma unroll
    for (int j = 0; j < NI; ++j) split_frag<B_KMAJOR, B_COLS>(tB, lane, warp_n * WTN + j * 8, kk, bb[j], bs[j]);
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < NI; ++j) {
        mma_1688_tf32(acc[i][j], as[i], bb[j][0], bb[j][1]);
        mma_1688_tf32(acc[i][j], ab[i], bs[j][0], bs[j][1]);
        mma_1688_tf32(acc[i][j], ab[i], bb[j][0], bb[j][1]);
      }
  }
}

// ---- operand producers of the sm80 mainloop --------------------------------------------------
// A producer moves k-tile kt of one operand into a ring slot in two steps: fetch(slot, kt, tid) starts
// the move (cp.async straight into the slot, or global loads into registers) and land(slot, tid)
// finishes it (a register-staged producer stores its registers to smem there). The mainloop calls land
// after the MMAs of the iteration, so a register-staged producer's global latency hides behind them.
//
// TileProducer: the plain operand, a [MN, K] (K-major) or [K, MN] (MN-major) matrix with unit stride
// along its columns and row stride ld (0: packed, the column extent), copied with VEC-element cp.async
// (zero-fill outside the matrix); land has nothing to do.
template <class T, bool KMAJOR, int ROWS, int COLS, int VEC, int THREADS, int BK>
struct TileProducer {
  const T* __restrict__ g;
  int mn0, MN, K;
  long long ld = 0;
  __device__ __forceinline__ void fetch(T* tile, int kt, int tid) const {
    long long packed;
    int r0, c0, rl, cl;
    tile_origin<KMAJOR>(mn0, kt * BK, MN, K, packed, r0, c0, rl, cl);
    load_tile<T, ROWS, COLS, VEC, THREADS>(tile, g, ld > 0 ? ld : packed, r0, c0, rl, cl, tid);
  }
  __device__ __forceinline__ void land(T*, int) const {}
};

// The multistage mainloop: acc (the warp's MI x NI m16n8 fragments) += A[m0.., :] * B[:, n0..] over K,
// with the operands produced by PA / PB into STAGES ring slots of [BM x BK] and [BN x BK] elements.
// Warps form a WM x WN grid; each owns a (BM/WM) x (BN/WN) warp tile.
template <class T, int BM, int BN, int BK, int WM, int WN, int STAGES, bool A_KMAJOR, bool B_KMAJOR, class PA, class PB>
__device__ __forceinline__ void mainloop_sm80(PA& pa, PB& pb, int K, unsigned char* smem,
                                              float (&acc)[BM / WM / 16][BN / WN / 8][4]) {
  constexpr int WTM = BM / WM, WTN = BN / WN;
  constexpr int MI = WTM / 16, NI = WTN / 8;
  static_assert(WTM % 16 == 0 && WTN % 16 == 0 && BK % 16 == 0, "warp tile must be whole m16n16k16 steps");
  constexpr int A_COLS = A_KMAJOR ? BK : BM;  // tile shapes as stored: [rows][cols]
  constexpr int B_COLS = B_KMAJOR ? BK : BN;
  constexpr int A_ELEMS = BM * BK, B_ELEMS = BN * BK;

  T* sA = reinterpret_cast<T*>(smem);
  T* sB = sA + STAGES * A_ELEMS;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp / WN, warp_n = warp % WN;

#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.0f;

  const int KT = (K + BK - 1) / BK;
  // prologue: STAGES-1 tiles in flight (TokLoad s for s < STAGES-1); empty groups keep the count uniform
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < KT) {
      pa.fetch(sA + s * A_ELEMS, s, tid);
      pb.fetch(sB + s * B_ELEMS, s, tid);
      pa.land(sA + s * A_ELEMS, tid);
      pb.land(sB + s * B_ELEMS, tid);
    }
    cp_async_commit();
  }
  for (int kt = 0; kt < KT; ++kt) {
    cp_async_wait<STAGES - 2>();  // Wait(TokLoad kt)
    __syncthreads();              // ... for every thread's copies; slot (kt-1)%STAGES is free again
    const int pre = kt + STAGES - 1;
    const bool more = pre < KT;
    if (more) {  // TokLoad pre, overlapping the MMAs below
      pa.fetch(sA + (pre % STAGES) * A_ELEMS, pre, tid);
      pb.fetch(sB + (pre % STAGES) * B_ELEMS, pre, tid);
    }
    cp_async_commit();
    const T* tA = sA + (kt % STAGES) * A_ELEMS;
    const T* tB = sB + (kt % STAGES) * B_ELEMS;
    if constexpr (sizeof(T) == 4) {
      mma_step_tf32<BK, MI, NI, WTM, WTN, A_COLS, B_COLS, A_KMAJOR, B_KMAJOR>(tA, tB, warp_m, warp_n, lane, acc);
    } else {
#pragma unroll
      for (int kk = 0; kk < BK; kk += 16) {
        u32 af[MI][4], bf[NI / 2][4];
#pragma unroll
        for (int i = 0; i < MI; ++i) load_frag<T, A_KMAJOR, A_COLS>(af[i], tA, warp_m * WTM + i * 16, kk, lane);
#pragma unroll
        for (int j = 0; j < NI / 2; ++j) load_frag<T, B_KMAJOR, B_COLS>(bf[j], tB, warp_n * WTN + j * 16, kk, lane);
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
          for (int j = 0; j < NI; ++j) {
            u32 b0, b1;
            b_pick(j, bf[j >> 1], b0, b1);
            mma_16816<T>(acc[i][j], af[i], b0, b1);
          }
      }
    }
    if (more) {  // register-staged producers store the prefetched tile (read at iteration pre > kt)
      pa.land(sA + (pre % STAGES) * A_ELEMS, tid);
      pb.land(sB + (pre % STAGES) * B_ELEMS, tid);
    }
  }
  cp_async_wait<0>();
}

// The accumulators of one CTA tile through the epilogue: Epi::store2(b, m, n, v0, v1) applies it to
// the pair (m, n), (m, n+1) and stores what lies inside the output (TokCompute -> TokEpilogue).
template <int BM, int BN, int WM, int WN, class Epi>
__device__ __forceinline__ void store_acc_sm80(const Epi& epi, const float (&acc)[BM / WM / 16][BN / WN / 8][4], int b,
                                               int m0, int n0) {
  constexpr int WTM = BM / WM, WTN = BN / WN, MI = WTM / 16, NI = WTN / 8;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warp_m = warp / WN, warp_n = warp % WN;
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j) {
      int m, n;
      acc_coord<WTM, WTN>(warp_m, warp_n, i, j, lane, m, n);
      epi.store2(b, m0 + m, n0 + n, acc[i][j][0], acc[i][j][1]);
      epi.store2(b, m0 + m + 8, n0 + n, acc[i][j][2], acc[i][j][3]);
    }
}

// One CTA computes the BM x BN tile (tile_m, tile_n) of batch b: plain operands through TileProducer,
// epilogue on the accumulators with predicated paired stores. a_ld / b_ld: the operands' row strides
// (0: packed); the batch strides are per operand (0: broadcast); an operand reading a run of the batch dims
// reads matrix batch_index(b, div, mod) (mod 0: b).
template <class T, int BM, int BN, int BK, int WM, int WN, int STAGES, bool A_KMAJOR, bool B_KMAJOR,
          int VEC_A, int VEC_B, class Epi>
__device__ __forceinline__ void gemm_sm80(const T* __restrict__ A, const T* __restrict__ B, const Epi& epi,
                                          int M, int N, int K, long long a_bstride, long long b_bstride,
                                          unsigned char* smem, int b_lo = 0, int NB = -1, long long a_ld = 0,
                                          long long b_ld = 0, int a_bdiv = 1, int a_bmod = 0, int b_bdiv = 1,
                                          int b_bmod = 0) {
  constexpr int THREADS = WM * WN * 32;
  // tile shapes as stored: [rows][cols], cols contiguous in global memory
  constexpr int A_ROWS = A_KMAJOR ? BM : BK, A_COLS = A_KMAJOR ? BK : BM;
  constexpr int B_ROWS = B_KMAJOR ? BN : BK, B_COLS = B_KMAJOR ? BK : BN;
  const int b = blockIdx.z;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  TileProducer<T, A_KMAJOR, A_ROWS, A_COLS, VEC_A, THREADS, BK> pa{A + elem_offset(batch_index(b, a_bdiv, a_bmod), a_bstride, 0, 0, 0),
                                                                 m0, M, K, a_ld};
  // B's N tile from its own tensor: B itself, or the piece b_lo.. of NB columns that holds it
  TileProducer<T, B_KMAJOR, B_ROWS, B_COLS, VEC_B, THREADS, BK> pb{B + elem_offset(batch_index(b, b_bdiv, b_bmod), b_bstride, 0, 0, 0), n0 - b_lo,
                                                                 NB < 0 ? N : NB, K, b_ld};
  float acc[BM / WM / 16][BN / WN / 8][4];
  mainloop_sm80<T, BM, BN, BK, WM, WN, STAGES, A_KMAJOR, B_KMAJOR>(pa, pb, K, smem, acc);
  store_acc_sm80<BM, BN, WM, WN>(epi, acc, b, m0, n0);
}

// =============================================================================================
// SM90: TMA + mbarrier ring + wgmma, one producer warpgroup and NC consumer warpgroups
// =============================================================================================
__device__ __forceinline__ void mbar_init(u64* bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(u64* bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u64* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
// Wait(token): blocks until the phase with the given parity has completed (mbarrier.try_wait.parity)
__device__ __forceinline__ void mbar_wait(u64* bar, u32 parity) {
  const u32 addr = smem_u32(bar);
  u32 done = 0;
  while (!done) {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done) : "r"(addr), "r"(parity) : "memory");
  }
}

// TMA tile loads, completing on an mbarrier with a transaction count (coordinates innermost first)
__device__ __forceinline__ void tma_load_2d(void* dst, const void* tmap, u64* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
      ::"r"(smem_u32(dst)), "l"(tmap), "r"(c0), "r"(c1), "r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void tma_load_3d(void* dst, const void* tmap, u64* bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n"
      ::"r"(smem_u32(dst)), "l"(tmap), "r"(c0), "r"(c1), "r"(c2), "r"(smem_u32(bar)) : "memory");
}
template <bool RANK3>
__device__ __forceinline__ void tma_load(void* dst, const void* tmap, u64* bar, int c0, int c1, int b) {
  if constexpr (RANK3) tma_load_3d(dst, tmap, bar, c0, c1, b);
  else tma_load_2d(dst, tmap, bar, c0, c1);
}

// Shared-memory matrix descriptor (PTX ISA 9.7.15.5.1.2.2), 128-byte swizzle, tile base 1024-aligned.
__device__ __forceinline__ u64 smem_desc(const void* p, u32 lbo, u32 sbo) {
  const u32 a = smem_u32(p);
  return (u64)((a & 0x3FFFF) >> 4) | ((u64)((lbo & 0x3FFFF) >> 4) << 16) |
         ((u64)((sbo & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

template <int REGS> __device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS)); }
template <int REGS> __device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS)); }

template <class T, int BN, bool A_KMAJOR, bool B_KMAJOR>
__device__ __forceinline__ void wgmma_tile(float (&d)[BN / 2], u64 da, u64 db) {
  constexpr int TA = A_KMAJOR ? 0 : 1, TB = B_KMAJOR ? 0 : 1;
  constexpr bool F16 = same_type<T, __half>::value;
  if constexpr (BN == 64) { if constexpr (F16) wgmma_m64n64k16_f16<TA, TB>(d, da, db); else wgmma_m64n64k16_bf16<TA, TB>(d, da, db); }
  else if constexpr (BN == 128) { if constexpr (F16) wgmma_m64n128k16_f16<TA, TB>(d, da, db); else wgmma_m64n128k16_bf16<TA, TB>(d, da, db); }
  else { static_assert(BN == 256, "wgmma N must be 64, 128 or 256"); if constexpr (F16) wgmma_m64n256k16_f16<TA, TB>(d, da, db); else wgmma_m64n256k16_bf16<TA, TB>(d, da, db); }
}

// generic-proxy shared-memory writes made visible to the async proxy (wgmma operands, TMA stores)
// pin register operands of asynchronous wgmma in place: the compiler may not move their reads or writes
// across this point (wgmma_fence / wgmma_wait only order memory)
template <int R>
__device__ __forceinline__ void fence_operands(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int R, int C>
__device__ __forceinline__ void fence_operands(float (&d)[R][C]) {
#pragma unroll
  for (int i = 0; i < R; ++i) fence_operands(d[i]);
}
template <int R, int C>
__device__ __forceinline__ void fence_operands(u32 (&d)[R][C]) {
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int j = 0; j < C; ++j) asm volatile("" : "+r"(d[i][j])::"memory");
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// named barrier `id` (1..15; 0 is __syncthreads) over `count` threads, a multiple of 32
__device__ __forceinline__ void named_bar_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// ---- operand producers of the sm90 skeleton (run by the producer warpgroup) ------------------------
// A TMA operand is issued by one thread and completes on the stage's full barrier with kTmaBytes bytes;
// a gathered operand (kGather) is written by all 128 producer threads with generic stores, then
// fence.proxy.async + one mbarrier arrive per thread (the barrier counts 1 + 128 arrivals).
//
// TmaOperand: LA / LB describe the smem tile (backend/layouts.py decides them; the host encodes the
// tensor maps from the same boxes). Tile `tmn` of ROWS rows along M (or N):
//   K-major X: one TMA box {64 K, rows}, coordinates (k0, mn0).
//   MN-major X: `boxes` boxes {64 MN, 64 K}, coordinates (mn0 + 64 j, k0).
template <bool KMAJOR, bool RANK3, class L, int ROWS>
struct TmaOperand {
  const void* tmap;
  int bdiv = 1, bmod = 0;  // reads batch coordinate batch_index(b, bdiv, bmod) (a run of the batch dims)
  static constexpr bool kGather = false;
  static constexpr int kTmaBytes = L::bytes;
  __device__ __forceinline__ void issue(unsigned char* dst, u64* bar, int tmn, int k0, int t) const {
    const int mn0 = tmn * ROWS, b = batch_index(t, bdiv, bmod);
#pragma unroll
    for (int j = 0; j < L::boxes; ++j) {
      if constexpr (KMAJOR) tma_load<RANK3>(dst, tmap, bar, k0, mn0, b);
      else tma_load<RANK3>(dst + j * L::box_stride, tmap, bar, mn0 + 64 * j, k0, b);
    }
  }
  __device__ __forceinline__ void gather(unsigned char*, int, int, int, int) const {}
};

// TmaPieces: B concatenated along N from P pieces, one tensor map each; tile `tmn` reads the piece
// that holds it (b_piece), at its column inside that piece (2-D operands only).
template <bool KMAJOR, class L, int ROWS, int P>
struct TmaPieces {
  const void* tmap[P];
  int start[P];
  static constexpr bool kGather = false;
  static constexpr int kTmaBytes = L::bytes;
  __device__ __forceinline__ void issue(unsigned char* dst, u64* bar, int tmn, int k0, int b) const {
    int lo;
    const int j = b_piece<P>(tmn * ROWS, start, lo);
    const int mn0 = tmn * ROWS - lo;
#pragma unroll
    for (int q = 0; q < L::boxes; ++q) {
      if constexpr (KMAJOR) tma_load<false>(dst, pick<P>(j, tmap), bar, k0, mn0, b);
      else tma_load<false>(dst + q * L::box_stride, pick<P>(j, tmap), bar, mn0 + 64 * q, k0, b);
    }
  }
  __device__ __forceinline__ void gather(unsigned char*, int, int, int, int) const {}
};

// Consumer-side output of the plain skeleton: the epilogue on the accumulators, paired stores
// (Epi::store2). Consumer c's thread (warp wq, lane g*4+t) holds rows 64c + 16wq + g (+8) and columns
// 8i + 2t (+1) of the BM x BN tile. PAIR (two sibling GEMMs combined column by column, TmaPair's boxes):
// group i of an even box is the first piece's, i + 8 the second's, and C[m, j] = Epi::pair(first, second).
template <class Epi, bool PAIR = false>
struct StoreOut {
  Epi epi;
  static constexpr int kSmemBytes = 0;
  template <int BM, int BN, int NC>
  __device__ __forceinline__ void tile(const float (&d)[BN / 2], int tm, int tn, int b, int c, unsigned char*) const {
    const int tid = threadIdx.x, wq = (tid & 127) >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int mrow = tm * BM + c * 64 + wq * 16 + g;
#pragma unroll
    for (int i = 0; i < BN / 8; ++i) {
      if constexpr (PAIR) {
        if ((i >> 3) & 1) continue;  // the second piece's group: paired with group i - 8
        int piece;
        const int j = pair_col_sm90(i >> 3, tn * (BN / 2), piece) + (i & 7) * 8 + 2 * t, u = 4 * (i + 8);
        epi.store2(b, mrow, j, epi.pair(d[4 * i + 0], d[u + 0]), epi.pair(d[4 * i + 1], d[u + 1]));
        epi.store2(b, mrow + 8, j, epi.pair(d[4 * i + 2], d[u + 2]), epi.pair(d[4 * i + 3], d[u + 3]));
        continue;
      }
      const int n = tn * BN + i * 8 + 2 * t;
      epi.store2(b, mrow, n, d[4 * i + 0], d[4 * i + 1]);
      epi.store2(b, mrow + 8, n, d[4 * i + 2], d[4 * i + 3]);
    }
  }
};

// Persistent warp-specialized kernel body. Tiles are numbered (m fastest, then n, then batch).
// Ring slot s: full[s] completes when the stage's operands landed (TokLoad: TMA bytes, plus one arrive
// per producer thread for a gathered operand), empty[s] when every consumer warp finished reading it
// (its wgmma group completed). Each stage holds the A tile then the B tile, both 1024-byte aligned (the
// 128-byte swizzle pattern repeats there). PREGS / CREGS: the producer's / consumers' register budget
// (setmaxnreg, with two or more consumer warpgroups). Out::tile gets each consumer's accumulators and
// Out::kSmemBytes of scratch smem after the barriers.
template <class T, int BM, int BN, int STAGES, int NC, bool A_KMAJOR, bool B_KMAJOR, class LA, class LB, int PREGS,
          int CREGS, class PA, class PB, class Out>
__device__ __forceinline__ void ws_sm90(PA& pa, PB& pb, const Out& out, int tiles_m, int tiles_n, int batch,
                                        int K, unsigned char* smem_raw) {
  constexpr int BK = 64;
  static_assert(BM == 64 * NC, "each consumer warpgroup owns 64 rows");
  constexpr int STAGE_BYTES = LA::bytes + LB::bytes;
  static_assert(LA::bytes % 1024 == 0 && LB::bytes % 1024 == 0, "tiles must keep the 1024-byte swizzle alignment");
  // setmaxnreg only moves registers between the CTA's warps: the budgets must fit what the launch allocated
  static_assert(NC < 2 || PREGS * 128 + CREGS * NC * 128 <= (65536 / ((NC + 1) * 128)) / 8 * 8 * (NC + 1) * 128,
                "setmaxnreg budgets exceed the registers the CTA holds");
  constexpr bool GATHER = PA::kGather || PB::kGather;
  constexpr u32 TMA_BYTES = (PA::kGather ? 0 : PA::kTmaBytes) + (PB::kGather ? 0 : PB::kTmaBytes);

  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<u64>(smem_raw) + 1023) & ~u64(1023));
  u64* full = reinterpret_cast<u64*>(smem + STAGES * STAGE_BYTES);
  u64* empty = full + STAGES;
  unsigned char* scratch = reinterpret_cast<unsigned char*>(empty + STAGES);

  const int tid = threadIdx.x, wg = tid / 128, lane = tid & 31;
  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], GATHER ? 1 + 128 : 1);
      mbar_init(&empty[s], NC * 4);  // one arrive per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  }
  __syncthreads();

  const int tiles = tiles_m * tiles_n * batch;
  const int KT = (K + BK - 1) / BK;

  if (wg == 0) {
    // ---------------- producer warpgroup: thread 0 issues the TMA loads, all 128 gather ----------------
    if constexpr (NC >= 2) setmaxnreg_dec<PREGS>();
    if (GATHER || tid == 0) {
      int it = 0;
      for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int tm = tile % tiles_m, tn = (tile / tiles_m) % tiles_n, b = tile / (tiles_m * tiles_n);
        for (int kt = 0; kt < KT; ++kt, ++it) {
          const int s = it % STAGES;
          if (it >= STAGES) mbar_wait(&empty[s], ((it / STAGES) + 1) & 1);  // slot released
          unsigned char* sa = smem + s * STAGE_BYTES;
          unsigned char* sb = sa + LA::bytes;
          const int k0 = kt * BK;
          if (tid == 0) {
            mbar_expect_tx(&full[s], TMA_BYTES);
            if constexpr (!PA::kGather) pa.issue(sa, &full[s], tm, k0, b);
            if constexpr (!PB::kGather) pb.issue(sb, &full[s], tn, k0, b);
          }
          if constexpr (GATHER) {
            if constexpr (PA::kGather) pa.gather(sa, tm, k0, b, tid);
            if constexpr (PB::kGather) pb.gather(sb, tn, k0, b, tid);
            fence_proxy_async();  // the generic stores above are read by wgmma (async proxy)
            mbar_arrive(&full[s]);
          }
        }
      }
    }
  } else {
    // ---------------- consumer warpgroups: wgmma on the ring, epilogue on the accumulators ----------------
    if constexpr (NC >= 2) setmaxnreg_inc<CREGS>();
    const int c = wg - 1;  // consumer index: rows 64c .. 64c+63 of the tile
    int it = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      const int tm = tile % tiles_m, tn = (tile / tiles_m) % tiles_n, b = tile / (tiles_m * tiles_n);
      float d[BN / 2];
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) d[i] = 0.0f;
      fence_operands(d);  // the zeroing stays before the first wgmma reads d
      for (int kt = 0; kt < KT; ++kt, ++it) {
        const int s = it % STAGES;
        mbar_wait(&full[s], (it / STAGES) & 1);  // Wait(TokLoad it)
        __syncwarp();  // wgmma.*.sync.aligned needs the warp converged after the spin loop
        const unsigned char* sa = smem + s * STAGE_BYTES + c * LA::mn64;
        const unsigned char* sb = smem + s * STAGE_BYTES + LA::bytes;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
          const u64 da = smem_desc(sa + kk * LA::kstep, LA::lbo, LA::sbo);
          const u64 db = smem_desc(sb + kk * LB::kstep, LB::lbo, LB::sbo);
          wgmma_tile<T, BN, A_KMAJOR, B_KMAJOR>(d, da, db);
        }
        wgmma_commit();  // TokCompute it
        if (kt > 0) {
          wgmma_wait<1>();  // group it-1 done: its slot can be refilled
          __syncwarp();
          if (lane == 0) mbar_arrive(&empty[(it - 1) % STAGES]);
        }
      }
      wgmma_wait<0>();
      fence_operands(d);  // no epilogue arithmetic on d is hoisted above the wait
      if (KT > 0) {
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[(it - 1) % STAGES]);
      }
      // epilogue (the producer is already fetching the next tile's slots: epilogue_overlap)
      out.template tile<BM, BN, NC>(d, tm, tn, b, c, scratch);
    }
  }
}

// The GEMM: both operands by TMA, the plain epilogue.
template <class T, int BM, int BN, int STAGES, int NC, bool A_KMAJOR, bool B_KMAJOR, bool A_RANK3, bool B_RANK3,
          class LA, class LB, class Epi>
__device__ __forceinline__ void gemm_sm90(const void* tmA, const void* tmB, const Epi& epi, int M, int N, int K,
                                          int batch, unsigned char* smem_raw, int a_bdiv = 1, int a_bmod = 0,
                                          int b_bdiv = 1, int b_bmod = 0) {
  TmaOperand<A_KMAJOR, A_RANK3, LA, BM> pa{tmA, a_bdiv, a_bmod};
  TmaOperand<B_KMAJOR, B_RANK3, LB, BN> pb{tmB, b_bdiv, b_bmod};
  const StoreOut<Epi> out{epi};
  ws_sm90<T, BM, BN, STAGES, NC, A_KMAJOR, B_KMAJOR, LA, LB, 40, 232>(pa, pb, out, (M + BM - 1) / BM,
                                                                     (N + BN - 1) / BN, batch, K, smem_raw);
}

// The GEMM with B concatenated along N from P pieces (tensor maps tmB[j], first columns start[j]).
template <class T, int BM, int BN, int STAGES, int NC, bool A_KMAJOR, bool B_KMAJOR, int P, class LA, class LB,
          class Epi>
__device__ __forceinline__ void gemm_sm90_pieces(const void* tmA, const void* const (&tmB)[P], const int (&start)[P],
                                                 const Epi& epi, int M, int N, int K, unsigned char* smem_raw) {
  TmaOperand<A_KMAJOR, false, LA, BM> pa{tmA};
  TmaPieces<B_KMAJOR, LB, BN, P> pb;
#pragma unroll
  for (int j = 0; j < P; ++j) { pb.tmap[j] = tmB[j]; pb.start[j] = start[j]; }
  const StoreOut<Epi> out{epi};
  ws_sm90<T, BM, BN, STAGES, NC, A_KMAJOR, B_KMAJOR, LA, LB, 40, 232>(pa, pb, out, (M + BM - 1) / BM,
                                                                     (N + BN - 1) / BN, 1, K, smem_raw);
}


// =============================================================================================
// A computed as its tile is filled (backend/gemm/prologue.py): A[m, k] = Fn::f(sources at (m, k)), each source
// ("mk" [M, ld] at (m, col + k), or "k" [K]) read 16 bytes at a time (EPC = 8 16-bit or 4 fp32 elements), the value
// computed in fp32 (Fn rounds each 16-bit step as the reference does) and stored as T into the K-major A tile.
// Outside the matrix (m >= M or k >= K; K % EPC == 0) the tile holds 0. Fn (generated per kernel) gives NS
// chunked sources src[s] with row strides ld[s] (0: a "k" source) and columns col[s], and f(x, m, st), st the
// row's NST per-row statistics (PrologueStats below; NST 0: none) that the CTA computes before its first A tile.
// =============================================================================================
// 16 bytes of global memory, or zeros where pred is false (nothing is read then); on the host (the emulator of
// tests/test_gemm_prologue_emulate.py) a plain copy
POLYSAT_HD uint4 load_v4(const void* p, bool pred) {
  uint4 v = make_uint4(0u, 0u, 0u, 0u);
#if defined(__CUDA_ARCH__)
  asm volatile("{\n.reg .pred q;\nsetp.ne.b32 q, %5, 0;\nmov.b32 %0, 0;\nmov.b32 %1, 0;\nmov.b32 %2, 0;\nmov.b32 %3, 0;\n"
               "@q ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n}\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "r"((int)pred));
#else
  if (pred) {
    const unsigned char* b = static_cast<const unsigned char*>(p);
    u32 w[4] = {0u, 0u, 0u, 0u};
    for (int i = 0; i < 16; ++i) w[i / 4] |= (u32)b[i] << (8 * (i % 4));
    v = make_uint4(w[0], w[1], w[2], w[3]);
  }
#endif
  return v;
}
POLYSAT_HD void store_v4(unsigned char* tile, int off, uint4 v) {
#if defined(__CUDA_ARCH__)
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_u32(tile) + off), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w) : "memory");
#else
  const u32 w[4] = {v.x, v.y, v.z, v.w};
  for (int i = 0; i < 16; ++i) tile[off + i] = (unsigned char)(w[i / 4] >> (8 * (i % 4)));
#endif
}
template <class T> POLYSAT_HD float bits_to_f32(u32 h);
template <> POLYSAT_HD float bits_to_f32<float>(u32 h) { return bits_f32(h); }
template <> POLYSAT_HD float bits_to_f32<__half>(u32 h) { return __half2float(__ushort_as_half((unsigned short)h)); }
template <> POLYSAT_HD float bits_to_f32<__nv_bfloat16>(u32 h) {
  return __bfloat162float(__ushort_as_bfloat16((unsigned short)h));
}
template <class T> POLYSAT_HD u32 f32_to_bits(float x);
template <> POLYSAT_HD u32 f32_to_bits<float>(float x) { return f32_bits(x); }
template <> POLYSAT_HD u32 f32_to_bits<__half>(float x) { return __half_as_ushort(__float2half_rn(x)); }
template <> POLYSAT_HD u32 f32_to_bits<__nv_bfloat16>(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
POLYSAT_HD u32 word(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }
// elements of T in one 16-byte chunk, and element e of a chunk as fp32
template <class T> constexpr int kEpc = 16 / (int)sizeof(T);
template <class T>
POLYSAT_HD float chunk_elem(const uint4& v, int e) {
  if constexpr (sizeof(T) == 4) return bits_to_f32<T>(word(v, e));
  else return bits_to_f32<T>((word(v, e >> 1) >> (16 * (e & 1))) & 0xffffu);
}

// byte offset of the 16-byte chunk kc of row `row` in one ring slot of the K-major A tile:
// sm80 the [ROWS][BK] xor-16B tile the fragments read (swz_elem), sm90 rows of 128 bytes, 128B-swizzled (TMA's)
template <class T, int BK>
struct KPlaceSm80 {
  static POLYSAT_HD int offset(int row, int kc) { return (int)sizeof(T) * swz_elem<T, BK>(row, kc * kEpc<T>); }
};
struct KPlaceSm90 {
  static POLYSAT_HD int offset(int row, int kc) { return (row << 7) ^ ((row & 7) << 4) ^ (kc << 4); }
};

// stats[row * NST + s] = Fn::post(s, the sum in order of the TPR partials part[s * ROWS * TPR + row * TPR + q]) for
// the ROWS rows, THREADS threads taking rows tid, tid + THREADS, .. (after the barrier that follows the partials)
template <class Fn, int ROWS, int THREADS, int TPR, int NST>
POLYSAT_HD void finish_rows(const Fn& fn, const float* part, float* stats, int tid) {
  for (int row = tid; row < ROWS; row += THREADS)
#pragma unroll
    for (int s = 0; s < Fn::NST; ++s) {
      float sum = 0.0f;
      for (int q = 0; q < TPR; ++q) sum += part[s * ROWS * TPR + row * TPR + q];
      stats[row * NST + s] = fn.post(s, sum);
    }
}

// A prologue's per-row statistics (backend/gemm/prologue.py "stat"): stats[row * NST + s] = Fn::post(s, the sum over
// k < K of Fn::pre(s, x_s[m0 + row, col_s + k])) for the ROWS rows of the CTA's M tile, x_s the [M, st_ld[s]]
// tensor st_src[s] of T (K % EPC == 0). THREADS threads: TPR = THREADS / ROWS threads share a row (when ROWS
// divides THREADS; else each thread takes rows tid, tid + THREADS, ..), thread q of a row summing its 16-byte chunks
// q, q + TPR, .. with U loads in flight; partials() leaves each thread's sums in part[], and after the caller's
// barrier finish() adds a row's TPR partials in order and applies post (the sum's order is the kernel's own:
// the reduction reassociates). part holds NST * PART floats, stats ROWS * NST.
template <class T, class Fn, int ROWS, int THREADS, int U = 4>
struct PrologueStats {
  static constexpr bool SHARED = THREADS >= ROWS && THREADS % ROWS == 0;
  static constexpr int TPR = SHARED ? THREADS / ROWS : 1, RPT = SHARED ? 1 : (ROWS + THREADS - 1) / THREADS;
  static constexpr int NST = Fn::NST > 0 ? Fn::NST : 1, PART = ROWS * TPR;
  static POLYSAT_HD void partials(const Fn& fn, float* part, int m0, int M, int K, int tid) {
    constexpr int EPC = kEpc<T>;
    const int chunks = K / EPC;
#pragma unroll
    for (int s = 0; s < Fn::NST; ++s)
      for (int i = 0; i < RPT; ++i) {
        const int row = SHARED ? tid / TPR : tid + i * THREADS, q = SHARED ? tid % TPR : 0, m = m0 + row;
        if (row >= ROWS) continue;
        float acc = 0.0f;
        if (m < M) {
          const T* p = fn.st_src[s] + (long long)m * fn.st_ld[s] + fn.st_col[s];
          for (int c0 = q; c0 < chunks; c0 += TPR * U) {
            uint4 raw[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
              const int c = c0 + u * TPR;
              raw[u] = load_v4(p + (c < chunks ? EPC * c : 0), c < chunks);
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
              if (c0 + u * TPR >= chunks) continue;
#pragma unroll
              for (int e = 0; e < EPC; ++e) acc += fn.pre(s, chunk_elem<T>(raw[u], e));
            }
          }
        }
        part[s * PART + row * TPR + q] = acc;
      }
  }
  static POLYSAT_HD void finish(const Fn& fn, const float* part, float* stats, int tid) {
    finish_rows<Fn, ROWS, THREADS, TPR, NST>(fn, part, stats, tid);
  }
};

// PASSES chunks per thread per k tile: chunk c = tid + p * THREADS is row c / CPR, k chunk c % CPR.
// fetch() loads CHUNK passes into registers, land() computes and stores them.
// Fn::LIN >= 0 (backend/gemm/prologue.py in_loop; sm80 only): A is linear in the one statistic, which sums Fn::pre over
// the chunked source LIN's elements at (m, k): land() then computes f without it (Fn's program reads 1 in its place)
// and adds pre of each element it lands to the thread's partial for that row, lsum[p] (a thread keeps its rows and its
// k chunk tid % CPR in every tile), and publish() leaves them in part[row * CPR + tid % CPR] for finish_rows.
template <class T, class Fn, int ROWS, int BK, int THREADS, int CHUNK, class Place>
struct PrologueTile {
  static constexpr int EPC = kEpc<T>, CPR = BK / EPC, PASSES = ROWS * CPR / THREADS;
  static constexpr bool LIN = Fn::LIN >= 0;
  static_assert(BK % EPC == 0 && (ROWS * CPR) % THREADS == 0 && PASSES % CHUNK == 0,
                "the prologue tile must divide evenly among the threads");
  static_assert(!LIN || (Fn::NST == 1 && THREADS % CPR == 0), "an in-loop statistic is the one statistic");
  Fn fn;
  int m0, M, K;
  const float* stats = nullptr;  // the tile's per-row statistics (PrologueStats), when Fn::NST > 0 and not LIN
  uint4 raw[CHUNK][Fn::NS];
  float lsum[LIN ? PASSES : 1] = {};  // LIN: this thread's partial sums of its rows' statistic
  POLYSAT_HD void fetch(int k0, int tid, int p0) {
#pragma unroll
    for (int p = 0; p < CHUNK; ++p) {
      const int c = tid + (p0 + p) * THREADS, m = m0 + c / CPR, k = k0 + (c % CPR) * EPC;
      const bool in = m < M && k < K;
#pragma unroll
      for (int s = 0; s < Fn::NS; ++s)
        raw[p][s] = load_v4(fn.src[s] + (in ? (long long)m * fn.ld[s] + fn.col[s] + k : 0), in);
    }
  }
  POLYSAT_HD void land(unsigned char* tile, int k0, int tid, int p0) {
#pragma unroll
    for (int p = 0; p < CHUNK; ++p) {
      const int c = tid + (p0 + p) * THREADS, row = c / CPR, kc = c % CPR, m = m0 + row;
      const bool in = m < M && k0 + kc * EPC < K;
      if constexpr (LIN) {
        if (in)
#pragma unroll
          for (int e = 0; e < EPC; ++e) lsum[p0 + p] += fn.pre(0, chunk_elem<T>(raw[p][LIN ? Fn::LIN : 0], e));
      }
      constexpr int EPW = EPC / 4;  // elements per 32-bit word: 2 (16-bit), 1 (fp32)
      u32 out[4];
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        out[w] = 0u;
#pragma unroll
        for (int q = 0; q < EPW; ++q) {
          float x[Fn::NS];
#pragma unroll
          for (int s = 0; s < Fn::NS; ++s) x[s] = chunk_elem<T>(raw[p][s], w * EPW + q);
          const u32 h = in ? f32_to_bits<T>(fn.f(x, m, Fn::NST > 0 && !LIN ? stats + row * Fn::NST : nullptr)) : 0u;
          out[w] |= h << (32 / EPW * q);
        }
      }
      store_v4(tile, Place::offset(row, kc), make_uint4(out[0], out[1], out[2], out[3]));
    }
  }
  POLYSAT_HD void publish(float* part, int tid) const {
#pragma unroll
    for (int p = 0; p < (LIN ? PASSES : 0); ++p) part[tid + p * THREADS] = lsum[p];  // c = row * CPR + k chunk
  }
};

// sm80: the A producer of mainloop_sm80, register-staged (fetch before the MMAs, land after them).
template <class T, class Fn, int BM, int BK, int THREADS>
struct PrologueSm80 {
  PrologueTile<T, Fn, BM, BK, THREADS, BM * (BK / kEpc<T>) / THREADS, KPlaceSm80<T, BK>> t;
  int k0 = 0;
  __device__ __forceinline__ void fetch(T*, int kt, int tid) { k0 = kt * BK; t.fetch(k0, tid, 0); }
  __device__ __forceinline__ void land(T* tile, int tid) { t.land(reinterpret_cast<unsigned char*>(tile), k0, tid, 0); }
};

// sm90: the gathered A operand of ws_sm90 (the producer warpgroup's 128 threads), CHUNK passes at a time; the
// statistics' pass holds STAT_LOADS 16-byte loads in flight per thread (16 with one consumer warpgroup, whose
// producer keeps its registers; 4 under setmaxnreg's 40: analyses/prologue_cone.py STAT_LOADS_ONE)
template <class T, class Fn, int BM, int CHUNK>
struct PrologueSm90 {
  static constexpr int STAT_LOADS = BM == 64 ? 16 : 4;
  static_assert(Fn::LIN < 0, "sm90: the statistic's pass runs in the producer (no in-loop statistic)");
  static constexpr bool kGather = true;
  static constexpr int kTmaBytes = 0;
  PrologueTile<T, Fn, BM, 64, 128, CHUNK, KPlaceSm90> t;
  __device__ __forceinline__ void issue(unsigned char*, u64*, int, int, int) const {}
  __device__ __forceinline__ void gather(unsigned char* dst, int tm, int k0, int, int tid) {
    t.m0 = tm * BM;
    if constexpr (Fn::NST > 0) {
      using RS = PrologueStats<T, Fn, BM, 128, STAT_LOADS>;
      __shared__ float part[RS::NST * RS::PART], stats[BM * RS::NST];  // static: no pointer held in registers
      if (k0 == 0) {  // the tile's first A stage: its rows' statistics, over all of K, by the 128 producer threads
        named_bar_sync(2, 128);  // every producer thread is done with the previous tile's statistics
        RS::partials(t.fn, part, t.m0, t.M, t.K, tid);
        named_bar_sync(2, 128);
        RS::finish(t.fn, part, stats, tid);
        named_bar_sync(2, 128);
      }
      t.stats = stats;
    }
#pragma unroll
    for (int p0 = 0; p0 < t.PASSES; p0 += CHUNK) {
      t.fetch(k0, tid, p0);
      t.land(dst, k0, tid, p0);
    }
  }
};

// The accumulators' rows m of the CTA tile times scale[m] (an in-loop statistic: A's factor taken out of the sum)
template <int BM, int BN, int WM, int WN>
POLYSAT_HD void scale_rows_sm80(float (&acc)[BM / WM / 16][BN / WN / 8][4], const float* scale, int tid) {
  constexpr int WTM = BM / WM, WTN = BN / WN, MI = WTM / 16, NI = WTN / 8;
  const int lane = tid & 31, warp = tid >> 5;
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j) {
      int m, n;
      acc_coord<WTM, WTN>(warp / WN, warp % WN, i, j, lane, m, n);
      const float lo = scale[m], hi = scale[m + 8];
      acc[i][j][0] *= lo;
      acc[i][j][1] *= lo;
      acc[i][j][2] *= hi;
      acc[i][j][3] *= hi;
    }
}

// sm80: the rows' statistics (PrologueStats, by every thread, before the main loop, 16 loads in flight: the
// accumulators and fragments are not live yet, so the 64 registers cost nothing; analyses/prologue_cone.py
// STAT_LOADS_SM80), then the main loop with A computed by the prologue and B from any producer PB (a plain operand,
// the piece of a concatenation, or a pair's two pieces). With an in-loop statistic (Fn::LIN >= 0) there is no pass:
// the main loop sums it as A's tiles land, and the accumulators' rows are scaled by it after the loop (A = r * h:
// sum_k r h B = r sum_k h B; the ring is free then and holds the partials).
template <class T, int BM, int BN, int BK, int WM, int WN, int STAGES, bool B_KMAJOR, class Fn, class PB>
__device__ __forceinline__ void mainloop_sm80_prologue(const Fn& fn, PB& pb, int M, int K, unsigned char* smem,
                                                       float (&acc)[BM / WM / 16][BN / WN / 8][4]) {
  constexpr int THREADS = WM * WN * 32;
  PrologueSm80<T, Fn, BM, BK, THREADS> pa{{fn, (int)blockIdx.y * BM, M, K}};
  if constexpr (Fn::LIN >= 0) {
    using Tile = decltype(pa.t);
    static_assert(BM * Tile::CPR * 4 + BM * 4 <= STAGES * BM * BK * (int)sizeof(T), "the ring holds the partials");
    mainloop_sm80<T, BM, BN, BK, WM, WN, STAGES, true, B_KMAJOR>(pa, pb, K, smem, acc);
    __syncthreads();  // every warp is done with the ring
    float* part = reinterpret_cast<float*>(smem);
    float* stats = part + BM * Tile::CPR;
    pa.t.publish(part, threadIdx.x);
    __syncthreads();
    finish_rows<Fn, BM, THREADS, Tile::CPR, 1>(fn, part, stats, threadIdx.x);
    __syncthreads();
    scale_rows_sm80<BM, BN, WM, WN>(acc, stats, threadIdx.x);
  } else {
    if constexpr (Fn::NST > 0) {
      using RS = PrologueStats<T, Fn, BM, THREADS, 16>;
      __shared__ float part[RS::NST * RS::PART], stats[BM * RS::NST];
      RS::partials(fn, part, pa.t.m0, M, K, threadIdx.x);
      __syncthreads();
      RS::finish(fn, part, stats, threadIdx.x);
      __syncthreads();
      pa.t.stats = stats;
    }
    mainloop_sm80<T, BM, BN, BK, WM, WN, STAGES, true, B_KMAJOR>(pa, pb, K, smem, acc);
  }
}

// B's N tile from B itself, or from the piece b_lo.. of NB columns of a concatenation that holds it
template <class T, int BM, int BN, int BK, int WM, int WN, int STAGES, bool B_KMAJOR, int VEC_B, class Fn, class Epi>
__device__ __forceinline__ void gemm_sm80_prologue(const Fn& fn, const T* __restrict__ B, const Epi& epi, int M, int N,
                                                   int K, unsigned char* smem, long long b_ld = 0, int b_lo = 0,
                                                   int NB = -1) {
  constexpr int THREADS = WM * WN * 32;
  constexpr int B_ROWS = B_KMAJOR ? BN : BK, B_COLS = B_KMAJOR ? BK : BN;
  const int n0 = blockIdx.x * BN;
  TileProducer<T, B_KMAJOR, B_ROWS, B_COLS, VEC_B, THREADS, BK> pb{B, n0 - b_lo, NB < 0 ? N : NB, K, b_ld};
  float acc[BM / WM / 16][BN / WN / 8][4];
  mainloop_sm80_prologue<T, BM, BN, BK, WM, WN, STAGES, B_KMAJOR>(fn, pb, M, K, smem, acc);
  store_acc_sm80<BM, BN, WM, WN>(epi, acc, 0, blockIdx.y * BM, n0);
}

// sm90: the producer warpgroup computes A (and the rows' statistics); B from any TMA producer PB, out any output
template <class T, int BM, int BN, int STAGES, int NC, bool B_KMAJOR, class LA, class LB, int CHUNK, class Fn, class PB,
          class Out>
__device__ __forceinline__ void gemm_sm90_prologue(const Fn& fn, PB& pb, const Out& out, int M, int N, int K,
                                                   unsigned char* smem_raw) {
  PrologueSm90<T, Fn, BM, CHUNK> pa{{fn, 0, M, K}};
  ws_sm90<T, BM, BN, STAGES, NC, true, B_KMAJOR, LA, LB, 40, 232>(pa, pb, out, (M + BM - 1) / BM, (N + BN - 1) / BN, 1,
                                                                  K, smem_raw);
}


// =============================================================================================
// Two sibling GEMMs combined column by column (backend/gemm/paired.py): B = [B_0 | B_1], both [K, W] row-major
// (MN-major), interleaved inside each N tile so that column j of both pieces lands in one thread's
// accumulators; the epilogue computes C[m, j] = Epi::pair(acc_0, acc_1) and C is [M, W]. The CTA's N tile tn
// covers the piece columns tn*BN/2 .. tn*BN/2 + BN/2 - 1 of both pieces.
//   sm80: tile column c is piece (c / 8) & 1, piece column tn*BN/2 + (c / 16) * 8 + c % 8 (n8 fragment pairs);
//   sm90: 64-column TMA box q is piece q & 1 at column tn*BN/2 + (q / 2) * 64 (accumulator groups i, i + 8).
// =============================================================================================
template <class T, int BK, int BN, int VEC, int THREADS>
struct PairTileProducer {
  const T* __restrict__ b[2];
  int n0h, W, K;
  __device__ __forceinline__ void fetch(T* tile, int kt, int tid) const {
    constexpr int TOTAL = BK * (BN / VEC);
    static_assert(TOTAL % THREADS == 0 && 8 % VEC == 0, "pair tile copies must divide evenly among the threads");
#pragma unroll
    for (int i = 0; i < TOTAL / THREADS; ++i) {
      int r, c;
      copy_coord<BN, VEC>(tid + i * THREADS, r, c);
      int piece;
      const int k = kt * BK + r, col = pair_col_sm80(c, n0h, piece);
      const bool ok = k < K && col < W;
      const T* src = piece ? b[1] : b[0];  // a select, not a runtime index (no local memory)
      src = ok ? src + (long long)k * W + col : src;
      cp_async<VEC * (int)sizeof(T)>(smem_u32(tile + swz_elem<T, BN>(r, c)), src, ok);
    }
  }
  __device__ __forceinline__ void land(T*, int) const {}
};

template <int BM, int BN, int WM, int WN, class Epi>
__device__ __forceinline__ void store_pair_sm80(const Epi& epi, const float (&acc)[BM / WM / 16][BN / WN / 8][4], int m0,
                                                int n0h) {
  constexpr int WTM = BM / WM, WTN = BN / WN, MI = WTM / 16, NI = WTN / 8;
  static_assert(WTN % 16 == 0, "a warp holds whole n8 fragment pairs");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warp_m = warp / WN, warp_n = warp % WN;
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; j += 2) {
      int m, n;
      acc_coord<WTM, WTN>(warp_m, warp_n, i, j, lane, m, n);
      int piece;
      const int col = pair_col_sm80(n, n0h, piece);  // n: the first piece's fragment (its n8 block is even)
      const float(&g)[4] = acc[i][j];
      const float(&u)[4] = acc[i][j + 1];
      epi.store2(0, m0 + m, col, epi.pair(g[0], u[0]), epi.pair(g[1], u[1]));
      epi.store2(0, m0 + m + 8, col, epi.pair(g[2], u[2]), epi.pair(g[3], u[3]));
    }
}

template <class T, int BM, int BN, int BK, int WM, int WN, int STAGES, bool A_KMAJOR, int VEC_A, int VEC_B, class Epi>
__device__ __forceinline__ void gemm_sm80_pair(const T* __restrict__ A, const T* __restrict__ B0, const T* __restrict__ B1,
                                               const Epi& epi, int M, int N, int K, unsigned char* smem) {
  constexpr int THREADS = WM * WN * 32;
  constexpr int A_ROWS = A_KMAJOR ? BM : BK, A_COLS = A_KMAJOR ? BK : BM;
  const int m0 = blockIdx.y * BM, n0h = blockIdx.x * (BN / 2);
  TileProducer<T, A_KMAJOR, A_ROWS, A_COLS, VEC_A, THREADS, BK> pa{A, m0, M, K, 0};
  PairTileProducer<T, BK, BN, VEC_B, THREADS> pb{{B0, B1}, n0h, N / 2, K};
  float acc[BM / WM / 16][BN / WN / 8][4];
  mainloop_sm80<T, BM, BN, BK, WM, WN, STAGES, A_KMAJOR, false>(pa, pb, K, smem, acc);
  store_pair_sm80<BM, BN, WM, WN>(epi, acc, m0, n0h);
}

// ... with A computed by a prologue (backend/gemm/prologue.py)
template <class T, int BM, int BN, int BK, int WM, int WN, int STAGES, int VEC_B, class Fn, class Epi>
__device__ __forceinline__ void gemm_sm80_prologue_pair(const Fn& fn, const T* __restrict__ B0, const T* __restrict__ B1,
                                                        const Epi& epi, int M, int N, int K, unsigned char* smem) {
  constexpr int THREADS = WM * WN * 32;
  const int n0h = blockIdx.x * (BN / 2);
  PairTileProducer<T, BK, BN, VEC_B, THREADS> pb{{B0, B1}, n0h, N / 2, K};
  float acc[BM / WM / 16][BN / WN / 8][4];
  mainloop_sm80_prologue<T, BM, BN, BK, WM, WN, STAGES, false>(fn, pb, M, K, smem, acc);
  store_pair_sm80<BM, BN, WM, WN>(epi, acc, blockIdx.y * BM, n0h);
}

// sm90: the interleaved B (MN-major boxes of 64 columns, one tensor map per piece)
template <class L, int BN>
struct TmaPair {
  const void* tmap[2];
  static constexpr bool kGather = false;
  static constexpr int kTmaBytes = L::bytes;
  static_assert(BN % 128 == 0 && L::boxes == BN / 64, "a pair tile holds whole 64-column boxes of both pieces");
  __device__ __forceinline__ void issue(unsigned char* dst, u64* bar, int tn, int k0, int) const {
#pragma unroll
    for (int q = 0; q < L::boxes; ++q) {
      int piece;
      const int col = pair_col_sm90(q, tn * (BN / 2), piece);
      tma_load<false>(dst + q * L::box_stride, piece ? tmap[1] : tmap[0], bar, col, k0, 0);
    }
  }
  __device__ __forceinline__ void gather(unsigned char*, int, int, int, int) const {}
};


template <class T, int BM, int BN, int STAGES, int NC, bool A_KMAJOR, class LA, class LB, class Epi>
__device__ __forceinline__ void gemm_sm90_pair(const void* tmA, const void* tmB0, const void* tmB1, const Epi& epi,
                                               int M, int N, int K, unsigned char* smem_raw) {
  TmaOperand<A_KMAJOR, false, LA, BM> pa{tmA};
  TmaPair<LB, BN> pb{{tmB0, tmB1}};
  const StoreOut<Epi, true> out{epi};
  ws_sm90<T, BM, BN, STAGES, NC, A_KMAJOR, false, LA, LB, 40, 232>(pa, pb, out, (M + BM - 1) / BM, (N + BN - 1) / BN,
                                                                   1, K, smem_raw);
}

}  // namespace polysat
