"""Hostile and careless input stays contained: rule files, caches, model files, npz inputs, knobs and
``--out`` give a coded diagnostic (never E1999) or the right result, and touch no file outside the run's folder
and its caches. Every case runs the command in-process with its working directory in a fresh folder whose
caches are pointed into it by the knobs; a sentinel folder beside it must come out unchanged."""
from __future__ import annotations

import json
import os
import pathlib

import numpy as np
import pytest

from polysat.cli import main

ROOT = pathlib.Path(__file__).resolve().parent.parent
GEMM = str(ROOT / "examples" / "gemm_bias_relu.json")


def _tree(d: pathlib.Path) -> dict:
    return {str(p.relative_to(d)): (p.read_bytes() if p.is_file() and not p.is_symlink() else os.readlink(p)
                                    if p.is_symlink() else None) for p in sorted(d.rglob("*"))}


class Box:
    """tmp/run (the working directory, caches inside it) beside tmp/sentinel (must stay as it was)."""

    def __init__(self, tmp: pathlib.Path, monkeypatch, capsys):
        self.tmp, self.capsys = tmp, capsys
        self.run_dir = tmp / "run"
        self.run_dir.mkdir()
        self.sentinel = tmp / "sentinel"
        self.sentinel.mkdir()
        (self.sentinel / "SECRET.bin").write_bytes(b"secret")
        (self.sentinel / "notes.txt").write_text("keep me")
        monkeypatch.chdir(self.run_dir)
        for k, v in {"POLYSAT_KERNEL_CACHE": "kcache", "POLYSAT_MODEL_CACHE": "mcache",
                     "POLYSAT_MEASURE_LOG": "measure.csv", "POLYSAT_NVCC_CACHE": "ncache"}.items():
            monkeypatch.setenv(k, str(self.run_dir / v))
        self.before = _tree(self.sentinel)
        self.top = sorted(p.name for p in tmp.iterdir())

    def cli(self, *argv: str) -> tuple:
        rc = main(list(argv))
        out = self.capsys.readouterr()
        return rc, out.out, out.err

    def check_contained(self) -> None:
        assert _tree(self.sentinel) == self.before, "a file outside the run's folders changed"
        assert sorted(p.name for p in self.tmp.iterdir()) == self.top, "a file appeared beside the run's folder"


@pytest.fixture
def box(tmp_path, monkeypatch, capsys):
    b = Box(tmp_path, monkeypatch, capsys)
    yield b
    b.check_contained()


def _coded(err: str, code: str) -> None:
    assert code in err, err
    assert "E1999" not in err and "Traceback" not in err, err


# ---- rule files are declarations ---------------------------------------------------------------------------

RULE = '(ruleset x)\n; law: a = a\n(rewrite (Binary "ADD" a b) (Binary "ADD" a b) :ruleset x :name "x-id")\n'


@pytest.mark.parametrize("command", [
    '(output "../sentinel/notes.txt" (Tensor "a"))', '(input rel "../sentinel/SECRET.bin")', "(run x 1000000)",
    "(run-schedule (saturate (run x)))", '(extract (Tensor "a"))', "(push)", '(include "../sentinel/x.egg")',
    "(print-size)", '(let big (Tensor "a"))'])
def test_a_rule_file_command_other_than_a_declaration_is_refused_at_its_line(box, command):
    rules = box.run_dir / "rules"
    rules.mkdir()
    (rules / "evil.egg").write_text(RULE + command + "\n")
    rc, _, err = box.cli("compile", GEMM, "--rules", str(rules))
    assert rc == 1
    _coded(err, "E1403")
    assert "evil.egg:4" in err


def test_a_rule_nested_past_the_parser_bound_is_refused_at_its_line(box):
    """A pattern 5,000 deep (a RecursionError in the pattern walks, and a stack overflow for egglog's parser)."""
    deep = "a"
    for i in range(5000):
        deep = f'(Binary "ADD" {deep} b{i % 3})'
    rules = box.run_dir / "rules"
    rules.mkdir()
    (rules / "deep.egg").write_text(f'(ruleset mine)\n; law: a = a\n(rewrite {deep} {deep} :ruleset mine :name "h-deep")\n')
    rc, _, err = box.cli("compile", GEMM, "--rules", str(rules))
    assert rc == 1
    _coded(err, "E1403")
    assert "deep.egg:3" in err and "nested deeper than 200" in err


