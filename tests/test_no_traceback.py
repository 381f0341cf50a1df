"""No model file, however broken, makes polysat crash: random mutations of valid models compile (and,
when they compile, run) with exit status 0 or 1, and every failure is a coded diagnostic of the user's
input -- never a traceback, never E1999 InternalError (which is a caught crash, a polysat bug).

Seeds are the shipped examples, one small model per Frontend IR op, and a Tiny IR document. A mutation
picks any place in the JSON tree and replaces, deletes, duplicates or cross-wires it (so names start
pointing at the wrong tensors and cycles appear), or damages the file's text (docs/DESIGN.md §Diagnostics).
"""
from __future__ import annotations

import copy
import importlib.util
import json
import pathlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from polysat.frontend import load_model
from polysat.ir.diagnostics import PolysatError
from polysat.ir.dtypes import DType
from polysat.ir.shapes import symbols
from polysat.ir.tiny_json import dump_tiny

_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)
model, node = oracle.model, oracle.node

ROOT = pathlib.Path(__file__).resolve().parent.parent
f16 = lambda *s: ("fp16", list(s))  # noqa: E731

ZOO = {
    "gemm_batched_1d": model({"A": f16(2, "M", "K"), "B": f16("K")}, [node("GEMM", ["A", "B"], "C", trans_a=False)],
                             ["C"]),
    "elementwise_mix": model({"A": f16(3, 4), "B": ("bf16", [4]), "Cd": ("bool", [3, 1])},
                             [node("Elementwise", ["A", "B"], "S", fn="pow"),
                              node("Elementwise", ["Cd", "S", "A"], "W", fn="where"),
                              node("Elementwise", ["W"], "G", fn="gelu", approximate="tanh"),
                              node("Elementwise", ["G", "B"], "Y", fn="ge"),
                              node("Elementwise", ["Y"], "Z", fn="cast", to="fp32")], ["Z", "G"]),
    "reduce_softmax_layernorm": model({"X": f16("R", 5, 6), "G": f16(6), "Bt": f16(6)},
                                      [node("Reduce", ["X"], "M", op="mean", axes=[0, -1], keepdim=True),
                                       node("Softmax", ["X"], "S", axis=1),
                                       node("LayerNorm", ["S", "G", "Bt"], "L", axis=-1, eps=1e-5)], ["M", "L"]),
    "conv_pool": model({"X": f16(1, 4, 9, 9), "W": f16(6, 2, 3, 3), "b": f16(6)},
                       [node("Conv2D", ["X", "W", "b"], "C", stride=[2, 1], pad=[1, 0, 1, 1], dilation=[1, 2], groups=2),
                        node("MaxPool2D", ["C"], "P", kernel=[2, 2], stride=[1, 2], pad=[1, 0, 1, 0])], ["P"],
                       {"P": {"dtype": "fp16", "shape": [1, 6, "Ho", "Wo"]}}),
    "attention_causal": model({"Q": f16(1, 2, "M", 8), "K": f16(1, 2, "N", 8), "V": f16(1, 2, "N", 4)},
                              [node("Attention", ["Q", "K", "V"], "O", causal=True, scale=0.3)], ["O"]),
    "movement": model({"X": f16(2, 3, 4)},
                      [node("Reshape", ["X"], "R", shape=[6, -1]), node("Transpose", ["R"], "T", perm=[1, 0]),
                       node("Expand", ["T"], "E", shape=[2, 4, 6]), node("Pad", ["E"], "P", pads=[[0, 1], [1, 0], [2, 2]],
                                                                          value=1.5),
                       node("Slice", ["P"], "S", starts=[-3, 1], ends=[10, 4], steps=[2, 1], axes=[2, 1]),
                       node("Flip", ["S"], "F", axes=[0, 2])], ["F"]),
}


