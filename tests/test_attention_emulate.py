"""The flash-attention skeleton's index, fragment and softmax logic, run on the CPU (no GPU needed).

polysat_attention.cuh keeps every index computation and all per-thread softmax math in
``__host__ __device__`` helpers. tests/test_attention_emulator.cu (built here with nvcc as host code)
calls exactly those helpers and models only the hardware, from the PTX ISA: cp.async zero-fill,
ldmatrix.x4 (.trans) with a bank-conflict check, mma.m16n8k16, TMA's 128-byte swizzle, wgmma reading
its smem operands through descriptors (K-major and MN-major canonical layouts) and its A operand from
registers, quad shuffles. Checked here:

* the fragment maps (``acc_rc``: the m16n8 / wgmma accumulator element -> (row, column); ``a_src``: the
  accumulator pair each P A-fragment register is packed from) against Python models written from the
  PTX ISA figures (mma.m16n8k16 A and C/D, wgmma m64nNk16 A-in-registers and D);
* the causal / tail key-block bounds (``key_range`` in C++, ``key_blocks`` in Python) against brute force;
* whole problems (both skeletons, both algorithms, fp16 / bf16, causal, M != N, row and key tails,
  rows that see no key, negative and zero scales) against ``attention_reference``, the numpy meaning.
"""
from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polysat.backend.attention.render import scale_constants
from polysat.backend.attention.plan import key_blocks
from polysat.backend.attention.reference import reference as attention_reference
from polysat.backend.attention.spec import AttentionSpec
from polysat.backend.common.render import TEMPLATES
from polysat.backend.common.nvcc import nvcc_path
from polysat.ir.dtypes import DType, round_to

EMULATOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "test_attention_emulator.cu")
DTYPES = {"fp16": DType.fp16, "bf16": DType.bf16, "fp32": DType.fp32}
UNIT_ROUNDOFF = {DType.fp16: 2.0 ** -11, DType.bf16: 2.0 ** -8}
OUT_ULP = {DType.fp16: 2.0 ** -10, DType.bf16: 2.0 ** -7, DType.fp32: 0.0}


def build_emulator(source: str, folder) -> str:
    """source (a host emulator .cu, with tests/flash_emulator_host.cuh) built with nvcc into folder; warnings
    are left on (-w would hide them)."""
    exe = nvcc_path()
    assert exe, "nvcc is needed to build the host emulator"
    binary = str(folder / "emulate")
    build = subprocess.run([exe, "-std=c++17", "-O2", "-I", TEMPLATES, "-o", binary, source],
                           capture_output=True, text=True, check=False)
    assert build.returncode == 0, build.stderr[-4000:]
    return binary


@pytest.fixture(scope="module")
def emulator(tmp_path_factory) -> str:
    return build_emulator(EMULATOR, tmp_path_factory.mktemp("attn_emu"))


def _run(emulator: str, *args: str) -> str:
    p = subprocess.run([emulator, *args], capture_output=True, text=True, check=False, timeout=600,
                       env={**os.environ, "LC_ALL": "C"})
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return p.stdout


@pytest.fixture(scope="module")
def configs(emulator) -> list[dict]:
    out = []
    for line in _run(emulator, "configs").splitlines():
        i, sk, dt, ot, d, dv, bm, bn, causal, algo, sign = line.split()
        out.append({"id": int(i), "skeleton": sk, "dtype": DTYPES[dt], "out": DTYPES[ot], "d": int(d), "dv": int(dv),
                    "bm": int(bm), "bn": int(bn), "causal": causal == "1", "algo": algo, "sign": int(sign)})
    return out


# ---- PTX ISA fragment figures (9.7.14.5.8 mma.m16n8k16; 9.7.15.5.1.1.1 wgmma m64nNk16) -----------------
def mma_cd(lane: int, i: int) -> tuple[int, int]:
    """c_i / d_i (i < 4) of mma.m16n8k16 with .f32 accumulators: (row, col) in the 16 x 8 tile."""
    g, t = lane >> 2, lane % 4
    return (g if i < 2 else g + 8), t * 2 + (i & 1)


def mma_a(lane: int, i: int) -> tuple[int, int]:
    """a_i (i < 8) of mma.m16n8k16 .f16/.bf16: (row, col) in the 16 x 16 tile; register q holds a_2q, a_2q+1."""
    g, t = lane >> 2, lane % 4
    return (g if i in (0, 1, 4, 5) else g + 8), t * 2 + (i & 1) + (8 if i >= 4 else 0)


def wgmma_d(warp: int, lane: int, i: int) -> tuple[int, int]:
    """d_i of wgmma m64nNk16 .f32: warp w of the warpgroup holds rows 16w..16w+15."""
    g, t = lane >> 2, lane % 4
    return 16 * warp + g + 8 * ((i >> 1) & 1), (i >> 2) * 8 + 2 * t + (i & 1)


def wgmma_a(warp: int, lane: int, i: int) -> tuple[int, int]:
    """a_i of wgmma m64nNk16 with A in registers (.f16/.bf16): per warp, the m16n8k16 A layout."""
    r, c = mma_a(lane, i)
    return 16 * warp + r, c


