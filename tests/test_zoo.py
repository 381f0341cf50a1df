"""Architectures nobody here wrote (bench/corpora/zoo_models.py: transformers configs and torchvision at tiny sizes, random
weights, no downloads) through the ONNX file path and torch.export, compiled with --cost model: the reference
evaluator and playback of the extracted kernels against onnxruntime / eager torch (bench/zoo.py runs them all
with torch.compile and the peers beside). ConvNeXt's depthwise 7x7 after a downsampling conv came out of the
e-graph as a view past its input (E1202) before the composing movement rules required reads inside their base."""
from __future__ import annotations

import pytest

from polysat.bench import zoo

MODELS = ["bert", "roberta", "gpt2", "llama", "convnext", "resnet18", "qwen2_moe"]


@pytest.mark.parametrize("name", MODELS)
def test_zoo_model_onnx_path(name):
    r = zoo.measure(name, "onnx")
    assert "error" not in r, r.get("error")
    assert r["reference_ok"] and r["playback_ok"], r


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama", "mixtral", "phi3"])
def test_zoo_model_torch_export_path(name):
    r = zoo.measure(name, "export")
    assert "error" not in r, r.get("error")
    assert r["reference_ok"] and r["playback_ok"], r


@pytest.mark.parametrize("name", ["mobilevit", "mobilenet_v3", "efficientnet_b0", "vit_b_16"])
def test_zoo_model_outputs_carry_signal(name):
    """Random weights gave these an output of 0 or ~1e-10, which any answer of zeros matches; calibrated
    BatchNorm statistics and no zero Linear keep it of the order of its inputs (bench/corpora/zoo_models._alive),
    and a calibration batch large enough keeps it from blowing up (EfficientNet-B0: logits of 9.5e4 with 4)."""
    import numpy as np
    import torch
    from polysat.bench.corpora.zoo_models import build
    m, x = build(name)
    with torch.no_grad():
        y = m(*x).numpy()
    assert not m.training and np.isfinite(y).all() and float(y.std()) > 1e-3, float(y.std())
    assert float(np.abs(y).max()) < 1e3, float(np.abs(y).max())  # not blown up by the calibration either


def test_uneven_adaptive_pool_exports_and_compiles():
    """AlexNet (6x6) and VGG-19 (7x7) pool a feature map their output size does not divide at the zoo's image
    sizes; torch's exporter refuses that, the bench writes it as averaging MatMuls (bench/zoo._adaptive_avg_pool2d):
    onnxruntime on those bytes matches eager torch, and polysat's ONNX path matches onnxruntime."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    import torch
    from polysat.frontend.onnx import import_onnx
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d((3, 2))).eval()
    x = (torch.randn(1, 3, 7, 6),)  # 5x4 features: bins of 2 and 3 rows overlapping, 2 columns each
    data, feeds = zoo.export_onnx(m, x)
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    with torch.no_grad():
        np.testing.assert_allclose(want[0], m(*x).numpy(), rtol=1e-5, atol=1e-6)
    r: dict = {}
    zoo._compile_and_check(import_onnx(onnx.load_from_string(data), origin="pool.onnx"), feeds, want, r)
    assert r["reference_ok"] and r["playback_ok"], r


def test_vit_b_16_multi_head_attention_exports_op_by_op():
    """nn.MultiheadAttention's inference fast path is one fused ATen op torch's ONNX exporter refuses
    (aten::_native_multi_head_attention, opset 17); the zoo builds ViT-B/16 with it off, so its attention exports
    as the module's ops (the ONNX path and the peers' bytes)."""
    import onnx
    from polysat.bench.corpora.zoo_models import build
    m, x = build("vit_b_16")
    data, _ = zoo.export_onnx(m, x)
    ops = {n.op_type for n in onnx.load_from_string(data).graph.node}
    assert {"MatMul", "Softmax"} <= ops, sorted(ops)


def test_a_path_is_timed_by_its_cpu_seconds():
    """bench/zoo.py stops a model's path after --timeout CPU seconds (its work), not wall seconds a loaded machine
    stretches: the CPU seconds it reads of a process are those the process counts itself."""
    import os
    import time
    t0 = time.process_time()
    while time.process_time() - t0 < 0.3:
        pass
    assert abs(zoo.cpu_seconds(os.getpid()) - time.process_time()) < 0.1
    assert zoo.cpu_seconds(-1) == 0.0
