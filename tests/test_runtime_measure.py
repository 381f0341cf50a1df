"""The measurement log (runtime/measure.py; docs/DESIGN.md §Runtime): the rows `run --target cuda` and the GPU
benches append, produced here without a GPU from the planned kernels (``actual_us`` is what only a GPU fills).
FLOPs and bytes are checked against the GEMM's own arithmetic, not against the cost model's output."""
from __future__ import annotations

import dataclasses
import json
import types

import numpy as np
import pytest

from polysat.backend.gemm.spec import GemmSpec
from polysat.ir.dtypes import DType
from polysat.pipeline import Compilation
from polysat.runtime import measure
from polysat.runtime.compiled import compile_model
from polysat.runtime.kernels import source

M, N, K = 40, 56, 24


@pytest.fixture()
def compiled(tmp_path, monkeypatch):
    monkeypatch.setenv("POLYSAT_MODEL_CACHE", str(tmp_path / "models"))
    monkeypatch.setenv("POLYSAT_KERNEL_CACHE", str(tmp_path / "kernels"))
    rng = np.random.default_rng(0)
    ins = {"A": rng.standard_normal((M, K)), "B": rng.standard_normal((K, N)), "bias": rng.standard_normal(N)}
    return compile_model(Compilation("examples/gemm_bias_relu.json", arch="sm80"), ins, "sm80", (8, 0))


def test_a_run_logs_one_row_per_kernel_with_the_modelled_numbers(compiled, tmp_path):
    (r,) = compiled.rows({})
    assert r["kernel"] == "k0" and r["kind"] == "gemm" and r["arch"] == "sm80" and r["source"] == "run"
    assert set(r["ops"].split(",")) == {"gemm", "bias_add", "relu"}  # the model's own op names
    assert json.loads(r["shapes"]) == {"K": K, "M": M, "N": N}
    assert 2 * M * N * K <= r["flops"] <= 2 * M * N * K + 4 * M * N  # the contraction, plus bias and ReLU
    assert r["bytes"] >= 2 * (M * K + K * N + N + M * N)  # every fp16 operand read once, the output written once
    assert 0 < r["occupancy"] <= 1 and r["estimate_us"] > 0
    assert r["actual_us"] == ""  # nothing ran on a GPU
    plan = json.loads(r["plan"])
    assert plan["arch"] == "sm80" and len(plan["tile"]) == 3
    path = tmp_path / "log.csv"
    assert measure.append(compiled.rows({}), str(path)) == str(path)
    measure.append(compiled.rows({"k0": 12.25}), str(path))
    got = measure.read(str(path))
    assert path.read_text().count("time,source,model,kernel,ops") == 1 and len(got) == 2
    assert tuple(got[0]) == measure.FIELDS
    assert got[0]["actual_us"] == "" and float(got[1]["actual_us"]) == 12.25
    assert int(got[0]["flops"]) == r["flops"] and json.loads(got[1]["plan"]) == plan


def test_a_region_on_the_cpu_is_logged_as_playback_without_a_time(compiled):
    cpu = dataclasses.replace(compiled, kernels=[{"region": "k0", "kind": "playback", "why": "E1504 NoKernelTemplate"}])
    (r,) = cpu.rows({"k0": 3.0})
    assert r["kind"] == "playback" and r["actual_us"] == ""
    assert json.loads(r["plan"]) == {"target": "playback", "why": "E1504 NoKernelTemplate"}


def test_the_knob_names_the_file_and_off_writes_nothing(compiled, tmp_path, monkeypatch):
    monkeypatch.setenv("POLYSAT_MEASURE_LOG", str(tmp_path / "sub" / "m.csv"))
    assert measure.append(compiled.rows({})) == str(tmp_path / "sub" / "m.csv")
    monkeypatch.setenv("POLYSAT_MEASURE_LOG", "off")
    assert measure.append(compiled.rows({})) is None
    assert measure.append([], str(tmp_path / "empty.csv")) is None and not (tmp_path / "empty.csv").exists()


def test_a_bench_row_carries_the_plan_search_estimate():
    m, n, k = 1024, 512, 256
    spec = GemmSpec("bench_fp16", m, n, k, in_dtype=DType.fp16, out_dtype=DType.fp16)
    ks = source("gemm", spec, {}, "sm90")
    r = measure.launch_row("bench/gemm.py", "gemm fp16", "gemm", "sm90", types.SimpleNamespace(kernel=ks),
                           {"m": m, "n": n, "k": k}, 0.0125)
    assert r["flops"] == 2 * m * n * k and r["bytes"] >= 2 * (m * k + k * n + m * n)
    assert 0 < r["occupancy"] <= 1 and r["estimate_us"] > 0 and r["actual_us"] == 12.5
    assert r["source"] == "bench/gemm.py" and r["kernel"] == ks.name and json.loads(r["plan"])["arch"] == "sm90"


def test_the_bench_harness_appends_one_row_per_timed_kernel(tmp_path, monkeypatch, capsys):
    from polysat.bench.harness import log_kernels
    monkeypatch.setenv("POLYSAT_MEASURE_LOG", str(tmp_path / "bench.csv"))
    launches = []
    for m in (256, 384):
        spec = GemmSpec(f"bench_{m}", m, 128, 64, in_dtype=DType.fp16, out_dtype=DType.fp16)
        launches.append((f"gemm {m}", "gemm", types.SimpleNamespace(kernel=source("gemm", spec, {}, "sm80")),
                         {"m": m, "n": 128, "k": 64}, 0.002 * m))
    log_kernels("bench/gemm.py", types.SimpleNamespace(arch="sm80"), launches)
    rows = measure.read(str(tmp_path / "bench.csv"))
    assert [r["model"] for r in rows] == ["gemm 256", "gemm 384"] and all(r["source"] == "bench/gemm.py" for r in rows)
    assert [int(r["flops"]) for r in rows] == [2 * m * 128 * 64 for m in (256, 384)]
    assert [float(r["actual_us"]) for r in rows] == [512.0, 768.0]
    assert "2 kernel measurement(s) appended" in capsys.readouterr().out