def _maps(emulator):
    acc, asrc, pack = {}, {}, None
    for line in _run(emulator, "maps").splitlines():
        f = line.split()
        if f[0] == "acc":
            t, j, e, r, c = map(int, f[1:])
            acc[(t, j, e)] = (r, c)
        elif f[0] == "asrc":
            kk, q, j, e = map(int, f[1:])
            asrc[(kk, q)] = (j, e)
        else:
            pack = tuple(float(x) for x in f[1:])
    return acc, asrc, pack


def check_fragment_maps(acc, asrc) -> None:
    for (t, j, e), (r, c) in acc.items():
        mr, mc = mma_cd(t, e)
        assert (r, c) == (mr, 8 * j + mc), ("acc_rc vs mma C/D", t, j, e)
        for w in range(4):  # the same element of a wgmma accumulator, per warp
            assert (16 * w + r, c) == wgmma_d(w, t, 4 * j + e), ("acc_rc vs wgmma D", w, t, j, e)
    for (kk, q), (j, e) in asrc.items():
        for t in range(32):
            for h in range(2):  # low half = a_2q, high half = a_2q+1 (columns are keys 16kk ..)
                r, c = acc[(t, j, e + h)]
                ar, ac = mma_a(t, 2 * q + h)
                assert (r, c) == (ar, 16 * kk + ac), ("a_src vs mma A", kk, q, t, h)
                for w in range(4):
                    assert (16 * w + r, c) == (wgmma_a(w, t, 2 * q + h)[0], 16 * kk + wgmma_a(w, t, 2 * q + h)[1]), \
                        ("a_src vs wgmma A", w, kk, q, t, h)


def test_fragment_maps_match_the_ptx_figures(emulator):
    acc, asrc, pack = _maps(emulator)
    assert len(acc) == 32 * 8 * 4 and len(asrc) == 16
    check_fragment_maps(acc, asrc)
    assert pack == (1.0, 2.0, 1.0, 2.0)  # the lower column sits in the low 16 bits


def test_a_wrong_fragment_map_is_caught(emulator):
    acc, asrc, _ = _maps(emulator)
    swapped = {k: (2 * k[0] + (k[1] & 1), 2 * (k[1] >> 1)) for k in asrc}  # rows / k-halves confused
    with pytest.raises(AssertionError):
        check_fragment_maps(acc, swapped)


# ---- key-block bounds -----------------------------------------------------------------------------------
def visible(i: int, j: int, m: int, n: int, causal: bool) -> bool:
    return j < n and (not causal or j <= i + (n - m))


