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

from .. import knobs
from ..frontend.onnx import FOLD_ONLY, _default_opset, dtype_of_onnx, import_onnx
from ..ir.diagnostics import PolysatError, fail


def _np_of_onnx(elem: int) -> np.dtype:
    from onnx import helper
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem))


# ONNX operand positions that are shapes, axes or indices: an integer graph input read only there is
# a compile-time value for polysat, bound when the inputs arrive (one compilation per distinct value).
SHAPE_OPERANDS = {"Reshape": {1}, "Expand": {1}, "Tile": {1}, "Slice": {1, 2, 3, 4}, "Pad": {1, 3}, "Split": {1},
                  "Squeeze": {1}, "Unsqueeze": {1}, "Trilu": {1}, "ConstantOfShape": {0},
                  "Range": {0, 1, 2}, "OneHot": {1}, **{op: {1} for op in (
                      "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceSumSquare", "ReduceL1", "ReduceL2",
                      "ReduceLogSum", "ReduceLogSumExp")}}


def shape_inputs(model) -> list:
    """Integer graph inputs every reader of which takes them as a shape operand."""
    inits = {i.name for i in model.graph.initializer}
    out = []
    for vi in model.graph.input:
        if vi.name in inits or vi.type.tensor_type.elem_type not in (6, 7):  # int32, int64
            continue
        uses = [(n.op_type, k) for n in model.graph.node for k, x in enumerate(n.input) if x == vi.name]
        if uses and all(k in SHAPE_OPERANDS.get(op, ()) for op, k in uses):
            out.append(vi.name)
    return out


class Declined(PolysatError):
    """The import refused the model once its shape inputs were bound (a late is_compatible)."""


class PolysatRep(BackendRep):
    """A prepared model: the compilation, its parameters, and the graph's input and output names. A model
    with shape inputs (:func:`shape_inputs`) is compiled when they arrive, once per distinct value."""

    def __init__(self, model, target: str, cost: str = knobs.DEFAULT_COST):
        self.model, self.target, self.cost = model, target, cost
        self.shape_names = shape_inputs(model)
        self.compiled: dict = {}
        inits = {i.name for i in model.graph.initializer}
        self.input_names = [i.name for i in model.graph.input if i.name not in inits]
        self.output_types = [o.type.tensor_type.elem_type for o in model.graph.output]
        self.output_names = [o.name for o in model.graph.output]
        if not self.shape_names:
            self.compile({})  # model errors surface at prepare

    def compile(self, bound: dict) -> tuple:
        from ..pipeline import Compilation
        key = tuple((k, v.dtype.str, v.shape, v.tobytes()) for k, v in sorted(bound.items()))
        if key not in self.compiled:
            try:
                doc = import_onnx(self.model, self.model.graph.name or "model", bound)
            except PolysatError as e:  # refused on sight of the shape values, before computing anything
                raise Declined(e.diagnostics) from None
            c = Compilation(doc, cost=self.cost)
            c.program
            self.compiled[key] = (doc, c)
        return self.compiled[key]

    def run(self, inputs: Any, **kwargs: Any) -> tuple:
        from ..cli import TARGETS
        from ..frontend import with_parameters
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            feeds = dict(zip(self.input_names, inputs, strict=True))
        bound = {k: np.asarray(feeds.pop(k)) for k in self.shape_names}
        doc, c = self.compile(bound)
        outs = TARGETS[self.target](c, with_parameters(doc, feeds))
        names = [e["tensor"] for e in doc["signature"]["outputs"]]
        return tuple(np.asarray(outs[n]).astype(_np_of_onnx(t)) for n, t in zip(names, self.output_types))


class PolysatBackend(Backend):
    target = "reference"
    cost = knobs.DEFAULT_COST
    declined: dict = {}

    @classmethod
    def is_compatible(cls, model, device: str = "CPU", **kwargs: Any) -> bool:
        """Whether polysat imports the model; with shape inputs (bound only at run time), whether it has
        a translation for every op (attribute values are then checked when the values arrive)."""
        from ..frontend.onnx_ops import HANDLERS
        try:
            if not shape_inputs(model):
                import_onnx(model, model.graph.name or "model")
                return True
            if _default_opset(model) < 13:
                import_onnx(model, model.graph.name or "model")  # the version converter's verdict
            for n in model.graph.node:
                if n.op_type not in HANDLERS and n.op_type not in FOLD_ONLY:
                    fail("UnsupportedOp", n.name or n.op_type, f"ONNX op {n.op_type} has no polysat lowering")
            for vi in model.graph.input:
                if vi.name not in shape_inputs(model) and vi.name not in {i.name for i in model.graph.initializer}:
                    dtype_of_onnx(vi.type.tensor_type.elem_type, vi.name, f"graph input {vi.name!r}")
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
    from ..frontend.onnx_ops import HANDLERS
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
    except Declined as e:
        d = e.diagnostics[0]
        return "declined", f"{d.code} {d.kind}: {d.why} (with the shape inputs bound)"
    except (AssertionError, PolysatError) as e:
        return "fail", f"{type(e).__name__}: {str(e).strip()[:300]}"
    return "pass", ""
