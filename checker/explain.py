"""Counterexamples as text, and the consistency check of an e-graph before a rule runs.

A counterexample shows the test program (the terms loaded, each class spelled through the term its
value came from), the class the rule rewrote with its term before and the rule's new e-node after,
the inputs when they are small, and the two values at the first element that differs.
"""
from __future__ import annotations

import numpy as np

from ..egraph.graph import ENode, EGraphView
from ..egraph.printer import format_terms
from .diff import StepResult, compare
from .tolerance import agree
from .values import Unevaluable, Valuer


def consistent(v0: EGraphView, val0: Valuer) -> bool:
    """Every e-node of v0 evaluates to its class's value (the e-graph before the checked rule ran)."""
    for c, ns in v0.classes.items():
        if c not in val0.vals:
            continue
        for n in ns:
            if n is val0.via.get(c) or not all(ch in val0.vals for ch in n.children):
                continue
            try:
                if compare(val0.vals[c], val0.node(n)):
                    return False
            except Unevaluable:
                return False
    return True


def _arr(a: np.ndarray) -> str:
    return np.array2string(np.asarray(a).astype(np.float64) if a.dtype != np.bool_ else a, precision=6,
                           separator=", ", threshold=24)


def _spell(chosen: dict, root: int, override: "dict | None" = None) -> str:
    pick = dict(chosen)
    pick.update(override or {})
    try:
        text = format_terms(pick, [root])
    except (KeyError, RecursionError):
        return "(a term with a class that has no finite term)"
    return text.replace("out0 = ", "")


def counterexample(res: StepResult, v0: EGraphView, val0: Valuer, inputs: dict, roots: int, source: str) -> str:
    f = res.findings[0]
    lines = [f"  counterexample ({source}):"]
    chosen0 = dict(val0.via)
    for k in range(roots):
        c = v0.by_index.get(k)
        if c is not None and c in chosen0:
            lines.append(f"    out{k} = " + _spell(chosen0, c).replace("\n", "\n      "))
    small = {k: a for k, a in inputs.items() if np.asarray(a).size <= 24}
    for k, a in small.items():
        lines.append(f"    input {k} ({a.dtype}, shape {list(a.shape)}) = {_arr(a)}")
    if len(small) < len(inputs):
        lines.append(f"    ({len(inputs) - len(small)} larger input(s) not shown)")
    chosen1 = dict(res.val1.via) if res.val1 is not None else {}
    if f.kind == "conflict" or f.node is None:
        lines.append(f"  the rule {f.why}")
        return "\n".join(lines)
    before = _spell(chosen1, f.cls) if f.cls in chosen1 else "(a class the rule created)"
    after = _spell(chosen1, -1, {-1: ENode(f.node.op, f.node.args, f.node.children, -1, 0)})
    if f.kind == "merge":
        lines.append("  the rule equated two terms of different values:")
    else:
        lines.append("  the rule rewrote:" if f.kind == "mismatch" else f"  the rule made a term the checker cannot "
                     f"evaluate ({f.why}):")
    one, two = ("one:  ", "other:") if f.kind == "merge" else ("before:", "after: ")
    lines.append(f"    {one} {before}")
    lines.append(f"    {two} {after}")
    if f.want is not None and f.got is not None:
        if f.first is not None and f.want.v.shape == f.got.v.shape:
            i = f.first
            a, b = np.asarray(f.want.v)[i] if i else f.want.v, np.asarray(f.got.v)[i] if i else f.got.v
            lines.append(f"    at index {list(i)}: value before {float(a)!r}, after {float(b)!r}: {f.why}")
            bad = np.argwhere(~agree(f.want, f.got) & (f.want.mask if f.want.mask is not None else True))
            w, g = f.want.v.astype(np.float64), f.got.v.astype(np.float64)
            lines.append(f"    {len(bad)} of {int(np.size(w))} element(s) differ: " + ", ".join(
                f"{list(int(k) for k in at)}: {float(w[tuple(at)])!r} -> {float(g[tuple(at)])!r}" for at in bad[:4])
                + (" ..." if len(bad) > 4 else ""))
            with np.errstate(all="ignore"):
                d = np.abs(w - g)
            fin = [float(d[tuple(at)]) for at in bad if np.isfinite(d[tuple(at)])]
            if fin:
                lines.append(f"    max abs difference among finite ones {max(fin):.6g}")
        else:
            lines.append(f"    {f.why}")
        if np.size(f.want.v) <= 24:
            lines.append(f"    value before: {_arr(f.want.v)}")
            lines.append(f"    value after:  {_arr(f.got.v)}")
    return "\n".join(lines)
