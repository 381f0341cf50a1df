"""torch.export importer and the torch.compile backend (frontend/torch_export.py, torch_compile.py) on
the four small architectures of examples/torch_models.py. Oracle: torch eager. torch comes with the test extra, so these tests run (never skip) in CI."""
from __future__ import annotations

import io
import logging
import pathlib
import tomllib

import numpy as np
import pytest
import torch

from polysat.cli import TARGETS
from polysat.commands.torch_compile import polysat_backend
from polysat.examples.torch_models import MODELS, build
from polysat.frontend import with_parameters
from polysat.frontend.torch_export import import_exported
from polysat.ir.diagnostics import PolysatError
from polysat.pipeline import Compilation


@pytest.mark.parametrize("name", sorted(MODELS))
def test_torch_export_model_matches_eager(name):
    m, args = build(name)
    with torch.no_grad():
        want = m(*args).numpy()
    ep = torch.export.export(m, args)
    doc = import_exported(ep)
    c = Compilation(doc, cost="model")
    feeds = with_parameters(doc, {e["tensor"]: a.numpy() for e, a in
                                  zip([i for i in doc["signature"]["inputs"] if i.get("role") != "param"], args)})
    for target in ("reference", "playback"):
        got = TARGETS[target](c, feeds)[doc["signature"]["outputs"][0]["tensor"]]
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3, err_msg=f"{name} on {target}")


def test_torch_compile_backend_runs_through_polysat(caplog, monkeypatch):
    import polysat.commands.torch_compile as tc
    compiled_graphs, real = [], tc.compile_graph

    def counting(gm, inputs, target, cost, consts=None):
        compiled_graphs.append(target)
        return real(gm, inputs, target, cost, consts)
    monkeypatch.setattr(tc, "compile_graph", counting)
    m, args = build("gpt2_block")
    torch._dynamo.reset()
    with torch.no_grad():
        want = m(*args)
        compiled = torch.compile(m, backend=polysat_backend, options={"target": "playback", "cost": "model"})
        with caplog.at_level(logging.WARNING, logger="polysat.torch"):
            got = compiled(*args)
    assert compiled_graphs == ["playback"]
    assert not [r for r in caplog.records if "eagerly" in r.getMessage()], caplog.text
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-3, atol=1e-3)


def test_torch_compile_falls_back_to_eager_with_a_logged_reason(caplog):
    class Products(torch.nn.Module):
        def forward(self, x):
            return torch.cumprod(x, dim=-1) * 2.0
    x = torch.randn(4, 8)
    torch._dynamo.reset()
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="polysat.torch"):
        got = torch.compile(Products(), backend=polysat_backend)(x)
    np.testing.assert_allclose(got.numpy(), (torch.cumprod(x, dim=-1) * 2.0).numpy())
    assert any("E1102" in r.getMessage() and "cumprod" in r.getMessage() for r in caplog.records), caplog.text


