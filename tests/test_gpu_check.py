"""The GPU check (bench/gpu_check.py, bench/gpu_report.py, bench/gpu_launch.py, the bench modules' cases and
references) on the CPU: without a device every part is SKIPPED with the reason and the exit status is 0; the
report assembles rows, ratios, medians and estimate / measured from synthetic timings; a failing case is a
FAIL row and the others go on; pytest's JUnit XML and compute-sanitizer's summary are read; the gpu tests
select and collect; every sanitizer item's kernels render and build with nvcc; the benches' sampled
references agree with direct numpy ones. The ``gpu``-marked test launches every item once on a GPU.
"""
from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from polysat.backend.common.gpu import cuda_available
from polysat.bench import attention, conv, gemm, gpu_check, gpu_launch, simt
from polysat.bench import gpu_report as R
from polysat.bench import harness
from polysat.bench.harness import run_cases

_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_without_a_device_every_part_is_skipped_with_the_reason_and_the_exit_status_is_0(tmp_path, monkeypatch,
                                                                                          capsys):
    import polysat.backend.common.gpu as gpu
    monkeypatch.setattr(gpu, "cuda_available", lambda: False)
    assert gpu_check.main(["--out", str(tmp_path), "--quick"]) == 0
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["env"]["cuda_device"] is False and "no CUDA device" in rep["env"]["why"]
    for name in ("tests", "sanitize", "bench"):
        assert rep["parts"][name]["status"] == "SKIPPED" and "no CUDA device" in rep["parts"][name]["reason"]
    assert R.overall(rep) == "SKIPPED"
    md = (tmp_path / "report.md").read_text()
    assert "## bench: SKIPPED (no CUDA device" in md and "**SKIPPED**" in md
    assert not list(tmp_path.glob("*.xml")) and "gpu_check: SKIPPED" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        gpu_check.main(["--out", str(tmp_path), "--part", "benchmarks"])
    assert e.value.code == 2


def test_a_bench_row_has_its_medians_throughputs_ratios_and_estimate_over_measured():
    t_polysat = R.median([2.0, 1.0, 1.5, 9.0, 1.2])  # 1.5: an outlier does not move the median
    t_cublas = R.median([1.2, 1.2, 1.3])
    row = R.bench_row("gemm", "4096x4096x4096", {"polysat": t_polysat, "cublas": t_cublas},
                      flops=2.0 * 4096 ** 3, estimate_us=1200.0, dtype="fp16", max_rel_err=1e-3)
    assert row["status"] == "ok" and row["polysat_ms"] == 1.5 and row["cublas_ms"] == 1.2
    assert row["polysat_tflops"] == pytest.approx(2 * 4096 ** 3 / 1.5e-3 / 1e12)
    assert row["vs_cublas"] == pytest.approx(0.8)  # = polysat TFLOP/s / cuBLAS TFLOP/s
    assert row["vs_cublas"] == pytest.approx(row["polysat_tflops"] / row["cublas_tflops"])
    assert row["est_over_measured"] == pytest.approx(0.8) and row["baselines_missing"] == ""
    mem = R.bench_row("simt", "softmax", {"polysat": 0.1, "torch": 0.2}, nbytes=3e8, copy_gbps=4000.0)
    assert mem["polysat_gbps"] == pytest.approx(3000.0) and mem["vs_copy"] == pytest.approx(0.75)
    assert mem["vs_torch"] == pytest.approx(2.0) and mem["estimate_us"] is None and mem["est_over_measured"] is None
    with pytest.raises(ValueError):
        R.median([])
    with pytest.raises(ValueError):
        R.bench_row("gemm", "x", {"polysat": None, "cublas": 1.0})


def test_without_torch_the_baselines_say_so_and_the_polysat_figures_stay():
    row = R.bench_row("attention", "d64 s4096", {"polysat": 2.0, "sdpa_flash": None}, flops=1e12,
                      estimate_us=2500.0, missing="torch missing (No module named 'torch')")
    assert row["polysat_tflops"] == pytest.approx(500.0) and row["sdpa_flash_ms"] is None and row["vs_sdpa_flash"] is None
    assert row["baselines_missing"] == "sdpa_flash: torch missing (No module named 'torch')"
    assert row["est_over_measured"] == pytest.approx(1.25)
    md = R.markdown({"date": "d", "env": {}, "parts": {"bench": R.part("ok", rows=[row], copy_gbps=None)}})
    assert "torch missing" in md and "| d64 s4096 |" in md


