"""bench/scale.py runs its smallest point end to end: a weight-free ONNX graph written by the bench, polysat and
tinygrad each in a fresh process on the same bytes, a row with CPU seconds, RSS, kernels, prices and stop
reasons, and no partition priced above one kernel per op; with --repeat, each side's runs and their median."""
from __future__ import annotations

import json

import onnx

from polysat.bench import scale
from polysat.bench.corpora.scale_models import GRAPHS, build


def test_the_smallest_point_runs_on_both_sides(tmp_path, capsys):
    out = tmp_path / "scale.json"
    assert scale.main(["--only", "soft_moe_e2", "--out", str(out), "--timeout", "300", "--repeat", "2"]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    ps, tg = row["polysat"], row["tinygrad"]
    assert "error" not in ps and "error" not in tg, row
    assert ps["kernels"] >= 1 and tg["kernels"] >= 1 and ps["cpu_s"] > 0 and tg["cpu_s"] > 0
    assert not ps["worse"] and ps["time_est_us"] <= ps["unfused_us"] * (1 + 1e-9) and ps["time_est_us"] <= ps["size_us"] * (1 + 1e-9)
    assert ps["saturation_stop"] and ps["search_stop"] and ps["peak_mb"] > 0
    for side in (ps, tg):  # two runs a side, the median (of two: their mean) the side's CPU seconds
        assert len(side["cpu_runs"]) == 2 and side["cpu_s"] == sum(side["cpu_runs"]) / 2
    assert len(row["cpu_ratios"]) == 2 and row["cpu_ratio"] == round(ps["cpu_s"] / tg["cpu_s"], 3)
    assert "soft_moe_e2" in capsys.readouterr().out


def test_the_graphs_are_weight_free_and_valid():
    """Every weight is a declared graph input: the files stay small at any size."""
    for name, args in (("llama3_8b", (2,)), ("gpt2", ("small", 2)), ("resnet", (50,)), ("unet", ()), ("soft_moe", (4,))):
        m = build(name, *args)
        onnx.checker.check_model(m)
        assert all(len(i.raw_data) + len(i.int64_data) * 8 < 1 << 16 for i in m.graph.initializer), name
        assert len(m.SerializeToString()) < 1 << 20 and name in GRAPHS


def test_the_half_precision_llama_is_a_half_precision_export():
    """--dtype fp16: every float input (weights, rotary tables) and the output fp16; only the RMSNorms and the
    softmax run in fp32, each between a Cast up and a Cast back, as transformers' modules are exported; the
    names of the points say so and the other graphs have no fp16 point."""
    m = build("llama2_7b", 2, "fp16")
    onnx.checker.check_model(m)
    types = {i.name: i.type.tensor_type.elem_type for i in list(m.graph.input) + list(m.graph.output)}
    assert types.pop("input_ids") == onnx.TensorProto.INT64
    assert set(types.values()) == {onnx.TensorProto.FLOAT16}, types
    casts = [n for n in m.graph.node if n.op_type == "Cast"]
    norms = sum(n.op_type == "ReduceMean" for n in m.graph.node)
    softmaxes = sum(n.op_type == "Softmax" for n in m.graph.node)
    assert norms == 2 * 2 + 1 and softmaxes == 2 and len(casts) == 2 * (norms + softmaxes)
    assert [p[0] for p in scale.points(True, "fp16")] == ["llama2_7b_L1_fp16"]
    assert {p[1] for p in scale.points(False, "fp16")} == {"llama2_7b", "llama3_8b"}
    assert build("llama2_7b", 2).SerializeToString() == build("llama2_7b", 2, "fp32").SerializeToString()


def test_llama2_7b_dims_take_five_kernels_a_layer():
    """LLaMA-2-7B dims (fp32, 2 layers, segmented: one layer searched): RMSNorm + Q/K/V in one 3xTF32 GEMM | RoPE +
    attention | out-projection + residual | RMSNorm + gate/up + SiLU x up | down-projection + residual (2 x 5 + the
    final norm). Each RMSNorm is its GEMM's A prologue with its statistic summed in the main loop (``stat_in_loop``);
    with a pass over K before the loop the fused kernel priced above the norm's row kernel and the GEMM apart, and
    the layer was 7 kernels; 10 before the search took the sibling concatenations and fused reductions' values
    (docs/DESIGN.md §Fusion)."""
    from polysat.frontend.onnx import import_onnx
    from polysat.pipeline import Compilation
    s = Compilation(import_onnx(build("llama2_7b", 2), origin="llama2_7b_L2.onnx"), cost="model").search
    assert len(s.best.priced) <= 2 * 5 + 1, len(s.best.priced)
    assert sum(p.region.stat_in_loop and p.region.mma_path == "tf32x3" for p in s.best.priced) == 2 * 2
    assert s.best.total <= s.baseline.total
