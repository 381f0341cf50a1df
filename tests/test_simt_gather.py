"""Gathers by run-time indices (Tiny IR GATHER: an embedding lookup, ONNX Gather / GatherElements) as SIMT kernels,
without a GPU.

The kernel reads the index, wraps it with ``polysat_simt::wrap_index`` (negative counts from the end of the
axis, outside the axis reads 0) and loads the table there. Checked here: the helper itself, built on the host,
against the reference evaluator's ``wrap_index`` on every index around the axis; gathering kernels on every
axis, GatherElements, a scalar index, fp16 / bf16 / i32 tables, emulated on the host (tests/simt_host.py)
for several plans against playback and a numpy oracle; a GPT-2-like embedding graph (token and position
Gathers by int64 inputs, add, LayerNorm, a tied LM head) through ``compile --dump=cu``: exit 0, a kernel per
gathering region that nvcc builds for sm_80 and sm_90a without spills, emulated against numpy, and a runtime
plan in which no step plays back on the host, whose launch parameters are the region's tensors.
"""
from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import tempfile
from types import SimpleNamespace

import numpy as np
import pytest

from polysat.backend.simt.bind import bind as simt_bind
from polysat.backend.simt.plan import SimtPlan, search, stop_reason
from polysat.ir.dtypes import round_to
from polysat.pipeline import Compilation

HERE = pathlib.Path(__file__).parent
_spec = importlib.util.spec_from_file_location("polysat_test_simt_host", HERE / "simt_host.py")
host = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(host)
oracle = host.oracle
gr = host.load("polysat_test_gather_runtime", "test_gather_runtime.py")
PLANS = [SimtPlan("sm80", 128, 1, 1), SimtPlan("sm80", 128, 4, 2), SimtPlan("sm80", 256, 32, 4),
         SimtPlan("sm80", 128, 4, 4, unroll=4)]


def _plans(spec) -> list:
    best = search(spec, "sm80", {}).best
    return [p for p in PLANS if stop_reason(spec, p) is None and p.key() != best.key()] + [best]


def test_wrap_index_helper_matches_the_reference_evaluator():
    """Every index from -3n-2 to 3n+2 on axes of 1, 2, 7 and 50, and the i32 extremes: the kernel's
    ``wrap_index`` (built on the host from the header every SIMT kernel inlines) gives the position the
    reference evaluator reads, or -1 exactly where it reads 0."""
    from polysat.backend.common.nvcc import nvcc_path
    from polysat.backend.simt.render import header
    from polysat.ir.evaluate import wrap_index
    sizes = (1, 2, 7, 50)
    cases = [(i, n) for n in sizes for i in [*range(-3 * n - 2, 3 * n + 3), -2 ** 31, 2 ** 31 - 1]]
    main = ("#include <cstdio>\nint main() {\n  const long long c[][2] = {"
            + ", ".join(f"{{{i}LL, {n}LL}}" for i, n in cases) + "};\n"
            f"  for (int k = 0; k < {len(cases)}; ++k) std::printf(\"%lld\\n\", "
            "polysat_simt::wrap_index((long long)(int)c[k][0], c[k][1]));\n  return 0;\n}\n")
    with tempfile.TemporaryDirectory(prefix="polysat-wrap-") as tmp:
        src, exe = os.path.join(tmp, "w.cu"), os.path.join(tmp, "w")
        with open(src, "w", encoding="utf-8") as f:
            f.write(header() + main)
        build = subprocess.run([nvcc_path(), "-std=c++17", "-arch=sm_80", "-o", exe, src], capture_output=True, text=True)
        assert build.returncode == 0, build.stderr[-3000:]
        got = [int(x) for x in subprocess.run([exe], capture_output=True, text=True, check=True).stdout.split()]
    for (i, n), g in zip(cases, got, strict=True):
        at, ok = wrap_index(np.array([i]), n)
        assert g == (int(at[0]) if ok[0] else -1), (i, n, g)
    assert sum(g == -1 for g in got) > len(sizes) * 4  # out of range on both sides of every axis


def _gather_doc(op: str, table: tuple, index: tuple, axis: int) -> dict:
    return oracle.model({"X": table, "I": index}, [oracle.node(op, ["X", "I"], "Y", axis=axis)], ["Y"])


