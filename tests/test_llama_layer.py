"""A LLaMA-family layer exported from ``transformers`` (a 1-layer LlamaModel from bench/corpora/zoo_models.py's tiny
config: 4 query heads over 2 KV heads, rotary embeddings, SiLU-gated MLP; random weights, no downloads), compiled
with ``--cost model``: the reference evaluator and CPU playback of the chosen kernels equal onnxruntime on the
same bytes, grouped-query attention reads each KV head in place (the kernel holding the softmax reads the K/V
projections' kernels' outputs, never a ``repeat_kv`` expansion), and rotary embeddings are applied inside the
Q/K projection's kernel or the attention kernel, never in a kernel of their own.
"""
from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

from polysat.bench import zoo
from polysat.bench.corpora import zoo_models


@pytest.fixture(scope="module")
def llama1():
    import onnx
    import onnxruntime as ort
    import torch
    from polysat.frontend.onnx import import_onnx
    from polysat.pipeline import Compilation
    cfg = dict(zoo_models._DECODER, num_hidden_layers=1)
    m, x = zoo_models._hf("LlamaModel", "LlamaConfig", lambda: (zoo_models._ids(),), **cfg)()
    f = io.BytesIO()
    with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        torch.onnx.export(m, x, f, dynamo=False, opset_version=17, input_names=["ids"], do_constant_folding=True)
    data, feeds = f.getvalue(), {"ids": x[0].numpy()}
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    doc = import_onnx(onnx.load_from_string(data), origin="llama1.onnx")
    return doc, feeds, want, Compilation(doc, cost="model")


def test_reference_and_playback_equal_onnxruntime(llama1):
    from polysat.cli import TARGETS
    from polysat.frontend import with_parameters
    doc, feeds, want, c = llama1
    inputs = with_parameters(doc, feeds)
    names = [e["tensor"] for e in doc["signature"]["outputs"]]
    for target in ("reference", "playback"):
        got = TARGETS[target](c, inputs)
        for n, w in zip(names, want, strict=True):
            ok, err = zoo.close(got[n], w)
            assert ok, (target, n, err)


def test_gqa_reads_kv_heads_in_place_and_rope_is_fused(llama1):
    import polysat
    ks = polysat.kernels(llama1[3])
    writer = {t: k for k in ks for t in k["writes"]}
    attn = [k for k in ks if any(op.endswith("/Softmax") for op in k["ops"])]
    assert len(attn) == 1, [k["ops"] for k in ks]
    for t in attn[0]["reads"]:  # each computed operand of attention comes from a projection's kernel
        if t in writer:
            assert any("_proj/MatMul" in op for op in writer[t]["ops"]), (t, writer[t]["ops"])
    for k in ks:  # rotate_half's Neg / Concat sit beside a projection or the softmax, never alone
        if any(op.split("/")[-1].startswith(("Neg", "Concat")) for op in k["ops"] if "self_attn" in op):
            assert k is attn[0] or any(op.endswith(("q_proj/MatMul", "k_proj/MatMul")) for op in k["ops"]), k["ops"]
    layer = [k for k in ks if any("/layers.0/" in op for op in k["ops"])]
    print(f"\nLLaMA layer: {len(layer)} kernels: " + " | ".join(",".join(o.split("/")[-1] for o in k["ops"]) for k in layer))
    # 6 (DESIGN.md §Fusion): RMSNorm | Q/K/V siblings in one GEMM (V read in place by the GQA attention) |
    # RoPE + attention | out-proj + residual | RMSNorm + gate/up siblings | SiLU x up + down-proj + residual
    assert len(layer) <= 6, len(layer)