GROW = """(relation h-grow (i64))
; law: (facts only) h-grow holds for every number it reaches
(rule ((h-grow x)) ((h-grow (+ x 1)) (h-grow (+ x 1000000000))) :ruleset RULESET :name "h-grow-step")
; law: (facts only) a seed fact
(rule ((Tensor t)) ((h-grow 0)) :ruleset RULESET :name "h-grow-seed")
"""


def test_growing_analysis_rules_stop_at_the_row_limit(box, monkeypatch):
    rules = box.run_dir / "rules"
    rules.mkdir()
    (rules / "grow.egg").write_text(GROW.replace("RULESET", "analysis"))
    monkeypatch.setenv("POLYSAT_EGRAPH_ROWS", "20000")
    rc, _, err = box.cli("compile", GEMM, "--rules", str(rules))
    assert rc == 1
    _coded(err, "E1505")


def test_growing_fusion_facts_stop_with_a_rolled_back_iteration(box, monkeypatch):
    from polysat.pipeline import Compilation
    rules = box.run_dir / "rules"
    rules.mkdir()
    (rules / "grow.egg").write_text(GROW.replace("RULESET", "fusion-facts").replace("(Tensor t)", "(computed t)"))
    monkeypatch.setenv("POLYSAT_EGRAPH_ROWS", "30000")
    c = Compilation(GEMM, rules_dirs=(str(rules),), cost="model")
    st, rep = c.saturated
    assert rep.stop.value == "row_limit" and rep.rolled_back
    assert sum(st.sizes().values()) <= 30000 if hasattr(st, "sizes") else True
    assert c.regions  # the rolled-back e-graph still extracts


DOUBLE = """(relation h-dbl (i64))
; law: (facts only) a seed fact
(rule ((SEED t)) ((h-dbl 1)) :ruleset RULESET :name "h-dbl-seed")
; law: (facts only) h-dbl doubles each iteration
(rule ((h-dbl x)) ((h-dbl (* 2 x)) (h-dbl (+ (* 2 x) 1))) :ruleset RULESET :name "h-dbl-step")
"""


@pytest.mark.parametrize("ruleset", ["mine", "analysis", "fusion-facts"])
def test_a_relation_that_doubles_each_iteration_stops_at_the_row_limit(box, monkeypatch, ruleset):
    """Relation rows count against the limit like e-nodes, in a user's ruleset or a shipped one: the run stops
    with row_limit and the iteration rolled back (E1505 when it is the loaded program's own analysis)."""
    from polysat.ir.diagnostics import PolysatError
    from polysat.pipeline import Compilation
    rules = box.run_dir / "rules"
    rules.mkdir()
    text = DOUBLE.replace("RULESET", ruleset).replace("SEED", "computed" if ruleset == "fusion-facts" else "Tensor")
    (rules / "double.egg").write_text(("(ruleset mine)\n" if ruleset == "mine" else "") + text)
    monkeypatch.setenv("POLYSAT_EGRAPH_ROWS", "30000")
    c = Compilation(GEMM, rules_dirs=(str(rules),), cost="model")
    if ruleset == "analysis":
        with pytest.raises(PolysatError) as e:
            c.saturated
        assert e.value.diagnostics[0].code == "E1505" and "row limit" in e.value.diagnostics[0].why
        return
    st, rep = c.saturated
    assert rep.stop.value == "row_limit" and rep.rolled_back
    assert sum(st.sizes().values()) <= 30000 and rep.rules["h-dbl-step"].matches > 0
    assert c.regions