def _gather_spec(doc: dict):
    regions = [r for r in Compilation(doc, cost="size").regions if r.name.startswith("gather_")]
    assert len(regions) == 1, [r.name for r in regions]
    return simt_bind(regions[0]).spec


def _cases() -> list:
    rng = np.random.default_rng(0)
    out = []
    for axis in (0, 1, 2):  # some indices negative, some outside the axis on both sides
        x = rng.standard_normal((5, 6, 7)).astype(np.float32)
        idx = rng.integers(-9, 9, (2, 3)).astype(np.int32)
        spec = _gather_spec(_gather_doc("Gather", ("fp32", [5, 6, 7]), ("i32", [2, 3]), axis))
        out.append((f"Gather axis {axis}", spec, {}, {"X": x, "I": idx}, gr._take(x, idx, axis)))
    x = rng.standard_normal((4, 5)).astype(np.float32)
    idx = rng.integers(-6, 6, (3, 5)).astype(np.int32)
    i = np.where(idx < 0, idx + 4, idx)
    ok = (i >= 0) & (i < 4)
    want = np.where(ok, np.take_along_axis(x[:, :5], np.where(ok, i, 0), 0), 0)
    out.append(("GatherElements axis 0", _gather_spec(_gather_doc("GatherElements", ("fp32", [4, 5]), ("i32", [3, 5]), 0)),
                {}, {"X": x, "I": idx}, want))
    x = rng.standard_normal((6, 9)).astype(np.float32)
    for j in (-1, 6):
        out.append((f"scalar index {j}", _gather_spec(_gather_doc("Gather", ("fp32", [6, 9]), ("i32", []), 0)), {},
                    {"X": x, "I": np.asarray(j, np.int32)}, gr._take(x, np.asarray(j), 0)))
    for dt in ("fp16", "bf16"):  # an embedding table of 16-bit floats, 33 wide (a tail for every vector width)
        spec = _gather_spec(_gather_doc("Gather", (dt, [40, 33]), ("i32", [3, 4]), 0))
        x = np.asarray(round_to(rng.standard_normal((40, 33)).astype(np.float32), spec.dtypes()["X"]), np.float32)
        ids = rng.integers(-45, 45, (3, 4)).astype(np.int32)
        out.append((f"{dt} embedding", spec, {}, {"X": x, "I": ids}, gr._take(x, ids, 0)))
    spec = _gather_spec(_gather_doc("Gather", ("fp32", ["V", "D"]), ("i32", ["B", "S"]), 0))  # sizes known at launch
    x = rng.standard_normal((9, 13)).astype(np.float32)
    ids = rng.integers(-11, 11, (2, 5)).astype(np.int32)
    out.append(("symbolic sizes", spec, {"V": 9, "D": 13, "B": 2, "S": 5}, {"X": x, "I": ids}, gr._take(x, ids, 0)))
    table = rng.integers(-1000, 1000, (11,)).astype(np.int32)
    ids = rng.integers(-13, 13, (4, 3)).astype(np.int32)
    out.append(("i32 table", _gather_spec(_gather_doc("Gather", ("i32", [11]), ("i32", [4, 3]), 0)), {},
                {"X": table, "I": ids}, gr._take(table, ids, 0)))
    return out


def test_gathering_kernels_match_playback_and_numpy():
    cases = _cases()
    for label, spec, _env, _x, _want in cases:
        assert spec.KIND == "simt", label
    host.check_cases([(label, spec, env, x, want.astype(np.float64)) for label, spec, env, x, want in cases], _plans)


