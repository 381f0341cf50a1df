"""Generated models never crash polysat: thousands of small Frontend IR graphs, built from the op table
itself (every op, its declared attributes with good and bad values, unknown attributes, every dtype,
symbolic sizes with huge coefficients, names with control characters), go through the CLI's own error
path (``polysat compile`` then ``polysat run``, in-process). Each ends with exit status 0 or 1, and a 1
carries a coded diagnostic of the user's input: never a traceback, never E1999 InternalError.

A second, smaller campaign sends generated models through the e-graph, Poly Core and the regions
(``--cost=model``), where huge symbolic sizes used to reach isl.
"""
from __future__ import annotations

import atexit
import functools
import importlib.util
import json
import math
import os
import pathlib
import shutil
import tempfile

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from polysat.frontend.lower import op_table
from polysat.frontend.lower_elementwise import FNS

_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)

OPS = sorted(op_table())
DTYPES = ["fp16", "bf16", "fp32", "fp32", "i32", "bool"]
DIMS = st.one_of(st.sampled_from([1, 2, 3, 4]), st.sampled_from(["M", "N", "2*M", "M+1"]),
                 st.just("M*4611686018427387904"), st.just(2 ** 40))
NAMES = st.one_of(st.sampled_from(["x", "y", "q_proj", "ln1", "t0", "t1", "t2"]),
                  st.sampled_from(["a\nb", "tab\there", "", "é", "nul\x00", " "]))
# values an attribute may take: plausible ones for each kind, and nonsense
SMALL_INT = st.integers(-3, 4)
INT_LIST = st.lists(st.one_of(SMALL_INT, st.sampled_from(["M", "N"])), min_size=0, max_size=4)
NONSENSE = st.one_of(st.none(), st.booleans(), st.just({}), st.just("relu"), st.just(float("nan")), st.just(2 ** 70))


@functools.lru_cache(maxsize=None)
def _value_for(kind: str):
    if kind == "bool":
        return st.booleans()
    if "dtype" in kind or kind.startswith("fp16"):
        return st.sampled_from(["fp16", "bf16", "fp32", "i32", "bool", "fp8"])
    if "|" in kind and '"' in kind:
        return st.sampled_from([s.strip().strip('"') for s in kind.split("|")])
    if kind.startswith("sum"):
        return st.sampled_from(["sum", "max", "min", "mean", "prod"])
    if "[[lo, hi]]" in kind:
        return st.lists(st.lists(st.one_of(st.integers(-1, 2), st.just("M")), min_size=2, max_size=2), max_size=4)
    if kind.startswith("number"):
        return st.sampled_from([0.5, 1e-5, -1.0, 0, 3])
    if kind.startswith("int") and "[" not in kind:
        return SMALL_INT
    if kind.startswith(" | ".join(FNS[:2])):
        return st.sampled_from(list(FNS) + ["softplus"])
    return st.one_of(SMALL_INT, INT_LIST)


@st.composite
def attrs_for(draw, op: str, wild: bool, fn: "str | None" = None) -> dict:
    """Required attributes always, optional ones sometimes; wild: nonsense values and unknown names too."""
    table = (op_table()[op][2] or {}) if op in op_table() else {}
    out = {}
    for key, spec in table.items():
        if key == "fn" or (not spec.required and draw(st.integers(0, 2)) > 0) or (spec.fns and fn not in spec.fns
                                                                                   and not wild):
            continue
        if not wild and key in TAME:
            out[key] = draw(TAME[key])
            continue
        out[key] = draw(_wild_value(spec.kind) if wild else _value_for(spec.kind))
    if wild and draw(st.integers(0, 3)) == 0:
        out[draw(st.sampled_from(["transpose_b", "axis", "alpha", "to"]))] = draw(NONSENSE)
    return out


TAME = {k: st.sampled_from(v) for k, v in {
    "axes": [[-1], [0], 0], "axis": [-1, 0], "kernel": [1, [1, 1]], "starts": [[0]], "ends": [[1], [-1]],
    "steps": [[1]], "stride": [1], "dilation": [1], "pad": [0], "perm": [[0]], "shape": [[-1], [1, -1]],
    "pads": [[[0, 1]]], "groups": [1], "keepdim": [True, False]}.items()}
PICK = st.integers(0, 2 ** 16)  # an index into a list that grows while a model is drawn
DICE = st.integers(0, 5)


@functools.lru_cache(maxsize=None)
def _wild_value(kind: str):
    return st.one_of(_value_for(kind), NONSENSE)
UNARY = ("neg", "relu", "exp2", "log2", "sqrt", "rsqrt", "recip", "exp", "log", "sigmoid", "silu", "tanh", "gelu",
         "cast")