def _explode(grow: int, pairs_action: str) -> str:
    """h-n grows ``grow``-fold in each of two iterations (1, grow, grow**2 rows: far under the row limit); h-pairs
    joins it with itself on c, so its matches in the last step are grow**4, all in one egglog call."""
    kids = " ".join(f"(h-n (+ (* {grow} x) {i}) c)" for i in range(grow))
    return f"""(ruleset mine)
(relation h-n (i64 i64))
(relation h-one (i64))
(relation h-q (i64 i64))
; law: (facts only) a seed fact
(rule ((Tensor t)) ((h-n 0 0)) :ruleset mine :name "h-seed")
; law: (facts only) h-n grows {grow}-fold, twice
(rule ((h-n x c) (< x {grow})) ({kids}) :ruleset mine :name "h-grow")
; law: (facts only) every pair of h-n facts sharing c
(rule ((h-n a c) (h-n b c)) ({pairs_action}) :ruleset mine :name "h-pairs")
"""


@pytest.mark.parametrize("knob, action, said", [
    ("POLYSAT_EGRAPH_MEMORY_MB=150", "(h-q a b)", "resident memory grew"),  # 16M rows asked for in one call
    ("POLYSAT_EGRAPH_SECONDS=1", "(h-one (+ a b))", "CPU deadline")])  # 4G matches, few rows: hours of CPU
def test_one_egglog_call_past_its_bound_ends_with_e1505(box, knob, action, said):
    """A step whose matches explode inside one egglog call (which cannot be stopped) ends the process with E1505
    within its bound (egraph/watchdog.py), in the command's own format; it never runs on to MemoryError."""
    import subprocess
    import sys
    rules = box.run_dir / "rules"
    rules.mkdir()
    grow = 64 if "MEMORY" in knob else 256
    (rules / "boom.egg").write_text(_explode(grow, action))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), **dict([knob.split("=")]))
    p = subprocess.run([sys.executable, "-m", "polysat", "extract", GEMM, "--cost", "size", "--rules", "rules",
                        "--json"], cwd=box.run_dir, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stderr[-2000:]
    (d,) = json.loads(p.stdout)["diagnostics"]
    assert d["code"] == "E1505" and said in d["why"] and "(run mine)" in d["why"], d
    assert "Traceback" not in p.stderr and "MemoryError" not in p.stderr


def test_the_watchdog_never_ends_a_library_callers_process(box):
    """Only a command arms the watchdog: after a CLI call returns, and in library use, a call past every bound
    runs to its end (the checks between egglog calls still bound the saturation)."""
    import time
    from polysat.egraph import watchdog
    box.cli("extract", GEMM, "--cost", "size")
    assert watchdog._REPORTER[0] is None
    with watchdog.bounded("library call", cpu_until=0.0, rss0=0.0, rss_growth=0.0):  # every bound crossed
        time.sleep(0.1)  # the sampler would have ended the process within 20 ms


CROSS = """(ruleset mine)
(relation h-one (i64))
; law: (facts only) every pair of tensors
(rule ((Tensor a) (Tensor b)) ((h-one 1)) :ruleset mine :name "h-pairs")
"""


def test_a_rule_whose_query_is_a_cross_product_is_refused_at_its_line(box):
    rules = box.run_dir / "rules"
    rules.mkdir()
    (rules / "cross.egg").write_text(CROSS)
    rc, _, err = box.cli("compile", GEMM, "--rules", str(rules))
    assert rc == 1
    _coded(err, "E1409")
    assert "cross.egg:4" in err and "{a} and {b}" in err


# ---- knobs -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,value", [("POLYSAT_EGRAPH_SECONDS", "nan"), ("POLYSAT_EGRAPH_SECONDS", "inf"),
                                        ("POLYSAT_EGRAPH_NODES", "-5"), ("POLYSAT_SEED", "-1"),
                                        ("POLYSAT_SYMBOL_SIZE", "0"), ("POLYSAT_EVAL_MAX_ELEMENTS", "0")])