def _gpt2_embedding():
    """GPT-2's input side: token and position embeddings gathered by int64 inputs, added, LayerNorm, and a
    LM head (an ONNX model, opset 17)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(1)
    v, s, d = 64, 8, 32
    inits = {"wte": rng.standard_normal((v, d)) * 0.5, "wpe": rng.standard_normal((16, d)) * 0.1,
             "ln_g": 1 + rng.standard_normal(d) * 0.1, "ln_b": rng.standard_normal(d) * 0.1,
             "head": rng.standard_normal((d, v)) * 0.2}
    nodes = [helper.make_node("Gather", ["wte", "input_ids"], ["tok"], axis=0, name="wte_lookup"),
             helper.make_node("Gather", ["wpe", "position_ids"], ["pos"], axis=0, name="wpe_lookup"),
             helper.make_node("Add", ["tok", "pos"], ["h"], name="embed_add"),
             helper.make_node("LayerNormalization", ["h", "ln_g", "ln_b"], ["hn"], axis=-1, epsilon=1e-5, name="ln_f"),
             helper.make_node("MatMul", ["hn", "head"], ["logits"], name="lm_head")]
    g = helper.make_graph(nodes, "gpt2_embedding",
                          [helper.make_tensor_value_info(n, TensorProto.INT64, [1, s]) for n in ("input_ids", "position_ids")],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, s, v])],
                          [numpy_helper.from_array(a.astype(np.float32), k) for k, a in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def gpt2_dump(tmp_path_factory):
    """``polysat compile gpt2_embedding.onnx --dump=cu`` (exit status, cu.json, the model)."""
    m = _gpt2_embedding()
    tmp = tmp_path_factory.mktemp("gpt2")
    path = tmp / "gpt2_embedding.onnx"
    path.write_bytes(m.SerializeToString())
    rc, out, err = oracle.cli(["compile", str(path), "--dump=cu", "--out", str(tmp / "dumps")])
    assert rc == 0, out + err
    return json.loads((tmp / "dumps" / "cu.json").read_text(encoding="utf-8")), m


def test_gpt2_embedding_dumps_a_kernel_per_gather_that_nvcc_builds(gpt2_dump):
    doc, _m = gpt2_dump
    gathers = [l for l in doc["launches"] if l["region"].startswith("gather_")]
    read = sorted(sorted(set(l["tensors"].values()) & {"wte", "wpe", "input_ids", "position_ids"}) for l in gathers)
    assert read == [["input_ids", "wte"], ["position_ids", "wpe"]], gathers
    index = []
    for l in gathers:
        with open(l["file"], encoding="utf-8") as f:
            text = f.read()
        assert "polysat_simt::wrap_index(" in text.split("namespace ns_", 1)[1]  # the kernel's own code calls it
        index += [(l["region"], arch, SimpleNamespace(source=text)) for arch in ("sm80", "sm90")]
    bad = [(label, arch, rep.log[-1500:]) for label, arch, _ks, rep in oracle.nvcc_builds(index, "gather kernels")
           if not rep.ok or rep.spills]
    assert not bad, bad


def test_gpt2_embedding_kernels_emulated_and_launched_without_playback(gpt2_dump):
    """The same graph compiled in process: the gathering kernels, emulated on the host with ids that count from
    the end, give numpy's lookups; the model runtime binds every region to a kernel (none played back), each
    gathering kernel's launch parameters are its region's tensors, and the whole model on the host arena
    (each kernel as its kind's numpy meaning) matches onnxruntime."""
    import onnxruntime as ort
    from polysat.backend import stages
    from polysat.frontend import with_parameters
    from polysat.frontend.onnx import import_onnx
    from polysat.runtime.host import host_runtime
    from polysat.runtime.kernels import source
    from polysat.runtime.model import steps_of
    _doc, m = gpt2_dump
    doc = import_onnx(m)
    c = Compilation(doc, cost="model")
    ids = np.array([[3, 63, -1, -64, 0, 17, 5, 40]], np.int64)
    pos = np.array([[0, 1, 2, 3, 4, 5, 6, -9]], np.int64)
    inputs = with_parameters(doc, {"input_ids": ids, "position_ids": pos})
    jobs, wants = [], []
    for r, ks, b in stages.launches(c.regions, "sm80"):
        if not r.name.startswith("gather_"):
            continue
        table, index = (b.names.user(n) for n in ks.spec.inputs)
        jobs.append((ks, {n: inputs[b.names.user(n)] for n in ks.spec.inputs}, {}))
        wants.append(gr._take(inputs[table], inputs[index].astype(np.int32), 0))
        params = [(p.kind, b.names.user(p.role)) for p in ks.params]
        assert params == [("ptr", table), ("ptr", index), ("ptr", b.names.user(ks.spec.c))], params
        assert ks.grid() == (-(-ks.spec.rows() // ks.plan.rows_per_block), 1, 1)
    assert len(jobs) == 2
    for got, want in zip(host.emulate_many(jobs), wants, strict=True):
        np.testing.assert_array_equal(got, want)
    steps = steps_of(c.regions)
    assert not [s.region.name for s in steps if s.on_cpu]
    env = {}
    for s in steps:
        if s.region.name.startswith("gather_"):
            assert s.kind.name == "simt" and source(s.kind.name, s.binding.spec, env, "sm90").skeleton == "simt"
    launched = []

    def launch(kind, spec, tensors, env, out):
        launched.append(kind.name)
        out[...] = kind.reference(spec, tensors, env)
    got = host_runtime(c.regions, frozenset(doc.get("parameters") or ()), launch=launch).run(inputs)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"input_ids": ids, "position_ids": np.where(pos < 0, pos + 16, pos)})[0]
    np.testing.assert_allclose(got["logits"], want, rtol=1e-3, atol=1e-3)
    assert len(launched) == len(c.regions)


def _cuda() -> bool:
    from polysat.backend.common.gpu import cuda_available
    return cuda_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="no CUDA GPU visible")
