"""Models as deep or wide as users write them: no walk recurses along a model's size (ir/trampoline.py), so a
5,000-op chain and a 3,000-leaf tree compile under Python's own recursion limit (nothing raises it); Poly Core
stays linear in a chain and turns sets it cannot count into coded diagnostics; the stages after the search
stop at their time bound with E1505 (ir/deadline.py)."""
from __future__ import annotations

import json
import sys

import islpy as isl
import pytest

from polysat.analyses.footprint import card, extents
from polysat.cli import main
from polysat.ir import trampoline
from polysat.ir.diagnostics import PolysatError

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


def _depth(k: int):
    if k == 0:
        return 0
    return 1 + (yield _depth(k - 1))


def test_a_generator_walk_goes_far_deeper_than_the_recursion_limit():
    assert trampoline.run(_depth(100_000)) == 100_000
    assert trampoline.run(42) == 42  # a walk that returned without yielding is its value


def _fails(k: int):
    if k == 0:
        raise KeyError("bottom")
    return (yield _fails(k - 1))


def _catches(k: int):
    try:
        yield _fails(k)
    except KeyError as e:
        return f"caught {e.args[0]}"


def test_an_error_deep_in_a_walk_reaches_its_callers_as_a_call_would():
    assert trampoline.run(_catches(5_000)) == "caught bottom"
    with pytest.raises(KeyError):
        trampoline.run(_fails(5_000))


def _doc(graph: list, inputs: list, outputs: list) -> dict:
    tensors = {t: {"dtype": "fp32", "shape": [4]} for t in inputs}
    tensors |= {t: {"dtype": "fp32", "shape": [4]} for op in graph for t in op["outputs"]}
    return {"signature": {"inputs": [{"tensor": t} for t in inputs], "outputs": [{"tensor": t} for t in outputs]},
            "tensors": tensors, "graph": graph}


def _chain(n: int) -> dict:
    graph, prev = [], "X"
    for k in range(n):
        graph.append({"op": "Elementwise", "name": f"e{k}", "inputs": [prev], "outputs": [f"t{k}"],
                      "attrs": {"fn": "relu" if k % 2 else "neg"}})
        prev = f"t{k}"
    return _doc(graph, ["X"], [prev])


def _tree(leaves: int) -> dict:
    """X times a distinct constant per leaf, summed pairwise: 12 levels of adds over 3,000 leaves."""
    graph, level = [], []
    for k in range(leaves):
        graph.append({"op": "Constant", "name": f"c{k}", "inputs": [], "outputs": [f"c{k}"],
                      "attrs": {"value": k + 1, "shape": [4]}})
        graph.append({"op": "Elementwise", "name": f"l{k}", "inputs": ["X", f"c{k}"], "outputs": [f"l{k}"],
                      "attrs": {"fn": "mul"}})
        level.append(f"l{k}")
    depth = 0
    while len(level) > 1:
        nxt = []
        for i in range(0, len(level) - 1, 2):
            t = f"a{depth}_{i}"
            graph.append({"op": "Elementwise", "name": t, "inputs": [level[i], level[i + 1]], "outputs": [t],
                          "attrs": {"fn": "add"}})
            nxt.append(t)
        level, depth = nxt + level[len(level) - len(level) % 2:], depth + 1
    return _doc(graph, ["X"], level)


@pytest.fixture
def no_raised_limit(monkeypatch):
    """Fails the test when anything raises Python's recursion limit."""
    limit = sys.getrecursionlimit()

    def refuse(n: int) -> None:
        if n > limit:
            raise AssertionError(f"the recursion limit was raised to {n}")
    monkeypatch.setattr(sys, "setrecursionlimit", refuse)


@pytest.mark.parametrize("model, dump", [(lambda: _chain(5000), "region"), (lambda: _tree(3000), "")])
def test_a_deep_chain_and_a_wide_tree_compile_under_pythons_recursion_limit(tmp_path, capsys, no_raised_limit,
                                                                            model, dump):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(model()))
    argv = ["compile", str(path), "--cost", "size"] + ([f"--dump={dump}", "--out", str(tmp_path / "d")] if dump else [])
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 0, err
    if dump:
        assert (tmp_path / "d" / f"{dump}.json").is_file()


def test_poly_core_counts_an_empty_set_as_nothing_and_refuses_an_unbounded_one():
    assert extents(isl.Set("{ [i, j] : 1 = 0 }")) == ((0, -1), (0, -1))
    assert card(isl.Set("{ [i] : 1 = 0 }")) == 0
    with pytest.raises(PolysatError) as e:
        extents(isl.Set("{ [i] : i >= 0 }"))
    assert e.value.diagnostics[0].code == "E1007"


def test_the_stages_after_the_search_stop_at_their_time_bound(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("POLYSAT_STAGE_SECONDS", "0")
    rc = main(["compile", str(ROOT / "examples" / "gemm_bias_relu.json"), "--dump=analysis,cu",
               "--out", str(tmp_path / "d")])
    err = capsys.readouterr().err
    assert rc == 1
    assert "E1505 ResourceLimit" in err and "POLYSAT_STAGE_SECONDS" in err and "E1999" not in err, err


@pytest.fixture
def low_recursion_limit():
    """Python's recursion limit set 250 frames above the caller's depth (restored after): a walk that recursed
    once per op of a 400-op chain would cross it, as a 5,000-op chain crosses the default 1,000."""
    limit, depth, f = sys.getrecursionlimit(), 0, sys._getframe()
    while f is not None:
        depth, f = depth + 1, f.f_back
    sys.setrecursionlimit(depth + 250)
    yield
    sys.setrecursionlimit(limit)


def test_a_long_chain_renders_its_cuda_source_without_recursion(tmp_path, capsys, low_recursion_limit):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(_chain(400)))
    rc = main(["compile", str(path), "--cost", "size", "--dump=cu", "--out", str(tmp_path / "d")])
    err = capsys.readouterr().err
    assert rc == 0, err
    (cu,) = (tmp_path / "d").glob("*.cu")
    assert cu.read_text().count("polysat_simt::relu(") == 200  # every op of the chain is in the kernel
