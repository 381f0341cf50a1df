"""Two sibling GEMMs combined column by column in one epilogue (backend/gemm/paired.py): a half-precision SwiGLU
MLP's ``SiLU(x @ W_gate) * (x @ W_up)`` (every fp16 step rounded) is one tensor-core GEMM over B = [W_gate | W_up]
whose tiles hold column j of both pieces, writing the [S, F] product, never the [S, 2F] concatenation. The spec's
numpy meaning equals CPU playback of the region; the compiled MLP (reference evaluator, playback and the host
runtime, where each kernel is its kind's numpy meaning) equals onnxruntime on the same bytes; the kernel builds
for sm_80 and sm_90a with no spills (no GPU needed); a pair spec survives JSON and a malformed one is refused.
"""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

from polysat.backend.gemm.spec import GemmSpec
from polysat.backend.kinds import bind
from polysat.ir.diagnostics import PolysatError
from polysat.ir.playback import bind_region_symbols, playback

_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)

S, D, F = 128, 64, 128


def _mlp() -> bytes:
    from polysat.bench.corpora.scale_models import swiglu_mlp
    return swiglu_mlp(D, F, S).SerializeToString()


@pytest.fixture(scope="module")
def compiled():
    return oracle.onnx_compiled(_mlp(), "mlp.onnx")


def _pair_region(regions):
    return oracle.the_region(regions, 2)


def test_gate_up_and_silu_x_up_bind_as_one_paired_gemm_with_playbacks_meaning(compiled):
    _, _, c = compiled
    r = _pair_region(c.regions)
    kind, b = bind(r)
    assert kind.name == "gemm", r.name
    assert [w for _, w in b.spec.b_pieces] == [F, F] and b.spec.pair and b.spec.shapes()[b.spec.c] == (S, F)
    assert [op for op, _ in b.spec.pair].count("round_fp16") >= 4  # gate, up, sigmoid, x*sigmoid, *up
    rng = np.random.default_rng(0)
    x = {buf.name: (rng.uniform(-1, 1, buf.memref.shape) * (1 if buf.name == "x" else 0.2)).astype(np.float16)
         for buf in r.inputs}
    env = bind_region_symbols([r], x)
    want = playback([r], x, keep_all=True)[r.outputs[0].name]
    got = kind.reference(b.spec, b.arrays(x, env), env)
    oracle.assert_close(np.asarray(got).reshape(want.shape), want.astype(np.float64), "fp16", r.name)


def test_the_compiled_mlp_equals_onnxruntime(compiled):
    rt = oracle.targets_equal_onnxruntime(compiled, lambda name, shape, rng: rng.uniform(-1, 1, shape) * (
        1 if name == "x" else 0.2))
    assert sum(not st.on_cpu and st.kind.name == "gemm" for st in rt.steps) == 2  # the pair and the down projection


def test_a_pair_spec_survives_json_and_a_bad_one_is_refused(compiled):
    spec = bind(_pair_region(compiled[2].regions))[1].spec
    assert GemmSpec.from_json(spec.to_json()) == spec
    with pytest.raises(PolysatError, match="pair"):
        GemmSpec("p", 16, 256, 64, b_pieces=(("a", 128), ("b", 64), ("c", 64)), pair=spec.pair)
    with pytest.raises(PolysatError, match="pair"):
        GemmSpec("p", 16, 256, 64, b_pieces=(("a", 128), ("b", 128)), pair=(("mul", (("v",), ("x", 1))),))


def test_the_paired_gemm_builds_for_both_skeletons(compiled):
    oracle.region_builds_for_both_skeletons(_pair_region(compiled[2].regions), "paired GEMM", "_pair<")


@pytest.mark.gpu
def test_the_paired_gemm_on_the_gpu_matches_its_reference(compiled):
    """Both skeletons run the bound spec against its numpy meaning (when a GPU is lent)."""
    oracle.gemm_on_gpu_matches_reference(bind(_pair_region(compiled[2].regions))[1].spec)
