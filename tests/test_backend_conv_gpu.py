"""Conv and conv + pool kernels on a real GPU against CPU playback of their regions (rtol = atol = 1e-3).

Marked ``gpu``: skipped only when no CUDA GPU is visible. Every shape has tails in every GEMM dimension
(M = N*Ho*Wo, Co per group and K = Cg*Kh*Kw are multiples of no tile), pads and strides; on an sm90
device each kernel also runs with the sm80 skeleton forced (Hopper's tail branch).
"""
import importlib.util
import pathlib

import numpy as np
import pytest

from polysat.backend.common.device_tensors import DeviceArray

from polysat.backend.common.gpu import cuda_available, device
from polysat.runtime import regions as device_run
from polysat.backend.conv.plan import search as conv_search
from polysat.backend.conv_pool.reference import reference as conv_pool_reference, random_inputs as random_conv_pool_inputs
from polysat.backend.conv_pool.spec import ConvPoolSpec
from polysat.backend.conv.reference import reference as conv_reference, random_inputs as random_conv_inputs
from polysat.backend.conv.spec import ConvSpec
from polysat.backend.common.spec import EpilogueOp
from polysat.ir.dtypes import DType, round_to
from polysat.ir.playback import playback
from polysat.pipeline import Compilation

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible")]

F16, BF16, F32 = DType.fp16, DType.bf16, DType.fp32


_oracle_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_oracle_spec)
_oracle_spec.loader.exec_module(oracle)
conv_model = oracle.conv_model


MODELS = {
    "conv3x3_s2_silu": "examples/conv3x3_s2_silu.json",
    "conv_relu_maxpool": "examples/conv_relu_maxpool.json",
    "tails": conv_model([2, 24, 19, 17], [40, 24, 3, 3], {"stride": 1, "pad": 1}, bias=True, act="relu"),
    "grouped_tails": conv_model([3, 16, 15, 13], [36, 8, 3, 3], {"stride": [2, 1], "pad": [1, 0, 2, 1], "groups": 2},
                                act="silu"),
    "depthwise": conv_model([2, 24, 15, 15], [24, 1, 3, 3], {"stride": 2, "pad": 1, "groups": 24}, bias=True),
    "dilated_bf16": conv_model([1, 16, 23, 21], [24, 16, 3, 3], {"stride": 1, "pad": 2, "dilation": 2}, dt="bf16"),
    "odd_k": conv_model([3, 5, 13, 11], [7, 5, 3, 2], {"stride": [2, 1], "pad": [1, 0, 0, 1]}),
    "pool_tails": conv_model([2, 16, 35, 29], [40, 16, 3, 3], {"stride": 1, "pad": 1}, bias=True, act="relu",
                             pool={"kernel": [2, 2], "stride": [2, 2]}),
}


def assert_close(got, want, dtype: DType):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    ulp = {F16: 2.0 ** -10, BF16: 2.0 ** -7, F32: 0.0}[dtype]  # the output rounding may land one ulp apart
    tol = 1e-3 + 1e-3 * np.abs(want) + ulp * np.abs(want)
    bad = np.abs(got - want) > tol
    assert not bad.any(), f"{bad.sum()} of {bad.size} differ; first at {np.argwhere(bad)[0]}: {got[bad][0]} vs {want[bad][0]}"


@pytest.mark.parametrize("model", sorted(MODELS))
def test_region_kernels_match_playback(model):
    regions = Compilation(MODELS[model], cost="model").regions
    rng = np.random.default_rng(3)
    inputs = {}
    for r in regions:
        for b in r.inputs:
            inputs.setdefault(b.name, round_to(rng.uniform(-1, 1, b.memref.shape).astype(np.float32) * 0.3, b.memref.dtype))
    want = playback(regions, inputs)
    got = device_run.run_cuda(regions, inputs)
    for name, w in want.items():
        assert_close(got[name], w, regions[-1].outputs[0].memref.dtype)


SPECS = {
    "residual_f32": ConvSpec("res", 2, 16, 21, 19, 40, 3, 3, pad=(1, 1, 1, 1), out_dtype=F32,
                             epilogue=(EpilogueOp("bias", "b", dtype=F32), EpilogueOp("gelu_tanh"),
                                       EpilogueOp("residual", "r", dtype=F16))),
    "stem_pool": ConvPoolSpec(ConvSpec("stem", 2, 8, 45, 45, 40, 7, 7, stride=(2, 2), pad=(3, 3, 3, 3),
                                       epilogue=(EpilogueOp("bias", "b", dtype=F16), EpilogueOp("relu"))),
                              (23, 23), (3, 3), (2, 2), (1, 1)),
    "dilated_pool_grouped": ConvPoolSpec(ConvSpec("dp", 1, 16, 20, 19, 24, 3, 3, pad=(1, 1, 1, 1), groups=2,
                                                  in_dtype=BF16, out_dtype=BF16, epilogue=(EpilogueOp("silu"),)),
                                         (20, 19), (3, 2), (2, 1), (1, 1), (2, 1)),
}


@pytest.mark.parametrize("case", sorted(SPECS))
def test_spec_kernels_match_their_numpy_meaning_on_every_skeleton(case):
    spec = SPECS[case]
    pooled = isinstance(spec, ConvPoolSpec)
    ins = (random_conv_pool_inputs if pooled else random_conv_inputs)(spec, 7)
    want = (conv_pool_reference if pooled else conv_reference)(spec, ins)
    from polysat.backend.conv.launch import run as run_conv
    arch = device().arch
    plans = [None] + ([conv_search(spec, "sm90", skeletons=("sm80",)).best] if arch == "sm90" else [])
    for plan in plans:
        got = run_conv(spec, ins, plan=plan)
        assert got.shape == want.shape
        assert_close(got, want, spec.dtypes()[spec.c])


def test_prepared_launch_relaunches_on_device_tensors():
    from polysat.backend.conv.launch import prepare as prepare_conv
    spec = SPECS["residual_f32"]
    ins = random_conv_inputs(spec, 9)
    want = conv_reference(spec, ins)
    dev = {k: DeviceArray.from_numpy(np.asarray(v).astype(spec.dtypes()[k].np)) for k, v in ins.items()}
    out = DeviceArray(spec.shapes()[spec.c], np.float32)
    launch = prepare_conv(spec, {**dev, spec.c: out})
    launch()
    first = out.numpy()
    launch()
    assert_close(first, want, F32)
    np.testing.assert_array_equal(out.numpy(), first)
