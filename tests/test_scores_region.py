"""The two-region form of attention (P materialized, deferred: 2 regions connected), as
``--cost size`` extracts it: the first region (P = softmax(scale * Q K^T, masked), cast to P's type) binds
to the softmax_scores kind, the second (P V) to the GEMM kind; the ScoresSpec's numpy meaning equals CPU
playback of the region; regions of any other shape are E1504 from this kind with a reason. No GPU needed.
"""
from __future__ import annotations

import importlib.util
import json
import pathlib

import numpy as np
import pytest

from polysat.backend.common.region_match import NoBind
from polysat.backend import kinds, stages
from polysat.backend.scores.bind import bind as scores_binding
from polysat.backend.scores.reference import reference as scores_reference
from polysat.backend.scores.spec import ScoresSpec
from polysat.ir.diagnostics import PolysatError
from polysat.ir.dtypes import DType, round_to
from polysat.ir.playback import bind_region_symbols, playback
from polysat.ir.region import region_json
from polysat.ir.region_load import region_from_json
from polysat.pipeline import Compilation

_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)

EXAMPLE = str(pathlib.Path(__file__).resolve().parents[1] / "examples" / "attention.json")


def two_regions(dt: str, causal: bool, d: int, m, n, batch=("B", "H")):
    doc = oracle.model({"Q": (dt, [*batch, m, d]), "K": (dt, [*batch, n, d]), "V": (dt, [*batch, n, d])},
                       [oracle.node("Attention", ["Q", "K", "V"], "O", causal=causal)], ["O"], {"O": {"dtype": dt}})
    return Compilation(doc, cost="size").regions


# (dtype, causal, d, M, N, batch): static and symbolic sizes, M != N both ways (causal rows without keys)
CASES = [("fp16", True, 64, "M", "N", ("B", "H")), ("bf16", False, 128, "M", "N", ("B", "H")),
         ("fp16", False, 64, 70, 45, (2, 3)), ("bf16", True, 128, 37, 90, (2, 2)), ("fp16", True, 128, 50, 30, ("B", "H"))]
ENVS = [{"B": 1, "H": 2, "M": 67, "N": 131}, {"B": 2, "H": 1, "M": 130, "N": 70}, {}, {}, {"B": 2, "H": 1}]
# (static size-1 batch dims make the frontend drop the axis and recompute exp inside the row sum: neither this
# kind nor the GEMM kind binds those regions yet)


def _inputs(regions, env, seed):
    """Random program inputs for the regions' symbols (rounded to their types)."""
    rng = np.random.default_rng(seed)
    out = {}
    for r in regions:
        for b in r.inputs:
            if b.name in out or b.name in {o.name for x in regions for o in x.outputs}:
                continue
            shape = tuple(int(s) if isinstance(s, int) else int(s.evaluate(env)) for s in b.memref.shape)
            x = rng.uniform(-2, 2, size=shape).astype(np.float32)
            out[b.name] = np.asarray(round_to(x, b.memref.dtype)).astype(b.memref.dtype.np)
    return out


@pytest.mark.parametrize("case,env", list(zip(CASES, ENVS, strict=True)), ids=[f"{c[0]}-{'causal' if c[1] else 'full'}-d{c[2]}-{c[3]}x{c[4]}" for c in CASES])
def test_first_region_binds_and_its_meaning_is_playback(case, env):
    dt, causal, d, m, n, batch = case
    regions = two_regions(dt, causal, d, m, n, batch)
    assert len(regions) == 2
    (k0, b0), (k1, _) = (kinds.bind(r) for r in regions)
    assert (k0.name, k1.name) == ("softmax_scores", "gemm")
    spec = b0.spec
    assert spec.causal == causal and spec.d == d and spec.in_dtype == DType(dt) and spec.p_dtype == DType(dt)
    assert spec.m == m and spec.n == n and spec.batch == batch
    assert spec.scale == pytest.approx(d ** -0.5)
    inputs = _inputs(regions[:1], env, seed=d + len(env))
    env = bind_region_symbols(regions[:1], inputs)
    want = playback(regions[:1], inputs, keep_all=True)[spec.p].astype(np.float32)
    got = k0.reference(spec, b0.arrays(inputs, env), env).astype(np.float32).reshape(want.shape)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-3, atol=1e-3)
    if causal and isinstance(m, int) and isinstance(n, int) and m > n:
        assert np.isnan(want).any(), "rows that see no key are NaN in both"


def test_the_example_compiles_to_softmax_scores_and_gemm():
    regions = Compilation(EXAMPLE, cost="size").regions
    names = [k.name for k, _ in map(kinds.bind, regions)]
    assert names == ["softmax_scores", "gemm"]
    pj = json.loads(json.dumps(stages.plan_json(regions, "sm90")))
    k0 = pj["plans"][0]
    assert k0["kind"] == "softmax_scores" and k0["spec"]["causal"] is True
    assert k0["chosen"]["algo_choice"]["attention"] == "streaming_softmax_2pass"
    assert k0["chosen"]["skeleton"] == "sm80" and k0["chosen"]["arch"] == "sm90"
    assert any(p["key"].startswith("sm90_") and "no P-store mode" in p["why"] for p in k0["pruned"])
    gj = stages.gpu_json(regions, "sm80")
    ops = json.dumps(gj["kernels"][0])
    assert gj["kernels"][0]["kind"] == "softmax_scores" and '"StGlobalVec"' in ops and "sV" not in ops