def brute_blocks(m0: int, rows: int, bn: int, m: int, n: int, causal: bool) -> tuple[int, int]:
    """(1 + the last block holding a key a stored row sees, the first block holding a masked (stored row, key))."""
    stored = range(m0, min(m0 + rows, m))
    nb = -(-n // bn)
    last = max((jb for jb in range(nb) for i in stored for j in range(jb * bn, (jb + 1) * bn)
                if visible(i, j, m, n, causal)), default=-1)
    count = last + 1
    first = next((jb for jb in range(count) if any(not visible(i, j, m, n, causal) for i in stored
                                                   for j in range(jb * bn, (jb + 1) * bn))), count)
    return count, first


def test_key_range_matches_brute_force(emulator):
    lines = _run(emulator, "ranges").splitlines()
    assert len(lines) > 4000
    for line in lines:
        causal, rows, bn, m, n, m0, count, first = map(int, line.split())
        assert (count, first) == brute_blocks(m0, rows, bn, m, n, bool(causal)), line


@settings(max_examples=200)
@given(st.integers(1, 300), st.integers(1, 300), st.sampled_from([64, 128]), st.sampled_from([64, 128]), st.booleans(),
       st.data())
def test_python_key_blocks_matches_brute_force(m, n, bm, bn, causal, data):
    tm = data.draw(st.integers(0, (m - 1) // bm))
    assert key_blocks(tm * bm, bm, bn, m, n, causal) == brute_blocks(tm * bm, bm, bn, m, n, causal)


# ---- whole problems against the numpy meaning -------------------------------------------------------------
def emulate(emulator: str, cfg: dict, q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, tmp,
            spec: "AttentionSpec | None" = None) -> np.ndarray:
    """O of the emulated kernel; spec with cols: Q, K, V [rows, ld] column windows, O [m, H*dv]."""
    cols = spec.cols if spec is not None else ()
    b, m, n = (spec.batch[0], spec.m, spec.n) if cols else (q.shape[0], q.shape[1], k.shape[1])
    sign, c = scale_constants(scale)
    assert sign == cfg["sign"]
    src, dst = tmp / f"in_{cfg['id']}.bin", tmp / f"out_{cfg['id']}.bin"
    with open(src, "wb") as f:
        np.array([cfg["id"], b, m, n], np.int32).tofile(f)
        np.array([c], np.float32).tofile(f)
        for x in (q, k, v):
            np.ascontiguousarray(x, np.float32).tofile(f)
    assert _run(emulator, "run", str(src), str(dst), *(str(x) for c in cols for x in c)).strip() == "OK"
    return np.fromfile(dst, np.float32).reshape((m, cols[3][1]) if cols else (b, m, cfg["dv"]))


def windows(b: int, d: int, dv: int) -> tuple:
    """Q the second piece of a [m, 64 + b*d] matrix, K and V the two pieces of a fused [n, b*(d + dv)] one,
    O [m, b*dv]: (offset, ld, head stride) of each."""
    return ((64, 64 + b * d, d), (0, b * (d + dv), d), (b * d, b * (d + dv), dv), (0, b * dv, dv))


def check_problem(emulator, cfg, b, m, n, seed, tmp, cols: bool = False):
    rng = np.random.default_rng(seed)
    dt = cfg["dtype"]
    d, dv = cfg["d"], cfg["dv"]
    scale = {1: 2.0 / np.sqrt(d), -1: -1.5 / np.sqrt(d), 0: 0.0}[cfg["sign"]]
    spec = AttentionSpec("emu", m, n, d, dv, batch=(b,), causal=cfg["causal"], scale=float(scale), in_dtype=dt,
                         p_dtype=dt, out_dtype=cfg["out"], cols=windows(b, d, dv) if cols else ())
    x = {name: np.asarray(round_to(rng.uniform(-1, 1, size=shape).astype(np.float32), dt)).astype(np.float32)
         for name, shape in spec.shapes().items() if name != "O"}
    want = attention_reference(spec, x).astype(np.float64)
    got = emulate(emulator, cfg, x["Q"], x["K"], x["V"], spec.scale, tmp, spec).astype(np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(want)), "rows without a visible key must be NaN, the others not"
    ok = ~np.isnan(want)
    u = UNIT_ROUNDOFF[dt]
    # online: P rounded before normalisation, the reference after; each is within u*max|V| of the exact
    # O. 2-pass: the same rounding point, apart from rare one-ulp flips where exp2 and numpy's exp differ.
    slack = (2.0 if cfg["algo"] == "online" else 1.0) * u * np.abs(x["V"]).max()
    tol = 1e-3 + 1e-3 * np.abs(want) + OUT_ULP[cfg["out"]] * np.abs(want) + slack
    bad = (np.abs(got - want) > tol) & ok
    assert not bad.any(), (f"{cfg}: {bad.sum()} of {ok.sum()} differ; first at {np.argwhere(bad)[0]}: "
                           f"{got[bad][0]} vs {want[bad][0]}")
    return np.abs(got - want)[ok].max() if ok.any() else 0.0


# shapes with tails in rows and keys, M != N both ways, several batch entries, causal rows without keys (m > n)
SHAPES = [(2, 70, 70), (1, 130, 200), (1, 200, 77), (1, 33, 300), (1, 1, 1), (3, 64, 128)]


@pytest.mark.parametrize("cid", range(18))
def test_emulated_kernel_matches_reference(emulator, configs, cid, tmp_path):
    cfg = configs[cid]
    for i, (b, m, n) in enumerate(SHAPES):
        check_problem(emulator, cfg, b, m, n, seed=100 * cid + i, tmp=tmp_path)


@pytest.mark.parametrize("cid", range(18))
def test_emulated_kernel_on_column_windows_matches_reference(emulator, configs, cid, tmp_path):
    """Q, K and V heads as column windows of row-major matrices (a fused Q/K/V projection's pieces), O with
    the heads interleaved."""
    for i, (b, m, n) in enumerate([(2, 70, 70), (3, 33, 80), (2, 80, 47)]):
        check_problem(emulator, configs[cid], b, m, n, seed=7 * cid + i, tmp=tmp_path, cols=True)


@settings(max_examples=12)
@given(st.integers(0, 17), st.integers(1, 2), st.integers(1, 260), st.integers(1, 260), st.integers(0, 2 ** 31))
def test_emulated_kernel_on_generated_shapes(emulator, configs, tmp_path_factory, cid, b, m, n, seed):
    check_problem(emulator, configs[cid], b, m, n, seed, tmp_path_factory.mktemp("gen"))


def test_the_configurations_cover_both_skeletons_and_algorithms(configs):
    seen = {(c["skeleton"], c["algo"], c["causal"], c["dtype"]) for c in configs}
    for sk in ("sm80", "sm90"):
        for algo in ("online", "2pass"):
            assert any(s[0] == sk and s[1] == algo for s in seen)
        assert {s[3] for s in seen if s[0] == sk} == {DType.fp16, DType.bf16}
        assert {s[2] for s in seen if s[0] == sk} == {False, True}
    assert {c["sign"] for c in configs} == {-1, 0, 1}
    assert any(c["d"] != c["dv"] for c in configs)
    # head dims: 64 and 128 on both skeletons (and D = 256 on sm90: four 64-column TMA boxes); on sm80 also
    # small, wide, padded (not multiples of 16 / of 8: narrower copies, scalar stores) and D != Dv across
    # panel widths
    assert {c["d"] for c in configs if c["skeleton"] == "sm90"} == {64, 128, 256}
    assert {c["d"] for c in configs if c["skeleton"] == "sm80"} == {7, 8, 20, 32, 64, 96, 100, 128, 256}
