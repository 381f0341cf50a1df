"""The attention skeleton's new index helpers run on the host (nvcc builds polysat_attention.cuh as host code):

* ``pro_rows``: every thread of a CTA in turn fills a [ROWS][COLS] tile of head h from a prologue's ``at(row, h,
  c)``: read back at ``tile_offset``, each element is at(row0 + r, h, c), and 0 for rows past the limit and the
  padding columns past the head dim (numpy's tile, built here independently);
* ``scores`` with a mask tensor (``MK``) and a score program (``FN``): a key the mask hides, a key past N and a
  query row past M read -inf, every other score is FN's value (numpy's where over the same fragment map);
* ``rows_at`` of grouped-query heads: query head b reads KV head b / rep.
"""
from __future__ import annotations

import subprocess

import numpy as np
import pytest

from polysat.backend.common.nvcc import nvcc_path
from polysat.backend.common.render import TEMPLATES

SOURCE = r"""
#include "polysat_attention.cuh"
#include <cstdio>
#include <cmath>
#include <vector>
using namespace polysat;
using namespace polysat::attn;

struct At {  // a prologue whose value names its coordinates (exact in fp32)
  static constexpr bool on = true;
  POLYSAT_HD float at(int row, int h, int c) const { return float(row * 4096 + h * 256 + c + 1); }
};
struct Fn {  // a score program: 2 v + 1
  static constexpr bool on = true;
  POLYSAT_HD static float f(float v) { return 2.0f * v + 1.0f; }
};
struct Mask {  // keys hidden where (i + 2 j) % 3 == 0, as a [M][LD] byte tensor would say
  static constexpr bool on = true;
  const unsigned char* t;
  int ld;
  POLYSAT_HD bool keep(int i, int j) const { return t[i * ld + j] != 0; }
};

template <int ROWS, int COLS, int THREADS>
static void tile(int h, int row0, int row_lim, int cols) {
  std::vector<float> t(ROWS * COLS, NAN);
  for (int tid = 0; tid < THREADS; ++tid) pro_rows<float, ROWS, COLS, THREADS>(t.data(), At{}, h, row0, row_lim, cols, tid);
  printf("tile %d %d %d %d %d %d\n", ROWS, COLS, h, row0, row_lim, cols);
  for (int r = 0; r < ROWS; ++r)
    for (int c = 0; c < COLS; ++c) printf("%.0f%c", t[tile_offset<ROWS, COLS>(r, c)], c + 1 == COLS ? '\n' : ' ');
}

int main() {
  tile<64, 32, 128>(3, 0, 64, 32);
  tile<64, 144, 128>(1, 128, 150, 136);  // head dim 136 padded to 144, a row tail
  tile<32, 64, 96>(0, 32, 40, 64);
  const int M = 20, N = 27, LD = 32;
  std::vector<unsigned char> m(M * LD);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < LD; ++j) m[i * LD + j] = (i + 2 * j) % 3 != 0;
  const Mask mk{m.data(), LD};
  for (int row0 : {0, 16}) {  // a warp's 16 query rows; rows >= M on the second
    for (int lane = 0; lane < 32; ++lane) {
      float s[4][4], mx[2] = {neg_inf(), neg_inf()};
      for (int j = 0; j < 4; ++j)
        for (int e = 0; e < 4; ++e) s[j][e] = float(lane * 16 + j * 4 + e);
      scores<4, 1, true, false, Fn, Mask>(s, mx, lane, row0, 24, M, N, mk);  // keys 24..55: a key tail at N
      for (int j = 0; j < 4; ++j)
        for (int e = 0; e < 4; ++e) {
          int r, c;
          acc_rc(lane, j, e, r, c);
          printf("score %d %d %d %g\n", row0 + r, 24 + c, lane * 16 + j * 4 + e, s[j][e]);
        }
    }
  }
  for (int b = 0; b < 8; ++b) {
    const RowsAt a = rows_at(b / 4, 50, 64, 4096, 6144, 128);
    printf("rows %d %lld %lld\n", b, a.base, a.ld);
  }
  return 0;
}
"""


@pytest.fixture(scope="module")
def lines(tmp_path_factory):
    exe = nvcc_path()
    assert exe, "nvcc is needed to build the host emulation"
    d = tmp_path_factory.mktemp("attn_pro")
    (d / "emulate.cu").write_text(SOURCE)
    build = subprocess.run([exe, "-std=c++17", "-O1", "-I", TEMPLATES, "-o", str(d / "emulate"), str(d / "emulate.cu")],
                           capture_output=True, text=True, check=False, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    run = subprocess.run([str(d / "emulate")], capture_output=True, text=True, check=True, timeout=300)
    return run.stdout.splitlines()


def test_prologue_tiles_hold_at_row_head_col_with_zero_tails(lines):
    heads = [i for i, x in enumerate(lines) if x.startswith("tile ")]
    assert len(heads) == 3
    for i in heads:
        rows, cols, h, row0, lim, width = map(int, lines[i].split()[1:])
        got = np.array([[float(v) for v in lines[i + 1 + r].split()] for r in range(rows)])
        r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
        want = np.where((row0 + r < lim) & (c < width), (row0 + r) * 4096 + h * 256 + c + 1, 0.0)
        np.testing.assert_array_equal(got, want, err_msg=lines[i])


def test_masked_scores_take_the_program_and_hide_keys(lines):
    rows = np.array([[float(v) for v in x.split()[1:]] for x in lines if x.startswith("score ")])
    i, j, v, got = rows.T
    m, n = 20, 27
    keep = (i < m) & (j < n) & ((i + 2 * j) % 3 != 0)
    want = np.where(keep, 2 * v + 1, -np.inf)
    np.testing.assert_array_equal(got, want)
    assert keep.any() and (~keep).any()


def test_grouped_query_heads_share_a_kv_window(lines):
    got = [tuple(map(int, x.split()[1:])) for x in lines if x.startswith("rows ")]
    assert got == [(b, 4096 + (b // 4) * 128, 6144) for b in range(8)]
