"""The softmax_scores kernel (the sm80 flash skeleton in STORE_P mode) run on the CPU (no GPU needed).

tests/test_scores_emulator.cu (built here with nvcc as host code) calls the kernel's own
``__host__ __device__`` helpers (key ranges, masking, the two-pass statistics, normalisation, ``p_pair``:
each (lane, register pair) of the S accumulator -> (row, col) of P, predicated on the M and N tails, and
``unseen_p`` for the key blocks past a CTA's diagonal) over the hardware models of the attention emulator,
and fails when an element of P is stored twice or never. Here the stored P is compared with
``scores_reference``, the numpy meaning, on shapes with row and key tails, M != N both ways (causal rows
that see no key are NaN), odd N (scalar stores), several batch entries, positive, negative and zero scales.
"""
from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

from polysat.backend.attention.render import scale_constants
from polysat.backend.scores.reference import reference as scores_reference
from polysat.backend.scores.spec import ScoresSpec
from polysat.ir.dtypes import DType, round_to

HERE = os.path.dirname(os.path.abspath(__file__))
EMULATOR = os.path.join(HERE, "test_scores_emulator.cu")
# the attention emulator's build and run helpers (the two emulators share flash_emulator_host.cuh)
_spec = importlib.util.spec_from_file_location("polysat_test_attention_emulate", os.path.join(HERE, "test_attention_emulate.py"))
_attention_emulate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_attention_emulate)
DTYPES = _attention_emulate.DTYPES
ULP = {DType.fp16: 2.0 ** -10, DType.bf16: 2.0 ** -7, DType.fp32: 0.0}  # P's rounding step at 1


@pytest.fixture(scope="module")
def emulator(tmp_path_factory) -> str:
    return _attention_emulate.build_emulator(EMULATOR, tmp_path_factory.mktemp("scores_emu"))


_run = _attention_emulate._run


@pytest.fixture(scope="module")
def configs(emulator) -> list[dict]:
    out = []
    for line in _run(emulator, "configs").splitlines():
        i, dt, pt, d, bm, bn, causal, sign = line.split()
        out.append({"id": int(i), "dtype": DTYPES[dt], "p": DTYPES[pt], "d": int(d), "bm": int(bm), "bn": int(bn),
                    "causal": causal == "1", "sign": int(sign)})
    return out


def check_problem(emulator, cfg, b, m, n, seed, tmp):
    rng = np.random.default_rng(seed)
    dt, d = cfg["dtype"], cfg["d"]
    scale = {1: 2.0 / np.sqrt(d), -1: -1.5 / np.sqrt(d), 0: 0.0}[cfg["sign"]]
    spec = ScoresSpec("emu", m, n, d, batch=(b,), causal=cfg["causal"], scale=float(scale), in_dtype=dt,
                      p_dtype=cfg["p"])
    x = {name: np.asarray(round_to(rng.uniform(-1, 1, size=shape).astype(np.float32), dt)).astype(np.float32)
         for name, shape in spec.shapes().items() if name != spec.p}
    sign, c = scale_constants(spec.scale)
    assert sign == cfg["sign"]
    src, dst = tmp / f"in_{cfg['id']}.bin", tmp / f"out_{cfg['id']}.bin"
    with open(src, "wb") as f:
        np.array([cfg["id"], b, m, n], np.int32).tofile(f)
        np.array([c], np.float32).tofile(f)
        for t in (x["Q"], x["K"]):
            np.ascontiguousarray(t, np.float32).tofile(f)
    assert _run(emulator, "run", str(src), str(dst)).strip() == "OK"
    got = np.fromfile(dst, np.float32).reshape(b, m, n).astype(np.float64)
    want = scores_reference(spec, x).astype(np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(want)), "rows without a visible key must be NaN, the others not"
    ok = ~np.isnan(want)
    # the same rounding point as the reference; exp2 vs numpy's exp may flip P's last bit
    tol = 1e-3 + 1e-3 * np.abs(want) + ULP[cfg["p"]] * np.abs(want)
    bad = (np.abs(got - want) > tol) & ok
    assert not bad.any(), (f"{cfg} {b}x{m}x{n}: {bad.sum()} of {ok.sum()} differ; first at {np.argwhere(bad)[0]}: "
                           f"{got[bad][0]} vs {want[bad][0]}")
    if cfg["causal"]:
        i, j = np.arange(m)[:, None], np.arange(n)[None, :]
        hidden = np.broadcast_to(j > i + (n - m), (b, m, n)) & ok
        assert (got[hidden] == 0).all(), "masked keys (stored without an MMA past the diagonal too) are 0"


# row and key tails, M != N both ways (causal rows without keys: m > n), odd N, several batch entries
SHAPES = [(2, 70, 70), (1, 130, 200), (1, 200, 77), (1, 33, 300), (1, 1, 1), (3, 64, 128), (2, 17, 9)]


@pytest.mark.parametrize("cid", range(9))
def test_emulated_kernel_stores_the_reference_p(emulator, configs, cid, tmp_path):
    for i, (b, m, n) in enumerate(SHAPES):
        check_problem(emulator, configs[cid], b, m, n, seed=100 * cid + i, tmp=tmp_path)


def test_the_configurations_cover_the_kind(configs):
    assert {c["dtype"] for c in configs} == {DType.fp16, DType.bf16}
    assert {c["causal"] for c in configs} == {False, True}
    assert {c["d"] for c in configs} == {8, 20, 64, 96, 128, 256} and {c["bn"] for c in configs} == {32, 64, 128}
    assert {c["sign"] for c in configs} == {-1, 0, 1}
    assert {c["p"] for c in configs} == {DType.fp16, DType.bf16, DType.fp32}