def test_a_failing_case_is_a_fail_row_with_its_error_and_the_others_go_on():
    said = []

    def one(case):
        if case["m"] == 2:
            raise RuntimeError("cuLaunchKernel failed: CUDA_ERROR_ILLEGAL_ADDRESS")
        return [R.bench_row("gemm", str(case["m"]), {"polysat": 1.0, "cublas": 0.9}, flops=1e9, dtype="fp16")]
    rows = run_cases("gemm", [{"m": 1, "dtype": "fp16"}, {"m": 2, "dtype": "bf16"}, {"m": 3, "dtype": "fp16"}], one,
                     lambda c: str(c["m"]), said.append)
    assert [r["status"] for r in rows] == ["ok", "FAIL", "ok"] and rows[1]["dtype"] == "bf16"
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in rows[1]["error"] and "FAIL" in said[1]
    rep = {"date": "d", "env": {"device": "NVIDIA H100 80GB HBM3"}, "parts": {"bench": R.part("FAIL", rows=rows)}}
    assert R.overall(rep) == "FAIL" and "FAIL: RuntimeError: cuLaunchKernel failed" in R.markdown(rep)


def test_pytest_junit_xml_gives_one_outcome_per_test():
    xml = """<testsuites><testsuite name="pytest" tests="4">
      <testcase classname="tests.test_backend_gpu" name="test_a[gemm_f16]" time="1.5"/>
      <testcase classname="tests.test_backend_gpu" name="test_b" time="0.2">
        <failure message="AssertionError: 3 of 9 differ">tb</failure></testcase>
      <testcase classname="tests.test_simt_gpu" name="test_c" time="0.1"><error message="fixture broke">tb</error>
      </testcase>
      <testcase classname="tests.test_siblings" name="test_d" time="0">
        <skipped message="the sm90 skeleton needs an sm90 GPU"/></testcase><testcase time="0.000" />
    </testsuite></testsuites>"""
    rows = R.junit_rows(xml)
    assert [(r["test"], r["outcome"]) for r in rows] == [
        ("tests.test_backend_gpu::test_a[gemm_f16]", "passed"), ("tests.test_backend_gpu::test_b", "failed"),
        ("tests.test_simt_gpu::test_c", "error"), ("tests.test_siblings::test_d", "skipped")]
    assert rows[1]["message"] == "AssertionError: 3 of 9 differ" and rows[0]["seconds"] == 1.5
    assert R.test_counts(rows) == {"passed": 1, "failed": 1, "error": 1, "skipped": 1}


def test_compute_sanitizer_runs_are_ok_only_with_zero_errors_and_a_clean_exit():
    clean = "========= COMPUTE-SANITIZER\n{\"ok\": true}\n========= ERROR SUMMARY: 0 errors\n"
    racy = "========= Error: Race reported between Write access at ...\n========= ERROR SUMMARY: 3 errors\n"
    assert R.sanitize_status(0, clean) == ("ok", 0, "")
    assert R.sanitize_status(0, racy) == ("FAIL", 3, "3 error(s)")
    assert R.sanitize_status(1, clean)[0] == "FAIL"  # the launch's own output check failed
    assert R.sanitize_status(-1, "", timed_out=True)[2] == "timed out"
    assert R.sanitize_status(134, "Segmentation fault")[1] is None