def test_a_meaningless_knob_falls_back_to_its_default_with_a_warning(box, monkeypatch, name, value):
    from polysat import knobs
    monkeypatch.setattr(knobs, "_WARNED", set())
    monkeypatch.setenv(name, value)
    fn = {"POLYSAT_EGRAPH_SECONDS": knobs.egraph_seconds, "POLYSAT_EGRAPH_NODES": knobs.egraph_nodes,
          "POLYSAT_SEED": knobs.seed, "POLYSAT_SYMBOL_SIZE": knobs.demo_symbol_size,
          "POLYSAT_EVAL_MAX_ELEMENTS": knobs.eval_max_elements}[name]
    monkeypatch.delenv(name)
    default = fn()
    monkeypatch.setenv(name, value)
    assert fn() == default
    assert f"{name}={value!r} is ignored" in box.capsys.readouterr().err


# ---- caches are untrusted ----------------------------------------------------------------------------------

FAKE_CUBIN = b"\x7fELF" + bytes(60)


@pytest.fixture
def kernel(box, monkeypatch):
    """A kernel source and the kernel cache module with a compiler that returns FAKE_CUBIN (and counts)."""
    from types import SimpleNamespace
    from polysat.backend.common import kernel_cache
    runs = []
    monkeypatch.setattr(kernel_cache, "_include_dirs", lambda: [])
    monkeypatch.setattr(kernel_cache, "_nvcc_cubin", lambda *a: runs.append(a) or FAKE_CUBIN)
    monkeypatch.setattr(kernel_cache, "_WARNED", set())
    ks = SimpleNamespace(source="__global__ void k() {}", skeleton="sm80")
    return SimpleNamespace(kc=kernel_cache, ks=ks, runs=runs, name=kernel_cache.cubin_name(ks, "sm80", (8, 0)))


def test_a_link_in_the_kernel_cache_is_not_written_through(box, kernel):
    kdir = box.run_dir / "kcache"
    kdir.mkdir()
    (kdir / kernel.name).symlink_to(box.sentinel / "notes.txt")
    (kdir / (kernel.name + ".tmp")).symlink_to(box.sentinel / "SECRET.bin")
    assert kernel.kc.cubin_for(kernel.ks, "sm80", (8, 0)) == FAKE_CUBIN and len(kernel.runs) == 1
    assert (kdir / kernel.name).read_bytes() == FAKE_CUBIN and not (kdir / kernel.name).is_symlink()


def test_a_truncated_cubin_is_compiled_again(box, kernel):
    kdir = box.run_dir / "kcache"
    kdir.mkdir()
    (kdir / kernel.name).write_bytes(b"\x7fELF\x02\x01\x01")
    assert kernel.kc.cubin_for(kernel.ks, "sm80", (8, 0)) == FAKE_CUBIN and len(kernel.runs) == 1
    assert kernel.kc.cubin_for(kernel.ks, "sm80", (8, 0)) == FAKE_CUBIN and len(kernel.runs) == 1  # now cached


@pytest.mark.parametrize("how", ["file", "read-only"])
def test_an_unusable_kernel_cache_is_a_warning_and_a_cacheless_run(box, kernel, how):
    kdir = box.run_dir / "kcache"
    if how == "file":
        kdir.write_text("not a folder")
    else:
        kdir.mkdir()
        kdir.chmod(0o500)
    try:
        assert kernel.kc.cubin_for(kernel.ks, "sm80", (8, 0)) == FAKE_CUBIN
    finally:
        if how != "file":
            kdir.chmod(0o700)
    if os.geteuid() != 0 or how == "file":  # root writes a read-only folder
        assert "warning: the kernel cache" in box.capsys.readouterr().err


def _entry(box, name: str, **over) -> None:
    from polysat.runtime import cache
    d = box.run_dir / "mcache" / name
    d.mkdir(parents=True)
    doc = {"schema": cache.SCHEMA, "key": name, "model": "m", "arch": "sm80", "env": {}, "params": [], "regions": [],
           "memory": {}, "prices": {}, "kernels": [{"region": "k0", "kind": "gemm", "cubin": "a" * 40 + ".cubin"}]}
    (d / ("a" * 40 + ".cubin")).write_bytes(FAKE_CUBIN)
    doc.update(over)
    (d / "entry.json").write_text(json.dumps(doc))