def _why(region) -> str:
    no = scores_binding(region)
    assert isinstance(no, NoBind), no
    assert no.reason.startswith("not a softmax_scores region: ")
    return no.reason


def _edit(region, fn):
    doc = json.loads(json.dumps(region_json(region)))
    fn(doc["region"])
    return region_from_json(doc)


def _let(doc, name):
    return next(x for x in doc["lets"] if x["let"] == name)["expr"]


def test_other_regions_are_rejected_with_a_reason():
    regions = Compilation(EXAMPLE, cost="size").regions
    k0 = regions[0]
    assert "div" in _why(regions[1])  # P V: a GEMM, not a softmax
    lets = {x["let"]: x for x in region_json(k0)["region"]["lets"]}
    div = next(n for n, x in lets.items() if "div" in x["expr"])
    exp = next(n for n, x in lets.items() if "exp2" in x["expr"])
    mx = next(n for n, x in lets.items() if x["expr"].get("reduce", {}).get("op") == "max")
    mul_log2e = next(n for n, x in lets.items() if "mul" in x["expr"] and
                     any(isinstance(a, dict) and a.get("const") == pytest.approx(1.4426950408889634) for a in x["expr"]["mul"]))

    def plain_exp_scale(doc):  # exp2 of (s - max) times 2 instead of log2(e)
        next(a for a in _let(doc, mul_log2e)["mul"] if isinstance(a, dict))["const"] = 2.0
    assert "log2(e)" in _why(_edit(k0, plain_exp_scale))

    def min_not_max(doc):
        _let(doc, mx)["reduce"]["op"] = "min"
        _let(doc, mx)["reduce"]["init"] = "inf"
    assert "row max" in _why(_edit(k0, min_not_max))

    def unnormalised(doc):  # yield e itself (no division by the row sum)
        doc["yield"][0]["from"] = exp
    assert "not an fp32 div" in _why(_edit(k0, unnormalised))

    def other_mask(doc):  # j <= i: top-left aligned, not the frontend's bottom-right causal mask
        def walk(x):
            if isinstance(x, dict):
                if "ge" in x and isinstance(x["ge"], list) and isinstance(x["ge"][0], str):
                    x["ge"][0] = "m - n"
                for v in x.values():
                    walk(v)
            elif isinstance(x, list):
                for v in x:
                    walk(v)
        walk(doc["lets"])
    assert "causal mask" in _why(_edit(k0, other_mask))
    assert div  # the recogniser's entry point exists in the example


def test_a_plain_softmax_and_a_gemm_are_not_softmax_scores():
    softmax = oracle.model({"X": ("fp16", ["M", "N"])}, [oracle.node("Softmax", ["X"], "Y", axis=-1)], ["Y"],
                           {"Y": {"dtype": "fp16"}})
    (r,) = Compilation(softmax, cost="size").regions  # softmax(X): the right shape, but X is no Q K^T
    assert "not a scaled Q K^T contraction" in _why(r)
    gemm = oracle.model({"A": ("fp16", ["M", 64]), "W": ("fp16", [64, "N"])}, [oracle.node("GEMM", ["A", "W"], "Y")],
                        ["Y"], {"Y": {"dtype": "fp16"}})
    (r,) = Compilation(gemm, cost="size").regions
    _why(r)
    assert kinds.bind(r)[0].name == "gemm"


def test_spec_checks_and_json_round_trip():
    s = ScoresSpec("s", "M", 77, 64, batch=("B",), causal=True, scale=0.125, in_dtype=DType.bf16, p_dtype=DType.fp32)
    assert ScoresSpec.from_json(json.loads(json.dumps(s.to_json()))) == s
    assert s.shapes({"M": 5, "B": 2}) == {"Q": (2, 5, 64), "K": (2, 77, 64), "P": (2, 5, 77)}
    for bad in ({"d": 0}, {"in_dtype": DType.fp32}, {"p": "Q"}, {"scale": float("inf")}):
        with pytest.raises(PolysatError):
            ScoresSpec(**{**dict(name="s", m=4, n=4, d=64), **bad})
    rng = np.random.default_rng(0)
    x = {"Q": rng.normal(size=(2, 5, 64)).astype(np.float32), "K": rng.normal(size=(2, 77, 64)).astype(np.float32)}
    p = scores_reference(s, x, {"M": 5, "B": 2})
    assert p.shape == (2, 5, 77) and p.dtype == np.float32
    np.testing.assert_allclose(np.nansum(p, axis=-1), 1.0, rtol=1e-5)
