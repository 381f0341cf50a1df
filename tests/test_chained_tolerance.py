"""The oracle of a model whose kernels hand 16-bit values to each other (tests/oracle.py assert_close_chained).

On the first GPU check (an H200), bench_transformer1's output differed from its playback by 8 fp16 ulps in 2 of
1216 elements: every kernel was right, but one stored fp16 intermediate rounded the other way (the GPU's fp32
sums run in another order) and the next kernels carried that ulp to the output. Here the same model is played
back on the CPU with such flips planted in its intermediates: the elementwise bound rejects them, the chained
bound accepts them, and it still rejects what a wrong kernel gives (an unwritten row, one element off by 5%).
"""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

from polysat.bench.models import transformer
from polysat.ir.dtypes import round_to
from polysat.ir.expr import Expr
from polysat.ir.playback import playback
from polysat.pipeline import Compilation

_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)
SIZES = {"S": 19}


@pytest.fixture(scope="module")
def model():
    c = Compilation(transformer(1, 64, 2, 128))
    rng = np.random.default_rng(18)
    x = {}
    for n in c.program.inputs:
        shape = tuple(d if isinstance(d, int) else int(Expr.of(d).evaluate(SIZES)) for d in n.shape)
        x[n.arg["tensor_id"]] = np.asarray(round_to(rng.uniform(-1, 1, size=shape).astype(np.float32), n.dtype)).astype(n.dtype.np)
    return c.regions, x


def _with_flips(regions, x, frac: float, seed: int) -> dict:
    """Playback region by region, each stored fp16 intermediate moved one ulp up or down at a fraction of its
    elements (what another summation order does to a few of them)."""
    rng, t = np.random.default_rng(seed), dict(x)
    for r in regions:
        out = playback([r], t, keep_all=True)
        for b in r.outputs:
            v = out[b.name]
            if not b.program_output and v.dtype == np.float16:
                up, down = np.nextafter(v, np.float16(np.inf)), np.nextafter(v, np.float16(-np.inf))
                move = rng.random(v.shape) < frac
                v = np.where(move, np.where(rng.random(v.shape) < 0.5, up, down), v).astype(np.float16)
            t[b.name] = v
    return t


def test_the_chain_roundoff_counts_the_16_bit_values_between_kernels(model):
    regions, _ = model
    out = [b.name for r in regions for b in r.outputs if b.program_output]
    assert out == ["b0_res2_o"]
    # fp16 between kernels: LayerNorm, Q, softmax(Q K^T), P V, then (the out-projection stored fp32) its cast, the
    # residual, LayerNorm, W1 + GELU: 8
    assert oracle.chain_roundoff(regions, "b0_res2_o") == pytest.approx(8 * 2.0 ** -10)
    assert oracle.chain_roundoff(regions[:1], regions[0].outputs[0].name) == 0.0  # one kernel: elementwise


def test_one_ulp_flips_of_intermediates_pass_the_chained_bound_not_the_elementwise_one(model):
    regions, x = model
    want = playback(regions, x)["b0_res2_o"].astype(np.float64)
    eps = oracle.chain_roundoff(regions, "b0_res2_o")
    for seed in range(3):
        got = _with_flips(regions, x, 0.01, seed)["b0_res2_o"]
        with pytest.raises(AssertionError, match="differ beyond rtol=atol=1e-3 \\(fp16"):
            oracle.assert_close(got, want, "fp16", "flipped")
        oracle.assert_close_chained(got, want, "fp16", eps, "flipped")


def test_the_chained_bound_still_rejects_a_wrong_kernel(model):
    regions, x = model
    want = playback(regions, x)["b0_res2_o"].astype(np.float64)
    eps, scale = oracle.chain_roundoff(regions, "b0_res2_o"), np.abs(want).max()
    unwritten = want.copy()
    unwritten[7] = 0.0  # a row no thread wrote
    off = want.copy()
    off[3, 5] += 0.05 * scale
    for bad in (unwritten, off):
        with pytest.raises(AssertionError, match="chained 16-bit intermediates"):
            oracle.assert_close_chained(bad.astype(np.float16), want, "fp16", eps, "wrong")
