"""What a new user meets at the command line and in Python: ``--version``, ``compile`` listing the
kernels it made by the user's op names, ``--dump=all``, a failing stage that does not stop the dumps
after it, E1504 as one short reason per line naming the user's ops, extract naming ops and tensors,
and the Python API (``polysat.compile`` / ``polysat.run``) checked against numpy.
"""
from __future__ import annotations

import importlib.util
import json
import pathlib
import re
import tomllib

import numpy as np
import pytest

import polysat

_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)

ROOT = pathlib.Path(__file__).resolve().parent.parent
GEMM = str(ROOT / "examples" / "gemm_bias_relu.json")
LN = str(ROOT / "examples" / "layernorm.json")
INTERNAL_ID = re.compile(r"\b[ne]\d+\b")


def test_version_is_the_one_pyproject_declares():
    want = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    rc, out, err = oracle.cli(["--version"])
    assert rc == 0 and (out + err).strip() == f"polysat {want}"


def test_compile_without_dump_lists_the_kernels_by_the_users_op_names():
    rc, out, err = oracle.cli(["compile", GEMM])
    assert rc == 0, err
    lines = [ln for ln in out.splitlines() if ln.strip().startswith("kernel ")]
    assert len(lines) == 1 and {"gemm", "bias_add", "relu"} <= set(re.findall(r"\w+", lines[0]))
    assert "-> C2" in lines[0] and not INTERNAL_ID.search(lines[0])
    rc, out, _ = oracle.cli(["compile", GEMM, "--json"])
    (k,) = json.loads(out)["kernels"]
    assert set(k["ops"]) == {"gemm", "bias_add", "relu"} and k["writes"] == ["C2"]


@pytest.fixture
def no_simt(monkeypatch):
    """Layernorm is a SIMT kernel; with that kind hidden no template takes it, so its backend stages fail."""
    from polysat.backend import kinds
    mma = tuple(k for k in kinds.kinds() if k.name != "simt")
    monkeypatch.setattr(kinds, "kinds", lambda: mma)
    kinds._bind_canonical.cache_clear()  # bindings made per canonical form with every kind are not this run's
    yield
    kinds._bind_canonical.cache_clear()


def test_dump_all_writes_every_stage_that_can_be_made_and_reports_the_one_that_cannot(tmp_path, no_simt):
    from polysat.pipeline import DUMPS
    rc, out, err = oracle.cli(["compile", LN, "--dump=all", "--out", str(tmp_path)])
    assert rc == 1
    files = {p.name for p in tmp_path.iterdir()}
    # no CUDA template takes layernorm here: plan, gpu and cu fail, and nothing else does
    assert files == {f"{s}.svg" if s in ("egraph_svg", "regions_svg", "roofline") else f"{s}.json"
                     for s in DUMPS if s not in ("plan", "gpu", "cu")}
    assert err.count("E1504") == 1  # reported once, not once per stage that needs it
    assert "at kernel k0 (ops ln):\n  - not a GEMM-family region" in err
    assert all(len(line) < 160 for line in err.splitlines())


def test_a_failing_stage_does_not_stop_a_later_independent_dump(tmp_path, no_simt):
    rc, out, _ = oracle.cli(["compile", LN, "--dump=cu,tiny", "--out", str(tmp_path), "--json"])
    assert rc == 1 and oracle.diagnostics(out)[0]["code"] == "E1504"
    assert (tmp_path / "tiny.json").is_file()


def test_extract_names_the_users_ops_and_tensors():
    rc, out, err = oracle.cli(["extract", GEMM])
    assert rc == 0, err
    row = next(ln for ln in out.splitlines() if ln.strip().startswith("k0 "))
    assert row.rstrip().endswith("A, B, bias -> C2")
    ops = next(ln for ln in out.splitlines() if ln.strip().startswith("ops:"))
    assert {"gemm", "bias_add", "relu"} <= set(re.findall(r"\w+", ops))


def test_python_api_compiles_and_runs_against_numpy():
    c = polysat.compile(GEMM, cost="size")
    assert [k["writes"] for k in polysat.kernels(c)] == [["C2"]]
    rng = np.random.default_rng(0)
    a, b, bias = rng.standard_normal((7, 11)), rng.standard_normal((11, 5)), rng.standard_normal(5)
    h = lambda x: x.astype(np.float16).astype(np.float64)  # noqa: E731
    want = np.maximum(h(a) @ h(b) + h(bias), 0)
    for target in ("reference", "playback"):
        got = polysat.run(c, {"A": a, "B": b, "bias": bias}, target=target)["C2"]
        oracle.assert_close(got, want, "fp16", what=target)


def test_region_dump_names_the_users_ops_and_still_loads(tmp_path):
    from polysat.ir.region_load import regions_from_json
    # the default partition (one region, --cost size) names both of the user's ops in one kernel
    rc, out, err = oracle.cli(["compile", str(ROOT / "examples" / "attention_row_softmax.json"), "--dump=region",
                               "--cost", "size", "--out", str(tmp_path)])
    assert rc == 0, err
    doc = json.loads((tmp_path / "region.json").read_text())
    assert [r["user"] for r in doc["regions"]] == [{"ops": ["qk", "row_softmax"], "reads": ["Q", "K"], "writes": ["P"]}]
    assert len(regions_from_json(doc)) == 1


def test_cu_dump_header_states_how_to_build_and_launch_and_its_command_builds(tmp_path):
    import shlex
    import subprocess
    from polysat.backend.stages import kernel_sources
    rc, out, err = oracle.cli(["compile", GEMM, "--dump=cu", "--out", str(tmp_path)])
    assert rc == 0, err
    (cu,) = tmp_path.glob("*.cu")
    head = dict(line[3:].split(":", 1) for line in cu.read_text().splitlines()[1:6])
    (ks,) = kernel_sources(polysat.compile(GEMM).regions, "sm90")
    assert head["block"].strip() == f"({ks.threads}, 1, 1) threads"
    assert head["shared"].strip().startswith(f"{ks.smem_bytes} bytes")
    assert "ceil(M/bm)" in head["grid"] and str(tuple(ks.plan.tile)) in head["grid"]
    assert head["params"].strip().startswith("A (tmap), B (tmap), C (ptr), T2 (ptr)")  # the kernel's names, and
    assert "T2 = bias" in cu.read_text().split("#include", 1)[0]  # its launch binds the user's tensors to them
    cmd = shlex.split(head["build"])
    assert cmd[0] == "nvcc"
    from polysat.backend.common.nvcc import nvcc_path
    assert nvcc_path() is not None, "nvcc is needed to check the dumped build command"
    r = subprocess.run([nvcc_path(), *cmd[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / cmd[-1]).is_file()


def test_a_stage_diagnostic_on_an_internal_node_names_the_users_op():
    from polysat.ir.diagnostics import diag
    from polysat.pipeline import Compilation, user_named
    c = Compilation(LN)
    c.program  # noqa: B018 — lowered, nothing extracted yet
    n = next(u for u in c.program.nodes if u.tag == "ln" and u.op.name == "REDUCE")
    (d,) = user_named(c, [diag("NonAffineIndex", n.id, f"the read of {n.id} is not affine")])
    assert d.at == f"ln\u00b7{n.id}" and d.why == f"the read of ln\u00b7{n.id} is not affine"