@pytest.mark.parametrize("over", [
    {"kernels": [{"region": "k0", "kind": "gemm", "cubin": "../../../sentinel/SECRET.bin"}]},
    {"kernels": [{"region": "k0", "kind": "gemm", "cubin": "/etc/passwd"}]},
    {"schema": "polysat-compiled-model/0"}, {"kernels": "all of them"}, {"env": [1, 2]}, {"key": "another"}])
def test_a_model_cache_entry_that_is_not_one_is_a_miss(box, over):
    from polysat.runtime import cache
    _entry(box, "k" * 32)
    assert cache.load("k" * 32) is not None  # the well-formed entry is a hit
    import shutil
    shutil.rmtree(box.run_dir / "mcache")
    _entry(box, "k" * 32, **over)
    assert cache.load("k" * 32) is None


def test_a_model_cache_entry_with_a_truncated_cubin_is_a_miss(box):
    from polysat.runtime import cache
    _entry(box, "k" * 32)
    (box.run_dir / "mcache" / ("k" * 32) / ("a" * 40 + ".cubin")).write_bytes(b"\x7fELF")
    assert cache.load("k" * 32) is None


# ---- outputs: --out, npz member names, an output that is an input ------------------------------------------

PASS = {"signature": {"inputs": [{"tensor": "X"}], "outputs": [{"tensor": "X"}, {"tensor": "../../x"}]},
        "tensors": {"X": {"dtype": "fp32", "shape": [4]}, "../../x": {"dtype": "fp32", "shape": [4]}},
        "graph": [{"op": "Elementwise", "name": "r", "inputs": ["X"], "outputs": ["../../x"], "attrs": {"fn": "relu"}}]}


def _pass_model(box) -> tuple:
    (box.run_dir / "m.json").write_text(json.dumps(PASS))
    x = np.arange(4, dtype=np.float32) - 2
    np.savez(box.run_dir / "in.npz", X=x)
    return "m.json", x


@pytest.mark.parametrize("target", ["reference", "playback"])
def test_an_output_that_is_an_input_is_written_and_member_names_stay_inside(box, target):
    model, x = _pass_model(box)
    rc, out, err = box.cli("run", model, "--inputs", "in.npz", "--target", target, "--out", "o.npz")
    assert rc == 0, err
    with np.load(box.run_dir / "o.npz") as z:
        assert sorted(z.files) == ["X", "x"]
        np.testing.assert_array_equal(z["X"], x)
        np.testing.assert_array_equal(z["x"], np.maximum(x, 0))
    import zipfile
    assert all(".." not in n and not n.startswith("/") for n in zipfile.ZipFile(box.run_dir / "o.npz").namelist())


@pytest.mark.parametrize("out", ["adir", "/dev/null", "", "missing/o.npz", "ro/o.npz", "afile/o.npz"])
def test_out_writes_the_path_it_names_or_is_e1506(box, out):
    model, _ = _pass_model(box)
    (box.run_dir / "adir").mkdir()
    (box.run_dir / "afile").write_text("a file, not a folder")
    (box.run_dir / "ro").mkdir()
    (box.run_dir / "ro").chmod(0o500)
    try:
        rc, _, err = box.cli("run", model, "--inputs", "in.npz", "--out", out)
    finally:
        (box.run_dir / "ro").chmod(0o700)
    if out == "ro/o.npz" and os.geteuid() == 0:  # root writes a read-only folder: then it is written
        assert rc == 0 and (box.run_dir / out).is_file()
        return
    assert rc == 1
    _coded(err, "E1506")
    assert not (box.run_dir / "adir.npz").exists() and not os.path.exists("/dev/null.npz")
    if out == "afile/o.npz":
        assert "is a file, not a folder" in err


def test_onnx_output_names_become_member_names_inside_the_archive(box):
    from onnx import helper
    model = _onnx(box.run_dir / "m.onnx", [helper.make_node("Relu", ["X"], ["../../x"])], [], out=("../../x", 2))
    np.savez(box.run_dir / "in.npz", X=np.array([-1, 2], np.float32))
    rc, _, err = box.cli("run", model, "--inputs", "in.npz", "--out", "o.npz")
    assert rc == 0, err
    with np.load(box.run_dir / "o.npz") as z:
        assert z.files == ["x"]
        np.testing.assert_array_equal(z["x"], [0, 2])


