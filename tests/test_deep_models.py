"""Models as deep or wide as users write them: no walk recurses along a model's size (ir/trampoline.py), so a
5,000-op chain and a 3,000-leaf tree compile under Python's own recursion limit (nothing raises it); Poly Core
stays linear in a chain and turns sets it cannot count into coded diagnostics; the stages after the search
stop at their time bound with E1505 (ir/deadline.py)."""
from __future__ import annotations

import json
import sys

import islpy as isl
import numpy as np
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


UNARY = {"relu": lambda x: np.maximum(x, 0), "neg": np.negative, "exp2": np.exp2, "sqrt": np.sqrt}


def _wide(branches: int) -> dict:
    """X [8, 64] into ``branches`` parallel branches (times a constant row, a unary function, a row max or sum), the
    branches' columns concatenated and summed: 4 ops a branch, as wide as it is long (750 branches: 3,002 ops)."""
    graph, tensors, cols = [], {"X": {"dtype": "fp32", "shape": [8, 64]}}, []
    for b in range(branches):
        graph += [{"op": "Constant", "name": f"c{b}", "inputs": [], "outputs": [f"c{b}"],
                   "attrs": {"value": (b % 97) / 50 + 0.5, "shape": [64]}},
                  {"op": "Elementwise", "name": f"m{b}", "inputs": ["X", f"c{b}"], "outputs": [f"m{b}"],
                   "attrs": {"fn": "mul"}},
                  {"op": "Elementwise", "name": f"u{b}", "inputs": [f"m{b}"], "outputs": [f"u{b}"],
                   "attrs": {"fn": list(UNARY)[b % 4]}},
                  {"op": "Reduce", "name": f"r{b}", "inputs": [f"u{b}"], "outputs": [f"r{b}"],
                   "attrs": {"op": "max" if b % 2 else "sum", "axes": [1], "keepdim": True}}]
        tensors |= {f"c{b}": {"dtype": "fp32", "shape": [64]}, f"m{b}": {"dtype": "fp32", "shape": [8, 64]},
                    f"u{b}": {"dtype": "fp32", "shape": [8, 64]}, f"r{b}": {"dtype": "fp32", "shape": [8, 1]}}
        cols.append(f"r{b}")
    graph += [{"op": "Concat", "name": "cat", "inputs": cols, "outputs": ["cat"], "attrs": {"axis": 1}},
              {"op": "Reduce", "name": "top", "inputs": ["cat"], "outputs": ["Y"], "attrs": {"op": "sum", "axes": [1]}}]
    tensors |= {"cat": {"dtype": "fp32", "shape": [8, branches]}, "Y": {"dtype": "fp32", "shape": [8]}}
    return {"signature": {"inputs": [{"tensor": "X"}], "outputs": [{"tensor": "Y"}]}, "tensors": tensors,
            "graph": graph}


def _wide_numpy(branches: int, x: np.ndarray) -> np.ndarray:
    """_wide's meaning, written independently in numpy (fp64)."""
    x = x.astype(np.float64)
    cols = []
    for b in range(branches):
        u = UNARY[list(UNARY)[b % 4]](x * ((b % 97) / 50 + 0.5))
        cols.append(u.max(axis=1) if b % 2 else u.sum(axis=1))
    return np.sum(cols, axis=0)


def test_a_wide_graph_analyses_each_branch_and_computes_what_numpy_does(tmp_path, capsys):
    """(At 750 branches, 3,002 ops: `--dump=analysis` and `extract --cost model` finish within their bounds;
    the figures are in the closing note.)"""
    path = tmp_path / "m.json"
    path.write_text(json.dumps(_wide(30)))
    rc = main(["compile", str(path), "--cost", "size", "--dump=analysis", "--out", str(tmp_path / "d")])
    assert rc == 0, capsys.readouterr().err
    regions = json.loads((tmp_path / "d" / "analysis.json").read_text())["regions"]
    assert len(regions) > 30  # a region a branch at least: the graph is wide, not one fused loop
    x = np.abs(np.random.default_rng(0).standard_normal((8, 64))).astype(np.float32)  # sqrt of a negative: NaN
    np.savez(tmp_path / "in.npz", X=x)
    rc = main(["run", str(path), "--inputs", str(tmp_path / "in.npz"), "--out", str(tmp_path / "o.npz")])
    assert rc == 0, capsys.readouterr().err
    with np.load(tmp_path / "o.npz") as z:
        np.testing.assert_allclose(z["Y"], _wide_numpy(30, x), rtol=1e-5)


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


