"""A Conv2D + SiLU over symbolic N, H, W whose weight tensor is named like a symbol ("W") compiles
under both costs, and its playback equals the reference evaluator and a numpy convolution.

Pricing renames a region's tensors to T0.. (pricing/kernels.py canonical) so equal kernels share
a price; the renaming must touch only isl tuple names, never the symbol W the domains mention.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from polysat import cli

MODEL = {"signature": {"inputs": [{"tensor": "X"}, {"tensor": "W"}, {"tensor": "bias"}], "outputs": [{"tensor": "Y"}]},
         "tensors": {"X": {"dtype": "fp16", "shape": ["N", 4, "H", "W"]}, "W": {"dtype": "fp16", "shape": [6, 4, 3, 3]},
                     "bias": {"dtype": "fp16", "shape": [6]},
                     "Y": {"dtype": "fp16", "shape": ["N", 6, "Ho", "Wo"]}},
         "graph": [{"op": "Conv2D", "name": "Yc", "inputs": ["X", "W", "bias"], "outputs": ["Yc"],
                    "attrs": {"stride": [2, 2], "pad": [1, 1, 1, 1]}},
                   {"op": "Elementwise", "name": "Y", "inputs": ["Yc"], "outputs": ["Y"], "attrs": {}, "fn": "silu"}]}


@pytest.fixture()
def path(tmp_path):
    p = tmp_path / "csym.json"
    p.write_text(json.dumps(MODEL))
    return p


@pytest.mark.parametrize("cost", ["size", "model"])
def test_symbolic_conv_compiles_under_both_costs(path, cost, capsys):
    assert cli.main(["extract", str(path), "--cost", cost]) == 0, capsys.readouterr()
    assert cli.main(["compile", str(path), "--cost", cost]) == 0, capsys.readouterr()
    assert cli.main(["compile", str(path), "--cost", cost, "--bind", "N=2,H=9,W=8"]) == 0, capsys.readouterr()


def _numpy_conv_silu(x, w, b):
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    n, _, hp, wp = x.shape
    ho, wo = (hp - 3) // 2 + 1, (wp - 3) // 2 + 1
    y = np.zeros((n, w.shape[0], ho, wo))
    for i in range(3):
        for j in range(3):
            y += np.einsum("nchw,oc->nohw", x[:, :, i:i + 2 * ho:2, j:j + 2 * wo:2], w[:, :, i, j].astype(np.float64))
    y += b.astype(np.float64)[None, :, None, None]
    return y / (1 + np.exp(-y))


def test_symbolic_conv_playback_equals_reference_and_numpy(path, tmp_path):
    rng = np.random.default_rng(0)
    ins = {"X": rng.standard_normal((2, 4, 9, 8)).astype(np.float16),
           "W": rng.standard_normal((6, 4, 3, 3)).astype(np.float16),
           "bias": rng.standard_normal(6).astype(np.float16)}
    np.savez(tmp_path / "in.npz", **ins)
    outs = {}
    for target in ("reference", "playback"):
        for cost in ("size", "model"):
            out = tmp_path / f"{target}_{cost}.npz"
            assert cli.main(["run", str(path), "--cost", cost, "--inputs", str(tmp_path / "in.npz"), "--out", str(out),
                             "--target", target]) == 0
            with np.load(out) as z:
                outs[target, cost] = z["Y"].astype(np.float64)
    want = _numpy_conv_silu(ins["X"], ins["W"], ins["bias"])
    assert want.shape == (2, 6, 5, 4)
    for got in outs.values():
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)
    for cost in ("size", "model"):
        np.testing.assert_allclose(outs["playback", cost], outs["reference", cost], rtol=1e-3, atol=2e-3)
