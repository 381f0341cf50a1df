"""Frontend IR (docs/DESIGN.md §Frontend IR): a graph signature, a tensor table and a DAG of high-level ops.

``parse_frontend`` checks the document's structure and returns frozen dataclasses; every problem is
a coded diagnostic naming the user's node or tensor. Shapes and dtypes of intermediates may be left
out of ``tensors``: lowering infers them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..ir.diagnostics import fail
from ..ir.dtypes import DType, parse_dtype
from ..ir.shapes import Shape, shape_of
from ..ir.tiny import Arg
from ..ir.toposort import stable_topo


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: DType | None
    shape: Shape | None


@dataclass(frozen=True)
class SignatureEntry:
    tensor: str
    role: str = "data"
    mutability: str = "immutable"
    storage: str | None = None


@dataclass(frozen=True)
class Node:
    op: str
    name: str
    inputs: tuple
    outputs: tuple
    attrs: Arg


@dataclass(frozen=True)
class FrontendGraph:
    inputs: tuple  # SignatureEntry
    outputs: tuple  # SignatureEntry
    tensors: tuple  # TensorSpec
    nodes: tuple  # Node, topological order

    def spec(self, name: str) -> TensorSpec | None:
        for t in self.tensors:
            if t.name == name:
                return t
        return None

    def to_json(self) -> dict:
        from ..ir.tiny_json import jsonable
        return {
            "signature": {"inputs": [_sig_json(e) for e in self.inputs], "outputs": [_sig_json(e) for e in self.outputs]},
            "tensors": {t.name: {k: v for k, v in (("dtype", t.dtype.value if t.dtype else None),
                                                   ("shape", jsonable(t.shape) if t.shape is not None else None)) if v is not None}
                        for t in self.tensors},
            "graph": [{"op": n.op, "name": n.name, "inputs": list(n.inputs), "outputs": list(n.outputs),
                       "attrs": jsonable(dict(n.attrs))} for n in self.nodes],
        }


def _sig_json(e: SignatureEntry) -> dict:
    d = {"tensor": e.tensor, "role": e.role, "mutability": e.mutability}
    if e.storage:
        d["storage"] = e.storage
    return d


def _freeze(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, dict):
        return Arg({k: _freeze(x) for k, x in v.items()})
    return v


def _sig_entries(raw: Any, where: str) -> tuple:
    if not isinstance(raw, list):
        fail("MalformedStructure", f"signature.{where}", f"signature.{where} is a list of {{\"tensor\": NAME}}")
    out = []
    for k, e in enumerate(raw):
        if isinstance(e, str):
            e = {"tensor": e}
        if not isinstance(e, dict) or not isinstance(e.get("tensor"), str) or not e["tensor"]:
            fail("MalformedStructure", f"signature.{where}[{k}]", "an entry is {\"tensor\": NAME, ...}")
        out.append(SignatureEntry(e["tensor"], str(e.get("role", "data")), str(e.get("mutability", "immutable")),
                                  e.get("storage")))
    return tuple(out)


def parse_frontend(doc: Any, origin: str = "model") -> FrontendGraph:
    if not isinstance(doc, dict) or not all(k in doc for k in ("signature", "graph")):
        fail("MalformedStructure", origin, "a Frontend IR model is an object with \"signature\", \"tensors\" and \"graph\"")
    sig = doc["signature"]
    if not isinstance(sig, dict):
        fail("MalformedStructure", "signature", "signature is {\"inputs\": [...], \"outputs\": [...]}")
    inputs = _sig_entries(sig.get("inputs", []), "inputs")
    outputs = _sig_entries(sig.get("outputs", []), "outputs")
    if not outputs:
        fail("OutputNeverProduced", "signature.outputs", "the signature lists no output")
    raw_t = doc.get("tensors", {}) or {}
    if not isinstance(raw_t, dict):
        fail("MalformedStructure", "tensors", "tensors is an object {NAME: {\"dtype\", \"shape\"}}")
    tensors = []
    for name, t in raw_t.items():
        if not isinstance(t, dict):
            fail("MalformedStructure", name, "a tensor entry is {\"dtype\": ..., \"shape\": [...]}")
        dt = None
        if "dtype" in t:
            dt = parse_dtype(t["dtype"])
            if dt is None:
                fail("UnknownDtype", name, f"unknown dtype {t['dtype']!r}")
        shape = None
        if "shape" in t:
            if not isinstance(t["shape"], list):
                fail("MalformedStructure", name, "shape is a list of ints and symbol names")
            try:
                shape = shape_of(t["shape"])
            except (ValueError, TypeError) as e:
                fail("InvalidAttribute", name, f"shape: {e}")
            for d in shape:
                if isinstance(d, int) and d <= 0:
                    fail("UnaddressableShape", name, f"shape {t['shape']} has a non-positive size")
        tensors.append(TensorSpec(name, dt, shape))
    graph = doc["graph"]
    if not isinstance(graph, list):
        fail("MalformedStructure", "graph", "graph is a list of op nodes")
    nodes: dict[str, Node] = {}
    producer: dict[str, str] = {}
    in_names = {e.tensor for e in inputs}
    for k, r in enumerate(graph):
        at = f"graph[{k}]"
        if not isinstance(r, dict):
            fail("MalformedStructure", at, "a graph node is {\"op\", \"name\", \"inputs\", \"outputs\", \"attrs\"}")
        name = r.get("name", f"{r.get('op', 'node')}_{k}")
        if not isinstance(name, str):
            fail("MalformedStructure", at, "a node's name is a string")
        if not isinstance(r.get("op"), str):
            fail("MalformedStructure", name, "a node needs a string \"op\"")
        ins, outs = r.get("inputs", []), r.get("outputs", [])
        if not isinstance(ins, list) or not all(isinstance(x, str) for x in ins) \
                or not isinstance(outs, list) or not all(isinstance(x, str) for x in outs):
            fail("MalformedStructure", name, "inputs and outputs are lists of tensor names")
        attrs = r.get("attrs", {}) or {}
        if not isinstance(attrs, dict):
            fail("MalformedStructure", name, "attrs is an object")
        if "fn" in r:
            attrs = {**attrs, "fn": r["fn"]}
        if name in nodes:
            fail("DuplicateDefinition", name, f"node name {name!r} is used twice")
        for o in outs:
            if o in producer or o in in_names:
                fail("DuplicateDefinition", name, f"tensor {o!r} is produced twice (also by "
                     f"{producer.get(o, 'the signature inputs')})")
            producer[o] = name
        nodes[name] = Node(r["op"], name, tuple(ins), tuple(outs), _freeze(attrs))
    for n in nodes.values():
        for t in n.inputs:
            if t not in producer and t not in in_names:
                fail("UnknownTensor", n.name, f"input tensor {t!r} is neither a signature input nor produced by a node")
    deps = {n.name: [producer[t] for t in n.inputs if t in producer] for n in nodes.values()}
    order = stable_topo(deps, "graph nodes")
    for e in outputs:
        if e.tensor not in producer and e.tensor not in in_names:
            fail("OutputNeverProduced", e.tensor, f"signature output {e.tensor!r} is produced by no node")
    return FrontendGraph(inputs, outputs, tuple(tensors), tuple(nodes[n] for n in order))
