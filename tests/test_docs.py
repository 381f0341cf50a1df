"""Docstrings cite docs/DESIGN.md by section, and every section they cite exists; nothing cites a document
outside the repository (the specification seeds, issue texts, probe notes)."""
from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "DESIGN.md"
SOURCES = ("*.py", "*.egg", "*.cuh", "*.j2")
CITE = re.compile(r"DESIGN\.md\s+§([^\s,;:)\"'`.]+(?: [^\s,;:)\"'`.§]+)*)")
OUTSIDE = re.compile(r"\bseed 00\d|\b[Ss]eed 0\d\d\b|\bissue \d|\bprobe §|§\d")


def _files():
    for pattern in SOURCES:
        for p in ROOT.rglob(pattern):
            rel = p.relative_to(ROOT)
            if rel.parts[0] not in (".venv", "build", "out") and "__pycache__" not in rel.parts:
                yield rel, p.read_text(encoding="utf-8")


def _sections() -> list:
    return [ln[3:].strip() for ln in DESIGN.read_text(encoding="utf-8").splitlines() if ln.startswith("## ")]


def test_every_cited_section_exists():
    sections = _sections()
    assert {"Frontend IR", "Tiny IR", "IndexBook", "Poly-View", "RB-SSA", "Poly Core", "Schedule Plan", "GPU IR",
            "Cost model", "Diagnostics", "Runtime"} <= set(sections)
    bad = []
    for rel, text in _files():
        for m in CITE.finditer(text):
            if not any(m.group(1) == s or m.group(1).startswith(s + " ") for s in sections):
                bad.append(f"{rel}: §{m.group(1)}")
    assert not bad, bad


def test_the_contents_line_links_every_section():
    text = DESIGN.read_text(encoding="utf-8")
    for s in _sections():
        anchor = re.sub(r"[^a-z0-9 -]", "", s.lower()).replace(" ", "-")
        assert f"(#{anchor})" in text, s


def test_no_citation_of_documents_outside_the_repository():
    # backend/templates/ still cite the seeds in the header comment every generated .cu carries: rewriting
    # it changes the text of every kernel, so it waits for a change that means to change the kernels
    bad = [f"{rel}: {line.strip()[:80]}" for rel, text in _files() if rel.parts[:2] != ("backend", "templates")
           for line in text.splitlines() if OUTSIDE.search(line)]
    assert not bad, bad
