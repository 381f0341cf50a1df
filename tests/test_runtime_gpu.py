"""The whole-model runtime on a GPU (runtime/cuda.py, runtime/compiled.py; docs/DESIGN.md §Runtime): one device
arena, parameters placed once, the launch sequence captured as a CUDA Graph on the first call of a shape set
and replayed on the next, every output equal to the reference evaluator; `polysat run --target cuda` twice
loads the compiled model from the disk cache the second time and logs measured times. Marked ``gpu``:
skipped only where no CUDA GPU is visible (tests/test_runtime_arena.py runs the same runner on a numpy arena).
"""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

from polysat import cli
from polysat.backend.common.gpu import cuda_available
from polysat.cli import random_inputs
from polysat.ir.evaluate import evaluate
from polysat.pipeline import Compilation
from polysat.runtime import measure
from polysat.runtime.model import parameter_names

_spec = importlib.util.spec_from_file_location("polysat_test_runtime_replay",
                                               pathlib.Path(__file__).with_name("test_runtime_replay.py"))
replay_tests = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(replay_tests)

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible")]


def _close(got, want):
    g, w = got.astype(np.float64), want.astype(np.float64)
    ulp = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}.get(str(want.dtype), 0.0)
    bad = np.abs(g - w) > 1e-3 + 1e-3 * np.abs(w) + ulp * np.abs(w)
    assert got.shape == want.shape and not bad.any(), f"{bad.sum()} of {bad.size} differ"


def _mlp(t):
    c = Compilation("examples/mlp.json")
    ins = {k: v * 0.1 for k, v in random_inputs(c.program, {"T": t}, 0).items()}
    return c, ins


def test_the_second_call_replays_the_captured_graph_and_parameters_stay_placed():
    from polysat.runtime.cuda import CudaRuntime
    c, ins = _mlp(77)
    rt = CudaRuntime(c.regions, parameter_names(c.doc))
    ref = evaluate(c.program, ins)
    first = rt.run(ins)
    assert rt.captures and rt.replays == 0 and rt.pool.uploads == 4
    assert all(v > 0 for v in rt.actual_us(ins).values()) and len(rt.actual_us(ins)) == len(c.regions)
    second = rt.run(ins)
    assert rt.replays == 1 and rt.pool.uploads == 4
    for k in ref:
        _close(first[k], ref[k])
        _close(second[k], ref[k])
    w1 = ins["W1"] * -1
    third = rt.run({**ins, "W1": w1})  # new weights: copied into the same pool slots, the graph replays
    assert rt.replays == 2 and rt.pool.uploads == 5
    _close(third["Y"], evaluate(c.program, {**ins, "W1": w1})["Y"])


def test_each_shape_set_has_its_own_arena_and_graph():
    from polysat.runtime.cuda import CudaRuntime
    c, ins77 = _mlp(77)
    _, ins45 = _mlp(45)
    rt = CudaRuntime(c.regions, parameter_names(c.doc))
    for ins in (ins77, ins45, ins77, ins45):
        _close(rt.run(ins)["Y"], evaluate(c.program, ins)["Y"])
    assert len(rt.captures) == 2 and len(rt.arenas) == 2 and rt.replays == 2


def test_a_region_on_the_cpu_keeps_the_model_eager_and_correct(capsys):
    from polysat.runtime.cuda import CudaRuntime
    replay_tests.cpu_step_stays_eager(CudaRuntime, capsys)


def test_cli_run_target_cuda_twice_loads_the_cache_and_logs_measured_times(tmp_path, monkeypatch):
    monkeypatch.setenv("POLYSAT_MODEL_CACHE", str(tmp_path / "models"))
    monkeypatch.setenv("POLYSAT_MEASURE_LOG", str(tmp_path / "log.csv"))
    c, ins = _mlp(33)
    np.savez(tmp_path / "in_all.npz", **ins)
    for _ in range(2):
        assert cli.main(["run", "examples/mlp.json", "--inputs", str(tmp_path / "in_all.npz"), "--out",
                         str(tmp_path / "o.npz"), "--target", "cuda"]) == 0
        with np.load(tmp_path / "o.npz") as z:
            _close(z["Y"], evaluate(c.program, ins)["Y"])
    rows = measure.read(str(tmp_path / "log.csv"))
    assert len(rows) == 2 * len(c.regions) and all(float(r["actual_us"]) > 0 for r in rows)
    assert len(list((tmp_path / "models").iterdir())) == 1


def test_the_python_api_twice_in_one_process_replays_the_same_runtime(tmp_path, monkeypatch):
    import polysat
    from polysat.runtime import compiled
    monkeypatch.setenv("POLYSAT_MODEL_CACHE", str(tmp_path / "models"))
    monkeypatch.setenv("POLYSAT_MEASURE_LOG", "off")
    c, ins = _mlp(21)
    cc = polysat.compile("examples/mlp.json")
    for _ in range(2):
        _close(polysat.run(cc, ins, target="cuda")["Y"], evaluate(c.program, ins)["Y"])
    rt = next(reversed(compiled._RUNTIMES.values()))
    assert rt.replays == 1 and rt.pool.uploads == 4
