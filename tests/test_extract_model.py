"""`polysat extract --cost=model` end to end (docs/DESIGN.md §Cost model): region counts per example, halo on
conv+relu+maxpool, fused cheaper than one kernel per op, the values kept, --explain and --json."""
from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from polysat.commands.extract import extract_command, run_extract
from polysat.tests.numeric import bind_env, close, random_inputs, same_outputs
from polysat.frontend import load_model
from polysat.ir.diagnostics import PolysatError
from polysat.ir.evaluate import evaluate
from polysat.ir.playback import playback
from polysat.pipeline import Compilation
from polysat.egraph.region_synth import synthesize

EX = pathlib.Path(__file__).resolve().parent.parent / "examples"
BIND = {"attention": {"B": 1, "H": 8, "M": 512, "N": 512}, "gemm_bias_relu": {"M": 1024, "N": 1024, "K": 1024}}
# regions per example under --cost=model (attention streams as one region, docs/DESIGN.md §Streaming).
# Contractions are priced as the kind that computes them: attention_row_softmax's one-kernel spelling is
# SIMT's (no template takes it), so a GEMM kernel plus a SIMT softmax kernel is cheaper.
EXPECTED = {"gemm_bias_relu": 1, "conv_relu_maxpool": 1, "softmax": 1, "layernorm": 1, "mlp": 2,
            "attention": 1, "conv3x3_s2_silu": 1, "attention_row_softmax": 2}
_CACHE: dict = {}


def result(name: str) -> dict:
    if name not in _CACHE:
        _CACHE[name] = run_extract(str(EX / f"{name}.json"), cost="model", bind=BIND.get(name))
    return _CACHE[name]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_model_cost_picks_the_expected_number_of_regions(name):
    r = result(name)
    assert r["total"]["kernels"] == EXPECTED[name], [(k["name"], k["outputs"]) for k in r["regions"]]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fused_partition_is_modelled_faster_than_one_kernel_per_op(name):
    t = result(name)["total"]
    assert t["unfused_kernels"] > t["kernels"]
    assert t["time_est_us"] < t["unfused_time_est_us"], t


@pytest.mark.parametrize("name", ["conv_relu_maxpool", "mlp", "attention", "layernorm"])
def test_model_extraction_keeps_the_values_and_plays_back(name):
    r = result(name)
    x = r["_extraction"]
    p = load_model(str(EX / f"{name}.json"))
    rng = np.random.default_rng(3)
    inputs = random_inputs(p, rng, bind_env(p, rng))
    ok, out, err = same_outputs(p, x.program, inputs)
    assert ok, (out, err)
    ref = evaluate(p, inputs)
    got = playback(synthesize(x.program, x.partition), inputs)
    assert all(close(ref[k], got[k]) for k in ref)


def test_conv_relu_maxpool_region_reports_a_halo_from_compute_at():
    (reg,) = result("conv_relu_maxpool")["regions"]
    halo = reg["analysis"]["compute_at"]["halo"]
    assert halo["bytes"] > 0
    assert any(v > 0 for v in halo["per_axis"].values()), halo


def test_mlp_regions_are_split_between_the_two_gemms():
    regs = result("mlp")["regions"]
    assert [len(r["analysis"]["reduce_axes"]) > 0 for r in regs] == [True, True]
    first, second = regs
    assert set(first["outputs"]) <= set(second["inputs"])


def test_json_output_has_the_issue_shape(capsys):
    assert extract_command(Compilation(str(EX / "gemm_bias_relu.json"), cost="model", bind=BIND["gemm_bias_relu"]),
                           as_json=True) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) >= {"regions", "total", "egraph"}
    (reg,) = doc["regions"]
    assert set(reg) >= {"name", "inputs", "outputs", "cost", "analysis"}
    assert set(reg["cost"]) >= {"flops", "bytes", "time_est_us"}
    assert set(reg["analysis"]) >= {"parallel_axes", "reduce_axes", "tail_axes", "compute_at", "min_buffer"}
    assert set(reg["analysis"]["compute_at"]) >= {"ok", "halo"}
    assert set(reg["analysis"]["compute_at"]["halo"]) == {"bytes", "per_axis"}
    assert set(doc["egraph"]) >= {"enodes", "eclasses", "iterations", "stop_reason"}
    assert reg["cost"]["flops"] >= 2 * 1024 ** 3  # the GEMM's 2·M·N·K at the bound sizes
    assert doc["total"]["time_est_us"] == pytest.approx(reg["cost"]["time_est_us"], rel=1e-6)


def test_explain_lists_a_rejected_fusion_with_both_prices(capsys):
    extract_command(Compilation(str(EX / "mlp.json"), cost="model"), explain=True, as_json=True)
    doc = json.loads(capsys.readouterr().out)
    rej = doc["rejected"]
    assert rej, "mlp keeps a boundary between its GEMMs: its fusion must be listed"
    r = rej[0]
    assert r["verdict"] in ("illegal", "priced higher")
    assert r["separate_us"] > 0 and r["fused_us"] is not None and r["fused_us"] > 0
    assert "many-to-many" in r["why"]


def test_explain_text_names_the_verdict_and_prices(capsys):
    extract_command(Compilation(str(EX / "mlp.json"), cost="model"), explain=True)
    out = capsys.readouterr().out
    assert "rejected fusions:" in out and "separate" in out and "fused" in out and "µs" in out
    assert "bound" in out and "saturation:" in out


def test_explain_says_attention_is_streamed_and_prices_the_two_pass_form(capsys):
    extract_command(Compilation(str(EX / "attention.json"), cost="model", bind=BIND["attention"]), explain=True)
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ": streamed (1 pass over the keys) —" in ln)
    one = float(line.split(" — ")[1].split(" µs")[0])
    two = float(line.split("without streaming ")[1].split(" µs")[0])
    assert one < two and "priced higher" in line, line


def test_size_cost_still_lists_priced_regions_and_explains_the_merge(capsys):
    extract_command(Compilation(str(EX / "conv_relu_maxpool.json"), cost="size"), explain=True, as_json=True)
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["regions"]) == 2  # the loaded default partition cuts before the pool
    assert all(r["cost"]["time_est_us"] > 0 and r["analysis"] is not None for r in doc["regions"])
    (r,) = doc["rejected"]
    assert r["fused_us"] < r["separate_us"]  # the model would fuse it: --cost=model does


def test_unknown_bound_symbol_is_a_coded_diagnostic():
    with pytest.raises(PolysatError) as e:
        run_extract(str(EX / "softmax.json"), cost="model", bind={"Q": 3})
    assert e.value.diagnostics[0].code.startswith("E")


def test_unknown_cost_model_is_a_coded_diagnostic():
    with pytest.raises(PolysatError):
        run_extract(str(EX / "softmax.json"), cost="no-such-cost")


def test_cli_extract_with_model_cost_and_bind(capsys):
    from polysat.cli import main
    assert main(["extract", str(EX / "softmax.json"), "--cost=model", "--json", "--bind", "R=512,C=1024"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["total"]["kernels"] == 1 and doc["total"]["params"] == {"R": 512, "C": 1024}
    assert doc["regions"][0]["cost"]["bytes"] >= 512 * 1024 * 2 * 2  # fp16 in and out, once each
    assert main(["extract", str(EX / "softmax.json"), "--cost=model", "--bind", "Q=3"]) == 1  # coded, no traceback
