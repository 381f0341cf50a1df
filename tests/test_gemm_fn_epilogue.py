"""An epilogue that reads the accumulator more than once (GEMM + bias then ``y * y``) is one GEMM kernel, as
``y * sigmoid(y)`` (SiLU) is: the GEMM kind takes any read-free fp32 function of the accumulator as an ``fn``
program (backend/common/epilogue_fn.py). The chosen kernel binds to the tensor-core kind, its numpy meaning
equals CPU playback of the region, playback equals a numpy oracle, and the kernel builds for sm_80 and sm_90a.
"""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

from polysat.backend.common import epilogue_fn
from polysat.backend.common.spec import EpilogueOp
from polysat.backend.gemm.spec import GemmSpec
from polysat.backend.kinds import bind
from polysat.ir.diagnostics import PolysatError
from polysat.ir.dtypes import DType
from polysat.ir.playback import bind_region_symbols, playback
from polysat.pipeline import Compilation

_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)

BIG = {"M": 8192, "N": 4096, "K": 4096}  # the sizes: the price decides at these


def _doc(tail: list) -> dict:
    tensors = {"A": {"dtype": "fp16", "shape": ["M", "K"]}, "B": {"dtype": "fp16", "shape": ["K", "N"]},
               "bias": {"dtype": "fp16", "shape": ["N"]}, "Y": {"dtype": "fp16", "shape": ["M", "N"]}}
    graph = [{"op": "GEMM", "name": "gemm", "inputs": ["A", "B"], "outputs": ["C0"], "attrs": {"acc_dtype": "fp32"}},
             {"op": "Elementwise", "name": "bias_add", "fn": "add", "inputs": ["C0", "bias"], "outputs": ["C1"]}, *tail]
    return {"signature": {"inputs": [{"tensor": t, "role": "data", "mutability": "immutable"} for t in ("A", "B", "bias")],
                          "outputs": [{"tensor": "Y"}]}, "tensors": tensors, "graph": graph}


SQUARE = [{"op": "Elementwise", "name": "sq", "fn": "mul", "inputs": ["C1", "C1"], "outputs": ["Y"]}]
CUBE_PLUS = [{"op": "Elementwise", "name": "sq", "fn": "mul", "inputs": ["C1", "C1"], "outputs": ["C2"]},
             {"op": "Elementwise", "name": "cube", "fn": "mul", "inputs": ["C2", "C1"], "outputs": ["C3"]},
             {"op": "Elementwise", "name": "plus", "fn": "add", "inputs": ["C3", "C1"], "outputs": ["Y"]}]


def _f16(x):
    return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


def _oracle(x: dict, tail: str) -> np.ndarray:
    """numpy from the ops' meaning: the GEMM and its epilogue in fp32 (Frontend IR's intermediates), Y fp16."""
    c1 = x["A"].astype(np.float32) @ x["B"].astype(np.float32) + x["bias"].astype(np.float32)
    return _f16(c1 * c1 if tail == "square" else c1 * c1 * c1 + c1)


@pytest.mark.parametrize("tail", ["square", "cube_plus"])
def test_a_multi_read_epilogue_is_one_gemm_kernel_equal_to_playback_and_numpy(tail):
    c = Compilation(_doc(SQUARE if tail == "square" else CUBE_PLUS), cost="model", bind=BIG)
    regions = c.regions
    assert len(regions) == 1, [r.name for r in regions]
    kind, b = bind(regions[0])
    assert kind.name == "gemm", kind.name
    assert any(op.kind == "fn" for op in b.spec.epilogue), b.spec.epilogue
    rng = np.random.default_rng(1)
    x = {"A": rng.uniform(-1, 1, (37, 48)).astype(np.float16), "B": rng.uniform(-1, 1, (48, 40)).astype(np.float16),
         "bias": rng.uniform(-1, 1, (40,)).astype(np.float16)}
    r = regions[0]
    env = bind_region_symbols([r], x)
    got = playback([r], x, keep_all=True)[r.outputs[0].name]
    oracle.assert_close(got, _oracle(x, tail), "fp16", "playback vs numpy")
    spec_out = kind.reference(b.spec, b.arrays(x, env), env)
    oracle.assert_close(np.asarray(spec_out).reshape(got.shape), got.astype(np.float64), "fp16", "GemmSpec vs playback")


def test_fn_programs_evaluate_render_and_round_trip():
    # y * sigmoid(1.702 y) clamped below at -1: v read four times, a compare and a select
    steps = (("mul", (("v",), ("c", 1.702))), ("neg", (("s", 0),)), ("mul", (("s", 1), ("c", 1.4426950408889634))),
             ("exp2", (("s", 2),)), ("add", (("s", 3), ("c", 1.0))), ("div", (("v",), ("s", 4))),
             ("cmplt", (("s", 5), ("c", -1.0))), ("select", (("s", 6), ("c", -1.0), ("s", 5))))
    assert epilogue_fn.check(steps) is None
    v = np.linspace(-6, 6, 49, dtype=np.float32)
    want = np.maximum(v / (1 + np.exp(-1.702 * v.astype(np.float64))), -1.0)
    np.testing.assert_allclose(epilogue_fn.evaluate(steps, v), want, rtol=1e-5, atol=1e-6)
    assert epilogue_fn.from_json(epilogue_fn.to_json(steps)) == steps
    lines = epilogue_fn.c_lines(steps)
    assert lines[-1] == "v = f7;" and "const bool f6 = (f5 < -1.000000000e+00f);" in lines
    spec = GemmSpec("g", 64, 64, 64, epilogue=(EpilogueOp("fn", steps=steps),))
    assert GemmSpec.from_json(spec.to_json()) == spec


@pytest.mark.parametrize("bad", [(), (("mul", (("v",),)),), (("add", (("s", 0), ("v",))),),
                                 (("cmplt", (("v",), ("c", 0.0))),), (("select", (("v",), ("v",), ("v",))),),
                                 (("launch_missiles", (("v",),)),)])
def test_malformed_fn_programs_are_diagnostics(bad):
    assert epilogue_fn.check(bad) is not None
    with pytest.raises(PolysatError):
        GemmSpec("g", 64, 64, 64, epilogue=(EpilogueOp("fn", steps=bad),))


def test_the_fn_epilogue_kernels_build_on_the_tensor_core_path():
    from polysat.backend import stages
    from polysat.backend.common.nvcc import missing_instructions
    regions = Compilation(_doc(CUBE_PLUS), cost="model", bind=BIG).regions
    index = [(r.name, arch, ks) for arch in ("sm80", "sm90") for r, ks in zip(regions, stages.kernel_sources(regions, arch))]
    for label, arch, ks, rep in oracle.nvcc_builds(index, "fn-epilogue GEMMs"):
        assert rep.ok and rep.spills == 0, (label, arch, rep.log[-2000:])
        assert missing_instructions(rep, ks.skeleton) == [], (label, arch)