def test_a_long_chain_renders_its_cuda_source_without_recursion(tmp_path, capsys, low_recursion_limit):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(_chain(400)))
    rc = main(["compile", str(path), "--cost", "size", "--dump=cu", "--out", str(tmp_path / "d")])
    err = capsys.readouterr().err
    assert rc == 0, err
    (cu,) = (tmp_path / "d").glob("*.cu")
    assert cu.read_text().count("polysat_simt::relu(") == 200  # every op of the chain is in the kernel


def _chain_in_a_reduce(n: int, fns: tuple = ("neg", "tanh")) -> dict:
    """X [40,1] times Y [1,50], then n unary ops (fns in turn), then a row sum: the whole chain is one reduce's
    body, a tree n deep inside one region (no lets to cut it)."""
    graph = [{"op": "Elementwise", "name": "p", "inputs": ["X", "Y"], "outputs": ["p"], "attrs": {"fn": "mul"}}]
    tensors = {"X": {"dtype": "fp32", "shape": [40, 1]}, "Y": {"dtype": "fp32", "shape": [1, 50]},
               "p": {"dtype": "fp32", "shape": [40, 50]}, "R": {"dtype": "fp32", "shape": [40]}}
    prev = "p"
    for k in range(n):
        graph.append({"op": "Elementwise", "name": f"t{k}", "inputs": [prev], "outputs": [f"t{k}"],
                      "attrs": {"fn": fns[k % 2]}})
        tensors[f"t{k}"] = {"dtype": "fp32", "shape": [40, 50]}
        prev = f"t{k}"
    graph.append({"op": "Reduce", "name": "r", "inputs": [prev], "outputs": ["R"], "attrs": {"op": "sum", "axes": [1]}})
    return {"signature": {"inputs": [{"tensor": "X"}, {"tensor": "Y"}], "outputs": [{"tensor": "R"}]},
            "tensors": tensors, "graph": graph}


def _transposes(n: int) -> dict:
    """X [8,4] through n transposes (a view chain n long), then relu(v) + exp(v) summed over rows, v an output."""
    graph, prev = [], "X"
    tensors = {"X": {"dtype": "fp32", "shape": [8, 4]}}
    for k in range(n):
        shape = [4, 8] if k % 2 == 0 else [8, 4]
        graph.append({"op": "Transpose", "name": f"v{k}", "inputs": [prev], "outputs": [f"v{k}"], "attrs": {"perm": [1, 0]}})
        tensors[f"v{k}"] = {"dtype": "fp32", "shape": shape}
        prev = f"v{k}"
    graph += [{"op": "Elementwise", "name": "a", "inputs": [prev], "outputs": ["a"], "attrs": {"fn": "relu"}},
              {"op": "Elementwise", "name": "b", "inputs": [prev], "outputs": ["b"], "attrs": {"fn": "exp"}},
              {"op": "Elementwise", "name": "c", "inputs": ["a", "b"], "outputs": ["c"], "attrs": {"fn": "add"}},
              {"op": "Reduce", "name": "R", "inputs": ["c"], "outputs": ["R"], "attrs": {"op": "sum", "axes": [1]}}]
    tensors |= {t: {"dtype": "fp32", "shape": tensors[prev]["shape"]} for t in "abc"}
    tensors["R"] = {"dtype": "fp32", "shape": [tensors[prev]["shape"][0]]}
    return {"signature": {"inputs": [{"tensor": "X"}], "outputs": [{"tensor": "R"}, {"tensor": prev}]},
            "tensors": tensors, "graph": graph}


