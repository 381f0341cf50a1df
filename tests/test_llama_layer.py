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


@pytest.fixture(scope="module")
def llama16():
    """The scale bench's weight-free LLaMA (bench/corpora/scale_models.py) written as a half-precision export
    (``dtype="fp16"``: weights and activations fp16, RMSNorm and softmax cast up to fp32 and back) at toy
    sizes, fed random fp16 weights and true rotary tables; onnxruntime's answer on the same bytes."""
    import onnx
    import onnxruntime as ort
    from polysat.bench.corpora.scale_models import llama
    from polysat.frontend.onnx import import_onnx
    from polysat.pipeline import Compilation
    s, dh, vocab = 16, 16, 100
    m = llama(1, d=64, heads=4, kv=4, ffn=128, s=s, vocab=vocab, dtype="fp16")
    rng = np.random.default_rng(0)
    angle = np.arange(s)[:, None] * (1e4 ** (-np.arange(0, dh, 2) / dh))[None]
    rope = {"rope_cos": np.cos(np.concatenate([angle, angle], -1)), "rope_sin": np.sin(np.concatenate([angle, angle], -1))}
    feeds = {}
    for i in m.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        if i.name == "input_ids":
            feeds[i.name] = rng.integers(0, vocab, shape).astype(np.int64)
        elif i.name in rope:
            feeds[i.name] = rope[i.name].reshape(shape).astype(np.float16)
        elif len(shape) == 1:  # a norm's scale
            feeds[i.name] = (1 + 0.1 * rng.standard_normal(shape)).astype(np.float16)
        else:  # a projection (or the embedding table): unit-variance outputs
            feeds[i.name] = (rng.standard_normal(shape) / np.sqrt(shape[0] if shape[0] != vocab else 1)).astype(np.float16)
    data = m.SerializeToString()
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    doc = import_onnx(onnx.load_from_string(data), origin="llama16.onnx")
    return doc, feeds, want, Compilation(doc, cost="model")


def test_fp16_reference_and_playback_equal_onnxruntime_to_half_precision(llama16):
    """Within 2 fp16 ulps at the output's scale (2^-9 of its largest value): the kernels compute in fp32
    where onnxruntime's fp16 MatMul rounds otherwise, so bit equality is not the contract."""
    from polysat.cli import TARGETS
    from polysat.frontend import with_parameters
    doc, feeds, (want,), c = llama16
    w = want.astype(np.float64)
    for target in ("reference", "playback"):
        got = TARGETS[target](c, with_parameters(doc, feeds))["hidden"]
        assert got.dtype == np.float16 and got.shape == want.shape
        err = np.abs(got.astype(np.float64) - w).max()
        assert err <= 2.0 ** -9 * np.abs(w).max(), (target, err)


def test_fp16_copy_kernels_are_priced_as_launched_copies(llama16):
    """A kernel with no statement (in the fp16 layer: a slice of the gate/up concatenation written out) is a
    SIMT copy the runtime launches: priced at a launch plus its bytes (pricing/kernels.py copy_cost), never
    free; priced at 0 µs, two such copies sat in the chosen LLaMA-2-7B fp16 layer (13 kernels, now 11)."""
    from polysat.analyses.devices import device
    s = llama16[3].search
    dev = device("sm90")
    copies = [p for p in s.baseline.priced if p.region is None]
    assert copies  # the one-kernel-per-op partition writes the concatenation's slices out
    for p in s.baseline.priced + s.best.priced:
        assert p.cost is not None and p.cost.time_est_us >= dev.launch_us, p.kernel.name
    for p in copies:
        assert p.cost.bytes > 0 and p.cost.time_est_us == pytest.approx(dev.launch_us + p.cost.bytes / (dev.dram_tbps * 1e6))
    assert not any(p.region is None for p in s.best.priced)
    assert len(s.best.priced) <= 6 and s.best.total <= s.baseline.total


def test_fp16_qkv_projections_run_as_one_gemm(llama16):
    """The half-precision layer's Q/K/V projections run as the one sibling GEMM (rules/siblings.egg): the
    attention kernel reads every computed operand from one kernel. Kept cut, the concatenation is the only home
    of the values it computes (search/sites.py masks): before, the rotary halves read the fp32 projections by
    fused views from outside it, so Q and K stayed GEMMs of their own (8 kernels; LLaMA-2-7B dims 10 a layer)."""
    import polysat
    ks = polysat.kernels(llama16[3])
    writer = {t: k["name"] for k in ks for t in k["writes"]}
    (attn,) = [k for k in ks if any("Softmax" in op for op in k["ops"])]
    producers = {writer[t] for t in attn["reads"] if t in writer}
    assert len(producers) == 1, [k["ops"] for k in ks]
    (qkv,) = [k for k in ks if k["name"] in producers]
    assert sum(1 for t in qkv["reads"] if t.startswith("w_")) >= 3, qkv
    assert len(ks) <= 6, [k["ops"] for k in ks]