def test_racecheck_closes_with_its_own_summary_line():
    # racecheck prints no ERROR SUMMARY: these are its closing lines as compute-sanitizer 2025.3.1 printed them on
    # an H200 (every racecheck run of the first GPU check was a FAIL "no ERROR SUMMARY" before this)
    clean = ("========= COMPUTE-SANITIZER\n{\"item\": \"gemm_sm90\", \"ok\": true}\n"
             "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n")
    racy = "========= RACECHECK SUMMARY: 4 hazards displayed (3 errors, 1 warnings)\n"
    assert R.sanitize_status(0, clean) == ("ok", 0, "")
    assert R.sanitize_status(0, racy) == ("FAIL", 3, "3 error(s)")
    assert R.sanitize_status(0, "========= RACECHECK SUMMARY: 0 hazards displayed")[1] is None  # cut short


def test_reports_of_several_runs_merge_and_the_results_file_names_the_device(tmp_path):
    env = {"device": "NVIDIA H100 80GB HBM3", "driver": "580.159.04", "cuda": "13.0"}
    row = R.bench_row("gemm", "8192x8192x8192", {"polysat": 1.4, "cublas": 1.38}, flops=2.0 * 8192 ** 3, dtype="bf16")
    a = {"date": "1", "env": env, "parts": {"tests": R.part("ok", tests=[]), "bench": R.skipped("not asked")}}
    b = {"date": "2", "env": env, "parts": {"tests": R.skipped("not asked"), "bench": R.part("ok", rows=[row])}}
    m = R.merge([a, b])
    assert m["parts"]["tests"]["status"] == "ok" and m["parts"]["bench"]["rows"] == [row] and m["merged_from"] == ["1", "2"]
    assert R.results_filename(env["device"]) == "nvidia-h100-80gb-hbm3.json"
    paths = R.write(m, str(tmp_path))
    doc = json.loads(pathlib.Path(paths["results"]).read_text())
    assert doc["device"] == env["device"] and doc["driver"] == "580.159.04" and doc["rows"] == [row] and doc["date"] == "2"
    assert "| 8192x8192x8192 | bf16 |" in pathlib.Path(paths["md"]).read_text()


def test_the_sanitize_part_runs_each_item_plain_then_under_each_tool_and_fails_per_run(tmp_path, monkeypatch):
    def fake_run(cmd, timeout, env=None):
        item = cmd[-1]
        if cmd[0] == "/opt/cs":
            tool = cmd[cmd.index("--tool") + 1]
            if (item, tool) == ("simt_softmax", "memcheck"):
                return 1, json.dumps({"item": item, "ok": False, "error": "max_rel_err 0.5"}) + "\n" + \
                    "========= ERROR SUMMARY: 0 errors\n", False
            return 0, f"========= ERROR SUMMARY: {2 if (item, tool) == ('conv', 'racecheck') else 0} errors\n", False
        if item == "scores":
            return 1, json.dumps({"item": item, "ok": False, "error": "InternalError: E1999"}) + "\n", False
        return 0, json.dumps({"item": item, "ok": True, "max_rel_err": 1e-3}) + "\n", False
    monkeypatch.setattr(gpu_check, "_run", fake_run)
    monkeypatch.setattr(gpu_check, "sanitizer", lambda: "/opt/cs")
    log = gpu_check.Log(str(tmp_path / "logs.txt"))
    p = gpu_check.part_sanitize(log, 3, 60, 600)
    runs = {(r["item"], r["tool"]): r for r in p["runs"]}
    assert len(runs) == 4 * len(gpu_launch.ITEMS) and p["status"] == "FAIL" and p["reason"] == f"3 of {4 * len(gpu_launch.ITEMS)} runs failed"
    assert runs[("simt_softmax", "memcheck")]["why"].endswith("output check failed); max_rel_err 0.5")
    assert runs[("conv", "racecheck")]["errors"] == 2 and runs[("scores", "none")]["why"] == "InternalError: E1999"
    assert runs[("gemm_sm90", "none")]["max_rel_err"] == 1e-3 and runs[("attention", "synccheck")]["status"] == "ok"
    assert "racecheck: gpu_launch conv" in (tmp_path / "logs.txt").read_text()
    late = gpu_check.part_sanitize(log, 1, 60, -1)  # the budget is spent before the first run
    assert all(r["status"] == "FAIL" and r["why"].startswith("not run") for r in late["runs"])
    monkeypatch.setattr(gpu_check, "sanitizer", lambda: None)
    assert "compute-sanitizer not found" in gpu_check.part_sanitize(log, 1, 60, 600)["runs"][-1]["why"]