@pytest.mark.parametrize("case", ["chain_in_a_reduce", "deferred_chain", "transposes"])
def test_a_deep_fused_tree_and_a_long_view_chain_compile_dump_and_run_without_recursion(tmp_path, capsys, monkeypatch,
                                                                                      low_recursion_limit, case):
    """The stages, the region and Poly-View dumps, playback and the reference evaluator walk a region's tree (as
    deep as the chain it fused) and a chain of views without a frame per op; the values are numpy's (fp64). (Also
    measured by hand at 400 ops: `--dump=all`, `extract --cost model`.)"""
    rng = np.random.default_rng(0)
    if case == "transposes":
        doc, x = _transposes(300), rng.standard_normal((8, 4)).astype(np.float32)
        np.savez(tmp_path / "in.npz", X=x)
        want = {"R": (np.maximum(x, 0) + np.exp(x.astype(np.float64))).sum(1), "v299": x}
    else:  # deferred: each [40,50] value is over the element limit, so the evaluators defer the chain and sum blocks
        fns = ("neg", "exp2") if case == "deferred_chain" else ("neg", "tanh")
        doc = _chain_in_a_reduce(300, fns)
        x, y = rng.standard_normal((40, 1)).astype(np.float32), rng.standard_normal((1, 50)).astype(np.float32)
        np.savez(tmp_path / "in.npz", X=x, Y=y)
        p = x.astype(np.float64) * y
        for k in range(300):
            p = {"neg": np.negative, "tanh": np.tanh, "exp2": np.exp2}[fns[k % 2]](p)
        want = {"R": p.sum(1)}
    path = tmp_path / "m.json"
    path.write_text(json.dumps(doc))
    rc = main(["compile", str(path), "--cost", "size", "--dump=region,poly_view", "--out", str(tmp_path / "d")])
    assert rc == 0, capsys.readouterr().err
    text = (tmp_path / "d" / "region.json").read_text()  # (json.loads itself recurses once per level)
    assert text.count('"exp2": [') == (1 if case == "transposes" else 150)  # a tanh (an exp) or an exp2 each; exp
    if case == "deferred_chain":
        monkeypatch.setenv("POLYSAT_EVAL_MAX_ELEMENTS", "1000")
    for target in ("reference", "playback"):
        rc = main(["run", str(path), "--inputs", str(tmp_path / "in.npz"), "--target", target, "--cost", "size",
                   "--out", str(tmp_path / f"{target}.npz")])
        assert rc == 0, capsys.readouterr().err
        with np.load(tmp_path / f"{target}.npz") as z:
            for k, v in want.items():
                np.testing.assert_allclose(z[k], v, rtol=1e-4, atol=1e-5)


def test_the_json_writer_writes_what_json_does_at_any_depth():
    docs = [{"a": [1, 2.5, None, True, {"x": [], "y": {}}], "b": 'é"', 3: float("nan"), None: -0.0}, [], {}, "x", [[[]]]]
    for d in docs:
        assert trampoline.json_text(d) == json.dumps(d, indent=1, ensure_ascii=False)
    deep = x = {}
    for _ in range(3 * sys.getrecursionlimit()):
        x["c"] = x = {}
    assert trampoline.json_text(deep).count("{") == 3 * sys.getrecursionlimit() + 1


def test_the_json_reader_reads_what_json_does_at_any_depth():
    texts = [json.dumps(d, indent=k) for d in ({"a": [1, 2.5, None, True, {"x": [], "y": {}}], "b": 'é"\\n', "c": -0.0,
                                                "d": [float("nan"), float("inf"), 1e300]}, [], {}, "x", [[[]]], 7)
             for k in (None, 2)] + ['  {"a" :[ 1 ,{ }] , "a": 2 }  ']
    for t in texts:
        assert repr(trampoline.json_value(t)) == repr(json.loads(t)), t
    for t in ["", "[", "[1,]", '{"a" 1}', '{"a": 1,}', "[1 2]", "{1: 2}", "[1] x", "]", '{"a": }', "tru"]:
        with pytest.raises(json.JSONDecodeError):
            trampoline.json_value(t)
    deep = x = {}
    for _ in range(3 * sys.getrecursionlimit()):
        x["c"] = [{}]
        x = x["c"][0]
    got, levels = trampoline.json_value(trampoline.json_text(deep)), 0
    while got:  # (== would recurse)
        got, levels = got["c"][0], levels + 1
    assert levels == 3 * sys.getrecursionlimit()


def test_a_sum_of_many_terms_is_split_and_rebuilt_without_recursion(low_recursion_limit):
    """backend/gemm/concat.py on a left-deep sum of 1,000 reads (a model summing 300 GEMMs reached its walks, past
    the recursion limit; by hand, that model now compiles its regions and is E1504 at its kernel, below)."""
    from polysat.backend.gemm import concat
    from polysat.ir.dtypes import DType
    from polysat.ir.expr import Expr
    from polysat.ir.region import binary, read
    leaves = [read(f"A{k}", (Expr.var("i0"),), DType.fp32, ("i0",)) for k in range(1000)]
    total = leaves[0]
    for leaf in leaves[1:]:
        total = binary("add", total, leaf, DType.fp32)
    assert concat._terms(lambda n: n, total) == leaves  # left to right
    swapped = concat.rebuild(total, lambda n: n, lambda n: leaves[1] if n is leaves[0] else None)
    assert concat._terms(lambda n: n, swapped) == [leaves[1]] + leaves[1:]


