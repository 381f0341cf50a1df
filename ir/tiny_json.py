"""Tiny IR as JSON (``{"uops": [...], "outputs": {...}}``): dump and load, round-tripping exactly.

Numbers in ``src`` (``"src": ["n10", 1.442695]``) become CONST nodes shaped and
typed like their sibling operand, so validated Tiny IR is always same-shape and explicitly typed.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from .diagnostics import fail
from .dtypes import DType
from .expr import Expr
from .builder import Builder
from .infer import check_bound_symbols
from .toposort import stable_topo
from .tiny import GroupOp, Ops, Program, UOp


def jsonable(v: Any) -> Any:
    if isinstance(v, DType):
        return v.value
    if isinstance(v, Expr):
        return v.constant if v.is_const else str(v)
    if isinstance(v, (tuple, list)):
        return [jsonable(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)  # "inf", "-inf", "nan"
    if isinstance(v, Mapping):  # dict or Arg
        return {k: jsonable(x) for k, x in v.items()}
    return v


def dump_node(n: UOp) -> dict:
    d = {"id": n.id, "uop": n.op.value, "src": list(n.src), "arg": jsonable(dict(n.arg)),
         "dtype": n.dtype.value, "shape": jsonable(n.shape)}
    if n.tag is not None:
        d["tag"] = n.tag
    return d


def dump_tiny(p: Program) -> dict:
    return {"uops": [dump_node(n) for n in p.nodes], "outputs": {name: nid for name, nid in p.outputs}}


def _op_of(at: str, name: Any) -> Ops:
    if isinstance(name, str):
        key = name.split(".")[-1].upper()
        if key in Ops.__members__:
            return Ops[key]
    fail("UnknownOp", at, f"unknown uop {name!r}", "Use a Tiny IR uop: " + ", ".join(o.value for o in Ops))


def load_tiny(doc: Any, origin: str = "model") -> Program:
    """Validate and type a Tiny IR document; every problem is a coded diagnostic."""
    if not isinstance(doc, dict) or not isinstance(doc.get("uops"), list):
        fail("MalformedStructure", origin, "a Tiny IR model is an object with a list \"uops\"")
    raw: dict[str, dict] = {}
    for k, r in enumerate(doc["uops"]):
        if not isinstance(r, dict):
            fail("MalformedStructure", f"{origin}: uops[{k}]", "each uop is an object {id, uop, src, arg, tag}")
        nid = r.get("id")
        if not isinstance(nid, str) or not nid:
            fail("MalformedStructure", f"{origin}: uops[{k}]", "a uop needs a string \"id\"")
        if nid in raw:
            fail("DuplicateDefinition", nid, f"node id {nid!r} is defined twice")
        src = r.get("src", [])
        if not isinstance(src, list) or not all(isinstance(s, (str, int, float)) and not isinstance(s, bool) for s in src):
            fail("MalformedStructure", nid, "src is a list of node ids or numbers")
        arg = r.get("arg", {}) or {}
        if not isinstance(arg, dict):
            fail("MalformedStructure", nid, "arg is an object")
        raw[nid] = r
    for nid, r in raw.items():
        for s in r.get("src", []):
            if isinstance(s, str) and s not in raw:
                fail("DanglingSrc", nid, f"src {s!r} names no node")
    order = stable_topo({nid: [x for x in r.get("src", []) if isinstance(x, str)] for nid, r in raw.items()}, "uops")
    b = Builder(prefix="t")
    b.reserve(raw)
    built: dict[str, UOp] = {}
    inputs_seen: dict[str, UOp] = {}
    for nid in order:
        r = raw[nid]
        op = _op_of(nid, r.get("uop"))
        src_nodes = [built[s] if isinstance(s, str) else s for s in r.get("src", [])]
        if any(not isinstance(s, UOp) for s in src_nodes):
            like = next((s for s in src_nodes if isinstance(s, UOp)), None)
            if like is None:
                fail("MalformedStructure", nid, "an op needs at least one node operand besides immediates")
            src_nodes = [s if isinstance(s, UOp) else b.const_like(s, like, at=nid) for s in src_nodes]
        if op in GroupOp.Binary | GroupOp.Ternary and len(src_nodes) > 1:
            src_nodes = b.broadcast(src_nodes, at=nid)
        n = b.add(op, src_nodes, r.get("arg", {}) or {}, at=nid, nid=nid, tag=r.get("tag"))
        if op == Ops.INPUT:
            tid = n.arg["tensor_id"]
            prev = inputs_seen.get(tid)
            if prev is not None and (prev.dtype, prev.shape) != (n.dtype, n.shape):
                fail("DuplicateDefinition", nid, f"tensor {tid!r} is input twice with different types")
            inputs_seen[tid] = n
        _check_declared(n, r)
        built[nid] = n
    nodes = b.nodes
    outs = doc.get("outputs")
    if outs is None:
        used = {s for n in nodes for s in n.src}
        outputs = tuple((n.id, n.id) for n in nodes if n.id not in used and n.op not in GroupOp.Leaf)
    elif isinstance(outs, dict):
        outputs = tuple(outs.items())
    elif isinstance(outs, list):
        outputs = tuple((o, o) for o in outs)
    else:
        fail("MalformedStructure", origin, "outputs is {tensor: node id} or a list of node ids")
    for name, nid in outputs:
        if not isinstance(nid, str) or nid not in built:
            fail("OutputNeverProduced", str(name), f"output {name!r} names no node ({nid!r})")
    if not outputs:
        fail("OutputNeverProduced", origin, "the program has no output")
    prog = Program(tuple(nodes), tuple(outputs))
    check_bound_symbols(prog)
    return prog


def _check_declared(n: UOp, r: dict) -> None:
    from .dtypes import parse_dtype
    from .shapes import fmt_shape, shape_of
    if "dtype" in r and parse_dtype(r["dtype"]) != n.dtype:
        fail("DtypeMismatch", n.id, f"declared dtype {r['dtype']!r} but {n.op.value} gives {n.dtype.value}")
    if "shape" in r:
        try:
            decl = shape_of(r["shape"])
        except (ValueError, TypeError) as e:
            fail("InvalidAttribute", n.id, f"shape: {e}")
        if decl != n.shape:
            fail("AxisSizeMismatch", n.id, f"declared shape {fmt_shape(decl)} but {n.op.value} gives {fmt_shape(n.shape)}")

