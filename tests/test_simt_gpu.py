"""SIMT kernels on a GPU (marker ``gpu``; skipped only when no CUDA GPU is visible).

Whole models through ``--target cuda``'s path (``runtime.regions.run_cuda``: every region on the device in order,
the SIMT kind's regions included) against CPU playback of the same regions and the reference evaluator
of the program; and every SIMT region of them, one by one, under plans of every shape (one lane per row,
sub-warp, warp and block-wide groups, scalar and vector steps) through the kind's ``launch`` against its
numpy meaning. rtol = atol = 1e-3 plus half an ulp of a 16-bit output.
"""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

from polysat.backend import kinds
from polysat.runtime import regions as device_run
from polysat.backend.common.gpu import cuda_available
from polysat.backend.simt.plan import SimtPlan, stop_reason
from polysat.bench.models import mlp_stack, transformer
from polysat.ir.dtypes import round_to
from polysat.ir.evaluate import evaluate
from polysat.ir.expr import Expr
from polysat.ir.playback import playback
from polysat.pipeline import Compilation

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible")]

HERE = pathlib.Path(__file__).parent
_spec = importlib.util.spec_from_file_location("polysat_test_oracle", HERE / "oracle.py")
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)
EX = HERE.parent / "examples"
SIZES = {"R": 37, "C": 1000, "T": 5, "B": 2, "H": 3, "M": 17, "N": 77, "D": 16, "S": 19}
MODELS = {"softmax": str(EX / "softmax.json"), "layernorm": str(EX / "layernorm.json"),
          "attention_row_softmax": str(EX / "attention_row_softmax.json"),
          "conv_relu_maxpool": str(EX / "conv_relu_maxpool.json"), "mlp": str(EX / "mlp.json"),
          "bench_mlp2": mlp_stack(2, 128), "bench_transformer1": transformer(1, 64, 2, 128)}
PLANS = [SimtPlan("sm80", 128, 1, 1), SimtPlan("sm80", 128, 8, 4), SimtPlan("sm80", 256, 32, 8),
         SimtPlan("sm80", 512, 512, 2), SimtPlan("sm80", 64, 64, 1), SimtPlan("sm80", 128, 16, 4, unroll=4),
         SimtPlan("sm80", 256, 256, 8, unroll=2)]


def _inputs(c: Compilation, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for n in c.program.inputs:
        shape = tuple(d if isinstance(d, int) else int(Expr.of(d).evaluate(SIZES)) for d in n.shape)
        dt = n.dtype
        out[n.arg["tensor_id"]] = np.asarray(round_to(rng.uniform(-1, 1, size=shape).astype(np.float32), dt)).astype(dt.np)
    return out


@pytest.mark.parametrize("name", sorted(MODELS))
def test_models_run_on_cuda_like_playback_and_the_reference(name):
    c = Compilation(MODELS[name])
    regions = c.regions
    x = _inputs(c, len(name))
    want = playback(regions, x, keep_all=True)
    ref = evaluate(c.program, x)
    got = device_run.run_cuda(regions, x)
    dts = {b.name: b.memref.dtype.value for r in regions for b in r.outputs}
    assert set(got) == {b.name for r in regions for b in r.outputs if b.program_output}
    for k, v in got.items():
        dt, eps = dts[k], oracle.chain_roundoff(regions, k)  # eps > 0: 16-bit values pass between its kernels
        oracle.assert_close_chained(v, want[k].astype(np.float64), dt, eps, f"{name} {k} vs playback")
        if k in ref:
            oracle.assert_close_chained(v, np.asarray(ref[k], np.float64), dt, eps,
                                        f"{name} {k} vs the reference evaluator")


@pytest.mark.parametrize("name", sorted(set(MODELS) - {"mlp", "bench_mlp2"}))  # those are GEMM regions only
def test_every_simt_region_under_every_plan_shape(name):
    from polysat.backend.simt.launch import run
    c = Compilation(MODELS[name])
    regions = c.regions
    x = _inputs(c, 3)
    tensors = {**x, **playback(regions, x, keep_all=True)}
    env = rt_env(regions, x)
    checked = 0
    for r in regions:
        kind, b = kinds.bind(r)
        if kind.name != "simt":
            continue
        spec = b.spec
        ins = {n: np.ascontiguousarray(np.asarray(round_to(tensors[n], spec.dtypes()[n])).astype(spec.dtypes()[n].np))
               for n in spec.inputs}
        want = kind.reference(spec, ins, env)
        for plan in [p for p in PLANS if stop_reason(spec, p) is None]:
            got = run(spec, ins, env, plan=plan)
            oracle.assert_close(got, want.astype(np.float64), spec.dtypes()[spec.c].value, f"{name}/{r.name} {plan.key()}")
            checked += 1
    assert checked


def rt_env(regions, x) -> dict:
    from polysat.ir.playback import bind_region_symbols
    return bind_region_symbols(list(regions), x)
