"""Frontend IR (docs/DESIGN.md §Frontend IR): a graph signature, a tensor table and a DAG of high-level ops.

``parse_frontend`` checks the document's structure and returns frozen dataclasses; every problem is
a coded diagnostic naming the user's node or tensor. Shapes and dtypes of intermediates may be left
out of ``tensors``: lowering infers them.
"""
from __future__ import annotations

from typing import Any

from ..ir import trampoline
from ..ir.diagnostics import fail
from ..ir.dtypes import parse_dtype
from ..ir.shapes import shape_of
from ..ir.tiny import Arg
from ..ir.toposort import stable_topo
from .graph import FrontendGraph, Node, SignatureEntry, TensorSpec
from .lower import op_table, unknown_attrs


NODE_FIELDS = ("op", "name", "inputs", "outputs", "attrs", "fn")


def check_name(name: str, at: str, what: str) -> None:
    """A name is printable text: it ends up in diagnostics, dumps, kernels' comments and rule files."""
    bad = [c for c in name if not c.isprintable()]
    if bad or not name:
        fail("MalformedStructure", at, f"{what} {name!r} is empty or holds a control character "
             f"({', '.join(repr(c) for c in dict.fromkeys(bad)) or 'empty'})",
             "Names are non-empty printable text: no newlines, tabs or NUL bytes.")


def check_fields(r: dict, name: str) -> None:
    """Every field of a graph node and every attribute is one the op takes (never silently ignored)."""
    extra = [k for k in r if k not in NODE_FIELDS]
    if extra:
        fail("MalformedStructure", name, f"unknown node field {', '.join(map(repr, extra))}; a node has "
             f"{', '.join(NODE_FIELDS)}", "Put the op's parameters under \"attrs\".")
    attrs = {**(r.get("attrs") or {}), **({"fn": r["fn"]} if "fn" in r else {})}
    unknown = unknown_attrs(r["op"], attrs)
    if unknown:
        known = op_table()[r["op"]][2] or {}
        fn = attrs.get("fn")
        takes = [k for k, a in known.items() if not a.fns or fn in a.fns]
        what = f"{r['op']} {fn}" if r["op"] == "Elementwise" and isinstance(fn, str) else r["op"]
        fail("InvalidAttribute", name, f"{what} has no attribute {', '.join(map(repr, unknown))}; it takes "
             f"{', '.join(takes) or 'none'}", "Remove the attribute or correct its spelling (docs/frontend_ir.md).")


def _freeze(v: Any) -> Any:
    """Lists as tuples, dicts as Args, at any depth (a generator walk: an attribute nested as deep as the JSON
    reader allows costs no frames)."""
    return trampoline.run(_frozen(v)) if isinstance(v, (list, dict)) else v


def _frozen(v: Any):
    items = list(v.items()) if isinstance(v, dict) else list(enumerate(v))
    out = []
    for k, x in items:
        out.append((k, (yield _frozen(x)) if isinstance(x, (list, dict)) else x))
    return Arg(dict(out)) if isinstance(v, dict) else tuple(x for _, x in out)


def _sig_entries(raw: Any, where: str) -> tuple:
    if not isinstance(raw, list):
        fail("MalformedStructure", f"signature.{where}", f"signature.{where} is a list of {{\"tensor\": NAME}}")
    out = []
    for k, e in enumerate(raw):
        if isinstance(e, str):
            e = {"tensor": e}
        if not isinstance(e, dict) or not isinstance(e.get("tensor"), str) or not e["tensor"]:
            fail("MalformedStructure", f"signature.{where}[{k}]", "an entry is {\"tensor\": NAME, ...}")
        check_name(e["tensor"], f"signature.{where}[{k}]", "tensor name")
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
        check_name(name, "tensors", "tensor name")
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
        check_name(name, at, "node name")
        if not isinstance(r.get("op"), str):
            fail("MalformedStructure", name, "a node needs a string \"op\"")
        ins, outs = r.get("inputs", []), r.get("outputs", [])
        if not isinstance(ins, list) or not all(isinstance(x, str) for x in ins) \
                or not isinstance(outs, list) or not all(isinstance(x, str) for x in outs):
            fail("MalformedStructure", name, "inputs and outputs are lists of tensor names")
        for t in ins + outs:
            check_name(t, name, "tensor name")
        attrs = r.get("attrs", {}) or {}
        if not isinstance(attrs, dict):
            fail("MalformedStructure", name, "attrs is an object")
        check_fields(r, name)
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