def test_the_tests_part_runs_the_gpu_files_and_reads_each_outcome(tmp_path, monkeypatch):
    seen = []

    def fake_run(cmd, timeout, env=None):
        seen.append(cmd)
        junit = next(c.split("=", 1)[1] for c in cmd if c.startswith("--junitxml="))
        pathlib.Path(junit).write_text('<testsuite><testcase classname="tests.test_backend_gpu" name="t1" time="2"/>'
                                       '<testcase classname="tests.test_simt_gpu" name="t2" time="1">'
                                       '<failure message="3 of 9 differ"/></testcase></testsuite>')
        return 1, "1 failed, 1 passed", False
    monkeypatch.setattr(gpu_check, "_run", fake_run)
    p = gpu_check.part_tests(str(tmp_path), gpu_check.Log(str(tmp_path / "logs.txt")), 1, 60)
    assert seen[0][2:5] == ["pytest", "-m", "gpu"] and "tests/test_backend_gpu.py" in seen[0]
    assert p["status"] == "FAIL" and p["counts"]["failed"] == 1 and p["tests"][1]["message"] == "3 of 9 differ"
    assert p["reason"] == "1 failed"
    monkeypatch.setattr(gpu_check, "_run", lambda cmd, timeout, env=None: (-1, "", True))
    assert gpu_check.part_tests(str(tmp_path), gpu_check.Log(str(tmp_path / "l.txt")), 1, 60)["reason"] == "timed out"


def test_the_check_cases_are_the_rows_the_gpu_bring_up_asks_for():
    g = {(c["dtype"], c["m"], c["n"], c["k"]) for c in gemm.check_cases(False)}
    assert {(d, *s) for d in ("fp16", "bf16") for s in ((4096,) * 3, (8192,) * 3, (4095, 4097, 1000))} <= g
    assert {(c["dtype"], c["m"]) for c in gemm.check_cases(True)} >= {("fp16", 4096), ("bf16", 4095), ("fp32", 4096)}
    a = attention.check_cases(False)
    assert {(c["d"], c["seq"], c["causal"]) for c in a} == {(d, s, c) for d in (64, 128)
                                                           for s in (1024, 2048, 4096, 8192, 16384) for c in (False, True)}
    assert all(c["batch"] * c["seq"] == 16384 and c["heads"] * c["d"] == 2048 for c in a)
    # each dtype's rows run the algorithm a compiled model of that dtype binds (bf16 streams in two passes)
    assert {(c["dtype"], c["algo"]) for c in a} == {("fp16", "online_softmax"), ("bf16", "streaming_softmax_2pass")}
    assert {c["name"] for c in conv.check_cases(False)} == {x[0] for x in conv.RESNET50_3X3 + conv.CONV_POOL}
    assert {c["name"] for c in simt.check_cases(True)} == {"softmax", "layernorm", "elementwise"}


def _conv_direct(x, w, stride, pad):
    n, c, h, _ = x.shape
    co, _, k, _ = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    ho = (h + 2 * pad - k) // stride + 1
    out = np.zeros((n, co, ho, ho))
    for i in range(ho):
        for j in range(ho):
            out[:, :, i, j] = np.einsum("ncij,ocij->no", xp[:, :, i * stride:i * stride + k, j * stride:j * stride + k], w)
    return out


