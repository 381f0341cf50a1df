"""The two-region form of attention on a GPU: softmax_scores (P written to device memory) then the GEMM
P V, through ``--target cuda``'s stages and through the Python API, against CPU playback and the numpy
meaning on shapes with row and key tails (rtol = atol = 1e-3). Needs a CUDA GPU (marker ``gpu``).
"""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

from polysat.backend import kinds
from polysat.runtime import regions as device_run
from polysat.backend.common.gpu import cuda_available, device
from polysat.backend.scores.reference import reference as scores_reference
from polysat.backend.scores.spec import ScoresSpec
from polysat.ir.dtypes import DType, round_to
from polysat.ir.playback import playback
from polysat.pipeline import Compilation

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible")]

_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)


ULP = {"fp16": 2.0 ** -10, "bf16": 2.0 ** -7, "fp32": 2.0 ** -23}


def _close(got, want, dt):
    """rtol = atol = 1e-3, plus one ulp of the stored type: the kernel's exp2 and numpy's exp may round
    the last bit of an element the other way (bf16's ulp alone exceeds 1e-3 relative)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    tol = 1e-3 + (1e-3 + ULP[dt]) * np.abs(want[ok])
    assert np.all(np.abs(got[ok] - want[ok]) <= tol), float(np.max(np.abs(got[ok] - want[ok]) - tol))


@pytest.mark.parametrize("dt,causal,d,m,n", [("fp16", True, 64, 130, 77), ("bf16", False, 128, 70, 201),
                                             ("fp16", False, 128, 64, 63), ("bf16", True, 64, 33, 300)])
def test_both_regions_run_on_cuda_like_playback(dt, causal, d, m, n):
    doc = oracle.model({"Q": (dt, ["B", "H", "M", d]), "K": (dt, ["B", "H", "N", d]), "V": (dt, ["B", "H", "N", d])},
                       [oracle.node("Attention", ["Q", "K", "V"], "O", causal=causal)], ["O"], {"O": {"dtype": dt}})
    regions = Compilation(doc, cost="size").regions
    assert [k.name for k, _ in map(kinds.bind, regions)] == ["softmax_scores", "gemm"]
    rng = np.random.default_rng(d + m)
    dtype = DType(dt)
    x = {name: np.asarray(round_to(rng.uniform(-1, 1, size=(2, 3, n if name != "Q" else m, d)).astype(np.float32),
                                   dtype)).astype(dtype.np) for name in ("Q", "K", "V")}
    want = playback(regions, x, keep_all=True)
    got = device_run.run_cuda(regions, x)
    _close(got["O"], want["O"], dt)
    # P itself, through the kind's Python API
    p_name = regions[0].outputs[0].name
    from polysat.backend.scores.launch import run as run_scores
    spec = kinds.bind(regions[0])[1].spec
    p = run_scores(spec, {"Q": x["Q"], "K": x["K"]}, {"B": 2, "H": 3, "M": m, "N": n})
    _close(p, want[p_name], dt)


@pytest.mark.parametrize("arch_plan", ["best", "bn128"])
def test_run_scores_matches_the_reference_with_tails(arch_plan):
    from polysat.backend.scores.launch import run as run_scores
    from polysat.backend.scores.plan import search
    spec = ScoresSpec("s", 201, 133, 64, batch=(2,), causal=True, scale=0.2, in_dtype=DType.fp16, p_dtype=DType.fp16)
    plan = None
    if arch_plan == "bn128":
        plan = next(p for p in search(spec, device().arch).ranked if p.block_n == 128)
    rng = np.random.default_rng(1)
    x = {n: np.asarray(round_to(rng.uniform(-1, 1, size=s).astype(np.float32), DType.fp16)).astype(np.float16)
         for n, s in spec.shapes().items() if n != spec.p}
    _close(run_scores(spec, x, plan=plan), scores_reference(spec, x), "fp16")


@pytest.mark.parametrize("d", [8, 20, 32, 96, 100, 160, 256])
def test_run_scores_on_other_head_dims(d):
    """Head dims other than 64 / 128 (the sm80 skeleton on the dims padded to 16; 20 and 100 with 8-byte
    copies) with row and key tails, causal, against the numpy meaning."""
    from polysat.backend.scores.launch import run as run_scores
    dt = DType.bf16 if d > 100 else DType.fp16
    spec = ScoresSpec("s", 131, 203, d, batch=(2,), causal=True, scale=d ** -0.5, in_dtype=dt, p_dtype=dt)
    rng = np.random.default_rng(d)
    x = {n: np.asarray(round_to(rng.uniform(-1, 1, size=s).astype(np.float32), dt)).astype(dt.np)
         for n, s in spec.shapes().items() if n != spec.p}
    _close(run_scores(spec, x), scores_reference(spec, x), dt.value)
