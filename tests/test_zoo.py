"""Architectures nobody here wrote (bench/corpora/zoo_models.py: transformers configs and torchvision at tiny sizes, random
weights, no downloads) through the ONNX file path and torch.export, compiled with --cost model: the reference
evaluator and playback of the extracted kernels against onnxruntime / eager torch (bench/zoo.py runs them all
with torch.compile and the peers beside). ConvNeXt's depthwise 7x7 after a downsampling conv came out of the
e-graph as a view past its input (E1202) before the composing movement rules required reads inside their base."""
from __future__ import annotations

import pytest

from polysat.bench import zoo

MODELS = ["bert", "roberta", "gpt2", "llama", "convnext", "resnet18"]


@pytest.mark.parametrize("name", MODELS)
def test_zoo_model_onnx_path(name):
    r = zoo.measure(name, "onnx")
    assert "error" not in r, r.get("error")
    assert r["reference_ok"] and r["playback_ok"], r


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama"])
def test_zoo_model_torch_export_path(name):
    r = zoo.measure(name, "export")
    assert "error" not in r, r.get("error")
    assert r["reference_ok"] and r["playback_ok"], r


@pytest.mark.parametrize("name", ["mobilevit", "mobilenet_v3", "efficientnet_b0", "vit_b_16"])
def test_zoo_model_outputs_carry_signal(name):
    """Random weights gave these an output of 0 or ~1e-10, which any answer of zeros matches; calibrated
    BatchNorm statistics and no zero Linear keep it of the order of its inputs (bench/corpora/zoo_models._alive)."""
    import numpy as np
    import torch
    from polysat.bench.corpora.zoo_models import build
    m, x = build(name)
    with torch.no_grad():
        y = m(*x).numpy()
    assert not m.training and np.isfinite(y).all() and float(y.std()) > 1e-3, float(y.std())