def test_the_conv_benchs_sampled_reference_is_the_conv_relu_maxpool():
    rng = np.random.default_rng(0)
    x, w, b = rng.standard_normal((2, 3, 9, 9)), rng.standard_normal((4, 3, 3, 3)), rng.standard_normal(4)
    y = _conv_direct(x, w, 2, 1)
    case = {"pool": None, "stride": 2, "pad": 1}
    assert conv.sampled_err(case, x, w, b, y, 5, 5, rng) < 1e-12
    pooled = np.maximum(y + b[None, :, None, None], 0)
    pooled = np.pad(pooled, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    p = np.stack([[pooled[:, :, i * 2:i * 2 + 3, j * 2:j * 2 + 3].max(axis=(2, 3)) for j in range(3)] for i in range(3)])
    p = p.transpose(2, 3, 0, 1)
    case = {"pool": (3, 2, 1), "stride": 2, "pad": 1}
    assert conv.sampled_err(case, x, w, b, p, 5, 5, rng) < 1e-12
    assert conv.sampled_err(case, x, w, b, p + 0.5 * (p > 1.0), 5, 5, rng) > 1e-2


class _Host:
    """A stand-in for a device tensor: Data(None).host reads ``numpy()``."""

    def __init__(self, a):
        self.a = np.asarray(a, np.float32)

    def numpy(self):
        return self.a


def test_the_gemm_and_attention_benchs_sampled_references_catch_a_wrong_output():
    from polysat.bench.harness import Data
    data, rng = Data(None), np.random.default_rng(0)
    a, b, bias = rng.standard_normal((70, 40)), rng.standard_normal((40, 30)), rng.standard_normal(30)
    c = a @ b
    assert gemm.sampled_err(data, _Host(a), _Host(b), _Host(bias), _Host(c), False, rng) < 1e-5
    assert gemm.sampled_err(data, _Host(a), _Host(b), _Host(bias), _Host(np.maximum(c + bias, 0)), True, rng) < 1e-5
    assert gemm.sampled_err(data, _Host(a), _Host(b), _Host(bias), _Host(c), True, rng) > 1e-2
    q, k, v = (rng.standard_normal((1, 2, 33, 8)) for _ in range(3))
    for causal in (False, True):
        s = q[0, 0] @ k[0, 0].T / np.sqrt(8)
        if causal:
            s = np.where(np.tri(33, dtype=bool), s, -np.inf)
        p = np.exp(s - s.max(1, keepdims=True))
        o = np.zeros_like(q)
        o[0, 0] = p / p.sum(1, keepdims=True) @ v[0, 0]
        assert attention.sampled_err(data, *(_Host(t) for t in (q, k, v, o)), causal, rng) < 1e-5
        assert attention.sampled_err(data, *(_Host(t) for t in (q, k, v, o)), not causal, rng) > 1e-3


def test_the_gpu_tests_select_and_collect():
    files = gpu_check.gpu_test_files()
    assert "tests/test_backend_gpu.py" in files and "tests/test_gpu_check.py" in files and len(files) >= 9
    p = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "--collect-only", "-p", "no:cacheprovider",
                        *files], capture_output=True, text=True, cwd=ROOT, check=False)
    collected = [x for x in p.stdout.splitlines() if "::" in x]
    assert p.returncode == 0 and {x.split("::")[0] for x in collected} == set(files), p.stdout[-2000:]
    assert len(collected) >= 80


def test_every_sanitizer_item_renders_its_kind_and_builds_with_nvcc():
    index, lost = [], {}
    for item in gpu_launch.ITEMS:
        try:
            got = gpu_launch.sources(item, "sm90")
        except RuntimeError as e:  # e.g. the example no longer extracts to a region of the item's kind
            lost[item.name] = str(e)
            continue
        if item.skeleton:
            assert all(ks.skeleton == item.skeleton for _, k, ks in got if k == item.kind)
        index += [(f"{item.name}/{r}", "sm90", ks) for r, _, ks in got]
    built = oracle.nvcc_builds(index, "sanitizer launch kernels")
    assert [label for label, _, _, rep in built if not rep.ok] == []
    assert lost == {}
    assert {i.name for i in gpu_launch.ITEMS} >= {"gemm_sm90", "gemm_sm80", "gemm_fp32", "gemm_rmsnorm_fp32", "conv", "conv_pool",
                                                  "attention", "scores", "simt_softmax", "simt_layernorm"}
    # the fp32 item's GEMM is the 3xTF32 one (its region priced on tensor cores at the launch's sizes)
    assert any("polysat::gemm_sm80<float," in ks.source  # the template's fp32 operands: 3xTF32
               for _, k, ks in gpu_launch.sources(gpu_launch.BY_NAME["gemm_fp32"], "sm90") if k == "gemm")
    # the RMSNorm item's GEMM sums its statistic in the main loop (backend/gemm/prologue.py in_loop)
    assert any("static constexpr int LIN = 0;" in ks.source
               for _, k, ks in gpu_launch.sources(gpu_launch.BY_NAME["gemm_rmsnorm_fp32"], "sm90") if k == "gemm")


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible")
@pytest.mark.parametrize("name", [i.name for i in gpu_launch.ITEMS])
def test_each_sanitizer_item_launches_once_and_equals_the_cpu_playback(name):
    res = gpu_launch.launch(gpu_launch.BY_NAME[name])
    assert res["ok"], res


