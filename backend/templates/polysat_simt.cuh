#ifndef POLYSAT_SIMT_CUH_
#define POLYSAT_SIMT_CUH_  // a guard, not #pragma once: several kernels may share one host emulator
// polysat SIMT skeleton helpers: the non-MMA path (one region = one kernel, no tensor-core contraction).
//
// A CTA holds ROWS row groups of G consecutive threads; a group owns one row (one point of the outer
// axes) and walks the row's elements lane-strided, V consecutive elements per lane per step. Everything
// that decides an index, a predicate, a vector width or the order of a reduction tree is a
// __host__ __device__ function here, so the host emulator (tests) runs the same code the GPU runs:
// only the cross-lane exchange itself (__shfl_xor_sync, shared memory) is device-only, and
// host_group_reduce replays it in the same order.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#if defined(__CUDACC_RTC__)  // NVRTC has the math functions built in and no C library headers
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fffffff)
#else
#include <math.h>
#endif

namespace polysat_simt {

// ---- numerics: every float value lives in fp32 and is rounded to its dtype after each op ------------
__host__ __device__ __forceinline__ float rnd_fp16(float x) { return __half2float(__float2half_rn(x)); }
__host__ __device__ __forceinline__ float rnd_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
__host__ __device__ __forceinline__ float rnd_fp32(float x) { return x; }

__host__ __device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__host__ __device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
__host__ __device__ __forceinline__ float to_f(float x) { return x; }
__host__ __device__ __forceinline__ int to_i(int x) { return x; }
__host__ __device__ __forceinline__ bool to_b(unsigned char x) { return x != 0; }

__host__ __device__ __forceinline__ void put(__half* p, float x) { *p = __float2half_rn(x); }
__host__ __device__ __forceinline__ void put(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }
__host__ __device__ __forceinline__ void put(float* p, float x) { *p = x; }
__host__ __device__ __forceinline__ void put(int* p, int x) { *p = x; }
__host__ __device__ __forceinline__ void put(unsigned char* p, bool x) { *p = x ? 1 : 0; }

// numpy's NaN-propagating maximum / minimum (fmaxf drops NaN)
__host__ __device__ __forceinline__ float nmax(float a, float b) { return (a != a || b != b) ? a + b : (a > b ? a : b); }
__host__ __device__ __forceinline__ float nmin(float a, float b) { return (a != a || b != b) ? a + b : (a < b ? a : b); }
__host__ __device__ __forceinline__ int nmax(int a, int b) { return a > b ? a : b; }
__host__ __device__ __forceinline__ int nmin(int a, int b) { return a < b ? a : b; }
__host__ __device__ __forceinline__ float relu(float x) { return x != x ? x : (x > 0.0f ? x : 0.0f); }
__host__ __device__ __forceinline__ int relu(int x) { return x > 0 ? x : 0; }
// float -> i32 as numpy: truncation (values outside int32 are undefined in both)
__host__ __device__ __forceinline__ int f2i(float x) { return (int)truncf(x); }

// ---- index arithmetic --------------------------------------------------------------------------------
// Python's floor division by a positive constant (index maps use it; C's / truncates toward zero)
__host__ __device__ __forceinline__ long long floordiv(long long a, long long q) {
  long long d = a / q;
  return (a % q != 0 && a < 0) ? d - 1 : d;
}
// the row a group owns (with TM > 1: a tile of TM consecutive rows) and the lane it is, from the thread and
// block index
template <int G, int ROWS>
__host__ __device__ __forceinline__ void row_of(long long block, int tid, long long n_rows, long long& row,
                                                int& lane, bool& active) {
  row = block * ROWS + tid / G;
  lane = tid % G;
  active = row < n_rows;
  if (!active) row = n_rows - 1;  // an idle group still takes part in its reductions, on a valid row
}
// an index clamped into [0, n) (a clamped row or element of a micro-tile computes; its store is masked off)
__host__ __device__ __forceinline__ long long clamp_index(long long i, long long n) { return i < n ? i : n - 1; }
// a gather's run-time index into an axis of n: a negative one counts from the end; -1 when it is still outside
// [0, n) (the read then gives 0, as the reference evaluator's wrap_index: a kernel cannot raise)
__host__ __device__ __forceinline__ long long wrap_index(long long i, long long n) {
  const long long j = i < 0 ? i + n : i;
  return (j >= 0 && j < n) ? j : -1LL;
}
// the first element a lane takes, and the stride between its steps, along a row of L elements
template <int G, int V>
__host__ __device__ __forceinline__ long long first_elem(int lane) { return (long long)lane * V; }
template <int G, int V>
__host__ __device__ __forceinline__ long long elem_stride() { return (long long)G * V; }
// may the V elements at p (element e0 of a row of L) move as one vector? all inside the row, and p aligned
// to the vector's size (the address itself is tested: no alignment is asked of the caller's buffers)
template <typename T, int V>
__host__ __device__ __forceinline__ bool vec_ok(const T* p, long long e0, long long L) {
  return V > 1 && e0 + V <= L && reinterpret_cast<unsigned long long>(p) % (sizeof(T) * V) == 0;
}

// ---- vector loads and stores: V consecutive elements, one ld/st.global.vN when aligned -----------------
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack { T v[V]; };

// dst[k] = src[off + k] for e0 + k < L (others: zero); one vector load when vec_ok
template <typename T, int V>
__host__ __device__ __forceinline__ void load_vec(T (&dst)[V], const T* __restrict__ src, long long off, long long e0,
                                                  long long L) {
  if (vec_ok<T, V>(src + off, e0, L)) {
    const Pack<T, V> p = *reinterpret_cast<const Pack<T, V>*>(src + off);
#pragma unroll
    for (int k = 0; k < V; ++k) dst[k] = p.v[k];
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) dst[k] = (e0 + k < L) ? src[off + k] : T();
  }
}
// dst[k] = 0 (a gathered row outside its tensor)
template <typename T, int V>
__host__ __device__ __forceinline__ void zero_vec(T (&dst)[V]) {
#pragma unroll
  for (int k = 0; k < V; ++k) dst[k] = T();
}
template <typename T, int V>
__host__ __device__ __forceinline__ void store_vec(T* __restrict__ dst, long long off, long long e0, long long L,
                                                   const T (&src)[V]) {
  if (vec_ok<T, V>(dst + off, e0, L)) {
    Pack<T, V> p;
#pragma unroll
    for (int k = 0; k < V; ++k) p.v[k] = src[k];
    *reinterpret_cast<Pack<T, V>*>(dst + off) = p;
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k)
      if (e0 + k < L) dst[off + k] = src[k];
  }
}

