"""The one pipeline (pipeline.Compilation): --arch, --bind and --cost reach every stage that needs them,
through every verb (compile, demo, extract), and a cost model is built from what it declares it needs."""
from __future__ import annotations

import json
import pathlib

import pytest

from polysat.analyses.price import price
from polysat.analyses.devices import device
from polysat.cli import main
from polysat.commands.extract import run_extract
from polysat.egraph.cost import Needs, SizeCost, lookup, make
from polysat.pricing.kernels import canonical
from polysat.search.model import ModelCost
from polysat.pipeline import Compilation

EX = pathlib.Path(__file__).resolve().parent.parent / "examples"
GEMM = str(EX / "gemm_bias_relu.json")
MLP = str(EX / "mlp.json")


def _dump(tmp_path, name: str, *args) -> dict:
    out = tmp_path / name
    assert main(["compile", *args, "--out", str(out)]) == 0
    return {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}


def test_cost_models_declare_what_they_need_and_make_builds_them_with_it():
    assert lookup("size").needs == Needs() and lookup("model").needs == Needs(arch=True, params=True, search=True)
    m = make("model", "sm80", {"M": 7})
    assert isinstance(m, ModelCost) and m.arch == "sm80" and m.params == {"M": 7}
    assert isinstance(make("size", "sm80", {"M": 7}), SizeCost)


@pytest.mark.parametrize("arch", ["sm80", "sm90"])
def test_compile_cost_model_prices_the_extraction_with_the_arch_device_table(tmp_path, arch):
    d = _dump(tmp_path, arch, MLP, "--arch", arch, "--cost", "model", "--dump=egraph,analysis")
    a = d["analysis"]
    assert a["arch"] == arch and a["device"] == device(arch).to_json()
    # the extraction's modelled total (what the search minimised) is the regions priced on this arch's table
    total = sum(r["analysis"]["cost"]["time_est_us"] for r in a["regions"])
    assert d["egraph"]["cost"] == pytest.approx(total, rel=1e-4)
    c = Compilation(MLP, arch=arch, cost="model")
    assert c.cost_model.arch == arch
    assert c.search.best.total == pytest.approx(sum(price(canonical(p.region), device(arch)).time_est_us
                                                    for p in c.search.best.priced if p.region is not None))


def test_sm80_and_sm90_tables_give_different_prices(tmp_path):
    a80 = _dump(tmp_path, "a", MLP, "--arch", "sm80", "--cost", "model", "--dump=egraph,analysis")
    a90 = _dump(tmp_path, "b", MLP, "--arch", "sm90", "--cost", "model", "--dump=egraph,analysis")
    assert a80["analysis"]["device"]["name"] != a90["analysis"]["device"]["name"]
    assert a80["egraph"]["cost"] != pytest.approx(a90["egraph"]["cost"], rel=1e-3)


def test_bind_reaches_the_prices_and_the_plan(tmp_path):
    small = _dump(tmp_path, "s", GEMM, "--arch", "sm80", "--cost", "model", "--bind", "M=64,N=64,K=64",
                  "--dump=analysis,plan")
    big = _dump(tmp_path, "b", GEMM, "--arch", "sm80", "--cost", "model", "--bind", "M=4096,N=4096,K=4096",
                "--dump=analysis,plan")
    assert small["analysis"]["params"] == {"M": 64, "K": 64, "N": 64}
    assert big["analysis"]["params"] == {"M": 4096, "K": 4096, "N": 4096}
    (s,), (b,) = small["analysis"]["regions"], big["analysis"]["regions"]
    assert 2 * 64 ** 3 <= s["analysis"]["cost"]["flops"] < 2 * 4096 ** 3 <= b["analysis"]["cost"]["flops"]
    ps, pb = small["plan"]["plans"][0]["chosen"], big["plan"]["plans"][0]["chosen"]
    assert ps["estimate"]["flops"] < pb["estimate"]["flops"] and ps["tile"] != pb["tile"]


def test_extract_and_compile_run_the_same_pipeline(tmp_path):
    r = run_extract(MLP, cost="model", arch="sm80", bind={"T": 512})
    d = _dump(tmp_path, "c", MLP, "--arch", "sm80", "--cost", "model", "--bind", "T=512", "--dump=analysis")
    assert r["total"]["params"] == d["analysis"]["params"] and d["analysis"]["params"]["T"] == 512
    assert [x["name"] for x in r["regions"]] == [x["name"] for x in d["analysis"]["regions"]]
    assert r["total"]["time_est_us"] == pytest.approx(sum(x["analysis"]["cost"]["time_est_us"]
                                                          for x in d["analysis"]["regions"]), rel=1e-4)


def test_demo_bind_reaches_the_pricing(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", GEMM, "--cost", "model", "--bind", "M=40,N=24,K=16", "--out", str(out)]) == 0
    a = json.loads((out / "analysis.json").read_text())
    assert a["params"] == {"M": 40, "K": 16, "N": 24}
    assert "inputs: " in capsys.readouterr().out


def test_binding_a_symbol_the_model_lacks_is_a_coded_diagnostic(tmp_path, capsys):
    assert main(["compile", GEMM, "--bind", "Q=3", "--dump=analysis", "--out", str(tmp_path), "--json"]) == 1
    (dg,) = json.loads(capsys.readouterr().out)["diagnostics"]
    assert dg["code"].startswith("E") and "Q" in dg["why"]
    assert main(["compile", GEMM, "--bind", "Q=3", "--cost", "size", "--dump=tiny", "--out", str(tmp_path)]) == 1


def test_a_stage_is_made_with_the_collector_relaxed_and_restored_after():
    """While a stage is made the cycle collector's youngest generation waits GC_GEN0 allocations (the search's
    millions of small objects beside a large live heap); after it, and after a nested stage, the thresholds are
    the caller's again; a threshold the caller set higher, or 0 (collection off), is left as it is."""
    import gc

    from polysat import pipeline
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        with pipeline._collector_relaxed():
            assert gc.get_threshold() == (pipeline.GC_GEN0, 10, 10)
            with pipeline._collector_relaxed():
                assert gc.get_threshold() == (pipeline.GC_GEN0, 10, 10)
            assert gc.get_threshold() == (pipeline.GC_GEN0, 10, 10)
        assert gc.get_threshold() == (700, 10, 10)
        for mine in ((0, 10, 10), (pipeline.GC_GEN0 * 2, 5, 5)):
            gc.set_threshold(*mine)
            with pipeline._collector_relaxed():
                assert gc.get_threshold() == mine
            assert gc.get_threshold() == mine
    finally:
        gc.set_threshold(*before)