class _Array:
    """A numpy-backed stand-in for DeviceArray (NaN-poisoned when made empty)."""

    def __init__(self, shape, dtype):
        self.a = np.full(tuple(shape), np.nan, dtype=np.float32).astype(dtype)

    @staticmethod
    def from_numpy(a):
        out = _Array(a.shape, a.dtype)
        out.a[...] = a
        return out

    def numpy(self):
        return self.a.copy()


class _Launch:
    """A fake prepared launch: the real kernel source (plan, estimate), the kind's numpy meaning as the kernel."""

    def __init__(self, kind: str, spec, tensors, env):
        from polysat.backend.kinds import kind_named
        from polysat.runtime.kernels import source
        self.kernel, self.kind, self.spec, self.tensors, self.env = source(kind, spec, env, "sm90"), kind_named(kind), \
            spec, tensors, env

    def __call__(self, stream=0):
        c = self.tensors[self.spec.c]
        ins = {n: t.a for n, t in self.tensors.items() if t is not c}
        c.a[...] = np.asarray(self.kind.reference(self.spec, ins, self.env)).astype(c.a.dtype)


def _numpy_device(monkeypatch):
    """A stand-in device: tensors in numpy, each kernel its kind's numpy meaning (the real kernel source gives the
    plan and the estimate), no PyTorch; returns the bench's Gpu."""
    import types

    import polysat.backend.attention.launch as al
    import polysat.backend.common.device_tensors as dt
    import polysat.backend.conv.launch as cl
    import polysat.backend.gemm.launch as gl
    import polysat.runtime.kernels as rk
    monkeypatch.setattr(dt, "DeviceArray", _Array)
    monkeypatch.setattr(gl, "prepare", lambda spec, t, env=None, **kw: _Launch("gemm", spec, t, env or {}))
    monkeypatch.setattr(cl, "prepare", lambda spec, t, **kw: _Launch(
        "conv_pool" if hasattr(spec, "conv") else "conv", spec, t, {}))
    monkeypatch.setattr(al, "prepare", lambda spec, t, env=None, **kw: _Launch("attention", spec, t, env or {}))
    monkeypatch.setattr(rk, "prepare", lambda kind, spec, t, env: _Launch(kind, spec, t, env))
    return types.SimpleNamespace(torch=None, why="torch missing (test)",
                                 dev=types.SimpleNamespace(arch="sm90", sms=132, cc=(9, 0)))


SMALL = {"gemm": [{"dtype": "bf16", "m": 70, "n": 48, "k": 40}],
         "conv": [{"dtype": "fp16", "name": "t", "c": 8, "hw": 11, "co": 16, "batch": 2, **case}
                  for case in ({"pool": None, "stride": 2, "pad": 1, "k": 3}, {"pool": (2, 2, 0), "stride": 1, "pad": 1, "k": 3},
                               {"pool": (3, 2, 1), "stride": 2, "pad": 3, "k": 7})],
         "attention": [{"dtype": "fp16", "d": 64, "seq": 40, "causal": True, "algo": "online_softmax", "batch": 1,
                        "heads": 2}],
         "simt": [{**c, "bind": {k: (300 if i == 0 else min(v, 64)) for i, (k, v) in enumerate(c["bind"].items())}}
                  for c in simt.cases(True)]}