class _Rotary(torch.nn.Module):
    """LLaMA's rotary tables: cos and sin of a buffer times positions made in the graph (polysat takes cos/sin
    only where they fold at import, so the buffer must be a constant of the graph), and a plain tensor attribute
    (GPT-2's kind: a constant dynamo keeps as an attribute, read while AOTAutograd's fake mode is on)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (100.0 ** (torch.arange(0, 8, 2).float() / 8)))
        self.w = torch.nn.Parameter(torch.randn(8, 8))
        self.scale = torch.tensor([0.5])

    def forward(self, x):
        pos = torch.arange(x.shape[1], dtype=torch.float32)
        f = pos[:, None] * self.inv_freq[None, :]
        emb = torch.cat([f, f], dim=-1)
        return (x @ self.w) * emb.cos() + x * emb.sin() * self.scale


def test_torch_compile_binds_parameters_and_buffers_as_constants(caplog):
    """No fallback on the rotary tables; a buffer written in place after compiling is compiled again, never
    stale (eager torch the oracle both times)."""
    m, x = _Rotary().eval(), torch.randn(1, 6, 8)
    torch._dynamo.reset()
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="polysat.torch"):
        compiled = torch.compile(m, backend=polysat_backend, options={"target": "playback"})
        np.testing.assert_allclose(compiled(x).numpy(), m(x).numpy(), rtol=1e-4, atol=1e-5)
        m.inv_freq.mul_(3.0)
        np.testing.assert_allclose(compiled(x).numpy(), m(x).numpy(), rtol=1e-4, atol=1e-5)
    assert not [r for r in caplog.records if "eagerly" in r.getMessage()], caplog.text


def test_unsupported_aten_op_is_a_diagnostic():
    class Products(torch.nn.Module):
        def forward(self, x):
            return torch.cumprod(x, dim=-1)
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ranker = Products()

        def forward(self, x):
            return self.ranker(x) * 2
    ep = torch.export.export(Model(), (torch.randn(2, 5),))
    with pytest.raises(PolysatError) as ei:
        import_exported(ep)
    d = ei.value.diagnostics[0]
    assert d.code == "E1102" and "cumprod" in d.why
    # the user's module and line, not only the FX node; a short suggestion, not every op mapped
    assert "in module ranker (Products)" in d.why and "test_torch_import.py" in d.why, d.why
    assert len(d.suggestion) < 300, d.suggestion


def test_embedding_lookup_by_int64_token_ids():
    """nn.Embedding and index_select over int64 ids are a run-time
    Gather: the ids are narrowed to i32 at import and checked when they arrive; an id beyond int32 is E1011."""
    class Emb(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.e = torch.nn.Embedding(10, 4)

        def forward(self, i, j):
            return self.e(i) * 2.0 + torch.index_select(self.e.weight, 0, j)
    torch.manual_seed(0)
    m, args = Emb().eval(), (torch.tensor([[1, 9, 0, 3]]), torch.tensor([2, 9, 5, 0]))
    with torch.no_grad():
        want = m(*args).numpy()
    doc = import_exported(torch.export.export(m, args))
    names = [i["tensor"] for i in doc["signature"]["inputs"] if i.get("role") != "param"]
    assert [doc["tensors"][n]["dtype"] for n in names] == ["i32", "i32"]
    c = Compilation(doc, cost="model")
    feeds = {n: a.numpy() for n, a in zip(names, args)}
    for target in ("reference", "playback"):
        got = TARGETS[target](c, with_parameters(doc, feeds))[doc["signature"]["outputs"][0]["tensor"]]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=target)
    with pytest.raises(PolysatError) as ei:
        with_parameters(doc, {**feeds, names[0]: np.array([[1, 2**40, 0, 3]], dtype=np.int64)})
    assert ei.value.diagnostics[0].code == "E1011"


def test_3d_conv_and_pools_match_eager():
    """Conv3d (groups, stride, padding, dilation), MaxPool3d and AvgPool3d through torch.export."""
    class Vol(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv3d(4, 6, 3, stride=(1, 2, 1), padding=1, dilation=(1, 1, 2), groups=2)
            self.mp, self.ap = torch.nn.MaxPool3d(2, stride=(2, 1, 2)), torch.nn.AvgPool3d(2, padding=1)

        def forward(self, x):
            y = torch.relu(self.conv(x))
            return self.mp(y).sum() + self.ap(y).mean(dim=(2, 3, 4))
    torch.manual_seed(1)
    m, x = Vol().eval(), torch.randn(1, 4, 5, 8, 9)
    with torch.no_grad():
        want = m(x).numpy()
    doc = import_exported(torch.export.export(m, (x,)))
    assert {n["op"] for n in doc["graph"]} >= {"Conv3D", "MaxPool3D", "AvgPool3D"}
    c = Compilation(doc, cost="model")
    name = [i for i in doc["signature"]["inputs"] if i.get("role") != "param"][0]["tensor"]
    for target in ("reference", "playback"):
        got = TARGETS[target](c, with_parameters(doc, {name: x.numpy()}))[doc["signature"]["outputs"][0]["tensor"]]
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3, err_msg=target)


def test_backend_is_registered_by_entry_point():
    """pyproject declares the torch_dynamo_backends entry point, and it names this backend."""
    root = pathlib.Path(__file__).resolve().parents[1]
    eps = tomllib.loads((root / "pyproject.toml").read_text())["project"]["entry-points"]["torch_dynamo_backends"]
    mod, _, fn = eps["polysat"].partition(":")
    import importlib
    assert getattr(importlib.import_module(mod), fn) is polysat_backend


def test_a_batched_linear_is_one_contraction_with_its_layernorm():
    """torch.export decomposes ``linear`` of a [2, 16, 64] input into a reshape to [32, 64], ``addmm`` and a reshape
    back. Computed on the batched input, as the ONNX exporter's MatMul is, LayerNorm + Linear is one kernel, as on the
    ONNX path; through the reshape the fusion rules read LayerNorm's rows merged across the batch as many-to-many
    (2 kernels). The numbers match eager torch either way."""
    import onnx as onnx_

    from polysat.frontend.onnx import import_onnx

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln, self.fc = torch.nn.LayerNorm(64), torch.nn.Linear(64, 128)

        def forward(self, x):
            return self.fc(self.ln(x))
    torch.manual_seed(0)
    m, x = M().eval(), torch.randn(2, 16, 64)
    doc = import_exported(torch.export.export(m, (x,)))
    c = Compilation(doc, cost="model")
    f = io.BytesIO()
    torch.onnx.export(m, (x,), f, dynamo=False, opset_version=17)
    assert len(c.priced) == len(Compilation(import_onnx(onnx_.load_from_string(f.getvalue())), cost="model").priced) == 1
    got = TARGETS["playback"](c, with_parameters(doc, {doc["signature"]["inputs"][0]["tensor"]: x.numpy()}))
    np.testing.assert_allclose(got[doc["signature"]["outputs"][0]["tensor"]], m(x).detach().numpy(), rtol=1e-4, atol=1e-4)


class _Attention(torch.nn.Module):
    """Q/K/V projections of [batch, 16, 64] into 2 heads of 32, scores = first(q, k), P @ V = second(p, v)."""

    def __init__(self, batch: int, first, second):
        super().__init__()
        self.batch, self.first, self.second = batch, first, second
        self.q, self.k, self.v = (torch.nn.Linear(64, 64) for _ in range(3))

    def forward(self, x):
        def heads(t):
            return t.view(self.batch, 16, 2, 32).transpose(1, 2)
        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        w = torch.softmax(self.first(q, k) * 0.17, -1)
        return self.second(w, v).transpose(1, 2).reshape(self.batch, 16, 64)


def _attention_compiled(batch: int, first, second) -> tuple:
    """(the document, its Compilation, the ONNX path's kernels) of _Attention; playback checked against eager torch."""
    import onnx as onnx_

    from polysat.frontend.onnx import import_onnx
    torch.manual_seed(0)
    m, x = _Attention(batch, first, second).eval(), torch.randn(batch, 16, 64)
    doc = import_exported(torch.export.export(m, (x,)))
    c = Compilation(doc, cost="model")
    got = TARGETS["playback"](c, with_parameters(doc, {doc["signature"]["inputs"][0]["tensor"]: x.numpy()}))
    np.testing.assert_allclose(got[doc["signature"]["outputs"][0]["tensor"]], m(x).detach().numpy(), rtol=1e-4, atol=1e-4)
    f = io.BytesIO()
    torch.onnx.export(m, (x,), f, dynamo=False, opset_version=17)
    return doc, c, len(Compilation(import_onnx(onnx_.load_from_string(f.getvalue())), cost="model").priced)


@pytest.mark.parametrize("batch", [1, 2])
def test_attentions_4d_matmuls_are_one_kernel_as_from_onnx(batch):
    """torch.export decomposes ``matmul`` of [B, H, S, D] tensors into reshapes merging B and H, ``bmm`` and a reshape
    back; the softmax between the two matmuls stays 4-D. Computed on the 4-D tensors, as the ONNX exporter's MatMul
    is, the softmax sits in the contraction's own axes and attention (projections included) compiles to the kernels
    the ONNX path gives (2; through the merged batch it was 5). The numbers match eager torch."""
    _, c, onnx_kernels = _attention_compiled(batch, lambda q, k: torch.matmul(q, k.transpose(2, 3)), torch.matmul)
    assert len(c.priced) == onnx_kernels == 2


@pytest.mark.parametrize("first, second", [("bhqd,bhkd->bhqk", "bhqk,bhkd->bhqd"), ("...qd,...kd->...qk", "...qk,...kd->...qd")])
def test_einsum_attention_is_kept_whole(first, second):
    """torch.export decomposes ``einsum`` into permutes, size-1 dims and a ``bmm`` whose batch no longer lines up with
    the softmax between the two products (ProphetNet: 63 kernels, 47 from ONNX). Kept whole, as the ONNX exporter's
    Einsum (an ellipsis too), attention with its projections is the ONNX path's 2 kernels; the
    numbers match eager torch."""
    doc, c, onnx_kernels = _attention_compiled(2, lambda q, k: torch.einsum(first, q, k),
                                               lambda p, v: torch.einsum(second, p, v))
    assert any(n["op"] == "Einsum" for n in doc["graph"])
    assert len(c.priced) == onnx_kernels == 2

