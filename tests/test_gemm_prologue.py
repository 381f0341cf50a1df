"""A GEMM whose A operand is computed as its tile is filled (backend/gemm/prologue.py): a half-precision SwiGLU
down projection, ``(SiLU(gate) * up) @ W_down`` with gate and up the two halves of one [S, 2F] fp16 tensor (the
sibling GEMMs' concatenation) and every fp16 step rounded, binds to the tensor-core GEMM kind with an A
prologue; the spec's numpy meaning equals CPU playback of the region and onnxruntime on the same bytes; the
prologue's program, tensors and sources survive the spec's JSON; bad prologues are refused with a reason; and
the kernel builds for sm_80 and sm_90a with no spills (no GPU needed).
"""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

from polysat.backend.gemm.prologue import Prologue, Source, check
from polysat.backend.gemm.spec import GemmSpec
from polysat.backend.kinds import bind
from polysat.ir.dtypes import DType
from polysat.ir.playback import bind_region_symbols, playback

_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)

S, F, D = 16, 128, 64


def _swiglu_down():
    """ONNX bytes: gu [1, S, 2F] fp16 -> SiLU(gu[..., :F]) * gu[..., F:] in fp16 -> @ W [F, D] fp16."""
    from onnx import TensorProto, helper
    from polysat.bench.corpora.scale_models import WeightFree
    g = WeightFree("fp16")
    gate, up = g.slice("gu", 0, F, 2), g.slice("gu", F, 2 * F, 2)
    act = g.op("Mul", [g.op("Mul", [gate, g.op("Sigmoid", [gate])]), up])
    g.op("Identity", [g.matmul(act, F, D)])
    g.nodes[-1].output[0] = "y"
    m = g.built([helper.make_tensor_value_info("gu", TensorProto.FLOAT16, [1, S, 2 * F])], "y", [1, S, D], "swiglu")
    return m.SerializeToString()


@pytest.fixture(scope="module")
def compiled():
    return oracle.onnx_compiled(_swiglu_down(), "swiglu.onnx")


def _contraction(regions):
    return oracle.the_region(regions, 1)


def test_the_swiglu_down_projection_binds_a_prologue_gemm_with_playbacks_meaning(compiled):
    _, _, c = compiled
    r = _contraction(c.regions)
    kind, b = bind(r)
    assert kind.name == "gemm", r.name
    pro = b.spec.a_prologue
    assert pro is not None and [s.role for s in pro.sources] == ["mk", "mk"]
    assert sorted(s.col for s in pro.sources) == [0, F] and {s.ld for s in pro.sources} == {2 * F}
    assert [op for op, _ in pro.steps].count("round_fp16") == 3  # sigmoid, x * sigmoid and * up: each rounded
    rng = np.random.default_rng(0)
    x = {buf.name: rng.uniform(-3, 3, buf.memref.shape).astype(np.float16) for buf in r.inputs}
    env = bind_region_symbols([r], x)
    want = playback([r], x, keep_all=True)[r.outputs[0].name]
    got = kind.reference(b.spec, b.arrays(x, env), env)
    oracle.assert_close(np.asarray(got).reshape(want.shape), want.astype(np.float64), "fp16", r.name)


def test_the_compiled_graph_equals_onnxruntime(compiled):
    """Reference evaluator, playback and the host runtime (each kernel its kind's numpy meaning, the prologue
    GEMM's included) against onnxruntime, to fp16 rounding; the kernels against the evaluator more tightly."""
    rt = oracle.targets_equal_onnxruntime(compiled, lambda name, shape, rng: rng.uniform(-3, 3, shape) * (
        1 if name == "gu" else 0.1))  # the activations and the (weight-free graph's) down-projection weight
    assert any(not st.on_cpu and st.kind.name == "gemm" for st in rt.steps)


def test_the_prologue_survives_json_and_bad_ones_are_refused():
    pro = Prologue((Source("gu", "mk", DType.fp16, 256, 0), Source("gu", "mk", DType.fp16, 256, 128),
                    Source("r", "m", DType.fp32), Source("g", "k", DType.fp16)),
                   (("mul", (("x", 0), ("x", 1))), ("mul", (("s", 0), ("x", 2))), ("mul", (("s", 1), ("x", 3))),
                    ("round_fp16", (("s", 2),))))
    spec = GemmSpec("p", 16, 64, 128, a_prologue=pro)
    assert GemmSpec.from_json(spec.to_json()) == spec
    assert spec.inputs == ("gu", "r", "g", "B") and spec.shapes()["gu"] == (16, 256)
    assert check(pro, 16, 128, DType.fp16) is None
    assert "round to the operand type" in check(Prologue(pro.sources, pro.steps[:-1]), 16, 128, DType.fp16)
    assert "exceed its row" in check(Prologue((Source("gu", "mk", DType.fp16, 256, 192),), (
        ("round_fp16", (("x", 0),)),)), 16, 128, DType.fp16)
    assert "multiples of 8" in check(Prologue((Source("gu", "mk", DType.fp16, 260, 4),), (
        ("round_fp16", (("x", 0),)),)), 16, 128, DType.fp16)
    assert "along K" in check(Prologue((Source("r", "m", DType.fp32),), (("round_fp16", (("x", 0),)),)), 16, 128,
                              DType.fp16)
    assert "not one of the 1 inputs" in check(Prologue((Source("g", "k", DType.fp16),), (
        ("round_fp16", (("x", 1),)),)), 16, 128, DType.fp16)


def test_the_prologue_gemm_builds_for_both_skeletons(compiled):
    oracle.region_builds_for_both_skeletons(_contraction(compiled[2].regions), "prologue GEMM", "_pro fn{")


@pytest.mark.gpu
def test_the_prologue_gemm_on_the_gpu_matches_its_reference(compiled):
    """Both skeletons run the bound spec against its numpy meaning (when a GPU is lent)."""
    oracle.gemm_on_gpu_matches_reference(bind(_contraction(compiled[2].regions))[1].spec)
