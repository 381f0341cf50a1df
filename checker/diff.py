"""What one rule application changed in the e-graph, and whether each change keeps the values.

Two exports of the same e-graph, before (``v0``) and after (``v1``) one rule ran alone, are matched
structurally: a class of v0 maps to the class of v1 that holds its e-nodes (a union only merges
classes, so the map is a function). An e-node of v1 whose key (constructor, attributes, mapped
children) no v0 node has is new: the rule made it. Every new e-node is evaluated on its children's
values (``checker/values.py``) and compared with its class's value: the value the class had before
the rule ran, or for a class the rule created, the value of its first evaluable e-node. Classes of v0
that the rule merged are compared with each other. A new e-node that cannot be evaluated is a
finding too, never skipped. Two values agree under the policy of ``checker/tolerance.py``: rewrites
are refinements (where the value before is undetermined, an overflow or an invalid operation on
non-NaN values, the value after may be anything), NaN matches NaN, an infinity must match exactly,
and finite values differ by at most the rounding both terms perform.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..egraph.graph import ENode, EGraphView
from .bounds import Val
from .tolerance import agree, describe
from .values import Unevaluable, Valuer


@dataclass
class Finding:
    kind: str  # "mismatch" | "merge" | "unevaluable" (the rule's term) | "checker" (the checker cannot value it) | "conflict"
    cls: int  # the v1 class
    node: "ENode | None"  # the new e-node (or, for a merge, a term of the other merged class)
    want: "Val | None" = None
    got: "Val | None" = None
    why: str = ""
    first: "tuple | None" = None  # index of the first element that differs


def class_map(v0: EGraphView, v1: EGraphView) -> dict:
    """v0 class -> v1 class."""
    f = {c: v1.by_index[i] for i, c in v0.by_index.items() if i in v1.by_index}
    index = {(n.op, n.args, n.children): c for c, ns in v1.classes.items() for n in ns}
    pending = [(c, n) for c, ns in v0.classes.items() for n in ns]
    while pending:
        rest = []
        for c, n in pending:
            if c in f:
                continue
            if all(ch in f for ch in n.children):
                hit = index.get((n.op, n.args, tuple(f[ch] for ch in n.children)))
                if hit is not None:
                    f[c] = hit
                    continue
            rest.append((c, n))
        if len(rest) == len(pending):
            break
        pending = rest
    return f


def _moved(n: ENode, f: dict) -> ENode:
    return ENode(n.op, n.args, tuple(f[ch] for ch in n.children), f[n.eclass], n.order)


def compare(want: Val, got: Val) -> "tuple | None":
    """None when the values agree (``checker/tolerance.py``), else (why, first differing index)."""
    if want.v.shape != got.v.shape:
        return f"shape {list(want.v.shape)} became {list(got.v.shape)}", None
    if (want.mask is None) != (got.mask is None) or (want.mask is not None and not np.array_equal(want.mask, got.mask)):
        return "the two reads are defined on different elements", None
    ok = agree(want, got)
    if want.mask is not None:
        ok = ok | ~want.mask
    if ok.all():
        return None
    bad = tuple(int(k) for k in np.argwhere(~ok)[0]) if ok.ndim else ()
    return describe(want, got, bad), bad


@dataclass
class StepResult:
    findings: list
    compared: int  # e-nodes and merges compared
    new_nodes: int
    val1: "Valuer | None" = None  # values after the rule (its via-terms spell the rewritten terms)


def check_step(v0: EGraphView, val0: Valuer, v1: EGraphView, inputs: dict) -> StepResult:
    """Compare everything the rule changed between v0 (valued by val0) and v1."""
    f = class_map(v0, v1)
    missing = [c for c in v0.classes if c not in f]
    if missing:
        return StepResult([Finding("checker", -1, None, why=f"{len(missing)} class(es) of the e-graph before the "
                                   "rule could not be found after it")], 0, 0)
    pre: dict = {}
    for c in v0.classes:
        pre.setdefault(f[c], []).append(c)
    out, compared = [], 0
    seed, via = {}, {}
    for c1, cs in pre.items():
        have = [c for c in cs if c in val0.vals]
        if not have:
            continue
        seed[c1] = val0.vals[have[0]]
        if have[0] in val0.via:
            via[c1] = _moved(val0.via[have[0]], f)
        for other in have[1:]:
            compared += 1
            bad = compare(val0.vals[have[0]], val0.vals[other])
            if bad:
                out.append(Finding("merge", c1, _moved(val0.via[other], f) if other in val0.via else None,
                                   val0.vals[have[0]], val0.vals[other], bad[0], bad[1]))
    old = {(n.op, n.args, tuple(f[ch] for ch in n.children)) for ns in v0.classes.values() for n in ns}
    new = [n for ns in v1.classes.values() for n in ns if (n.op, n.args, n.children) not in old]
    val1 = Valuer(v1, inputs, seed)
    val1.via.update(via)
    val1.value_all(set(new))
    for n in new:
        c = n.eclass
        if n.op in ("Tensor", "Mat") and c not in seed:
            continue  # new memory: compared through the reads of it
        if not all(ch in val1.vals for ch in n.children):
            out.append(Finding("checker", c, n, why="a child class of the new e-node has no evaluable term"))
            continue
        try:
            got = val1.node(n)
        except Unevaluable as e:
            out.append(Finding("unevaluable", c, n, why=str(e)))
            continue
        if c not in val1.vals:
            out.append(Finding("checker", c, n, why="its class has no evaluable term"))
            continue
        if val1.via.get(c) == n:
            continue  # the class's value is this node's (a class the rule created)
        compared += 1
        bad = compare(val1.vals[c], got)
        if bad:
            out.append(Finding("mismatch", c, n, val1.vals[c], got, bad[0], bad[1]))
    return StepResult(out, compared, len(new), val1)
