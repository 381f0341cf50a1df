"""The sm80 skeleton's index logic, run on the CPU against a model of the hardware (no GPU needed).

polysat_gemm.cuh keeps every index computation of the sm80 path in ``__host__ __device__`` helpers
(tile_origin, copy_coord, swz_offset, frag_coord, b_pick, acc_coord, elem_offset). This test compiles a host
program (tests/sm80_host_emulator.cuh) that calls exactly those helpers and models only what the hardware does, from the PTX ISA:
cp.async (zero-fill when predicated off), ldmatrix.x4 (.trans), and mma.m16n8k16.row.col fragment
layouts; it also checks that every ldmatrix phase is free of bank conflicts. Small integer data make every sum exact, so the emulated GEMM must equal the true product
bit for bit, for both operand majors, several tiles and warp grids, every vector width and odd shapes.
"""
import os
import subprocess

from polysat.backend.common.render import TEMPLATES
from polysat.backend.common.nvcc import nvcc_path

EMULATOR = r"""
#include "polysat_gemm.cuh"
#include "sm80_host_emulator.cuh"
#include <cstdio>
#include <cstdlib>
#include <vector>
using namespace polysat;

template <int BM, int BN, int BK, int WM, int WN, bool AK, bool BKM, int VA, int VB>
static void run(int M, int N, int K) {
  std::vector<float> A(M * K), B(K * N), C(M * N, -777.0f);
  srand(M * 7 + N * 13 + K);
  for (auto& x : A) x = float(rand() % 7 - 3);
  for (auto& x : B) x = float(rand() % 7 - 3);
  auto a_at = [&](int m, int k) { return AK ? A[m * K + k] : A[k * M + m]; };
  auto b_at = [&](int k, int n) { return BKM ? B[n * K + k] : B[k * N + n]; };
  gemm_tiles<BM, BN, BK, WM, WN, AK, BKM, VA, VB>(A, B, C, M, N, K, 1, {0, 0, 0, 0, N, 0});
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      float s = 0.0f;
      for (int k = 0; k < K; ++k) s += a_at(m, k) * b_at(k, n);
      if (C[m * N + n] != s) {
        std::printf("FAIL BM=%d BN=%d BK=%d W=%dx%d AK=%d BK=%d VA=%d VB=%d M=%d N=%d K=%d at (%d,%d): %g != %g\n",
                    BM, BN, BK, WM, WN, AK, BKM, VA, VB, M, N, K, m, n, C[m * N + n], s);
        std::exit(1);
      }
    }
}

int main() {
  run<64, 64, 32, 2, 2, true, false, 8, 8>(130, 72, 80);      // A row-major, B row-major ([K, N])
  run<64, 64, 64, 2, 2, false, true, 8, 8>(72, 136, 136);     // A col-major, B col-major
  run<128, 128, 32, 2, 2, true, true, 8, 8>(200, 136, 40);    // 64x64 warp tiles
  run<128, 128, 64, 2, 4, false, false, 8, 8>(136, 264, 72);  // 64x32 warp tiles
  run<128, 64, 32, 2, 2, true, false, 2, 4>(131, 100, 98);    // 4- and 8-byte copies
  run<64, 128, 32, 2, 2, false, false, 1, 1>(77, 93, 101);    // scalar copies, nothing aligned
  run<64, 64, 32, 2, 2, true, true, 1, 1>(5, 3, 7);           // a fraction of one tile
  std::printf("OK\n");
  return 0;
}
"""


def test_sm80_index_logic_matches_hardware_model(tmp_path):
    exe = nvcc_path()
    assert exe, "nvcc is needed to build the host emulator"
    src = tmp_path / "emulate.cu"
    src.write_text(EMULATOR)
    binary = tmp_path / "emulate"
    build = subprocess.run([exe, "-std=c++17", "-O1", "-I", TEMPLATES, "-I", os.path.dirname(__file__),
                            "-o", str(binary), str(src)],
                           capture_output=True, text=True, check=False)
    assert build.returncode == 0, build.stderr[-4000:]
    run = subprocess.run([str(binary)], capture_output=True, text=True, check=False, timeout=300,
                         env={**os.environ, "LC_ALL": "C"})
    assert run.returncode == 0 and run.stdout.strip() == "OK", run.stdout + run.stderr