def test_every_bench_measures_on_a_numpy_device_without_torch(monkeypatch):
    """Each bench's measure, end to end on a stand-in device (timings fixed): the rows carry polysat's figures,
    the plan's estimate, 'torch missing' baselines and a small sampled error, so the bench's plumbing and its
    independent references agree before a GPU runs it."""
    from polysat.bench.harness import Data
    gpu = _numpy_device(monkeypatch)
    data, measured = Data(None), []

    def timed(fn):
        fn()
        return 0.5

    rows = [r for b, m in (("gemm", gemm), ("conv", conv), ("attention", attention)) for c in SMALL[b]
            for r in m.measure(gpu, c, timed, data, measured)]
    rows += [r for c in SMALL["simt"] for r in simt.measure(gpu, c, timed, data, measured, 3000.0)]
    assert [r["bench"] for r in rows] == ["gemm", "gemm_bias_relu", "conv", "conv_relu_maxpool", "conv_relu_maxpool",
                                          "attention", "simt", "simt", "simt"] and len(measured) == len(rows)
    for r in rows:
        assert r["status"] == "ok" and r["polysat_ms"] == 0.5 and r["max_rel_err"] < 2e-2, r
        assert r["baselines_missing"].endswith("torch missing (test)") and r["estimate_us"] > 0
        assert (r.get("polysat_tflops") or r.get("polysat_gbps")) > 0
    assert all(r["vs_copy"] > 0 for r in rows if r["bench"] == "simt")


def test_the_bench_part_runs_every_bench_saves_after_each_row_and_keeps_to_its_budget(tmp_path, monkeypatch):
    import polysat.bench.harness as h
    gpu = _numpy_device(monkeypatch)
    monkeypatch.setattr(h, "open_device", lambda *a: gpu)
    monkeypatch.setattr(h, "copy_gbps", lambda timed: 3000.0)
    monkeypatch.setattr(h, "time_ms", lambda fn, iters, warmup: (fn(), 0.25)[1])
    monkeypatch.setenv("POLYSAT_MEASURE_LOG", str(tmp_path / "m.csv"))
    for name, m in (("gemm", gemm), ("conv", conv), ("attention", attention), ("simt", simt)):
        monkeypatch.setattr(m, "check_cases", lambda quick, name=name: SMALL[name][:1])
    built = []
    monkeypatch.setattr(gpu_check.harness, "build_kernels", lambda jobs, workers: built.extend(jobs) or ["", "E"][:len(jobs)])
    saves, report = [], {"parts": {}}
    p = gpu_check.part_bench(True, report, lambda: saves.append(len(report["parts"]["bench"]["rows"])), 600, 4)
    assert len(built) == 5 and {j[1] for j in built} == {"sm90", "simt"} and all(j[2:] == ("sm90", (9, 0)) for j in built)
    assert p["build"]["kernels"] == 5 and p["build"]["failed"] == 1
    assert p["status"] == "ok" and list(p["benches"]) == ["gemm", "conv", "attention", "simt"] and saves == [1, 2, 3, 4, 5]
    assert p["copy_gbps"] == 3000.0 and p["torch"] == "torch missing (test)" and len((tmp_path / "m.csv").read_text().splitlines()) == 6
    late = gpu_check.part_bench(True, {"parts": {}}, lambda: None, -1)
    assert late["status"] == "FAIL" and all("budget" in r["error"] for r in late["rows"]) and len(late["rows"]) == 4


def test_kernels_are_built_ahead_into_the_kernel_cache_by_worker_processes(tmp_path, monkeypatch):
    from polysat.backend.common.kernel_cache import cubin_name
    monkeypatch.setenv("POLYSAT_KERNEL_CACHE", str(tmp_path))
    ok = 'extern "C" __global__ void polysat_probe(float* y) { y[threadIdx.x] = 1.0f; }\n'
    bad = 'extern "C" __global__ void polysat_probe(float* y) { y[threadIdx.x] = undeclared; }\n'
    errors = harness.build_kernels([(ok, "sm80", "sm80", (8, 0)), (bad, "sm80", "sm80", (8, 0))], 2)
    assert errors[0] == "" and "undeclared" in errors[1]
    import types
    name = cubin_name(types.SimpleNamespace(source=ok, skeleton="sm80"), "sm80", (8, 0))
    assert (tmp_path / name).read_bytes()[:4] == b"\x7fELF"


