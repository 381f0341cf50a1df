"""polysat: fusion as an e-graph search priced by polyhedral analyses; CUDA for sm80/sm90 from one
MMA template.

The Python API (``docs/python_api.md``)::

    import polysat
    c = polysat.compile("examples/gemm_bias_relu.json", cost="model")   # or a model dict
    polysat.kernels(c)               # [{"name", "ops", "reads", "writes"}] of the chosen partition
    outs = polysat.run(c, {"A": a, "B": b, "bias": bias}, target="playback")
"""
from __future__ import annotations

from typing import Any


def _version() -> str:
    """The version pyproject.toml declares (the source tree's, else the installed package's)."""
    import pathlib
    import tomllib
    py = pathlib.Path(__file__).resolve().parent / "pyproject.toml"
    if py.is_file():
        with open(py, "rb") as f:
            return tomllib.load(f)["project"]["version"]
    from importlib.metadata import version
    return version("polysat")


__version__ = _version()


def compile(model: "str | dict", *, arch: str = "sm90", cost: str = "size", rules: tuple = ()) -> Any:  # noqa: A001
    """A lazily staged :class:`polysat.pipeline.Compilation` of a model file's path or a Frontend IR /
    Tiny IR document: ``.program`` (Tiny IR), ``.extraction``, ``.regions``. A bad
    model raises :class:`polysat.ir.diagnostics.PolysatError` with coded diagnostics."""
    from .pipeline import Compilation
    c = Compilation(model, arch=arch, rules_dirs=tuple(rules), cost=cost)
    c.program  # noqa: B018 — lower now: model errors surface here
    return c


def run(compilation: Any, inputs: dict, target: str = "reference") -> dict:
    """The model's outputs by name on numpy inputs (by input tensor name): ``reference`` (the meaning),
    ``playback`` (the extracted kernels on the CPU) or ``cuda`` (needs a GPU)."""
    from .cli import TARGETS
    from .ir.diagnostics import fail
    if target not in TARGETS:
        fail("UnknownTarget", "target", f"unknown target {target!r}; targets: {', '.join(TARGETS)}")
    return TARGETS[target](compilation, inputs)


def kernels(compilation: Any) -> list:
    """The kernels extraction made (under the compilation's cost model), named by the user's ops and
    tensors: [{"name", "ops", "reads", "writes"}]."""
    from .ir.user_names import node_names, region_names
    sp = compilation.split
    out = []
    if sp.program.outputs:
        x = compilation.extraction
        names = region_names(compilation.program, x.program)
        out = [{"name": k.name, **names(k)} for k in x.partition.kernels]
    ops = node_names(compilation.program)
    out += [{"name": f"gather_{s.node.id}", "ops": [ops[s.node.id]], "reads": [s.data, s.index], "writes": [s.out]}
            for s in sp.sites]  # a data-dependent gather: a kernel of its own (ir/gather_split.py)
    if sp.sites:  # in the order they run
        order = {r.name: k for k, r in enumerate(compilation.regions)}
        out.sort(key=lambda k: order.get(k["name"], len(order)))
    return out
