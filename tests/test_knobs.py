"""One home for the knobs: every environment variable polysat reads is a function in knobs.py (with its
default in the docstring) and a row of the knobs table (docs/knobs.md)."""
from __future__ import annotations

import inspect
import pathlib
import re

from polysat import knobs

ROOT = pathlib.Path(__file__).resolve().parent.parent
NAME = re.compile(r"POLYSAT_[A-Z0-9_]+")


def _sources():
    for p in ROOT.rglob("*.py"):
        rel = p.relative_to(ROOT)
        if rel.parts[0] not in ("tests", ".venv", "build") and not rel.parts[0].endswith(".egg-info"):
            yield rel, p.read_text(encoding="utf-8")


def test_every_knob_function_names_its_variables_and_default():
    fns = [f for n, f in inspect.getmembers(knobs, inspect.isfunction)
           if not n.startswith("_") and f.__module__ == knobs.__name__]
    assert len(fns) >= 13
    for f in fns:
        read = set(re.findall(r"(?:_num|environ\.get)\(\"([A-Z][A-Z0-9_]*)\"", inspect.getsource(f)))
        doc = inspect.getdoc(f) or ""
        assert read, f"{f.__name__} reads no environment variable"
        assert all(v in doc for v in read) and "default" in doc, \
            f"{f.__name__}: its doc line must name {sorted(read)} and the default"


def test_every_variable_the_package_names_is_in_the_knobs_table():
    readme = (ROOT / "docs" / "knobs.md").read_text(encoding="utf-8")
    table = {m for line in readme.splitlines() if line.startswith("| `POLYSAT_") for m in NAME.findall(line.split("|")[1])}
    named = {m for _, text in _sources() for m in NAME.findall(text)}
    assert named and named <= table, f"knobs missing from docs/knobs.md: {sorted(named - table)}"


def test_only_knobs_reads_the_environment_outside_the_backend():
    # the backend's POLYSAT_NVCC, _NVCC_CACHE, _KERNEL_CACHE move into knobs.py with the backend restructure
    readers = [str(rel) for rel, text in _sources() if "os.environ" in text and rel.parts[0] != "backend"]
    assert readers == ["knobs.py"], readers