def test_merge_adds_the_cost_models_price_of_each_rows_computation(tmp_path):
    from polysat.bench import gpu_estimates
    env = {"device": "NVIDIA H100 80GB HBM3", "driver": "580.159.04", "arch": "sm90"}
    rows = [R.bench_row("gemm_bias_relu", "512x256x128", {"polysat": 0.01, "cublas": 0.01}, flops=2.0 * 512 * 256 * 128,
                        dtype="fp16", m=512, n=256, k=128),
            R.fail_row("attention", "d64 s40", "RuntimeError: x", dtype="fp16"),
            R.bench_row("other", "x", {"polysat": 1.0}, flops=1.0)]
    doc = gpu_estimates.model_of(rows[0])[0]
    assert [op["op"] for op in doc["graph"]] == ["GEMM", "Elementwise", "Elementwise"]
    assert doc["tensors"]["A"]["shape"] == [512, 128] and doc["tensors"]["C2"]["shape"] == [512, 256]
    (tmp_path / "a.json").write_text(json.dumps({"date": "1", "env": env, "parts": {"tests": R.part("ok")}}))
    (tmp_path / "b.json").write_text(json.dumps({"date": "2", "env": env, "parts": {"bench": R.part("ok", rows=rows)}}))
    rc = gpu_check.main(["--merge", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--out", str(tmp_path / "m"),
                         "--results-dir", str(tmp_path / "results")])
    rep = json.loads((tmp_path / "m" / "report.json").read_text())
    got = rep["parts"]["bench"]["rows"]
    assert rc == 0 and rep["parts"]["tests"]["status"] == "ok" and got[0]["model_kernels"] >= 1
    assert got[0]["model_us"] > 0 and got[0]["model_over_measured"] == pytest.approx(got[0]["model_us"] / 10.0)
    assert "model_us" not in got[1] and "model_us" not in got[2]
    assert "model/meas" in (tmp_path / "m" / "report.md").read_text()
    assert json.loads((tmp_path / "m" / "nvidia-h100-80gb-hbm3.json").read_text())["rows"][0]["model_us"] > 0
    assert (tmp_path / "results" / "nvidia-h100-80gb-hbm3.json").read_text() == \
        (tmp_path / "m" / "nvidia-h100-80gb-hbm3.json").read_text()


def test_a_forced_skeleton_reaches_the_kinds_launch_as_its_plan(monkeypatch):
    """gpu_launch's prepare hands each kind's launch the best plan of the item's skeleton (the sm80 path on a
    Hopper GPU); items without one take the kind's own prepare."""
    import types

    import polysat.backend.attention.launch as al
    import polysat.backend.common.gpu as gpu
    import polysat.backend.conv.launch as cl
    import polysat.backend.gemm.launch as gl
    import polysat.runtime.kernels as rk
    from polysat.ir.playback import bind_region_symbols
    from polysat.runtime.model import steps_of
    monkeypatch.setattr(gpu, "device", lambda ordinal=0: types.SimpleNamespace(arch="sm90"))
    for m in (gl, al):
        monkeypatch.setattr(m, "prepare", lambda spec, t, env=None, plan=None, **kw: ("forced", plan))
    monkeypatch.setattr(cl, "prepare", lambda spec, t, plan=None, **kw: ("forced", plan))
    monkeypatch.setattr(rk, "prepare", lambda kind, spec, t, env: ("own", None))
    for item in gpu_launch.ITEMS:
        _, regions, ins = gpu_launch.compile_item(item)
        env = bind_region_symbols(regions, ins)
        got = [gpu_launch._prepare(item)(s.kind.name, s.binding.spec, {}, env) for s in steps_of(regions)]
        if item.skeleton:
            assert all(how == "forced" and plan.skeleton == item.skeleton for how, plan in got), item.name
        else:
            assert all(how == "own" for how, _ in got), item.name
