"""Arrows only run down the data flow, and no import circles (docs/DESIGN.md §Layers; README, Folders).

Every module of the package is parsed with ``ast``: every ``import`` counts, function-local ones included,
except those under ``if TYPE_CHECKING:`` (annotations, never executed). Each top-level folder or module may
import only itself and what comes before it in ``LAYERS``; and the modules' import graph, where importing
``a.b.c`` also runs the packages ``a`` and ``a.b``, has no circle, inside a folder or across folders.
"""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

# The top-level folders and modules in the order data flows through them (the README's folder table); each
# may import only those in earlier layers and its own. Names in one layer may import each other.
LAYERS = [
    {"examples"},  # example models (no polysat import)
    {"knobs", "version"},  # environment knobs; the package's version
    {"ir"},  # the data model: Tiny IR, RB-SSA, diagnostics, the reference evaluator and playback
    {"frontend"},  # Frontend IR / ONNX / torch.export -> Tiny IR
    {"analyses"},  # islpy: IndexBook, Poly-View, Poly Core, the price of one region
    {"rules"},  # the rule files (data)
    {"egraph"},  # the engine: terms, loading, rule files and their lint, saturation, extraction, region synthesis
    {"backend"},  # the kernel kinds: binding, plans, GPU IR, CUDA C, launch
    {"pricing"},  # symbols bound; a partition's kernels priced as the backend binds them
    {"search"},  # the --cost model fusion search
    {"checker"},  # the rule soundness checker
    {"pipeline"},  # the compiler as one ordered list of stages
    {"runtime"},  # --target cuda for a whole model
    {"viz"},  # the pictures
    {"cli", "commands", "__main__"},  # the polysat command
    {"bench"},  # benchmarks
    {"__init__"},  # the Python API (polysat.compile, polysat.run, polysat.kernels)
]
SKIP = {"tests", "docs", "build", "out", "setup.py"}  # setup.py: the build's, not the package's


def _modules() -> dict:
    """Dotted name (relative to polysat; '' for the package itself) -> path, for every module of the package."""
    out = {}
    for p in ROOT.rglob("*.py"):
        rel = p.relative_to(ROOT)
        if rel.parts[0] in SKIP or any(x.startswith(".") for x in rel.parts):
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _import_nodes(tree: ast.AST) -> list:
    """Every import statement of a module, wherever it sits, except under ``if TYPE_CHECKING:``."""
    skip = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.If) and getattr(n.test, "id", getattr(n.test, "attr", None)) == "TYPE_CHECKING":
            skip |= {id(x) for b in n.body for x in ast.walk(b)}
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in skip]


def imported(name: str) -> set:
    """The polysat modules module ``name`` imports (relative imports resolved; ``from a import b`` is the
    module a.b when there is one, else a), each with the packages above it that the import runs."""
    path = MODULES[name]
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    package = [x for x in package if x]
    targets = []
    for node in _import_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets += [a.name.split(".")[1:] for a in node.names if a.name.startswith("polysat.")]
            continue
        if node.level:
            base = package[:len(package) - (node.level - 1)]
            mod = base + (node.module.split(".") if node.module else [])
        elif node.module and node.module.split(".")[0] == "polysat":
            mod = node.module.split(".")[1:]
        else:
            continue
        for a in node.names:
            full = mod + [a.name]
            targets.append(full if ".".join(full) in MODULES else mod)
    out = set()
    for t in targets:
        if not t:  # a name of the package itself (``from .. import x`` where x is no module)
            out.add("")
        for k in range(1, len(t) + 1):  # a.b.c runs a and a.b first (the package polysat is already running)
            m = ".".join(t[:k])
            if m in MODULES and not name.startswith(m + "."):
                out.add(m)
    out.discard(name)
    return out


def _top(name: str) -> str:
    return name.split(".")[0] if name else "__init__"


def _layer(top: str) -> int:
    for k, names in enumerate(LAYERS):
        if top in names:
            return k
    raise KeyError(top)


def test_every_top_level_folder_and_module_has_a_layer():
    tops = {_top(m) for m in MODULES}
    placed = set().union(*LAYERS)
    assert tops <= placed, f"not placed in LAYERS: {sorted(tops - placed)}"


@pytest.mark.parametrize("top", sorted(set().union(*LAYERS)))
def test_a_folder_imports_only_what_comes_before_it(top):
    bad = {}
    for m in sorted(MODULES):
        if _top(m) != top:
            continue
        up = sorted(t for t in {_top(x) for x in imported(m)} if _layer(t) > _layer(top))
        if up:
            bad[m or "polysat"] = up
    assert not bad, f"imports against the data flow: {bad}"


def circles(graph: dict) -> list:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_import_circles():
    graph = {m: imported(m) for m in MODULES}
    found = circles(graph)
    assert not found, "import circles: " + "; ".join(" - ".join(c) for c in found)


def test_the_checker_sees_circles_and_every_kind_of_import(tmp_path):
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
    assert {"ir.tiny", "ir.dtypes", "knobs"} <= imported("ir.evaluate") | {"knobs"}
    assert {"analyses.isl_util", "ir"} <= imported("egraph.region_synth")  # ``from ..ir import region as rg`` runs ir
    assert "egraph.graph" in imported("commands.extract")
    assert "pipeline" in imported("runtime.compiled")  # a function-local import counts
    assert "frontend.onnx" not in imported("frontend.onnx_ops")  # ... one under TYPE_CHECKING does not


MAX_MODULES = 25  # modules of one folder (a room per concern)
MAX_LINES = 600  # lines of one module


def test_no_folder_holds_more_than_its_share_of_modules():
    per: dict = {}
    for m, p in MODULES.items():
        per.setdefault(p.parent, []).append(m)
    big = {str(d.relative_to(ROOT)): len(ms) for d, ms in per.items() if len(ms) > MAX_MODULES}
    assert not big, f"folders over {MAX_MODULES} modules: {big}"


def test_no_module_is_longer_than_it_can_be_read():
    long = {m or "polysat": n for m, p in MODULES.items()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"
