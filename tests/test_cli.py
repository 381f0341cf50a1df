"""The `polysat` command end to end: compile dumps, run through npz files, demo, exit codes."""
import json
import pathlib
import subprocess
import sys

import numpy as np

from polysat.cli import main

ROOT = pathlib.Path(__file__).parent.parent
GEMM = str(ROOT / "examples" / "gemm_bias_relu.json")


def test_compile_writes_requested_dumps(tmp_path):
    assert main(["compile", GEMM, "--dump=frontend,tiny", "--out", str(tmp_path)]) == 0
    tiny = json.loads((tmp_path / "tiny.json").read_text())
    front = json.loads((tmp_path / "frontend.json").read_text())
    assert tiny["outputs"] == {"C2": tiny["uops"][-1]["id"]}
    assert [n["op"] for n in front["graph"]] == ["GEMM", "Elementwise", "Elementwise"]


def test_run_binds_symbols_and_matches_numpy(tmp_path):
    rng = np.random.default_rng(3)
    a, b, bias = rng.standard_normal((19, 11)), rng.standard_normal((11, 5)), rng.standard_normal(5)
    np.savez(tmp_path / "in.npz", A=a, B=b, bias=bias)
    assert main(["run", GEMM, "--inputs", str(tmp_path / "in.npz"), "--out", str(tmp_path / "out.npz")]) == 0
    out = np.load(tmp_path / "out.npz")["C2"]
    h = lambda x: x.astype(np.float16).astype(np.float64)
    ref = np.maximum(h(a) @ h(b) + h(bias), 0).astype(np.float16).astype(np.float64)
    assert out.dtype == np.float16 and out.shape == (19, 5)
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=1e-3, atol=1e-3)


def test_run_rejects_a_symbol_bound_to_two_sizes(tmp_path, capsys):
    np.savez(tmp_path / "in.npz", A=np.ones((4, 3)), B=np.ones((5, 2)), bias=np.ones(2))
    assert main(["run", GEMM, "--inputs", str(tmp_path / "in.npz"), "--out", str(tmp_path / "o.npz"), "--json"]) == 1
    d = json.loads(capsys.readouterr().out)["diagnostics"][0]
    assert d["code"] == "E1304" and "K" in d["why"]


def test_demo_verifies(tmp_path):
    assert main(["demo", GEMM, "--out", str(tmp_path), "--bind", "M=9,N=7,K=5"]) == 0
    assert (tmp_path / "tiny.json").exists()


def _shifted_playback(monkeypatch, shift: float):
    """The playback target replaced by the reference moved by ``shift``: a stand-in for a kernel whose result is off."""
    import polysat.cli as cli
    ref = cli.TARGETS["reference"]
    monkeypatch.setitem(cli.TARGETS, "playback", lambda c, inputs: {k: (v + shift).astype(v.dtype) for k, v in ref(c, inputs).items()})


def test_demo_catches_a_wrong_result_on_a_well_conditioned_output(tmp_path, monkeypatch, capsys):
    _shifted_playback(monkeypatch, 0.05)
    assert main(["demo", GEMM, "--out", str(tmp_path), "--bind", "M=9,N=7,K=5"]) == 1
    out = capsys.readouterr().out
    assert "-> MISMATCH (a rounding of each value moves it by" in out and "verification FAILED" in out


def test_demo_compares_an_ill_conditioned_output_within_what_one_rounding_moves_it_by(tmp_path, monkeypatch, capsys):
    """y = (x + P) - P with P ~ 1e6: fp32 keeps x to 1/16, so a rounding of x + P moves y by ~0.1 (EfficientNetV2-S with
    random weights is such an output). A result 0.05 off is within that; one 5.0 off is not."""
    from onnx import TensorProto, helper, numpy_helper, save
    p = (1e6 + np.arange(8)).astype(np.float32)
    g = helper.make_graph([helper.make_node("Add", ["x", "P"], ["s"]), helper.make_node("Sub", ["s", "P"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8])], [numpy_helper.from_array(p, "P")])
    model = tmp_path / "cancel.onnx"
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    _shifted_playback(monkeypatch, 0.05)
    assert main(["demo", str(model), "--out", str(tmp_path / "a")]) == 0
    assert "-> OK (ill-conditioned: a rounding of each value moves it by" in capsys.readouterr().out
    _shifted_playback(monkeypatch, 5.0)
    assert main(["demo", str(model), "--out", str(tmp_path / "b")]) == 1
    assert "-> MISMATCH" in capsys.readouterr().out


def test_module_entry_point_and_help():
    r = subprocess.run([sys.executable, "-m", "polysat", "run", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--target" in r.stdout
    r = subprocess.run([sys.executable, "-m", "polysat", "compile", str(ROOT / "missing.json")], capture_output=True, text=True)
    assert r.returncode == 1 and "E1112" in r.stderr and "Traceback" not in r.stderr


def test_analysis_dump_reports_poly_core_per_region(tmp_path):
    conv = str(ROOT / "examples" / "conv_relu_maxpool.json")
    assert main(["compile", conv, "--dump=analysis,region", "--out", str(tmp_path), "--cost", "model"]) == 0
    an = json.loads((tmp_path / "analysis.json").read_text())
    regions = json.loads((tmp_path / "region.json").read_text())["regions"]
    assert len(an["regions"]) == len(regions) == 1
    a = an["regions"][0]["analysis"]
    assert a["compute_at"]["ok"] and a["compute_at"]["halo"]["bytes"] > 0
    assert a["cost"]["time_est_us"] > 0 and a["reduce_axes"]


def test_extract_json_lists_regions_with_costs_and_the_run_report(capsys):
    assert main(["extract", GEMM, "--cost=model", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (r,) = out["regions"]
    assert set(r["cost"]) >= {"flops", "bytes", "time_est_us"} and r["analysis"]["reduce_axes"]
    assert out["egraph"]["stop_reason"] in ("saturated", "node_limit", "iter_limit", "time_limit")