def test_out_without_npz_suffix_writes_exactly_that_path(box):
    model, _ = _pass_model(box)
    rc, out, _ = box.cli("run", model, "--inputs", "in.npz", "--out", "plain")
    assert rc == 0 and (box.run_dir / "plain").is_file() and not (box.run_dir / "plain.npz").exists()
    assert "wrote plain " in out


def test_npz_inputs_load_only_the_keys_the_model_needs_and_check_sizes_first(box, monkeypatch):
    model, x = _pass_model(box)
    with open(box.run_dir / "in.npz", "wb") as f:  # one unused member that would be 4 GiB decompressed
        np.savez_compressed(f, X=x, unused=np.zeros((1 << 20,), np.float32))
    monkeypatch.setenv("POLYSAT_EVAL_MAX_ELEMENTS", "1000")
    rc, _, err = box.cli("run", model, "--inputs", "in.npz", "--out", "o.npz")
    assert rc == 0, err
    np.savez(box.run_dir / "in.npz", X=np.zeros((2000,), np.float32))
    rc, _, err = box.cli("run", model, "--inputs", "in.npz", "--out", "o.npz")
    assert rc == 1
    _coded(err, "E1505")


# ---- model files: ONNX initializers and folds, integer inputs -----------------------------------------------

def _onnx(path, nodes, inits, inp=("X", 2), out=("Y", 2), ir=8):
    import onnx
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info(inp[0], TensorProto.FLOAT, [inp[1]])
    y = helper.make_tensor_value_info(out[0], TensorProto.FLOAT, [out[1]])
    m = helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits), opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = ir
    onnx.save(m, str(path))
    return str(path)


def test_an_onnx_initializer_named_like_an_input_is_a_default_the_input_overrides(box):
    from onnx import helper, numpy_helper
    model = _onnx(box.run_dir / "m.onnx", [helper.make_node("Relu", ["X"], ["Y"])],
                  [numpy_helper.from_array(np.zeros(2, np.float32), "X")])
    np.savez(box.run_dir / "in.npz", X=np.ones(2, np.float32))
    rc, _, err = box.cli("run", model, "--inputs", "in.npz", "--out", "o.npz")
    assert rc == 0, err
    with np.load(box.run_dir / "o.npz") as z:
        np.testing.assert_array_equal(z["Y"], [1, 1])  # onnxruntime's answer; the default gave 0
    np.savez(box.run_dir / "in.npz", other=np.ones(2, np.float32))
    rc, _, err = box.cli("run", model, "--inputs", "in.npz", "--out", "o.npz")
    assert rc == 0, err
    with np.load(box.run_dir / "o.npz") as z:
        np.testing.assert_array_equal(z["Y"], [0, 0])  # not given: the initializer is its value


def test_a_constant_of_shape_of_4_gib_folds_without_the_memory(box):
    import resource
    from onnx import helper, numpy_helper
    nodes = [helper.make_node("ConstantOfShape", ["s"], ["c"], value=numpy_helper.from_array(np.ones(1, np.float32))),
             helper.make_node("ReduceMax", ["c"], ["r"], keepdims=0), helper.make_node("Add", ["X", "r"], ["Y"])]
    model = _onnx(box.run_dir / "m.onnx", nodes, [numpy_helper.from_array(np.array([1 << 30], np.int64), "s")])
    np.savez(box.run_dir / "in.npz", X=np.ones(2, np.float32))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rc, _, err = box.cli("compile", model)
    assert rc == 0, err
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 1 << 20  # KiB: under 1 GiB more
    nodes[0] = helper.make_node("ConstantOfShape", ["s"], ["c"])
    model = _onnx(box.run_dir / "m2.onnx", [helper.make_node("Tile", ["X", "s"], ["t"]),
                                             helper.make_node("ReduceMax", ["t"], ["r"], keepdims=0),
                                             helper.make_node("Add", ["X", "r"], ["Y"])],
                  [numpy_helper.from_array(np.array([1 << 31], np.int64), "s"),
                   numpy_helper.from_array(np.ones(2, np.float32), "X")], ir=3)
    rc, _, err = box.cli("compile", model)
    assert rc == 1
    _coded(err, "E1505")