def test_a_plan_search_that_pruned_every_candidate_is_e1504_naming_why():
    """(A region summing 300 GEMMs: no SIMT plan holds 300 accumulators; it was E1999 IndexError.)"""
    from polysat.backend.common.plan_search import Pruned, SearchResult
    with pytest.raises(PolysatError) as e:
        SearchResult((), (Pruned(None, "a 1x1 micro-tile of 300 reduction(s) holds 300 accumulators > 32"),)).best
    assert e.value.diagnostics[0].code == "E1504" and "300 accumulators" in e.value.diagnostics[0].why


def _views_of(n: int, reads: list) -> dict:
    """X [8,4] fp16 cast to fp32 (c), n transposes of c, then a Reduce for each (name, op) of reads."""
    graph = [{"op": "Elementwise", "name": "c", "inputs": ["X"], "outputs": ["c"],
              "attrs": {"fn": "cast", "to": "fp32"}}]
    tensors, prev = {"X": {"dtype": "fp16", "shape": [8, 4]}, "c": {"dtype": "fp32", "shape": [8, 4]}}, "c"
    for k in range(n):
        graph.append({"op": "Transpose", "name": f"v{k}", "inputs": [prev], "outputs": [f"v{k}"],
                      "attrs": {"perm": [1, 0]}})
        tensors[f"v{k}"] = {"dtype": "fp32", "shape": [4, 8] if k % 2 == 0 else [8, 4]}
        prev = f"v{k}"
    for name, op in reads:
        graph.append({"op": "Reduce", "name": name, "inputs": [prev], "outputs": [name],
                      "attrs": {"op": op, "axes": [1]}})
        tensors[name] = {"dtype": "fp32", "shape": [tensors[prev]["shape"][0]]}
    return {"signature": {"inputs": [{"tensor": "X"}], "outputs": [{"tensor": name} for name, _ in reads]},
            "tensors": tensors, "graph": graph}


def test_a_partition_is_checked_through_a_long_chain_of_views_without_recursion(low_recursion_limit):
    """egraph/partition.py: a kernel that reads a value through 400 views it does not list is legal when the
    chain starts at memory the kernel reads, and E1999 when it starts at a value the kernel never reads."""
    from polysat.egraph.partition import Kernel, Partition
    from polysat.frontend import program_from_doc
    from polysat.ir.tiny import Ops
    p = program_from_doc(_views_of(400, [("R", "sum")]))
    (cast,) = [n.id for n in p.nodes if n.op == Ops.CAST]
    (red,) = [n.id for n in p.nodes if n.op == Ops.REDUCE]
    first = Kernel("k0", frozenset({cast}), (cast,), ("X",))
    Partition((first, Kernel("k1", frozenset({red}), (red,), (cast,)))).check(p)
    with pytest.raises(PolysatError) as e:
        Partition((first, Kernel("k1", frozenset({red}), (red,), ("X",)))).check(p)
    assert e.value.diagnostics[0].code == "E1999" and "neither in the kernel nor one of its inputs" in str(e.value)


def test_the_hand_style_partition_copies_a_cast_through_a_long_chain_of_views_without_recursion(low_recursion_limit):
    """search/hand_partition.py rule 4: a cast that two kernels read through 400 views is copied, views and
    all, into the kernel that does not compute it; each kernel then reads only X."""
    from polysat.frontend import program_from_doc
    from polysat.ir.tiny import Ops
    from polysat.search.hand_partition import hand_partition
    p = program_from_doc(_views_of(400, [("S", "sum"), ("M", "max")]))
    q, part = hand_partition(p, p)
    assert len(q.nodes) == 2 * len(p.nodes) - 3  # the cast and its 400 views once more; X and the reduces not
    assert [k.inputs for k in part.kernels] == [("X",), ("X",)]
    for k in part.kernels:
        assert sorted(q[i].op.name for i in k.nodes if q[i].op != Ops.PERMUTE) == ["CAST", "REDUCE"]
        assert sum(q[i].op == Ops.PERMUTE for i in k.nodes) == 400


