"""``torch.compile(model, backend="polysat")``: the backend registered by the ``torch_dynamo_backends``
entry point.

Each graph dynamo captures is lowered to core ATen by AOTAutograd (with torch's core decompositions),
imported through :mod:`.torch_export`, and compiled by polysat's pipeline; the compiled callable runs it
on a target (``reference``, ``playback``, or ``cuda`` where a GPU is present). A graph polysat cannot
take (a diagnostic at import or compile) falls back to eager for that graph, and the reason is logged.
The module's parameters and buffers (the inputs dynamo marks static) are the graph's constants, as in
torch.export: what depends on them alone folds at import (LLaMA's rotary cos/sin tables). A constant changed
in place after compiling (a new ``_version`` or storage) compiles the graph again on its next call.
Options: ``torch.compile(m, backend="polysat", options={"target": "playback", "cost": "model"})``.
"""
from __future__ import annotations

import logging

import numpy as np

from .. import knobs
from ..ir.diagnostics import PolysatError

log = logging.getLogger("polysat.torch")


def compile_graph(gm, example_inputs, target: str = "reference", cost: str = knobs.DEFAULT_COST,
                  consts: "dict | None" = None):
    """An ATen FX graph -> a callable over torch tensors; ``consts`` maps placeholder positions to the tensors
    they are bound to (the module's parameters and buffers), every other placeholder is a runtime input."""
    import torch
    from ..cli import TARGETS
    from ..pipeline import Compilation
    from ..frontend import with_parameters
    from ..frontend.torch_export import import_graph
    consts = consts or {}
    places = [n for n in gm.graph.nodes if n.op == "placeholder"]
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    outs = list(out_node.args[0]) if isinstance(out_node.args[0], (list, tuple)) else [out_node.args[0]]
    bound = {places[k].name: t for k, t in consts.items()}
    doc = import_graph(gm, [p.name for p in places if p.name not in bound], bound, outs, "torch.compile graph")
    c = Compilation(doc, cost=cost)
    c.program
    if target != "reference":
        c.regions  # extraction errors surface now, while eager is still an option
    names = [e["tensor"] for e in doc["signature"]["outputs"]]

    def run(*args):
        feeds = {p.name: np.asarray(a.detach().cpu().numpy()) for p, a in zip(places, args) if p.name not in bound}
        got = TARGETS[target](c, with_parameters(doc, feeds))
        return [torch.from_numpy(np.ascontiguousarray(got[n])) for n in names]
    return run


def _stamp(t) -> tuple:
    """What changes when a tensor is written in place or rebound: its version counter and storage."""
    return (t._version, t.data_ptr())  # noqa: SLF001 - torch's in-place write counter


def _static(example_inputs) -> dict:
    """Position -> tensor of the inputs dynamo marks static (a module's parameters and buffers)."""
    return {k: t for k, t in enumerate(example_inputs) if getattr(t, "_dynamo_static_input_type", None)}


def _bound_graph(graph, places: int, statics: dict, target: str, cost: str):
    """compile_graph with the static inputs bound as constants, compiled again when one of them is written
    after compiling (so a bound constant never goes stale)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    consts = statics if len(statics) < places else {}
    with unset_fake_temporarily():  # the bound tensors are read as real values, under AOTAutograd's fake mode
        state = [compile_graph(graph, None, target, cost, consts), {k: _stamp(t) for k, t in consts.items()}]

    def run(*args):
        if any(_stamp(args[k]) != s for k, s in state[1].items()):
            fresh = {k: args[k] for k in consts}
            state[:] = [compile_graph(graph, None, target, cost, fresh), {k: _stamp(t) for k, t in fresh.items()}]
        return state[0](*args)
    return run


def polysat_backend(gm, example_inputs, options: dict | None = None, mode: str | None = None):
    """The dynamo backend; torch.compile hands it ``options`` (``target``, ``cost``)."""
    from functorch.compile import make_boxed_func
    from torch._decomp import core_aten_decompositions
    from torch._functorch.aot_autograd import aot_module_simplified
    options = dict(options or {})
    target, cost = options.pop("target", "reference"), options.pop("cost", knobs.DEFAULT_COST)
    if options or mode:
        log.warning("polysat: options %s and mode %r are not known (known options: target, cost)", sorted(options), mode)

    statics = _static(example_inputs)

    def fw(graph, inputs):
        places = sum(1 for n in graph.graph.nodes if n.op == "placeholder")
        try:
            if places != len(example_inputs):  # AOTAutograd added or dropped inputs: none is bound
                return make_boxed_func(_bound_graph(graph, places, {}, target, cost))
            return make_boxed_func(_bound_graph(graph, places, statics, target, cost))
        except PolysatError as e:
            d = e.diagnostics[0]
            log.warning("polysat: graph runs eagerly: %s %s at %s: %s", d.code, d.kind, d.at, d.why)
            return make_boxed_func(graph.forward)
    return aot_module_simplified(gm, example_inputs, fw_compiler=fw, decompositions=core_aten_decompositions())
