"""The sm80 skeleton's fp32 path (3xTF32) run on the CPU against a model of the hardware (no GPU needed).

fp32 operands are staged as fp32 tiles (cp.async of up to 4 elements, ``swz_offset32``), read per k8 slice in
the m16n8k8 .tf32 fragment order (``frag_tf32``), split into a big and a small tf32 part (``split_tf32``) and
multiplied by three mma.m16n8k8 .tf32 (small x big, big x small, big x big). The host program
(tests/sm80_host_emulator.cuh ``gemm_tiles<..., F32>``) calls exactly the template's helpers and models the
hardware from the PTX ISA: the tensor core reads a .tf32 register's upper 19 bits, and every 4-byte fragment
load is checked for bank conflicts.

- Small integers are tf32-exact, so the emulated GEMM must equal the true product bit for bit, for both
  operand majors, several tiles and warp grids, 16-, 8- and 4-byte copies and odd shapes.
- Random normal fp32 data: the error against a float64 product must stay within fp32's own (a plain fp32
  dot product's bound, ``K * 2^-24`` of sum |a||b|); one tf32 MMA (the big parts alone) must not, so the
  bound tells the three-product split from a plain TF32 GEMM.
- ``tf32_rna`` rounds as ``cvt.rna.tf32.f32`` (nearest, ties away from zero) on hand-picked bit patterns.
"""
import importlib.util
import pathlib

_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)

EMULATOR = r"""
#include "polysat_gemm.cuh"
#include "sm80_host_emulator.cuh"
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
using namespace polysat;

// the emulated GEMM of A [M, K] (AK) or [K, M], B [N, K] (BKM) or [K, N]; returns the worst error against float64
// in units of sum_k |a b| (the scale of a dot product's rounding), and checks integer data bit for bit
template <int BM, int BN, int BK, int WM, int WN, bool AK, bool BKM, int VA, int VB>
static double run(int M, int N, int K, bool integers, double* big_only = nullptr) {
  std::vector<float> A(M * K), B(K * N), C(M * N, -777.0f);
  std::mt19937 gen(M * 7 + N * 13 + K);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& x : A) x = integers ? float(int(gen() % 7) - 3) : normal(gen);
  for (auto& x : B) x = integers ? float(int(gen() % 7) - 3) : normal(gen);
  auto a_at = [&](int m, int k) { return AK ? A[m * K + k] : A[k * M + m]; };
  auto b_at = [&](int k, int n) { return BKM ? B[n * K + k] : B[k * N + n]; };
  gemm_tiles<BM, BN, BK, WM, WN, AK, BKM, VA, VB, true>(A, B, C, M, N, K, 1, {0, 0, 0, 0, N, 0});
  double worst = 0.0, worst_big = 0.0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double s = 0.0, mag = 0.0, big = 0.0;
      for (int k = 0; k < K; ++k) {
        s += double(a_at(m, k)) * b_at(k, n);
        mag += std::fabs(double(a_at(m, k)) * b_at(k, n));
        big += double(tf32_rna(a_at(m, k))) * tf32_rna(b_at(k, n));
      }
      if (integers && C[m * N + n] != float(s)) {
        std::printf("FAIL BM=%d BN=%d BK=%d W=%dx%d AK=%d BK=%d VA=%d VB=%d M=%d N=%d K=%d at (%d,%d): %g != %g\n",
                    BM, BN, BK, WM, WN, AK, BKM, VA, VB, M, N, K, m, n, C[m * N + n], s);
        std::exit(1);
      }
      if (mag > 0) {
        worst = std::fmax(worst, std::fabs(C[m * N + n] - s) / mag);
        worst_big = std::fmax(worst_big, std::fabs(big - s) / mag);
      }
    }
  if (big_only) *big_only = worst_big;
  return worst;
}

int main() {
  // rounding: 1 + 2^-11 (half an ulp of tf32) ties away to 1 + 2^-10; just below it rounds down; negatives mirror
  const unsigned cases[][2] = {{0x3f801000u, 0x3f802000u}, {0x3f800fffu, 0x3f800000u}, {0xbf801000u, 0xbf802000u},
                               {0x3f803000u, 0x3f804000u}, {0x7f800000u, 0x7f800000u}, {0x00000000u, 0x00000000u}};
  for (auto& c : cases)
    if (f32_bits(tf32_rna(bits_f32(c[0]))) != c[1]) {
      std::printf("FAIL tf32_rna(%08x) = %08x, want %08x\n", c[0], f32_bits(tf32_rna(bits_f32(c[0]))), c[1]);
      return 1;
    }
  run<64, 64, 32, 2, 2, true, false, 4, 4>(130, 72, 80, true);      // A row-major, B row-major ([K, N])
  run<64, 64, 64, 2, 2, false, true, 4, 4>(72, 136, 136, true);     // A col-major, B col-major
  run<128, 64, 32, 2, 2, true, true, 4, 4>(200, 136, 40, true);     // 64x32 warp tiles
  run<64, 128, 32, 2, 2, false, false, 4, 4>(136, 264, 72, true);   // 32x64 warp tiles
  run<128, 64, 32, 2, 2, true, false, 2, 4>(131, 100, 98, true);    // 8- and 16-byte copies
  run<64, 64, 32, 2, 2, false, false, 1, 1>(77, 93, 101, true);     // scalar copies, nothing aligned
  run<64, 64, 32, 2, 2, true, true, 1, 1>(5, 3, 7, true);           // a fraction of one tile
  const int K = 512;
  double big = 0.0;
  const double err = run<64, 64, 32, 2, 2, true, false, 4, 4>(96, 80, K, false, &big);
  const double bound = K * std::ldexp(1.0, -24);
  std::printf("3xTF32 %.3g, one TF32 product %.3g, fp32 bound %.3g\n", err, big, bound);
  if (!(err <= bound)) { std::printf("FAIL 3xTF32 error %.3g above fp32's %.3g\n", err, bound); return 1; }
  if (!(big > bound)) { std::printf("FAIL the bound does not tell one TF32 product (%.3g) apart\n", big); return 1; }
  std::printf("OK\n");
  return 0;
}
"""


def test_sm80_fp32_path_matches_hardware_model(tmp_path):
    lines = oracle.run_host_emulator(EMULATOR, tmp_path, "emulate_tf32")
    assert [x for x in lines if x][-1] == "OK", lines