def _deep_region():
    """A region whose reduce body is a 500-node chain (unary and binary ops, transposes and selects in turn)."""
    from polysat.ir.dtypes import DType
    from polysat.ir.expr import Expr
    from polysat.ir.region import (Buffer, Let, MemRef, Region, Yield, binary, pred, read, reduce, select, transpose,
                                   unary)
    names, f32 = ("i", "k"), DType.fp32
    i, k = Expr.var("i"), Expr.var("k")
    x = read("X", (i, k), f32, names)
    v = x
    for n in range(400):
        step = n % 4
        if step == 0:
            v = unary("neg", v, f32)
        elif step == 1:
            v = binary("mul", v, x, f32)
        elif step == 2:
            v = transpose(transpose(v, [1, 0]), [1, 0])
        else:
            v = select(pred((i - 2,), names), v, x, f32)
    body = reduce("sum", ["k"], v, f32, 0.0, names)
    return Region("deep", (("i", 8),), (("k", 4),), (Buffer("X", MemRef((8, 4), f32)),),
                  (Buffer("R", MemRef((8,), f32), "gmem", True),), (Let("r", body),), (Yield("r", "R", f32, ("i",)),))


def test_a_deep_region_reads_back_from_its_json_without_recursion(low_recursion_limit):
    """ir/region_load.py (the compiled-model cache's loader): the region read back is the region written."""
    from polysat.ir.region import regions_json
    from polysat.ir.region_load import regions_from_json
    r = _deep_region()
    assert regions_from_json(regions_json([r])) == [r]


def test_a_compiled_model_with_a_deep_region_is_stored_and_loaded_without_recursion(tmp_path, monkeypatch,
                                                                                     low_recursion_limit):
    """runtime/cache.py writes and reads entry.json, runtime/compiled.py rebuilds the regions from it, with no frame
    per level (the region nests 2 JSON levels per op; json's own encoder and decoder recurse per level)."""
    from polysat.ir.region import regions_json
    from polysat.runtime import cache
    from polysat.runtime.compiled import _from_doc
    monkeypatch.setenv("POLYSAT_MODEL_CACHE", str(tmp_path / "models"))
    r = _deep_region()
    doc = {"model": "m.json", "arch": "sm90", "env": {}, "params": [], "regions": regions_json([r]), "memory": {},
           "kernels": [{"region": "deep", "kind": "playback"}], "prices": {}}
    directory = cache.store("k" * 32, doc, {})
    loaded, cubins = cache.load("k" * 32)
    assert cubins == {} and loaded["kernels"] == doc["kernels"]
    assert _from_doc("k" * 32, directory, loaded, True).regions == [r]


def test_a_long_chain_of_pads_plays_back_without_recursion(tmp_path, capsys, low_recursion_limit):
    """ir/playback.py: each Pad is a select guarded by an index predicate, its branches evaluated under a guard of
    their own; a chain of 150 pads (each sliced back) is a chain of such selects. The values are numpy's."""
    graph, tensors, prev = [], {"X": {"dtype": "fp32", "shape": [6, 4]}}, "X"
    for k in range(300):
        op = ({"op": "Pad", "attrs": {"pads": [[1, 0], [0, 1]], "value": 0.5}} if k % 2 == 0 else
              {"op": "Slice", "attrs": {"starts": [0, 1], "ends": [6, 5]}})
        graph.append({**op, "name": f"v{k}", "inputs": [prev], "outputs": [f"v{k}"]})
        tensors[f"v{k}"] = {"dtype": "fp32", "shape": [7, 5] if k % 2 == 0 else [6, 4]}
        prev = f"v{k}"
    graph.append({"op": "Elementwise", "name": "e", "inputs": [prev], "outputs": ["E"], "attrs": {"fn": "exp"}})
    tensors["E"] = {"dtype": "fp32", "shape": [6, 4]}
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"signature": {"inputs": [{"tensor": "X"}], "outputs": [{"tensor": "E"}]},
                                "tensors": tensors, "graph": graph}))
    x = np.random.default_rng(0).standard_normal((6, 4))
    np.savez(tmp_path / "in.npz", X=x.astype(np.float32))
    want = x.astype(np.float32).astype(np.float64)
    for _ in range(150):
        want = np.pad(want, ((1, 0), (0, 1)), constant_values=0.5)[0:6, 1:5]
    rc = main(["run", str(path), "--inputs", str(tmp_path / "in.npz"), "--target", "playback", "--cost", "size",
               "--out", str(tmp_path / "o.npz")])
    assert rc == 0, capsys.readouterr().err
    with np.load(tmp_path / "o.npz") as z:
        np.testing.assert_allclose(z["E"], np.exp(want), rtol=1e-5)
