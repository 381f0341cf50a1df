"""Epilogues a half-precision model computes in fp16 or bf16 (backend/common/epilogue_fn.py rounding steps).

An fp16 ONNX GEMM + bias followed by ``y * y`` or by SiLU (ONNX Sigmoid, widened to fp32 and rounded back, then a
16-bit Mul: the accumulator read twice) binds the GEMM kind as one kernel, its 16-bit steps an ``fn`` program of
fp32 ops each rounded to fp16. Checked against onnxruntime on the same bytes (the reference evaluator and CPU
playback of the chosen kernel), against the GEMM spec's own numpy meaning, and the rounding steps against
numpy's float16 and torch's bfloat16 arithmetic.
"""
from __future__ import annotations

import numpy as np
import pytest

from polysat.backend.common import epilogue_fn
from polysat.ir.dtypes import DType

M, K, N = 48, 64, 40


def _model(tail: str) -> bytes:
    from onnx import TensorProto as T
    from onnx import helper as h
    nodes = [h.make_node("MatMul", ["x", "w"], ["y0"], name="mm"), h.make_node("Add", ["y0", "b"], ["y"], name="bias")]
    if tail == "square":
        nodes.append(h.make_node("Mul", ["y", "y"], ["z"], name="square"))
    else:
        nodes += [h.make_node("Sigmoid", ["y"], ["s"], name="sig"), h.make_node("Mul", ["y", "s"], ["z"], name="silu")]
    g = h.make_graph(nodes, tail, [h.make_tensor_value_info("x", T.FLOAT16, [M, K]),
                                   h.make_tensor_value_info("w", T.FLOAT16, [K, N]),
                                   h.make_tensor_value_info("b", T.FLOAT16, [N])],
                     [h.make_tensor_value_info("z", T.FLOAT16, [M, N])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()


@pytest.fixture(scope="module", params=["square", "silu"])
def compiled(request):
    import onnx
    import onnxruntime as ort
    from polysat.frontend.onnx import import_onnx
    from polysat.pipeline import Compilation
    data = _model(request.param)
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((M, K)).astype(np.float16),
             "w": (rng.standard_normal((K, N)) / 4).astype(np.float16),
             "b": rng.standard_normal(N).astype(np.float16)}
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    doc = import_onnx(onnx.load_from_string(data), origin=f"{request.param}.onnx")
    return request.param, doc, feeds, want, Compilation(doc, cost="model")


def test_one_gemm_kernel_with_a_rounded_fn_epilogue(compiled):
    from polysat.backend.gemm.bind import bind
    from polysat.backend.kinds import tensor_core_kind
    _, _, _, _, c = compiled
    (region,) = c.regions  # the 16-bit epilogue fused: one kernel (it was two, the epilogue its own SIMT kernel)
    assert tensor_core_kind(region) == "gemm"
    fns = [op for op in bind(region).spec.epilogue if op.kind == "fn"]
    assert len(fns) == 1 and ("round_fp16", (("s", len(fns[0].steps) - 2),)) == fns[0].steps[-1]
    assert sum(1 for _, args in fns[0].steps for a in args if a == ("v",)) >= 1


def test_reference_and_playback_equal_onnxruntime(compiled):
    from polysat.cli import TARGETS
    from polysat.frontend import with_parameters
    _, doc, feeds, want, c = compiled
    w = want.astype(np.float64)
    for target in ("reference", "playback"):
        got = TARGETS[target](c, with_parameters(doc, feeds))["z"]
        assert got.dtype == np.float16 and got.shape == want.shape
        err = np.abs(got.astype(np.float64) - w).max()  # onnxruntime's fp16 MatMul rounds its own way: 2 ulps
        assert err <= 2.0 ** -9 * np.abs(w).max(), (target, err)


def test_gemm_spec_meaning_equals_region_playback_bit_for_bit(compiled):
    """The spec's numpy meaning (the fn program in fp32 with its rounding steps) and playback of the region
    (numpy's fp16 ops) round at the same places: equal bits on the same fp32 accumulator."""
    from polysat.backend.gemm.bind import bind
    from polysat.backend.gemm.reference import reference
    from polysat.ir.playback import playback
    _, _, feeds, _, c = compiled
    (region,) = c.regions
    b = bind(region)
    inputs = {buf.name: feeds[buf.name] for buf in region.inputs}
    got = playback([region], inputs, keep_all=True)[b.spec.c]
    ref = reference(b.spec, b.arrays(inputs, {}), {})
    np.testing.assert_array_equal(got.view(np.uint16), ref.view(np.uint16))


def test_rounding_steps_equal_16_bit_arithmetic():
    import torch
    rng = np.random.default_rng(0)
    a = rng.standard_normal(4096).astype(np.float32) * 30
    for op, np_op, t_op in (("mul", np.multiply, torch.mul), ("add", np.add, torch.add), ("div", np.divide, torch.div)):
        half = epilogue_fn.evaluate(((op, (("v",), ("c", 0.7109375))), ("round_fp16", (("s", 0),))), a.astype(np.float16).astype(np.float32))
        want = np_op(a.astype(np.float16), np.float16(0.7109375)).astype(np.float32)
        np.testing.assert_array_equal(half, want)
        x = torch.from_numpy(a).to(torch.bfloat16)
        bf = epilogue_fn.evaluate(((op, (("v",), ("c", 0.7109375))), ("round_bf16", (("s", 0),))), x.float().numpy())
        np.testing.assert_array_equal(bf, t_op(x, torch.tensor(0.7109375, dtype=torch.bfloat16)).float().numpy())
    assert epilogue_fn.check((("round_fp16", (("v",),)),)) is None
    assert "round_to<__nv_bfloat16>(v)" in " ".join(epilogue_fn.c_lines((("round_bf16", (("v",),)),)))


def test_a_16_bit_program_rounds_every_16_bit_op_and_no_fp32_one():
    """from_region on hand-built nodes: an fp16 mul of the value by itself rounds once, a widening cast adds no
    step, an fp32 op adds none, a narrowing cast rounds."""
    from polysat.ir import region as rg
    from polysat.ir.region import R, RNode
    acc = RNode(R.REDUCE, (), ("sum", ("r0",), 0.0), DType.fp32, ("i0",))
    v = rg.unary("cast", acc, DType.fp16)
    sq = rg.binary("mul", v, v, DType.fp16)
    wide = rg.unary("cast", sq, DType.fp32)
    back = rg.unary("cast", rg.binary("add", wide, rg.const(1.0, DType.fp32), DType.fp32), DType.bf16)
    lets = (lambda n: n)
    assert epilogue_fn.from_region(lets, sq, v) == (("mul", (("v",), ("v",))), ("round_fp16", (("s", 0),)))
    assert epilogue_fn.from_region(lets, back, v) == (
        ("mul", (("v",), ("v",))), ("round_fp16", (("s", 0),)), ("add", (("s", 1), ("c", 1.0))), ("round_bf16", (("s", 2),)))
    mixed = RNode(R.BINARY, (v, wide), "mul", DType.fp16, ("i0",))  # operands of two types: no program
    assert epilogue_fn.from_region(lets, mixed, v) is None


def test_fp16_conv_with_fp16_epilogue_binds_the_conv_kind_equal_to_playback():
    """The bench's fp16 conv -> relu -> conv + residual -> relu (relu and the residual add computed in fp16): each
    conv region binds the tensor-core conv kind (both were SIMT before: the 16-bit epilogue was refused), and the
    conv spec's numpy meaning equals CPU playback of the region on the same inputs."""
    from polysat.backend.conv.bind import bind as conv_bind
    from polysat.backend.conv.reference import random_inputs, reference
    from polysat.backend.kinds import tensor_core_kind
    from polysat.bench.models import conv_relu_conv
    from polysat.ir.playback import playback
    from polysat.pipeline import Compilation
    regions = Compilation(conv_relu_conv(channels=16, size=12, residual=True), cost="size").regions
    assert len(regions) == 2
    for r in regions:
        assert tensor_core_kind(r) == "conv"
        b = conv_bind(r)
        ins = random_inputs(b.spec, seed=3)
        got = playback([r], {t: ins[name] for name, t in b.tensors}, keep_all=True)[b.spec.c]
        want = reference(b.spec, ins)
        assert got.shape == want.shape
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=2e-3, atol=2e-3)
