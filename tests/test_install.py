"""polysat installs as users install it (README, two commands): a wheel built from this tree, installed
non-editable into a fresh virtual environment, runs the demo with every dump (the pictures included),
checks a rule file and starts a bench, from a directory outside the source tree.

Nothing is downloaded: the wheel is built without build isolation and installed without dependencies;
the fresh environment reads its dependencies (numpy, egglog, islpy, ...) from the test's own environment
through a path file added after the install, so only the wheel's copy of polysat is importable there.
"""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEMO = "attention.json"
PICTURES = ("egraph_svg.svg", "regions_svg.svg", "roofline.svg")


def _run(cmd: list, cwd: pathlib.Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["POLYSAT_MODEL_CACHE"] = str(cwd / "model-cache")
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))} exited {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple:
    """(the fresh environment's python, its polysat script, a working directory outside the tree)."""
    tmp = tmp_path_factory.mktemp("install")
    src, wheels = tmp / "src", tmp / "wheels"  # built from a copy: the build writes build/ beside the sources
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".*", "build", "out", "*.egg-info", "__pycache__", "tests"))
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
          "-w", str(wheels), str(src)], tmp)
    (wheel,) = wheels.glob("polysat-*.whl")
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp)
    py = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index", "-q", str(wheel)], tmp)
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (pathlib.Path(site) / "test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = tmp / "work"
    work.mkdir()
    return py, venv / "bin" / "polysat", work, wheel, pathlib.Path(site)


def test_the_wheel_holds_every_package_and_its_data(installed):
    *_, wheel, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder in (p for p in ROOT.iterdir() if (p / "__init__.py").is_file() and p.name != "tests"):
        assert f"polysat/{folder.name}/__init__.py" in names, f"package polysat.{folder.name} is not in the wheel"
    for data in ("polysat/rules/algebra.egg", "polysat/egraph/analysis.egg", f"polysat/examples/{DEMO}",
                 "polysat/backend/templates/gemm.cu.j2", "polysat/backend/templates/polysat_simt.cuh"):
        assert data in names, f"{data} is not in the wheel"
    assert not any(n.startswith(("polysat/tests/", "polysat/build/")) for n in names) and "polysat/setup.py" not in names


def test_the_installed_polysat_is_the_wheels(installed):
    py, _, work, _, site = installed
    got = _run([str(py), "-c", "import polysat.viz, polysat.bench; print(polysat.__file__, polysat.__version__)"], work)
    path, version = got.stdout.split()
    assert pathlib.Path(path).is_relative_to(site) and version


def test_the_installed_demo_writes_every_dump_with_the_pictures(installed):
    _, polysat, work, _, site = installed
    out = work / "demo"
    r = _run([str(polysat), "demo", str(site / "polysat" / "examples" / DEMO), "--cost", "model", "--out", str(out)], work)
    assert "== verification passed" in r.stdout, r.stdout
    assert not [ln for ln in r.stdout.splitlines() if "unavailable" in ln and "target" not in ln], r.stdout  # every dump
    for name in ("tiny.json", "egraph.json", "region.json", "analysis.json", "plan.json", "cu.json") + PICTURES:
        assert (out / name).is_file(), f"the demo wrote no {name}:\n{r.stdout}"
    for name in PICTURES:
        assert (out / name).read_text(encoding="utf-8").lstrip().startswith(("<svg", "<?xml"))


def test_the_installed_rule_checker_and_bench_start(installed):
    py, polysat, work, _, _ = installed
    r = _run([str(polysat), "rules", "--check", "--only", "algebra.egg"], work)
    assert "exit status 0" in r.stdout
    r = _run([str(py), "-m", "polysat.bench.fusion", "--help"], work)
    assert "usage" in r.stdout
