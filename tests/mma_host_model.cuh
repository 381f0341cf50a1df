// The one hardware model of mma.m16n8k16.row.col with f32 accumulation the host emulators share
// (tests/test_backend_emulate.py, tests/flash_emulator_host.cuh): fragments per PTX ISA 9.7.14.5.8.
#pragma once

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
