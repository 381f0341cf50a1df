"""``torch.compile(model, backend="polysat")``: the backend registered by the ``torch_dynamo_backends``
entry point.

Each graph dynamo captures is lowered to core ATen by AOTAutograd (with torch's core decompositions),
imported through :mod:`.torch_export`, and compiled by polysat's pipeline; the compiled callable runs it
on a target (``reference``, ``playback``, or ``cuda`` where a GPU is present). A graph polysat cannot
take (a diagnostic at import or compile) falls back to eager for that graph, and the reason is logged.
Options: ``torch.compile(m, backend="polysat", options={"target": "playback", "cost": "model"})``.
"""
from __future__ import annotations

import logging

import numpy as np

from .. import knobs
from ..ir.diagnostics import PolysatError

log = logging.getLogger("polysat.torch")


def compile_graph(gm, example_inputs, target: str = "reference", cost: str = knobs.DEFAULT_COST):
    """An ATen FX graph (every placeholder a runtime input) -> a callable over torch tensors."""
    import torch
    from ..cli import TARGETS
    from ..pipeline import Compilation
    from ..frontend import with_parameters
    from ..frontend.torch_export import import_graph
    places = [n for n in gm.graph.nodes if n.op == "placeholder"]
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    outs = list(out_node.args[0]) if isinstance(out_node.args[0], (list, tuple)) else [out_node.args[0]]
    doc = import_graph(gm, [p.name for p in places], {}, outs, "torch.compile graph")
    c = Compilation(doc, cost=cost)
    c.program
    if target != "reference":
        c.regions  # extraction errors surface now, while eager is still an option
    names = [e["tensor"] for e in doc["signature"]["outputs"]]

    def run(*args):
        feeds = {p.name: np.asarray(a.detach().cpu().numpy()) for p, a in zip(places, args)}
        got = TARGETS[target](c, with_parameters(doc, feeds))
        return [torch.from_numpy(np.ascontiguousarray(got[n])) for n in names]
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

    def fw(graph, inputs):
        try:
            return make_boxed_func(compile_graph(graph, inputs, target, cost))
        except PolysatError as e:
            d = e.diagnostics[0]
            log.warning("polysat: graph runs eagerly: %s %s at %s: %s", d.code, d.kind, d.at, d.why)
            return make_boxed_func(graph.forward)
    return aot_module_simplified(gm, example_inputs, fw_compiler=fw, decompositions=core_aten_decompositions())