def test_gathering_kernels_on_the_gpu_and_the_embedding_graph_on_cuda():
    """On a device: each gathering kernel under every plan shape it admits (launch.run) against its numpy
    meaning, and the GPT-2 embedding graph through ``--target cuda``'s path (no region played back) against
    playback and onnxruntime."""
    import onnxruntime as ort
    from polysat.backend.simt.launch import run
    from polysat.frontend import with_parameters
    from polysat.frontend.onnx import import_onnx
    from polysat.ir.playback import playback
    from polysat.runtime import regions as device_run
    from polysat.backend.simt.reference import reference
    for label, spec, env, x, want in _cases():
        for plan in _plans(spec):
            got = run(spec, x, env, plan=plan)
            oracle.assert_close(got, reference(spec, x, env).astype(np.float64), spec.dtypes()[spec.c].value,
                                f"{label} {plan.key()}")
            oracle.assert_close(got, want.astype(np.float64), spec.dtypes()[spec.c].value, f"{label} vs numpy")
    m = _gpt2_embedding()
    doc = import_onnx(m)
    c = Compilation(doc, cost="model")
    ids = np.array([[3, 63, -1, -64, 0, 17, 5, 40]], np.int64)
    inputs = with_parameters(doc, {"input_ids": ids, "position_ids": np.arange(8, dtype=np.int64)[None]})
    got = device_run.run_cuda(c.regions, inputs)["logits"]
    np.testing.assert_allclose(got, playback(c.regions, inputs)["logits"], rtol=1e-3, atol=1e-3)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"input_ids": ids, "position_ids": np.arange(8, dtype=np.int64)[None]})[0]
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


def test_the_compiled_model_holds_a_cubin_for_the_gather_and_nothing_on_the_cpu(tmp_path, monkeypatch):
    """``run --target cuda --compile-only``'s compiled model (runtime/compiled.py, no GPU needed): the gathering
    region is a SIMT kernel with its cubin for sm80, and no region is a playback step."""
    from polysat.runtime.compiled import compile_model
    monkeypatch.setenv("POLYSAT_MODEL_CACHE", str(tmp_path / "models"))
    monkeypatch.setenv("POLYSAT_KERNEL_CACHE", str(tmp_path / "kernels"))
    doc = oracle.model({"W": ("fp32", [50, 16]), "P": ("fp32", [8, 16]), "ids": ("i32", [2, 8])},
                       [oracle.node("Gather", ["W", "ids"], "E", axis=0),
                        oracle.node("Elementwise", ["E", "P"], "Y", fn="add")], ["Y"])
    rng = np.random.default_rng(4)
    ins = {"W": rng.standard_normal((50, 16)).astype(np.float32), "P": rng.standard_normal((8, 16)).astype(np.float32),
           "ids": rng.integers(-60, 60, (2, 8)).astype(np.int32)}
    cm = compile_model(Compilation(doc, arch="sm80"), ins, "sm80", (8, 0))
    kinds = {k["region"]: k["kind"] for k in cm.kernels}
    assert kinds.pop(next(r for r in kinds if r.startswith("gather_"))) == "simt" and set(kinds.values()) == {"simt"}
    assert all(k.get("cubin") for k in cm.kernels)