def test_index_maps_composed_along_a_long_reshape_chain_stop_at_their_size_bound(box):
    """120 reshapes and transposes whose composed index maps do not simplify: their floordivs nest and double in
    text each step (5 GB and MemoryError, or the OOM killer at 24 GB, before the bound): E1505 at once."""
    graph, tensors, prev = [], {"X": {"dtype": "fp32", "shape": [8, 4]}}, "X"
    for k in range(40):
        for j, (op, attrs, shape) in enumerate([("Reshape", {"shape": [32]}, [32]), ("Reshape", {"shape": [4, 8]}, [4, 8]),
                                                ("Transpose", {"perm": [1, 0]}, [8, 4])]):
            t = f"v{k}_{j}"
            graph.append({"op": op, "name": t, "inputs": [prev], "outputs": [t], "attrs": attrs})
            tensors[t], prev = {"dtype": "fp32", "shape": shape}, t
    graph.append({"op": "Elementwise", "name": "r", "inputs": [prev], "outputs": ["Y"], "attrs": {"fn": "relu"}})
    tensors["Y"] = {"dtype": "fp32", "shape": [8, 4]}
    (box.run_dir / "m.json").write_text(json.dumps({"signature": {"inputs": [{"tensor": "X"}], "outputs": [{"tensor": "Y"}]},
                                                    "tensors": tensors, "graph": graph}))
    rc, _, err = box.cli("extract", "m.json")
    assert rc == 1
    _coded(err, "E1505")
    assert "index expression" in err and "MemoryError" not in err


@pytest.mark.parametrize("depth, code", [(100_000, "E1108"), (900, "E1008")])
def test_a_model_file_nested_past_the_json_reader_is_malformed_and_a_deep_attribute_is_walked(box, depth, code):
    """100,000 levels: past json's own reader (E1108, was E1505 'a walk over the model'); 900: read, frozen
    without a frame per level, then refused as an unknown attribute."""
    doc = json.dumps({"signature": {"inputs": [{"tensor": "X"}], "outputs": [{"tensor": "Y"}]},
                      "tensors": {"X": {"dtype": "fp32", "shape": [4]}, "Y": {"dtype": "fp32", "shape": [4]}},
                      "graph": [{"op": "Elementwise", "name": "r", "inputs": ["X"], "outputs": ["Y"],
                                 "attrs": {"fn": "relu", "junk": "DEEP"}}]})
    (box.run_dir / "m.json").write_text(doc.replace('"DEEP"', "[" * depth + "]" * depth))
    rc, _, err = box.cli("compile", "m.json")
    assert rc == 1
    _coded(err, code)


@pytest.mark.parametrize("how,code", [("length", "E1109"), ("type", "E1011")])
def test_a_bad_onnx_initializer_is_a_coded_diagnostic(box, how, code):
    from onnx import TensorProto, helper
    w = helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])
    if how == "length":
        w.dims[0] = 3
    else:
        w.data_type = 99
    model = _onnx(box.run_dir / "m.onnx", [helper.make_node("Add", ["X", "w"], ["Y"])], [w])
    rc, _, err = box.cli("compile", model)
    assert rc == 1
    _coded(err, code)


GATHER = {"signature": {"inputs": [{"tensor": "X"}, {"tensor": "I"}], "outputs": [{"tensor": "G"}]},
          "tensors": {"X": {"dtype": "fp32", "shape": [5]}, "I": {"dtype": "i32", "shape": [2]},
                      "G": {"dtype": "fp32", "shape": [2]}},
          "graph": [{"op": "Gather", "name": "g", "inputs": ["X", "I"], "outputs": ["G"], "attrs": {"axis": 0}}]}


@pytest.mark.parametrize("idx", [np.array([2 ** 32 + 1, 0], np.int64), np.array([1.5, 0.0]),
                                 np.array([2 ** 32 - 1, 0], np.uint32)])
