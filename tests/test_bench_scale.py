"""bench/scale.py runs its smallest point end to end: a weight-free ONNX graph written by the bench, polysat and
tinygrad each in a fresh process on the same bytes, a row with CPU seconds, RSS, kernels, prices and stop
reasons, and no partition priced above one kernel per op."""
from __future__ import annotations

import json

import onnx

from polysat.bench import scale
from polysat.bench.corpora.scale_models import GRAPHS, build


def test_the_smallest_point_runs_on_both_sides(tmp_path, capsys):
    out = tmp_path / "scale.json"
    assert scale.main(["--only", "soft_moe_e2", "--out", str(out), "--timeout", "300"]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    ps, tg = row["polysat"], row["tinygrad"]
    assert "error" not in ps and "error" not in tg, row
    assert ps["kernels"] >= 1 and tg["kernels"] >= 1 and ps["cpu_s"] > 0 and tg["cpu_s"] > 0
    assert not ps["worse"] and ps["time_est_us"] <= ps["unfused_us"] * (1 + 1e-9) and ps["time_est_us"] <= ps["size_us"] * (1 + 1e-9)
    assert ps["saturation_stop"] and ps["search_stop"] and ps["peak_mb"] > 0
    assert "soft_moe_e2" in capsys.readouterr().out


def test_the_graphs_are_weight_free_and_valid():
    """Every weight is a declared graph input: the files stay small at any size."""
    for name, args in (("llama3_8b", (2,)), ("gpt2", ("small", 2)), ("resnet", (50,)), ("unet", ()), ("soft_moe", (4,))):
        m = build(name, *args)
        onnx.checker.check_model(m)
        assert all(len(i.raw_data) + len(i.int64_data) * 8 < 1 << 16 for i in m.graph.initializer), name
        assert len(m.SerializeToString()) < 1 << 20 and name in GRAPHS