@st.composite
def small_model(draw) -> dict:
    """1-3 inputs of rank 0-4 and 1-4 nodes, each reading earlier tensors. A third of the models are
    wild (any dtype, shape, attribute value or name); the rest share one float dtype and one shape."""
    wild = draw(st.integers(0, 2)) == 0
    tensors, inputs = {}, []
    shape = draw(st.lists(DIMS, min_size=1, max_size=4))
    dtype = draw(st.sampled_from(["fp16", "bf16", "fp32"]))
    for k in range(draw(st.integers(1, 3))):
        name = draw(NAMES) if wild and draw(st.integers(0, 3)) == 0 else f"in{k}"
        tensors[name] = {"dtype": draw(st.sampled_from(DTYPES)) if wild else dtype,
                         "shape": draw(st.lists(DIMS, min_size=0, max_size=4)) if wild else shape}
        inputs.append(name)
    avail = list(dict.fromkeys(inputs))
    graph = []
    for k in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(OPS + ["Elementwise"] * 6 + ["Conv3D"] * wild if wild else
                                  ["Elementwise"] * 8 + ["Softmax", "Reduce", "LayerNorm", "GEMM", "Flip", "Slice",
                                                         "Reshape", "Pad", "Transpose"]))
        lo, hi = op_table()[op][1] if op in op_table() else (1, 1)
        node = {"op": op, "name": draw(NAMES) if wild and draw(st.integers(0, 3)) == 0 else f"n{k}",
                "inputs": [avail[draw(PICK) % len(avail)] for _ in range(draw(st.integers(lo, hi)))],
                "outputs": [f"t{k}"]}
        fn = draw(st.sampled_from(list(FNS) + ["softplus"] * wild)) if op == "Elementwise" else None
        node["attrs"] = draw(attrs_for(op, wild, fn))
        if op == "Elementwise":
            node["fn"] = fn
            n_in = 3 if fn == "where" else 1 if fn in UNARY else 2
            node["inputs"] = [avail[draw(PICK) % len(avail)] for _ in range(n_in + (wild and draw(st.integers(0, 5)) == 0))]
        graph.append(node)
        avail.append(f"t{k}")
    outs = [graph[-1]["outputs"][0]] + ([avail[-2]] if len(avail) > 1 and draw(st.booleans()) else [])
    return {"signature": {"inputs": [{"tensor": t} for t in inputs], "outputs": [{"tensor": t} for t in outs]},
            "tensors": tensors, "graph": graph}


def _inputs(doc: dict, rng) -> "dict | None":
    """Random inputs (symbols M = N = 3), or None when one would be too big to make here."""
    out = {}
    for e in doc["signature"]["inputs"]:
        t = doc["tensors"][e["tensor"]]
        shape = tuple(d if isinstance(d, int) else 3 if d in ("M", "N") else 6 if d == "2*M" else 4 for d in t["shape"])
        if math.prod(shape) > 2 ** 16:
            return None
        x = rng.standard_normal(shape)
        out[e["tensor"]] = x > 0 if t["dtype"] == "bool" else x.astype(np.int32 if t["dtype"] == "i32" else np.float32)
    return out


def _clean(rc: int, stdout: str, stderr: str, doc: dict, what: str) -> None:
    text = stdout + stderr
    ctx = f"{what} {json.dumps(doc)[:600]}"
    assert rc in (0, 1), f"{ctx}: exit status {rc}"
    assert "Traceback" not in text, f"{ctx}: a traceback reached the user\n{text[-600:]}"
    if rc == 1:
        diags = oracle.diagnostics(stdout)
        assert diags, f"{ctx}: exit 1 without a coded diagnostic\n{text[-600:]}"
        assert not [d for d in diags if d["code"] == "E1999"], f"{ctx}: internal error {diags[0]['why']}"


_DIR = tempfile.mkdtemp(prefix="polysat_fuzz_")
atexit.register(shutil.rmtree, _DIR, True)
_STATS = {"models": 0, "compiled": 0, "ran": 0}


@settings(max_examples=int(os.environ.get("POLYSAT_FUZZ_MODELS", "2000")), deadline=None, derandomize=True,
          database=None, suppress_health_check=list(HealthCheck))
@given(small_model(), st.integers(0, 2 ** 16))
def test_generated_models_compile_and_run_without_crash(doc, seed):
    path = os.path.join(_DIR, "m.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    _STATS["models"] += 1
    rc, out, err = oracle.cli(["compile", path, "--json", "--dump=tiny", "--out", _DIR])
    _clean(rc, out, err, doc, "compile")
    if rc != 0:
        return
    _STATS["compiled"] += 1
    ins = _inputs(doc, np.random.default_rng(seed))
    if ins is None:
        return
    np.savez(os.path.join(_DIR, "in.npz"), **ins)
    rc, out, err = oracle.cli(["run", path, "--json", "--inputs", os.path.join(_DIR, "in.npz"),
                               "--out", os.path.join(_DIR, "out.npz")])
    _clean(rc, out, err, doc, "run")
    _STATS["ran"] += rc == 0


def test_the_campaign_ran_thousands_of_models_and_many_compiled():
    """Guards the campaign's reach: at least 2,000 models, a good share of them valid."""
    if _STATS["models"] == 0:  # run alone: the campaign has not run in this process
        test_generated_models_compile_and_run_without_crash()
    assert _STATS["models"] >= int(os.environ.get("POLYSAT_FUZZ_MODELS", "2000"))
    assert _STATS["compiled"] >= _STATS["models"] // 10, _STATS
    assert _STATS["ran"] >= _STATS["compiled"] // 4, _STATS


@settings(max_examples=12, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(small_model())
def test_generated_models_through_the_egraph_and_poly_core(doc):
    path = os.path.join(_DIR, "e.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    rc, out, err = oracle.cli(["compile", path, "--json", "--cost=model", "--dump=region,analysis", "--out", _DIR])
    _clean(rc, out, err, doc, "compile --cost=model")
