"""The documentation in the repository stays true: docs/frontend_ir.md is what the lowering table
generates, docs/rules.md names every constructor and helper the rule language has and its two worked
rules are judged by `polysat rules --check` as it says (the sound one passes, the wrong one is caught),
and the example of docs/python_api.md runs."""
from __future__ import annotations

import os
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def test_frontend_ir_reference_is_the_generated_one():
    from polysat.frontend.reference_doc import render
    assert (DOCS / "frontend_ir.md").read_text(encoding="utf-8") == render(), \
        "docs/frontend_ir.md is stale: python -m polysat.frontend.reference_doc > docs/frontend_ir.md"


def test_frontend_ir_reference_lists_every_op_and_attribute():
    from polysat.frontend.lower import op_table
    text = (DOCS / "frontend_ir.md").read_text(encoding="utf-8")
    for op, (_, _, attrs) in op_table().items():
        section = text.split(f"### {op}\n", 1)[1].split("\n### ", 1)[0]
        for name in attrs or ():
            assert f"| `{name}` |" in section, (op, name)


def test_rules_doc_names_every_constructor_and_helper():
    from polysat.egraph.ixfns import HELPERS
    from polysat.egraph.schema import CHILDREN
    text = (DOCS / "rules.md").read_text(encoding="utf-8")
    for c in CHILDREN:
        assert f"({c} " in text or f"`({c}" in text, c
    for h in HELPERS:
        assert f"${h}" in text, h


def test_rules_doc_worked_rules_are_judged_as_it_says(tmp_path):
    from polysat.cli import main
    text = (DOCS / "rules.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```lisp\n(.*?)```", text, re.S)
    good, bad = (b for b in blocks if ":name \"cast-after-boundary\"" in b), (b for b in blocks if "wrong on purpose" in b)
    fused = (b for b in blocks if ":name \"cast-after-fused-read\"" in b)  # a rule on a fused operand
    for name, rule, want in (("cast-after-boundary", next(good), 0), ("sub-after-boundary", next(bad), 1),
                             ("cast-after-fused-read", next(fused), 0)):
        d = tmp_path / name
        d.mkdir()
        (d / "rule.egg").write_text(rule, encoding="utf-8")
        assert main(["rules", "--check", "--rules", str(d), "--only", name]) == want, name


def test_python_api_example_runs():
    text = (DOCS / "python_api.md").read_text(encoding="utf-8")
    (code,) = re.findall(r"```python\n(.*?)```", text, re.S)
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        exec(compile(code, "docs/python_api.md", "exec"), {})  # noqa: S102 — the documented example itself
    finally:
        os.chdir(cwd)