def _seeds() -> list:
    out = [json.loads(p.read_text()) for p in sorted((ROOT / "examples").glob("*.json"))]
    out += list(ZOO.values())
    out += [dump_tiny(load_model(ZOO[k])) for k in ("conv_pool", "attention_causal", "movement")]
    return out


SEEDS = _seeds()

weird = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 40), st.sampled_from([0.5, -2.5, 1e-9, float("inf"), float("nan")]),
    st.sampled_from(["", "M", "K", "N", "Ho", "fp8", "bf16", "bool", "i32", "relu", "where", "Conv2D", "GEMM", "-1",
                     "M*2", "M//0", "2*M-1", "i0 + 1", "X", "C0", "NEG", "REDUCE"]),
    st.lists(st.integers(-2, 6), max_size=5), st.just({}), st.just([[0, 1], [1, 0]]),
)


def _paths(v, prefix=()) -> list:
    out = [prefix]
    if isinstance(v, dict):
        for k, x in v.items():
            out += _paths(x, prefix + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            out += _paths(x, prefix + (i,))
    return out


def _get(doc, path):
    for k in path:
        doc = doc[k]
    return doc


def _strings(doc) -> list:
    return sorted({v for p in _paths(doc) for v in [_get(doc, p)] if isinstance(v, str)}) or ["X"]


@st.composite
def mutated(draw):
    """A seed model with 1-2 structural mutations, or a damaged text; returned as file text."""
    doc = copy.deepcopy(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 2))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        how = draw(st.sampled_from(["replace", "replace", "rewire", "delete", "duplicate", "wrap"]))
        if not path:
            doc = copy.deepcopy(draw(weird)) if how == "replace" else [doc] if how == "wrap" else doc
            continue
        parent, key = _get(doc, path[:-1]), path[-1]
        if how == "replace":
            parent[key] = copy.deepcopy(draw(weird))  # strategies hand out shared objects
        elif how == "rewire":  # another name from the model: wrong tensors, cycles, duplicate ids
            parent[key] = draw(st.sampled_from(_strings(doc)))
        elif how == "delete":
            del parent[key]
        elif how == "duplicate" and isinstance(parent, list):
            parent.insert(key, copy.deepcopy(parent[key]))
        elif how == "duplicate":
            parent[key] = copy.deepcopy(draw(st.sampled_from([_get(doc, p) for p in paths])))
        else:
            parent[key] = [parent[key]]
    text = json.dumps(doc)
    cut = draw(st.sampled_from(["none"] * 8 + ["truncate", "insert"]))
    if cut == "truncate":
        text = text[:draw(st.integers(0, len(text)))]
    elif cut == "insert":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(["{", "]", ",", '"', "\\", "\x00", "é", "1e999"])) + text[at:]
    return text


def _inputs_for(text: str, rng) -> dict | None:
    """Random inputs for a model that compiles: symbols bound to 3; None if loading fails here."""
    try:
        prog = load_model(json.loads(text))
    except PolysatError:
        return None
    env = {s: 3 for n in prog.inputs for s in symbols(n.shape)}
    out = {}
    for n in prog.inputs:
        shape = tuple(d if isinstance(d, int) else int(d.evaluate(env)) for d in n.shape)
        if any(d < 1 for d in shape) or np.prod(shape) > 2**20:
            return None
        x = rng.standard_normal(shape)
        out[n.arg["tensor_id"]] = x > 0 if n.dtype == DType.bool else x.astype(np.int32 if n.dtype == DType.i32
                                                                               else np.float32)
    return out


def _assert_clean(rc: int, diags: list, text: str, what: str) -> None:
    assert rc in (0, 1), f"{what}: exit status {rc}\n{text[-800:]}"
    assert "Traceback" not in text, f"{what}: a traceback reached the user\n{text[-800:]}"
    if rc == 1:
        assert diags, f"{what}: failed without a coded diagnostic\n{text[-800:]}"
        internal = [d for d in diags if d["code"] == "E1999"]
        assert not internal, f"{what}: internal error (a crash) on a broken model: {internal[0]['why']}"


