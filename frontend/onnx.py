"""ONNX models in: an ONNX file (opset 13 onward) -> a Frontend IR document plus its parameter arrays.

Graph inputs become the signature's data inputs (``dim_param`` names become symbols); initializers
and ``Constant`` nodes are constants. A node whose inputs are all constants, and a ``Shape``/``Size``
of a statically shaped tensor, is folded at import (by onnx's reference evaluator), so shape
computations (``Shape -> Gather -> Concat -> Reshape``) never reach the compiler. Every other node is
translated by a handler of :mod:`.onnx_ops` into Frontend IR nodes; each emitted node is lowered at
once into a shadow :class:`~polysat.ir.builder.Builder`, which gives the handlers the shapes and
dtypes of what they have emitted. A constant a translated node reads becomes a ``Constant`` node when
all its elements are equal, else a parameter: a signature input with role ``param`` whose array is
carried in the document's ``"parameters"`` (the targets bind it; it is never written to JSON).

An op without a handler, an attribute a handler did not read, and a tensor type polysat cannot
compute in (int64 and float64 that do not fold, 8-bit integers, ...) are coded diagnostics naming
the ONNX node, op and attribute.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..ir.builder import Builder
from ..ir.diagnostics import PolysatError, fail
from ..ir.dtypes import DType
from ..ir.shapes import is_static, shape_of
from ..ir.tiny import UOp
from .lower import LOWERINGS, Ctx, op_table
from .model import Node, _freeze
from .onnx_ops import HANDLERS, NO_FOLD  # every handler module loaded
from .onnx_dtypes import NP_DTYPES, dtype_of_onnx, onnx_dtype_name, onnx_numeric

MIN_OPSET = 13
# Ops taken only by folding at import (they make constants: shapes, ranges, filled tensors).
FOLD_ONLY = frozenset({"Constant", "ConstantOfShape", "Range", "Shape", "Size", "EyeLike", "OneHot"})

@dataclass
class OnnxNode:
    """One ONNX node as a handler sees it; attributes are read through :meth:`attr`, which marks them
    honoured (an attribute no handler read is E1102 after the handler returns)."""

    op: str
    name: str
    inputs: list
    outputs: list
    attrs: dict
    proto: Any
    opset: int
    read: set = field(default_factory=set)

    def attr(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        v = self.attrs.get(key, default)
        if isinstance(v, bytes):
            v = v.decode()
        return v

    def has(self, k: int) -> bool:
        """Whether optional input k is given (ONNX leaves a missing optional input as "")."""
        return k < len(self.inputs) and self.inputs[k] != ""

    def unsupported(self, why: str, attr: str | None = None):
        where = f"attribute {attr!r} of " if attr else ""
        fail("UnsupportedOp", self.name, f"{where}ONNX {self.op} node {self.name!r}: {why}")


class Importer:
    """The translation state: constants, the shadow builder, emitted Frontend IR nodes, parameters."""

    def __init__(self, names: set, opset: int):
        self.opset = opset
        self.consts: dict[str, np.ndarray] = {}
        self.env: dict[str, UOp] = {}  # Frontend tensor -> shadow UOp
        self.alias: dict[str, str] = {}  # ONNX tensor -> Frontend tensor (materialized constants, identities)
        self.b = Builder()
        self.nodes: list[dict] = []
        self.inputs: list[dict] = []
        self.tensors: dict[str, dict] = {}
        self.params: dict[str, np.ndarray] = {}
        self._names: set = set(names)  # the source model's tensor names, reserved
        self._count = 0

    # ---- names ------------------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_./:-]", "_", hint) or "t"
        name = base
        while name in self._names:
            self._count += 1
            name = f"{base}_{self._count}"
        self._names.add(name)
        return name

    # ---- values -----------------------------------------------------------------------------
    def const(self, name: str) -> np.ndarray | None:
        return self.consts.get(name)

    def is_const(self, name: str) -> bool:
        return name in self.consts

    def value(self, name: str, at: str) -> str:
        """The Frontend tensor carrying ONNX tensor `name` (a constant is materialized on first use)."""
        if name in self.alias:
            return self.alias[name]
        if name in self.env:
            return name
        if name in self.consts:
            t = self.materialize(self.consts[name], name, at, exact=True)
            self.alias[name] = t
            return t
        fail("UnknownTensor", at, f"tensor {name!r} is neither a graph input, an initializer nor a node output")

    def materialize(self, arr: np.ndarray, hint: str, at: str, exact: bool = False) -> str:
        """A constant as a Frontend tensor (named `hint` itself when `exact`: an ONNX tensor's name)."""
        arr = np.asarray(arr)
        dt = self._const_dtype(arr, hint, at)
        if arr.size == 0:
            fail("UnaddressableShape", at, f"constant {hint!r} has shape {list(arr.shape)} with no elements")
        filled = all(st == 0 for st in arr.strides)  # one value broadcast (a folded ConstantOfShape)
        flat = arr.reshape(-1)[:1] if filled else arr.reshape(-1)
        if filled or np.all(flat == flat[0]) or (dt.is_float and np.all(np.isnan(flat))):
            v = flat[0].item()
            return self.emit("Constant", [], {"value": _json_scalar(v), "dtype": dt.value, "shape": list(arr.shape)},
                             name=f"{hint}/const", out=hint if exact else self.fresh(hint))
        name = hint if exact else self.fresh(hint)
        self.params[name] = arr.astype(dt.np, copy=False) if dt != DType.bf16 else arr
        self.inputs.append({"tensor": name, "role": "param"})
        self.tensors[name] = {"dtype": dt.value, "shape": list(arr.shape)}
        self.env[name] = self.b.input(name, dt, shape_of(arr.shape), at=name, nid=name)
        return name

    def _const_dtype(self, arr: np.ndarray, hint: str, at: str) -> DType:
        if arr.dtype in NP_DTYPES:
            return NP_DTYPES[arr.dtype]
        if arr.dtype.name == "bfloat16":
            return DType.bf16
        if arr.dtype.kind in "iu" and (arr.size == 0 or (arr.min() >= -2**31 and arr.max() < 2**31)):
            return DType.i32  # an exact narrowing: every value fits
        fail("UnsupportedDtype", at, f"constant {hint!r} of dtype {arr.dtype} reaches a computed op; polysat "
             "computes in fp16, bf16, fp32, i32 and bool" + (" (its values do not fit int32)" if arr.dtype.kind in "iu" else ""))

    def add_input(self, name: str, dt: DType, shape: tuple) -> None:
        """A data input of the signature."""
        self.inputs.append({"tensor": name})
        self.tensors[name] = {"dtype": dt.value, "shape": [d if isinstance(d, int) else str(d) for d in shape]}
        self.env[name] = self.b.input(name, dt, shape, at=name, nid=name)

    def call(self, op: str, name: str, inputs: list, attrs: dict | None = None, n_out: int = 1) -> list:
        """Translate one ONNX-style node given in Python terms (another importer's op mapped onto the ONNX
        handlers): an input is a tensor name, an array (a constant) or None (absent). Returns the
        output names (a constant output stays in ``consts``)."""
        from onnx import helper
        names = []
        for k, x in enumerate(inputs):
            if x is None:
                names.append("")
            elif isinstance(x, str):
                names.append(x)
            else:
                c = self.fresh(f"{name}/in{k}")
                self.consts[c] = np.asarray(x)
                names.append(c)
        outs = [self.fresh(name if n_out == 1 else f"{name}/{k}") for k in range(n_out)]
        proto = helper.make_node(op, names, outs, name=name, **(attrs or {}))
        translate_node(self, proto, 0)
        return outs

    def uop(self, t: str) -> UOp:
        return self.env[t]

    def shape(self, t: str) -> tuple:
        return self.env[t].shape

    def dtype(self, t: str) -> DType:
        return self.env[t].dtype

    def emit(self, op: str, inputs: list, attrs: dict | None = None, *, name: str, out: str | None = None) -> str:
        """Append one Frontend IR node and lower it into the shadow builder; returns its output tensor."""
        out = out or self.fresh(f"{name}/out")
        nname = self.fresh(name)
        attrs = dict(attrs or {})
        if isinstance(attrs.get("shape"), list):  # sizes written as text by handlers: static ones as ints
            attrs["shape"] = [int(d) if isinstance(d, str) and d.lstrip("-").isdigit() else d for d in attrs["shape"]]
        node = Node(op, nname, tuple(inputs), (out,), _freeze(attrs))
        fn, (lo, hi), _ = LOWERINGS[op]
        if not lo <= len(inputs) <= hi:
            fail("WrongArity", nname, f"{op} takes {lo} to {hi} inputs, got {len(inputs)}")
        (u,) = fn(Ctx(self.b, node), [self.env[t] for t in inputs])
        self.env[out] = u
        self.nodes.append({"op": op, "name": nname, "inputs": list(inputs), "outputs": [out], "attrs": attrs})
        return out

    def bind(self, onnx_name: str, t: str) -> None:
        """ONNX tensor `onnx_name` is Frontend tensor `t`."""
        if t != onnx_name:
            self.alias[onnx_name] = t


def _json_scalar(v: Any) -> Any:
    if isinstance(v, float) and (np.isinf(v) or np.isnan(v)):
        return "nan" if np.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def _default_opset(model) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    return 0


def _sym(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return s if s and not s[0].isdigit() else f"d_{s}"


def _input_shape(vi, at: str, sizes: "dict | None" = None) -> tuple:
    """The graph input's shape: its dim_values, its dim_params as symbols (or the size ``sizes`` gives one)."""
    sizes = sizes or {}
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        fail("UnsupportedOp", at, f"graph input {vi.name!r} has no shape; polysat needs its rank and sizes "
             "(a size may be a dim_param symbol)")
    dims = []
    for k, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value"):
            if d.dim_value <= 0:
                fail("UnaddressableShape", at, f"graph input {vi.name!r} axis {k} has size {d.dim_value}")
            dims.append(int(d.dim_value))
        else:
            sym = _sym(d.dim_param) if d.dim_param else _sym(f"{vi.name}_{k}")
            dims.append(int(sizes[sym]) if sym in sizes else sym)
    return shape_of(dims)


def import_onnx(model, origin: str = "model.onnx", bindings: dict | None = None, sizes: dict | None = None) -> dict:
    """An ``onnx.ModelProto`` -> Frontend IR document with ``"parameters"`` (name -> ndarray).
    ``bindings`` gives graph inputs a value to take as constants (a backend specializing on shapes); ``sizes``
    (symbol -> int) fixes the graph inputs' dim_params so named."""
    from onnx import numpy_helper
    op_table()  # every lowering loaded (the shadow builder lowers each emitted node)
    if 0 < _default_opset(model) < MIN_OPSET:
        model = _upgrade(model, origin)
    g = model.graph
    imp = Importer({x for n in g.node for x in n.output} | {i.name for i in g.input} | {i.name for i in g.initializer},
                   _default_opset(model))
    if imp.opset < MIN_OPSET:
        fail("UnsupportedOp", origin, f"the model imports ONNX opset {imp.opset}; polysat takes opset {MIN_OPSET} "
             "onward", "Convert it with onnx.version_converter.convert_version(model, 17).")
    for dom in model.opset_import:
        if dom.domain not in ("", "ai.onnx"):
            used = [n for n in model.graph.node if n.domain == dom.domain]
            if used:
                fail("UnsupportedOp", used[0].name or used[0].op_type, f"op {used[0].op_type} of domain "
                     f"{dom.domain!r}: polysat imports only the default ONNX domain")
    for init in g.initializer:
        imp.consts[init.name] = _initializer(init, numpy_helper)
    defaults: dict = {}
    if model.ir_version >= 4:  # an initializer named like a graph input is the input's default, not a constant
        for vi in g.input:
            if vi.name in imp.consts and vi.name not in (bindings or {}):
                defaults[vi.name] = imp.consts.pop(vi.name)
    for name, v in (bindings or {}).items():
        imp.consts[name] = np.asarray(v)
    narrowed: dict = {}
    for vi in g.input:
        if vi.name in imp.consts:
            continue  # an initializer listed as input (IR < 4 style): a constant
        elem = vi.type.tensor_type.elem_type
        if elem == 7:  # int64 (token ids, positions): computed as i32, its values checked to fit when they arrive
            narrowed[vi.name] = "int64"
            elem = 6
        dt = dtype_of_onnx(elem, vi.name, f"graph input {vi.name!r}")
        shape = _input_shape(vi, vi.name, sizes)
        imp.add_input(vi.name, dt, shape)
        if vi.name in defaults:
            defaults[vi.name] = np.asarray(defaults[vi.name]).astype(dt.np if dt != DType.bf16 else np.float32)
    for k, proto in enumerate(g.node):
        translate_node(imp, proto, k)
    outputs = []
    for vi in g.output:
        t = imp.value(vi.name, vi.name)
        if t != vi.name and vi.name not in imp.env:  # name the output as ONNX does (an identity reshape)
            t = imp.emit("Reshape", [t], {"shape": [d if isinstance(d, int) else str(d) for d in imp.shape(t)]},
                         name=f"{vi.name}/output", out=vi.name)
        outputs.append({"tensor": t})
    return {"signature": {"inputs": imp.inputs, "outputs": outputs}, "tensors": imp.tensors, "graph": imp.nodes,
            "parameters": imp.params, "onnx_outputs": [vi.name for vi in g.output], "narrowed_inputs": narrowed,
            "input_defaults": defaults}


def _initializer(init, numpy_helper) -> np.ndarray:
    """An initializer's array; E1011 for an element type onnx cannot read, E1109 when its data disagrees with
    its dims, E1505 past POLYSAT_EVAL_MAX_ELEMENTS."""
    from ..knobs import eval_max_elements
    n = int(np.prod([int(d) for d in init.dims], dtype=object)) if init.dims else 1
    if n > eval_max_elements():
        fail("ResourceLimit", init.name, f"initializer {init.name!r} has dims {list(init.dims)}: {n} elements, over "
             f"POLYSAT_EVAL_MAX_ELEMENTS = {eval_max_elements()}")
    if not onnx_numeric(init.data_type):
        fail("UnsupportedDtype", init.name, f"initializer {init.name!r} has ONNX type {onnx_dtype_name(init.data_type)}, "
             "which polysat does not read")
    try:
        arr = numpy_helper.to_array(init)
    except Exception as e:  # noqa: BLE001 — an initializer onnx cannot read is the model's error
        fail("MalformedStructure", init.name, f"initializer {init.name!r} cannot be read: {type(e).__name__}: "
             f"{str(e)[:200]}", "Each initializer's data must hold exactly the elements its dims and type name.")
    if arr.size != n:
        fail("MalformedStructure", init.name, f"initializer {init.name!r} holds {arr.size} elements, its dims "
             f"{list(init.dims)} name {n}")
    return arr


def _upgrade(model, origin: str):
    """An older-opset model converted to opset 13 by onnx's version converter (its semantics kept). The converter
    copies the whole model through C++ twice; large initializers (weights no adapter reads) travel without their
    bytes, which are put back by name (VGG-19's 574 MB took 41 of its 63 s of import)."""
    from onnx import ModelProto, version_converter
    light = ModelProto()
    light.CopyFrom(model)
    held = {}
    for t in light.graph.initializer:
        if len(t.raw_data) > _KEEP_BYTES:
            held[t.name] = t.raw_data
            t.raw_data = b""
    try:
        out = version_converter.convert_version(light, MIN_OPSET)
    except Exception as e:  # noqa: BLE001 — a model the converter cannot lift is refused with its reason
        fail("UnsupportedOp", origin, f"the model imports ONNX opset {_default_opset(model)} and onnx's version "
             f"converter cannot lift it to {MIN_OPSET}: {type(e).__name__}: {str(e)[:200]}",
             "Re-export the model at opset 13 or later.")
    for t in out.graph.initializer:
        if t.name in held and not t.raw_data:
            t.raw_data = held[t.name]
    return out


_KEEP_BYTES = 1 << 16  # initializers up to this size go through the converter whole (shapes, axes, scales)


def translate_node(imp: Importer, proto, k: int) -> None:
    from onnx import helper
    name = proto.name or f"{proto.op_type}_{k}"
    node = OnnxNode(proto.op_type, name, list(proto.input), list(proto.output),
                    {a.name: helper.get_attribute_value(a) for a in proto.attribute}, proto, imp.opset)
    given = [x for x in node.inputs if x]
    if node.op == "If":
        _inline_if(imp, node, k)
        return
    if node.op not in NO_FOLD and all(imp.is_const(x) for x in given) and (given or node.op == "Constant"):
        _fold(imp, node)
        return
    if node.op in ("Shape", "Size") and given and (given[0] in imp.env or given[0] in imp.alias):
        _fold_shape(imp, node)  # the shape of a computed tensor: a constant when static
        return
    if node.op in FOLD_ONLY:
        node.unsupported("it is taken only where it folds at import (all inputs constant, or the shape of a "
                         "statically shaped tensor); here an input is computed at run time")
    if node.op not in HANDLERS:
        fail("UnsupportedOp", name, f"ONNX op {node.op} (node {name!r}) has no polysat lowering",
             "Supported ONNX ops: " + ", ".join(sorted(HANDLERS)) + ".")
    before = len(imp.nodes)
    outs = HANDLERS[node.op](imp, node)
    extra = sorted(set(node.attrs) - node.read)
    if extra:
        node.unsupported(f"attribute {extra[0]} = {node.attrs[extra[0]]!r} is not supported by polysat's {node.op}",
                         extra[0])
    if len(outs) == 1 and node.outputs[0] and len(imp.nodes) > before and imp.nodes[-1]["outputs"] == [outs[0]] \
            and outs[0] not in imp.alias.values():
        imp.nodes[-1]["outputs"] = [node.outputs[0]]  # the node's last emitted tensor takes the ONNX name
        imp.env[node.outputs[0]] = imp.env.pop(outs[0])
        return
    for o, t in zip(node.outputs, outs):
        if o:
            if t in imp.consts and t not in imp.env:
                imp.consts[o] = imp.consts[t]
            else:
                imp.bind(o, t)


def _inline_if(imp: Importer, node: OnnxNode, k: int) -> None:
    """If whose condition folds at import (an exporter's shape check: VitDet's relative positions): the branch it
    takes, its nodes translated in place (they read the outer graph's values by name) and its outputs the If's."""
    from onnx import numpy_helper
    cond = imp.const(node.inputs[0]) if node.inputs and node.inputs[0] else None
    if cond is None or np.size(cond) != 1:
        node.unsupported("If on a condition computed at run time (polysat takes If where its condition folds at "
                         "import)")
    branch = node.attr("then_branch") if bool(np.asarray(cond).reshape(-1)[0]) else node.attr("else_branch")
    for init in branch.initializer:
        imp.consts[init.name] = numpy_helper.to_array(init)
    for j, proto in enumerate(branch.node):
        translate_node(imp, proto, 1000 * (k + 1) + j)
    for o, b in zip(node.outputs, branch.output):
        if o:
            if b.name in imp.consts:
                imp.consts[o] = imp.consts[b.name]
            else:
                imp.bind(o, imp.value(b.name, node.name))


def _gather_elements(data: np.ndarray, index: np.ndarray, axis: int = 0) -> np.ndarray:
    """ONNX GatherElements: out[p] = data[p with p[axis] replaced by index[p]] (negative indices count from the
    end; index may be smaller than data along the other axes)."""
    axis = axis % data.ndim
    index = np.where(index < 0, index + data.shape[axis], index)
    if index.size and (index.min() < 0 or index.max() >= data.shape[axis]):
        raise IndexError(f"index values outside [-{data.shape[axis]}, {data.shape[axis] - 1}] along axis {axis}")
    grid = list(np.indices(index.shape, sparse=True))
    grid[axis] = index
    return data[tuple(grid)]


def _gather(node: OnnxNode, x: np.ndarray, i: np.ndarray) -> np.ndarray:
    """ONNX Gather as onnx.reference computes it: ``np.take`` along the axis (negative indices count from the end,
    others out of range raise), indices numpy cannot take as they are taken as ints."""
    axis = int(node.attr("axis", 0))
    try:
        return np.take(x, i, axis=axis)
    except TypeError:
        return np.take(x, np.asarray(i).astype(int), axis=axis)


def _concat(node: OnnxNode, *xs: np.ndarray) -> np.ndarray:
    """ONNX Concat as onnx.reference computes it (``np.concatenate``), with its checks: no rank-0 input, the axis
    inside every input's rank."""
    axis = int(node.attr("axis"))
    for x in xs:
        if np.ndim(x) == 0:
            raise ValueError("Concat: one input has an empty shape")
        if not -np.ndim(x) <= axis < np.ndim(x):
            raise ValueError(f"Concat: axis {axis} is out of range for input rank {np.ndim(x)}")
    return np.concatenate(xs, axis)


# ops folded by numpy here, not by onnx.reference: those whose reference implementation is wrong on some inputs
# (onnx 1.23's GatherElements falls back, for more than 32 choices, to a loop that keeps one element per row), and
# those the reference computes by one numpy call, made here as it makes it (Gather: np.take, negative indices
# counting from the end; Concat), so a model whose constants need no other op never builds onnx's evaluator: its
# first construction in a process (its op registry and schemas) costs more than the rest of an import
_NUMPY_FOLDS = {"GatherElements": lambda node, x, i: _gather_elements(x, i, int(node.attr("axis", 0))),
                "Gather": _gather,
                "Concat": _concat}


def _fold(imp: Importer, node: OnnxNode) -> None:
    """Evaluate a node of constants with onnx's reference evaluator (exact ONNX semantics), or numpy where that
    evaluator is wrong or is one numpy call (``_NUMPY_FOLDS``)."""
    from ..knobs import eval_max_elements
    feeds = {x: imp.consts[x] for x in node.inputs if x}
    size, limit = _folded_size(node, feeds), eval_max_elements()
    if node.op == "ConstantOfShape" and size is not None:  # one value broadcast: no memory, so no limit
        from onnx import numpy_helper
        value = node.attr("value", None)
        v = numpy_helper.to_array(value).reshape(-1)[:1] if value is not None else np.zeros(1, np.float32)
        imp.consts[node.outputs[0]] = np.broadcast_to(v.reshape(()), tuple(int(d) for d in np.asarray(
            feeds[node.inputs[0]]).reshape(-1)))
        return
    if size is not None and size > limit:
        fail("ResourceLimit", node.name, f"ONNX {node.op} on constants would fold to {size} elements at import, over "
             f"POLYSAT_EVAL_MAX_ELEMENTS = {limit}", "Make the tensor a graph input, or raise POLYSAT_EVAL_MAX_ELEMENTS.")
    try:  # IEEE results (log(0) = -inf, a cast of inf) are ONNX's meaning: numpy's warnings about them are noise
        with np.errstate(all="ignore"):
            if node.op in _NUMPY_FOLDS:
                outs = [_NUMPY_FOLDS[node.op](node, *[imp.consts[x] for x in node.inputs if x])]
            else:
                from onnx.reference import ReferenceEvaluator
                outs = ReferenceEvaluator(node.proto).run(None, feeds)
    except PolysatError:
        raise
    except Exception as e:  # noqa: BLE001 — a constant the reference evaluator rejects is the model's error
        fail("InvalidAttribute", node.name, f"ONNX {node.op} on constants cannot be evaluated: {type(e).__name__}: {e}")
    for o, v in zip(node.outputs, outs):
        if o:
            if np.size(v) > limit:
                fail("ResourceLimit", node.name, f"ONNX {node.op} on constants folded to {np.size(v)} elements at "
                     f"import, over POLYSAT_EVAL_MAX_ELEMENTS = {limit}")
            imp.consts[o] = np.asarray(v)


def _folded_size(node: OnnxNode, feeds: dict) -> "int | None":
    """Elements a fold of node would make, where its inputs say so before it runs (the ops that make a large
    tensor from small constants); None when unknown."""
    def vals(k):
        x = feeds.get(node.inputs[k]) if len(node.inputs) > k and node.inputs[k] else None
        return None if x is None else [int(v) for v in np.asarray(x).reshape(-1)]
    try:
        if node.op == "ConstantOfShape":
            return int(np.prod(vals(0) or [1], dtype=object))
        if node.op == "Expand":
            x, shape = feeds[node.inputs[0]], vals(1)
            r = max(np.ndim(x), len(shape))
            a = [1] * (r - np.ndim(x)) + list(np.shape(x))
            b = [1] * (r - len(shape)) + shape
            return int(np.prod([max(u, v) for u, v in zip(a, b)], dtype=object))
        if node.op == "Tile":
            return int(np.size(feeds[node.inputs[0]]) * np.prod(vals(1), dtype=object))
        if node.op == "Range":
            start, limit, delta = (float(np.asarray(feeds[x]).reshape(-1)[0]) for x in node.inputs[:3])
            return max(0, int(np.ceil((limit - start) / delta))) if delta else None
    except (KeyError, TypeError, ValueError, OverflowError, IndexError):
        return None
    return None


def _fold_shape(imp: Importer, node: OnnxNode) -> None:
    t = imp.value(node.inputs[0], node.name)
    shape = imp.shape(t)
    if not is_static(shape):
        syms = sorted({str(d) for d in shape if not isinstance(d, int)})
        fail("UnsupportedOp", node.name, f"ONNX {node.op} node {node.name!r}: the input's shape "
             f"{[str(d) for d in shape]} {SYMBOLIC_SHAPE}",
             f"Give the sizes: --bind {','.join(f'{x}=<size>' for x in syms)} imports the model at them (or export it "
             "with static shapes).")
    if node.op == "Size":
        imp.consts[node.outputs[0]] = np.asarray(int(np.prod(shape)), dtype=np.int64)
        return
    r = len(shape)
    start, end = node.attr("start", 0), node.attr("end", r)
    imp.consts[node.outputs[0]] = np.asarray(shape, dtype=np.int64)[slice(start, end)]


SYMBOLIC_SHAPE = "is symbolic; polysat folds shape computations only on static sizes"


def load_onnx(path: str, sizes: dict | None = None) -> dict:
    """An .onnx file -> Frontend IR document (see :func:`import_onnx`); unreadable files are diagnostics."""
    if not os.path.isfile(path):
        fail("FileNotFound", path, f"no such file: {path}")
    try:
        import onnx
    except ImportError:
        fail("UnsupportedOp", path, "reading .onnx files needs the onnx package", "pip install onnx")
    try:
        model = onnx.load(path)
    except Exception as e:  # noqa: BLE001 — any unreadable file is the user's input problem
        fail("MalformedStructure", path, f"not a readable ONNX model: {type(e).__name__}: {e}")
    return import_onnx(model, path, sizes=sizes)
