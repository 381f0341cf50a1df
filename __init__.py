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


def __getattr__(name: str) -> Any:
    """``polysat.__version__`` (version.py), read on first use: a relative import at the top of this file
    would break pytest's collection from the source tree, whose root is this package."""
    if name == "__version__":
        from .version import __version__
        return __version__
    raise AttributeError(f"module 'polysat' has no attribute {name!r}")


def compile(model: "str | dict", *, arch: str = "sm90", cost: "str | None" = None, rules: tuple = ()) -> Any:  # noqa: A001
    """A lazily staged :class:`polysat.pipeline.Compilation` of a model file's path or a Frontend IR /
    Tiny IR document: ``.program`` (Tiny IR), ``.extraction``, ``.regions``; ``cost`` names the extraction's
    cost model (default ``knobs.DEFAULT_COST``, the searched partition). A bad model raises :class:`polysat.ir.diagnostics.PolysatError` with coded diagnostics."""
    from . import knobs
    from .pipeline import Compilation
    c = Compilation(model, arch=arch, rules_dirs=tuple(rules), cost=cost or knobs.DEFAULT_COST)
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
    tensors: [{"name", "ops", "reads", "writes"}] (pipeline.py ``kernels``)."""
    from .pipeline import kernels as kernels_of
    return kernels_of(compilation)