@settings(max_examples=200)
@given(mutated(), st.integers(0, 2**16))
def test_mutated_models_give_exit_status_0_or_1_and_never_crash(text, seed):
    rc, diags, out = oracle.compile_model(text, "--dump=frontend,tiny")
    _assert_clean(rc, diags, out, f"compile {text[:400]}")
    if rc != 0:
        return
    inputs = _inputs_for(text, np.random.default_rng(seed))
    if inputs is None:
        return
    rc, _, diags, err = oracle.run_model(text, inputs)
    _assert_clean(rc, diags, err + json.dumps(diags), f"run {text[:400]}")


def _tiny_view(index_map: list) -> dict:
    return {"uops": [{"id": "x", "uop": "INPUT", "arg": {"tensor_id": "x", "dtype": "fp32", "shape": [3]}},
                     {"id": "v", "uop": "VIEW", "src": ["x"], "arg": {"result_shape": [3], "index_map": index_map}}]}


f32 = lambda *s: ("fp32", list(s))  # noqa: E731
# The smallest forms of crashes the mutation test has found: (case id, model, inputs)
FOUND = [
    ("pad-amount-is-an-unbound-symbol", model({"X": f32(3)}, [node("Pad", ["X"], "Y", pads=[["P", 0]])], ["Y"]),
     {"X": np.ones(3, np.float32)}),
    ("slice-end-is-an-unbound-symbol", model({"X": f32(3)}, [node("Slice", ["X"], "Y", starts=[0], ends=["Q"])], ["Y"]),
     {"X": np.ones(3, np.float32)}),
    ("tiny-view-index-uses-an-unbound-name", _tiny_view(["q"]), {"x": np.ones(3, np.float32)}),
    ("reshape-size-null-next-to-minus-1", model({"X": f32(6)}, [node("Reshape", ["X"], "Y", shape=[None, -1])], ["Y"]),
     {"X": np.ones(6, np.float32)}),
    ("reshape-size-is-a-list", model({"X": f32(6)}, [node("Reshape", ["X"], "Y", shape=[[6], -1])], ["Y"]),
     {"X": np.ones(6, np.float32)}),
    ("attribute-holding-an-object-is-dumped", model({"X": f32(3)}, [node("Softmax", ["X"], "Y", axis=-1, extra={"a": 1})],
                                                    ["Y"]), {"X": np.ones(3, np.float32)}),
]


@pytest.mark.parametrize("case", FOUND, ids=[c[0] for c in FOUND])
def test_crashes_found_by_mutation_are_diagnostics(case):
    _, doc, inputs = case
    rc, diags, out = oracle.compile_model(doc, "--dump=frontend,tiny")
    _assert_clean(rc, diags, out, "compile")
    rc, _, diags, err = oracle.run_model(doc, inputs)
    _assert_clean(rc, diags, err + json.dumps(diags), "run")


GEMM_TEXT = (ROOT / "examples" / "gemm_bias_relu.json").read_text()
HOSTILE = {
    "nested-100k-deep": "[" * 100_000 + "]" * 100_000,
    "utf8-bom": "\ufeff" + GEMM_TEXT,
    "shape-1e999": GEMM_TEXT.replace('["M", "K"]', "[1e999, 3]"),
    "shape-huge-int": GEMM_TEXT.replace('["M", "K"]', "[" + "9" * 400 + ", 3]"),
    "nul-bytes": GEMM_TEXT.replace('"gemm"', '"ge\\u0000mm"'),
    "duplicate-keys": GEMM_TEXT.replace('"graph": [', '"graph": 1, "graph": ['),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_files_are_diagnosed_or_accepted_never_crash(name):
    rc, diags, out = oracle.compile_model(HOSTILE[name], "--dump=frontend,tiny")
    _assert_clean(rc, diags, out, name)
