"""Regions -> ConvSpec / ConvPoolSpec (backend/conv/bind.py, backend/conv_pool/bind.py).

The recognised spec's numpy meaning (conv_reference / conv_pool_reference) must equal CPU playback of the
region (ir/playback.py), rtol = atol = 1e-3:
* the examples (conv3x3_s2_silu; conv_relu_maxpool, fused into one region by the model cost);
* generated Conv2D models (stride, dilation, asymmetric pad, groups, depthwise, bias / activation /
  residual epilogues, fp16 / bf16) through the real frontend and extraction;
* conv + max-pool models through the extraction, MaxPool2D padding (-inf; the ResNet stem's 3x3/2 pad 1)
  included: one region, bound as the conv_pool kind;
* conv + max-pool regions in the extracted form for generated pool geometries, padding and dilation
  included.
Regions that are not a conv (a GEMM, a softmax, a guard that zeroes too much, W read transposed) are
E1504 NoKernelTemplate with the reason.
"""
from __future__ import annotations

import importlib.util
import pathlib

import copy
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from polysat.backend.common.region_match import NoBind
from polysat.backend import kinds
from polysat.backend.conv.bind import bind as conv_binding
from polysat.backend.conv_pool.bind import bind as conv_pool_binding
from polysat.backend.conv_pool.reference import reference as conv_pool_reference, random_inputs as random_conv_pool_inputs
from polysat.backend.conv_pool.spec import ConvPoolSpec
from polysat.backend.conv.reference import reference as conv_reference, random_inputs as random_conv_inputs
from polysat.backend.conv.spec import ConvSpec
from polysat.ir.diagnostics import PolysatError
from polysat.ir.playback import playback
from polysat.ir.region import region_json
from polysat.ir.region_load import region_from_json
from polysat.pipeline import Compilation

TOL = dict(rtol=1e-3, atol=1e-3)


def _close(got, want):
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), **TOL)


def check_meaning(region, binding, reference, inputs_of):
    spec = binding.spec
    ins = inputs_of(spec)
    got = playback([region], {t: ins[name] for name, t in binding.tensors}, keep_all=True)[spec.c]
    want = reference(spec, ins)
    assert got.shape == want.shape == spec.shapes()[spec.c]
    _close(got, want)


_oracle_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_oracle_spec)
_oracle_spec.loader.exec_module(oracle)
conv_model = oracle.conv_model


def regions_of(model):
    return Compilation(model, cost="model").regions


# ---- the examples ------------------------------------------------------------------------------------

def test_conv_example_binds_as_the_conv_kind_with_its_meaning():
    (r,) = regions_of("examples/conv3x3_s2_silu.json")
    kind, b = kinds.bind(r)
    assert kind.name == "conv"
    s = b.spec
    assert (s.stride, s.pad[0], s.pad[2], s.groups, s.out_hw) == ((2, 2), 1, 1, 1, (16, 16))
    assert [op.kind for op in s.epilogue] == ["bias", "silu"]
    check_meaning(r, b, conv_reference, lambda spec: random_conv_inputs(spec, 1))


def test_conv_relu_maxpool_example_is_one_conv_pool_kernel():
    (r,) = regions_of("examples/conv_relu_maxpool.json")
    kind, b = kinds.bind(r)
    assert kind.name == "conv_pool"
    s = b.spec
    assert isinstance(s, ConvPoolSpec)
    assert (s.kernel, s.stride, s.pad, s.conv_hw, s.out_hw) == ((2, 2), (2, 2), (0, 0), (34, 34), (17, 17))
    assert [op.kind for op in s.conv.epilogue] == ["relu"]
    check_meaning(r, b, conv_pool_reference, lambda spec: random_conv_pool_inputs(spec, 2))


# ---- generated convs through the frontend ----------------------------------------------------------------