// ---- reductions --------------------------------------------------------------------------------------
enum Op { SUM = 0, MAX = 1, MIN = 2 };
template <int OP, typename T>
__host__ __device__ __forceinline__ T combine(T a, T b) {
  return OP == SUM ? a + b : (OP == MAX ? nmax(a, b) : nmin(a, b));
}
template <int OP>
__host__ __device__ __forceinline__ bool combine(bool a, bool b) {
  return OP == MIN ? (a && b) : (a || b);  // numpy: sum and max of bools are "any", min is "all"
}
// the xor-butterfly partners of one step: lane l takes lane l ^ offset, offsets G/2, G/4, ..., 1
// (within one warp); the first offset of a group of G lanes
template <int G>
__host__ __device__ __forceinline__ int first_offset() { return (G > 32 ? 32 : G) / 2; }
// warps of a group whose partial sums meet in shared memory (one row per CTA when G > 32)
template <int G>
__host__ __device__ __forceinline__ int group_warps() { return G > 32 ? G / 32 : 1; }

// the host replay of group_reduce: the same butterfly over the lanes of each warp, then the warps'
// results combined in order 0, 1, ... as every lane reads them from shared memory
template <int G, int OP, typename T>
__host__ __device__ T host_group_reduce(T* vals) {
  const int W = G > 32 ? 32 : G;
  T tmp[32];
  for (int w = 0; w < group_warps<G>(); ++w) {
    T* v = vals + w * W;
    for (int off = first_offset<G>(); off > 0; off /= 2) {
      for (int l = 0; l < W; ++l) tmp[l] = combine<OP>(v[l], v[l ^ off]);
      for (int l = 0; l < W; ++l) v[l] = tmp[l];
    }
  }
  T r = vals[0];
  for (int w = 1; w < group_warps<G>(); ++w) r = combine<OP>(r, vals[w * W]);
  return r;
}

#ifdef __CUDACC__
template <typename T>
__device__ __forceinline__ T shfl_xor(T v, int off, int width) { return __shfl_xor_sync(0xffffffffu, v, off, width); }
__device__ __forceinline__ bool shfl_xor(bool v, int off, int width) {
  return __shfl_xor_sync(0xffffffffu, (int)v, off, width) != 0;
}
// every lane of the group gets op over the group's partials: warp butterfly, then (G > 32) shared memory
template <int G, int OP, typename T>
__device__ __forceinline__ T group_reduce(T v, T* red) {
  const int W = G > 32 ? 32 : G;
  for (int off = first_offset<G>(); off > 0; off /= 2) v = combine<OP>(v, shfl_xor(v, off, W));
  if (G > 32) {
    const int warp = threadIdx.x / 32;
    __syncthreads();  // red[] may still be read by the previous reduction
    if (threadIdx.x % 32 == 0) red[warp] = v;
    __syncthreads();
    v = red[0];
    for (int w = 1; w < group_warps<G>(); ++w) v = combine<OP>(v, red[w]);
  }
  return v;
}
#endif

}  // namespace polysat_simt
#endif  // POLYSAT_SIMT_CUH_
