"""polysat as an ONNX backend (``onnx.backend.base.Backend``), so ``onnx.backend.test.BackendTest`` and
any ONNX backend driver can run models through it.

``ReferenceBackend`` runs the imported model's Tiny IR on the numpy reference evaluator,
``PlaybackBackend`` runs the extracted RB-SSA regions (the e-graph pipeline) on the CPU. A model the
importer refuses (an unsupported op, attribute or dtype) is declined by ``is_compatible``, and the
reason (the diagnostic) is kept in ``Backend.declined`` under the graph's name.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from onnx.backend.base import Backend, BackendRep

from ..ir.diagnostics import PolysatError
from .onnx import import_onnx


def _np_of_onnx(elem: int) -> np.dtype:
    from onnx import helper
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem))


class PolysatRep(BackendRep):
    """A prepared model: the compilation, its parameters, and the graph's input and output names."""

    def __init__(self, model, target: str, cost: str = "size"):
        from ..pipeline import Compilation
        self.doc = import_onnx(model, model.graph.name or "model")
        self.target = target
        self.c = Compilation(self.doc, cost=cost)
        self.c.program  # compile now: model errors surface at prepare
        inits = {i.name for i in model.graph.initializer}
        self.input_names = [i.name for i in model.graph.input if i.name not in inits]
        self.output_types = [o.type.tensor_type.elem_type for o in model.graph.output]
        self.output_names = [o.name for o in model.graph.output]

    def run(self, inputs: Any, **kwargs: Any) -> tuple:
        from ..cli import TARGETS
        from . import with_parameters
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            feeds = dict(zip(self.input_names, inputs, strict=True))
        outs = TARGETS[self.target](self.c, with_parameters(self.doc, feeds))
        names = [e["tensor"] for e in self.doc["signature"]["outputs"]]
        return tuple(np.asarray(outs[n]).astype(_np_of_onnx(t)) for n, t in zip(names, self.output_types))


class PolysatBackend(Backend):
    target = "reference"
    cost = "size"
    declined: dict = {}

    @classmethod
    def is_compatible(cls, model, device: str = "CPU", **kwargs: Any) -> bool:
        try:
            import_onnx(model, model.graph.name or "model")
        except PolysatError as e:
            cls.declined[model.graph.name] = e.diagnostics[0]
            return False
        return True

    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs: Any) -> PolysatRep:
        super().prepare(model, device, **kwargs)
        return PolysatRep(model, cls.target, cls.cost)

    @classmethod
    def run_model(cls, model, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device == "CPU"


class ReferenceBackend(PolysatBackend):
    target = "reference"
    declined: dict = {}


class PlaybackBackend(PolysatBackend):
    target = "playback"
    declined: dict = {}


def prepare(model, device: str = "CPU", **kwargs: Any) -> PolysatRep:
    return ReferenceBackend.prepare(model, device, **kwargs)


def run_model(model, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple:
    return ReferenceBackend.run_model(model, inputs, device, **kwargs)


# ---- the ONNX node tests, as a conformance run -------------------------------------------------

def node_cases() -> list:
    """onnx's node test cases whose ops polysat takes (a handler, or folding at import)."""
    import warnings
    from onnx.backend.test.loader import load_model_tests
    from .onnx import FOLD_ONLY
    from .onnx_ops import HANDLERS
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the case generators' own numpy overflow warnings
        cases = load_model_tests(kind="node")
    out = []
    for t in cases:
        ops = {n.op_type for n in t.model.graph.node} - FOLD_ONLY
        if ops and ops <= set(HANDLERS):
            out.append(t)
    return out


def case_key(t) -> str:
    """The op a case tests: its one node's op, or "expanded" for a function body's decomposition."""
    nodes = [n for n in t.model.graph.node]
    return nodes[0].op_type if len(nodes) == 1 else "expanded"


def run_case(backend: type, t) -> tuple:
    """("pass" | "fail" | "declined", detail) of one node test case on a backend class."""
    from onnx import numpy_helper
    from onnx.backend.test.runner import Runner

    def arr(x):
        return numpy_helper.to_array(x) if hasattr(x, "data_type") else np.asarray(x)
    if not backend.is_compatible(t.model):
        d = backend.declined[t.model.graph.name]
        return "declined", f"{d.code} {d.kind}: {d.why}"
    try:
        rep = backend.prepare(t.model)
        for ins, outs in t.data_sets:
            got = rep.run([arr(x) for x in ins])
            with np.errstate(all="ignore"):
                Runner.assert_similar_outputs([arr(o) for o in outs], list(got), rtol=t.rtol, atol=t.atol)
    except (AssertionError, PolysatError) as e:
        return "fail", f"{type(e).__name__}: {str(e).strip()[:300]}"
    return "pass", ""
