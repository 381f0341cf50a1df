// The one hardware model of mma.m16n8k16.row.col with f32 accumulation the host emulators share
// (tests/test_backend_emulate.py, tests/flash_emulator_host.cuh): fragments per PTX ISA 9.7.14.5.8; and of
// mma.m16n8k8.row.col .tf32 (tests/test_gemm_tf32_emulate.py).
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

// the tensor core reads a .tf32 register's 19 upper bits (sign, exponent, 10 mantissa bits)
static float tf32_bits(float x) {
  union { float f; unsigned u; } v{x};
  v.u &= 0xffffe000u;
  return v.f;
}

// mma.m16n8k8.row.col f32 .tf32 (PTX ISA, fragments of m16n8k8 for .tf32): a[t][reg], b[t][reg], d[t][4];
// g = t / 4, q = t % 4: a0 (g, q), a1 (g + 8, q), a2 (g, q + 4), a3 (g + 8, q + 4); b0 (k q, n g), b1 (k q + 4, n g)
static void mma1688_tf32(float (&d)[32][4], const float (&a)[32][4], const float (&b)[32][2]) {
  float A[16][8], B[8][8], D[16][8];
  for (int t = 0; t < 32; ++t) {
    const int g = t / 4, q = t % 4;
    A[g][q] = tf32_bits(a[t][0]);
    A[g + 8][q] = tf32_bits(a[t][1]);
    A[g][q + 4] = tf32_bits(a[t][2]);
    A[g + 8][q + 4] = tf32_bits(a[t][3]);
    B[q][g] = tf32_bits(b[t][0]);
    B[q + 4][g] = tf32_bits(b[t][1]);
    D[g][2 * q] = d[t][0]; D[g][2 * q + 1] = d[t][1]; D[g + 8][2 * q] = d[t][2]; D[g + 8][2 * q + 1] = d[t][3];
  }
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      float s = D[i][j];
      for (int k = 0; k < 8; ++k) s += A[i][k] * B[k][j];  // tf32 x tf32 is exact in fp32
      D[i][j] = s;
    }
  for (int t = 0; t < 32; ++t) {
    const int g = t / 4, q = t % 4;
    d[t][0] = D[g][2 * q]; d[t][1] = D[g][2 * q + 1]; d[t][2] = D[g + 8][2 * q]; d[t][3] = D[g + 8][2 * q + 1];
  }
}