def test_gather_indices_that_do_not_fit_i32_are_refused_not_wrapped(box, idx):
    (box.run_dir / "m.json").write_text(json.dumps(GATHER))
    np.savez(box.run_dir / "in.npz", X=np.arange(5, dtype=np.float32), I=idx)
    rc, _, err = box.cli("run", "m.json", "--inputs", "in.npz", "--out", "o.npz")
    assert rc == 1
    _coded(err, "E1011")
    np.savez(box.run_dir / "in.npz", X=np.arange(5, dtype=np.float32), I=np.array([3, 1], np.int64))
    rc, _, err = box.cli("run", "m.json", "--inputs", "in.npz", "--out", "o.npz")
    assert rc == 0, err


@pytest.mark.parametrize("target", ["reference", "playback"])
def test_the_evaluators_sum_a_product_past_the_element_limit_in_blocks(box, monkeypatch, target):
    """(A tensor past the limit is refused: tests/test_evaluate_large_products.py.)"""
    m = {"signature": {"inputs": [{"tensor": "A"}, {"tensor": "B"}], "outputs": [{"tensor": "C"}]},
         "tensors": {"A": {"dtype": "fp32", "shape": [20, 20]}, "B": {"dtype": "fp32", "shape": [20, 20]},
                     "C": {"dtype": "fp32", "shape": [20, 20]}},
         "graph": [{"op": "GEMM", "name": "mm", "inputs": ["A", "B"], "outputs": ["C"], "attrs": {}}]}
    (box.run_dir / "m.json").write_text(json.dumps(m))
    np.savez(box.run_dir / "in.npz", A=np.ones((20, 20), np.float32), B=np.ones((20, 20), np.float32))
    monkeypatch.setenv("POLYSAT_EVAL_MAX_ELEMENTS", "4000")  # the outputs fit (400); the 8000-element product not
    rc, _, err = box.cli("run", "m.json", "--inputs", "in.npz", "--target", target, "--out", "o.npz")
    assert rc == 0, err
    with np.load(box.run_dir / "o.npz") as z:
        assert np.array_equal(z["C"], np.full((20, 20), 20, np.float32))


# ---- internal failures: coded, and the traceback kept under POLYSAT_DEBUG=1 ------------------------------------

def test_a_poly_core_failure_is_coded_and_keeps_its_traceback_under_debug(box, monkeypatch):
    from polysat.analyses import polycore
    from polysat.ir.diagnostics import PolysatError

    def broken(*a):
        raise ValueError("isl said no")
    monkeypatch.setattr(polycore, "_analyze", broken)
    from types import SimpleNamespace
    region = SimpleNamespace(name="k0")
    monkeypatch.delenv("POLYSAT_DEBUG", raising=False)
    with pytest.raises(PolysatError) as e:
        polycore.analyze(region)
    assert "ValueError: isl said no" in e.value.diagnostics[0].why
    monkeypatch.setenv("POLYSAT_DEBUG", "1")
    with pytest.raises(ValueError, match="isl said no"):
        polycore.analyze(region)


# ---- no recursion error on long chains -----------------------------------------------------------------------

def test_a_long_chain_dumps_its_egraph(box, low_recursion_limit):
    graph, prev = [], "X"
    for k in range(400):
        graph.append({"op": "Elementwise", "name": f"e{k}", "inputs": [prev], "outputs": [f"t{k}"],
                      "attrs": {"fn": "relu" if k % 2 else "neg"}})
        prev = f"t{k}"
    tensors = {t: {"dtype": "fp32", "shape": [4]} for t in ["X"] + [f"t{k}" for k in range(400)]}
    doc = {"signature": {"inputs": [{"tensor": "X"}], "outputs": [{"tensor": prev}]}, "tensors": tensors, "graph": graph}
    (box.run_dir / "m.json").write_text(json.dumps(doc))
    rc, out, err = box.cli("compile", "m.json", "--dump=egraph", "--out", "dumps")
    assert rc == 0, err
    assert (box.run_dir / "dumps" / "egraph.json").is_file()