@st.composite
def conv_models(draw):
    groups = draw(st.sampled_from([1, 1, 2, 3, "dw"]))
    cg = 1 if groups == "dw" else draw(st.integers(1, 4))
    c = draw(st.integers(2, 5)) if groups == "dw" else cg * groups
    g = c if groups == "dw" else groups
    co = g * draw(st.integers(1, 3))
    kh = draw(st.integers(1, 3))
    kw = draw(st.integers(1 if (c // g) * kh > 1 else 2, 3))  # K = 1 would be no contraction
    stride = draw(st.sampled_from([[1, 1], [2, 2], [1, 2], [3, 1]]))
    dil = draw(st.sampled_from([[1, 1], [2, 2], [1, 2]]))
    pad = draw(st.sampled_from([[0, 0, 0, 0], [1, 1, 1, 1], [0, 1, 2, 0], [2, 0, 1, 1]]))
    h, w = draw(st.integers(dil[0] * (kh - 1) + 1, 12)), draw(st.integers(dil[1] * (kw - 1) + 1, 12))
    n = draw(st.integers(1, 2))
    epi = draw(st.sampled_from(["none", "bias_relu", "silu", "bias_gelu", "relu_residual"]))
    dt = draw(st.sampled_from(["fp16", "bf16"]))
    return conv_model([n, c, h, w], [co, c // g, kh, kw], {"stride": stride, "pad": pad, "dilation": dil, "groups": g},
                      dt=dt, bias=epi.startswith("bias"), act={"bias_relu": "relu", "silu": "silu", "bias_gelu": "gelu",
                                                                "relu_residual": "relu"}.get(epi),
                      residual=epi == "relu_residual")


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conv_models(), st.integers(0, 1000))
def test_generated_conv_regions_mean_their_conv_spec(model, seed):
    regions = regions_of(model)
    assert len(regions) == 1, [r.name for r in regions]
    (r,) = regions
    kind, b = kinds.bind(r)
    assert kind.name == "conv"
    assert b.spec.groups == model["graph"][0]["attrs"]["groups"]
    check_meaning(r, b, conv_reference, lambda spec: random_conv_inputs(spec, seed))


@pytest.mark.parametrize("pool, act", [({"kernel": [2, 2], "stride": [2, 2]}, "relu"),
                                       ({"kernel": [3, 2], "stride": [2, 1]}, "relu"),
                                       ({"kernel": [2, 2], "stride": [2, 2]}, None),
                                       ({"kernel": [3, 3], "stride": [2, 2], "pad": [1, 1, 1, 1]}, "relu"),
                                       ({"kernel": [3, 2], "stride": [1, 2], "pad": [1, 0, 0, 1]}, None)])
def test_extracted_conv_pool_models_bind_as_one_kernel(pool, act):
    model = conv_model([2, 3, 11, 10], [4, 3, 3, 3], {"stride": [2, 1], "pad": [1, 1, 1, 1]}, bias=True, act=act, pool=pool)
    regions = regions_of(model)
    if len(regions) != 1:
        pytest.fail(f"the extraction split conv + pool into {len(regions)} regions")
    kind, b = kinds.bind(regions[0])
    assert kind.name == "conv_pool"
    check_meaning(regions[0], b, conv_pool_reference, lambda spec: random_conv_pool_inputs(spec, 5))


# ---- conv + pool regions in the extracted form, for generated geometries ------------------------------

def conv_pool_region(conv: ConvSpec, k, s, pad, d, bias: bool) -> dict:
    """The region JSON the extraction produces for Conv2D (+ bias) + ReLU + MaxPool2D, padding included:
    max over the window (r0, r1) of [pool guard ?] relu(sum over (r2, r3, r4) of guarded X * W [+ b]) : -inf."""
    (sh, sw), (dh, dw), (pt, _, pl, _) = conv.stride, conv.dilation, conv.pad
    ho, wo = conv.out_hw
    hp = (ho + 2 * pad[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    wp = (wo + 2 * pad[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    hc = f"{s[0]}*i2 + {d[0]}*r0 - {pad[0]}"
    wc = f"{s[1]}*i3 + {d[1]}*r1 - {pad[1]}"
    hx = f"{sh * s[0]}*i2 + {sh * d[0]}*r0 + {dh}*r3 - {sh * pad[0] + pt}"
    wx = f"{sw * s[1]}*i3 + {sw * d[1]}*r1 + {dw}*r4 - {sw * pad[1] + pl}"
    chan = "r2" if conv.groups == 1 else f"r2 + {conv.cg}*((i1)//{conv.cog})"

    def rng(e, hi):
        return [{"ge": [e, 0]}, {"ge": [f"{hi - 1} - ({e})", 0]}]

    def mem(shape, dt):
        return {"shape": shape, "dtype": dt, "alignment": 128, "noalias": True, "layout": {"kind": "row_major"}}
    xread = {"cast": [{"select": {"pred": {"and": rng(hx, conv.h) + rng(wx, conv.w)},
                                  "then": {"read": {"tensor": "X", "map": ["i0", chan, hx, wx]}},
                                  "else": {"const": 0.0, "dtype": "fp16"}}, "dtype": "fp16"}], "dtype": "fp32"}
    wread = {"cast": [{"read": {"tensor": "W", "map": ["i1", "r2", "r3", "r4"]}}], "dtype": "fp32"}
    val = {"reduce": {"op": "sum", "axes": ["r2", "r3", "r4"], "init": 0.0, "dtype": "fp32",
                      "body": {"mul": [xread, wread], "dtype": "fp32"}}}
    if bias:
        val = {"add": [val, {"cast": [{"read": {"tensor": "b", "map": ["i1"]}}], "dtype": "fp32"}], "dtype": "fp32"}
    val = {"relu": [val], "dtype": "fp32"}
    body = {"select": {"pred": {"and": rng(hc, ho) + rng(wc, wo)}, "then": val, "else": {"const": "-inf", "dtype": "fp32"}},
            "dtype": "fp32"}
    inputs = [{"name": "X", "memref": mem([conv.n, conv.cin, conv.h, conv.w], "fp16")},
              {"name": "W", "memref": mem([conv.co, conv.cg, conv.kh, conv.kw], "fp16")}]
    if bias:
        inputs.append({"name": "b", "memref": mem([conv.co], "fp16")})
    return {"name": "k0", "iters": [{"name": f"i{j}", "size": v} for j, v in enumerate((conv.n, conv.co, hp, wp))],
            "reduce_axes": [{"name": f"r{j}", "size": v} for j, v in enumerate((*k, conv.cg, conv.kh, conv.kw))],
            "inputs": inputs,
            "outputs": [{"name": "P", "memref": mem([conv.n, conv.co, hp, wp], "fp16"), "materialize": "gmem",
                         "program_output": True}],
            "lets": [{"let": "n1", "expr": {"reduce": {"op": "max", "axes": ["r0", "r1"], "init": "-inf", "dtype": "fp32",
                                                       "body": body}}}],
            "yield": [{"from": "n1", "to": "P", "cast": "fp16", "axes": ["i0", "i1", "i2", "i3"]}]}


@st.composite
def pool_geometries(draw):
    groups = draw(st.sampled_from([1, 2]))
    cg, cog = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    conv = ConvSpec("cp", draw(st.integers(1, 2)), cg * groups, draw(st.integers(7, 14)), draw(st.integers(7, 14)),
                    cog * groups, kh, kw, stride=draw(st.sampled_from([(1, 1), (2, 2), (1, 2)])),
                    pad=draw(st.sampled_from([(0, 0, 0, 0), (1, 1, 1, 1), (1, 0, 0, 1)])),
                    dilation=draw(st.sampled_from([(1, 1), (2, 1)])), groups=groups)
    k = (draw(st.integers(2, 3)), draw(st.integers(1, 3)))
    s = (draw(st.integers(1, 3)), draw(st.integers(1, 2)))
    d = (draw(st.integers(1, 2)), 1)
    pad = (draw(st.integers(0, k[0] // 2)), draw(st.integers(0, k[1] // 2)))
    return conv, k, s, pad, d


@settings(max_examples=25, deadline=None)
@given(pool_geometries(), st.booleans(), st.integers(0, 1000))
def test_conv_pool_regions_mean_their_conv_pool_spec(geo, bias, seed):
    conv, k, s, pad, d = geo
    ho, wo = conv.out_hw
    if any((n + 2 * p - dd * (kk - 1) - 1) < 0 for n, p, dd, kk in ((ho, pad[0], d[0], k[0]), (wo, pad[1], d[1], k[1]))):
        return  # the pool window does not fit this conv output
    r = region_from_json(conv_pool_region(conv, k, s, pad, d, bias))
    kind, b = kinds.bind(r)
    assert kind.name == "conv_pool"
    sp = b.spec
    assert sp.kernel == k and sp.out_hw == tuple(r.axis_sizes[a] for a in ("i2", "i3")) and sp.conv.groups == conv.groups
    check_meaning(r, b, conv_pool_reference, lambda spec: random_conv_pool_inputs(spec, seed))


# ---- not a conv --------------------------------------------------------------------------------------

def _edit(region, fn):
    doc = copy.deepcopy(region_json(region))
    fn(doc)
    return region_from_json(doc)


def _why(fn, region) -> str:
    """The recogniser's typed no (NoBind) and its reason."""
    no = fn(region)
    assert isinstance(no, NoBind), no
    return no.reason


def test_regions_that_are_not_convs_are_e1504_with_the_reason():
    (conv,) = regions_of("examples/conv3x3_s2_silu.json")
    text = json.dumps(region_json(conv))
    assert '"ge"' in text

    def tighter_guard(doc):  # one more zero row than the padding: not the conv's meaning
        s = json.dumps(doc).replace('"2*i2 + r1 - 1", 0', '"2*i2 + r1 - 2", 0', 1)
        doc.clear()
        doc.update(json.loads(s))
    assert "pad guard" in _why(conv_binding, _edit(conv, tighter_guard))

    def transposed_w(doc):
        s = json.dumps(doc).replace('"map": ["i1", "r0", "r1", "r2"]', '"map": ["i1", "r0", "r2", "r1"]')
        doc.clear()
        doc.update(json.loads(s))
    assert "X's row index" in _why(conv_binding, _edit(conv, transposed_w))
    (gemm,) = regions_of("examples/gemm_bias_relu.json")
    assert "NCHW" in _why(conv_binding, gemm)
    assert "max-reduce" in _why(conv_pool_binding, conv)
    soft = regions_of("examples/softmax.json")
    assert "conv" in _why(conv_binding, soft[0])
    assert kinds.bind(soft[0])[0].name == "simt"  # the kind without tensor cores takes it
