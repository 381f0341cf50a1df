"""Arrows only run down the data flow: each top-level folder imports only the folders before it
(README "Folders, in the order data flows through them"; docs/DESIGN.md §Layers)."""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

# folder -> the polysat top-level modules it may import (besides itself)
ALLOWED = {
    "ir": {"knobs"},
    "frontend": {"ir", "knobs"},
    "analyses": {"ir", "knobs"},
    "egraph": {"ir", "analyses", "knobs"},
    "backend": {"ir", "analyses", "knobs"},
}

# the stated exceptions (docs/DESIGN.md §Layers): module -> what it may import beyond its folder's ALLOWED
EXCEPTIONS = {
    # a kernel is priced as the kind the backend binds it to: pricing asks the synthesis and the binders
    "analyses/poly_from_view.py": {"egraph", "backend"},
}


def _imports(path: pathlib.Path) -> set:
    """The polysat top-level names a module imports (relative imports resolved against its package)."""
    rel = path.relative_to(ROOT)
    package = list(rel.parts[:-1])
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)] if node.level > 1 else package
                parts = base + (node.module.split(".") if node.module else [])
                if parts:
                    out.add(parts[0])
                else:  # `from .. import knobs` at the top: the imported names are the modules
                    out.update(a.name.split(".")[0] for a in node.names)
            elif node.module and node.module.split(".")[0] == "polysat":
                parts = node.module.split(".")[1:]
                out.update([parts[0]] if parts else [a.name for a in node.names])
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[1] for a in node.names if a.name.startswith("polysat."))
    return out


@pytest.mark.parametrize("folder", sorted(ALLOWED))
def test_a_folder_imports_only_what_comes_before_it(folder):
    bad = {}
    for p in sorted((ROOT / folder).rglob("*.py")):
        extra = _imports(p) - ALLOWED[folder] - {folder} - EXCEPTIONS.get(str(p.relative_to(ROOT)), set())
        if extra:
            bad[str(p.relative_to(ROOT))] = sorted(extra)
    assert not bad, f"imports against the data flow: {bad}"


def test_the_checker_sees_relative_and_absolute_imports():
    assert _imports(ROOT / "ir" / "evaluate.py") == {"ir", "knobs"}
    assert {"analyses", "ir"} <= _imports(ROOT / "egraph" / "region_synth.py")
    assert "egraph" in _imports(ROOT / "commands" / "extract.py")
