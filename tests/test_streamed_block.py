"""A streamed fp16 transformer block (rules/streaming.egg: one kernel walks the keys, P rounded at the
running max) is as close to float64 as the reference evaluator is.

The streamed region rounds P to fp16 before dividing by the row sum, the reference after; through the
projection and the FFN that moves single elements of the fp16 output by an ulp or so, so the two are
not compared with each other at 1e-3. Both are compared with an independent float64 oracle of the
block (tests/oracle.py, numpy; each op's output rounded to fp16 as the model declares), and playback's
worst error, in fp16 ulps of the output (at least the ulp at 1.0: an absolute error on values near zero
is not counted in their own tiny ulps), must not exceed the reference's by more than one.
"""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

from polysat.bench.models import transformer
from polysat.ir.evaluate import evaluate
from polysat.ir.playback import playback
from polysat.pipeline import Compilation

_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)

D, H, FF, S = 64, 2, 128, 24


def _block64(i: dict) -> np.ndarray:
    r = lambda x: oracle.rounded(x, "fp16")  # noqa: E731  each op's output is fp16 in the model
    x = r(i["X"])
    h = r(oracle.layernorm(x, gamma=r(i["b0_g1"]), beta=r(i["b0_be1"])))
    q, k, v = (r(h @ r(i[f"b0_W{n}"])).reshape(S, H, D // H).transpose(1, 0, 2)[None] for n in "qkv")
    a = r(oracle.attention(q, k, v, causal=True))[0].transpose(1, 0, 2).reshape(S, D)
    x = r(r(a @ r(i["b0_Wo"])) + x)
    h = r(oracle.layernorm(x, gamma=r(i["b0_g2"]), beta=r(i["b0_be2"])))
    h = r(oracle.gelu(r(r(h @ r(i["b0_W1"])) + r(i["b0_c1"])), "tanh"))
    return r(r(h @ r(i["b0_W2"])) + x)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_streamed_fp16_block_is_as_close_to_float64_as_the_reference(seed):
    c = Compilation(transformer(1, d_model=D, heads=H, d_ff=FF, seq=S), cost="model")
    streamed = [k for k in c.extraction.partition.kernels if any("softmax_sum" in str(c.extraction.program[n].tag or "")
                                                                  for n in k.nodes)]
    assert streamed, "the search no longer streams the block's attention: this test checks nothing"
    rng = np.random.default_rng(seed)
    ins = {n.arg["tensor_id"]: rng.standard_normal(n.arg["shape"]).astype(np.float32)
           for n in c.program.nodes if n.op.name == "INPUT"}
    ins = {k: v * (0.125 if k.startswith("b0_W") else 1.0) for k, v in ins.items()}
    want = _block64(ins)
    ulp = 2 * oracle.half_ulp(np.maximum(np.abs(want), 1.0), "fp16")  # an fp16 ulp, at least that at 1.0
    errs = {}
    for what, got in (("reference", evaluate(c.program, ins)), ("playback", playback(c.regions, ins))):
        (out,) = got.values()
        errs[what] = float((np.abs(out.astype(np.float64) - want) / ulp).max())
    assert errs["playback"] <= errs["reference"] + 1.0, errs
