"""The user's names for compiler values: which model op (``ln1``, ``q_proj``) or tensor a node of a
(possibly rewritten) Tiny IR program comes from, so extract, --explain, dumps and pictures never show
internal ids (``n33``, ``e9``) alone.

The frontend tags every Tiny IR node with the op it was lowered from; extraction keeps the ids of the
nodes it reuses, and a node it makes fresh takes the name of the node that consumes it (the class's
final node keeps the original id) or, failing that, of what it reads.
"""
from __future__ import annotations

import re

from .tiny import Ops, Program


def node_names(original: Program, program: "Program | None" = None) -> dict:
    """{node id of program (default: original): the user's op or input tensor it computes}."""
    from .stream_tags import parse_tag  # the streaming spelling's role tags (egraph/stream.py) are no op names
    program = program or original
    orig = {n.id: n for n in original.nodes}
    out: dict = {}
    for n in program.nodes:
        if n.op == Ops.INPUT:
            out[n.id] = str(n.arg["tensor_id"])
        elif n.id in orig and orig[n.id].tag:
            out[n.id] = orig[n.id].tag
        elif n.tag and parse_tag(n.tag) is None:  # a streaming role is named after the op it computes for
            out[n.id] = n.tag
    out.update(_softmax_roles(original, program, out))
    return _inherit(program, out)


def _softmax_roles(original: Program, program: Program, named: dict) -> dict:
    """The softmax part of a streamed softmax-weighted sum (its max, exp and row sum) named after the
    user's op that read the scores in the original program with a name of its own (an ONNX Softmax
    between the score and the P V MatMuls), so the fused kernel lists it; {} where no such op exists."""
    from .stream_tags import SOFTMAX_ROLES, parse_tag
    groups: dict = {}
    for n in program.nodes:
        gr = parse_tag(n.tag)
        if gr is not None and gr[1] in SOFTMAX_ROLES:
            groups.setdefault(gr[0], []).append(n)
    if not groups:
        return {}
    orig = {n.id: n for n in original.nodes}
    readers = original.consumers()
    out: dict = {}
    for nodes in groups.values():
        mx = next((n for n in nodes if parse_tag(n.tag)[1] == "max"), None)
        s = mx.src[0] if mx is not None else None
        own = named.get(s) or (orig[s].tag if s in orig else None)
        tags = [orig[c].tag for c in readers.get(s, ()) if c in orig and orig[c].tag and orig[c].tag != own]
        if tags:
            out.update({n.id: tags[0] for n in nodes})
    return out


def _inherit(program: Program, out: dict) -> dict:
    """out completed for the nodes it lacks: each takes the entry of its consumer, else of what it reads."""
    consumers = program.consumers()
    for n in reversed(program.nodes):  # fresh nodes: named after their consumer ...
        if n.id not in out:
            named = [c for c in consumers.get(n.id, ()) if c in out]
            if named:
                out[n.id] = out[named[0]]
    for n in program.nodes:  # ... or after what they read
        if n.id not in out:
            named = [s for s in n.src if s in out]
            out[n.id] = out[named[0]] if named else n.id
    return out


def tensor_names(original: Program, program: "Program | None" = None, op_outputs: "dict | None" = None) -> dict:
    """{node id: the name of the tensor it holds}: a program output's or input's name, the output tensor
    of the user's op when the node is that op's last node, else ``op·id`` (an op's intermediate)."""
    program = program or original
    names = node_names(original, program)
    last: dict = {}
    for n in original.nodes:
        if n.tag:
            last[n.tag] = n.id
    out = {nid: name for name, nid in program.outputs}
    for n in program.nodes:
        if n.id in out:
            continue
        op = names[n.id]
        if n.op == Ops.INPUT:
            out[n.id] = op
        elif last.get(op) == n.id:
            out[n.id] = (op_outputs or {}).get(op, op)
        else:
            out[n.id] = f"{op}\u00b7{n.id}"
    return out


def frontend_outputs(frontend) -> dict:
    """{user's op name: its output tensor} of a Frontend IR graph (empty for a Tiny IR model)."""
    return {} if frontend is None else {n.name: n.outputs[0] for n in frontend.nodes if n.outputs}


class region_names:  # noqa: N801 — used like a function: region_names(original, program)(kernel)
    """The user's names of a kernel of program's partition: {"ops", "reads", "writes"}."""

    def __init__(self, original: Program, program: Program, op_outputs: "dict | None" = None):
        self.program = program
        self.ops = node_names(original, program)
        self.tensors = tensor_names(original, program, op_outputs)

    def __call__(self, kernel) -> dict:
        order = {n.id: k for k, n in enumerate(self.program.nodes)}
        nodes = sorted(kernel.nodes, key=lambda i: order.get(i, 0))
        work = [i for i in nodes if self.program[i].op not in _FREE] or nodes
        return {"ops": list(dict.fromkeys(self.ops.get(i, i) for i in work)),
                "reads": [self.tensors.get(i, i) for i in kernel.inputs],
                "writes": [self.tensors.get(i, i) for i in kernel.outputs]}


_FREE = {Ops.CONST, Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP, Ops.VIEW}


_ID = re.compile(r"\b[ne]\d+\b")


def humanize(text: str, names: dict) -> str:
    """text with every internal node id (n33, e9) that names knows replaced by the user's name, and
    repeated clauses (``; ``-separated) said once."""
    out = _ID.sub(lambda m: names.get(m.group(0), m.group(0)), text)
    return "; ".join(dict.fromkeys(out.split("; ")))


def original_ids(text: str, original: Program, program: Program) -> str:
    """text (a reason naming nodes of program, a rewrite of original) with the id of each node program made
    fresh replaced by the id of the original node whose op it belongs to (its consumer's, else what it reads),
    so the user's names (and a stitched search's renaming per block) reach it."""
    known = {n.id for n in original.nodes}
    anchor = _inherit(program, {n.id: n.id for n in program.nodes if n.id in known})
    return _ID.sub(lambda m: anchor.get(m.group(0), m.group(0)), text)


def named_diagnostics(diags: list, kernels: dict, names: dict) -> list:
    """Diagnostics with the user's names: an ``at`` of ``region k3`` (or ``k3``) becomes ``kernel k3
    (ops ln1, q_proj)``; internal ids in ``why`` become the user's names. kernels: kernel name -> its
    ops; names: node id -> the user's name."""
    from dataclasses import replace
    out = []
    for d in diags:
        k = d.at.removeprefix("region ")
        at = f"kernel {k} (ops {', '.join(kernels[k])})" if k in kernels else names.get(d.at, d.at)
        out.append(replace(d, at=at, why=humanize(d.why, names)))
    return out
