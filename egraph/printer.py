"""Extracted terms as text, RB-SSA style: ``Reduce(SUM, (2), fp32){Binary(MUL, Read(A, (i0, i2)), ..)}``.
A class used more than once is printed once as ``%k = ...`` and referred to as ``%k``."""
from __future__ import annotations

from ..ir.toposort import postorder


def _uses(chosen: dict, roots) -> dict:
    count: dict = {}
    stack = list(roots)
    seen: set = set()
    while stack:
        c = stack.pop()
        count[c] = count.get(c, 0) + 1
        if c in seen:
            continue
        seen.add(c)
        stack.extend(chosen[c].children)
    return count


def format_terms(chosen: dict, roots) -> str:
    uses = _uses(chosen, roots)
    shared = {c for c, k in uses.items() if k > 1 and chosen[c].op not in ("Tensor", "Const")}
    names: dict = {}
    lines: list = []
    text: dict = {}  # class -> its term's text, made in post-order (children first: no recursion along a chain)
    for c in postorder(roots, lambda k: chosen[k].children):
        text[c] = _fmt(chosen[c], [names.get(ch) or text[ch] for ch in chosen[c].children])
        if c in shared:
            names[c] = f"%{len(names)}"
            lines.append(f"{names[c]} = {text[c]}")
    for k, r in enumerate(roots):
        lines.append(f"out{k} = {names.get(r) or text[r]}")
    return "\n".join(lines)


def _fmt(n, kids: list) -> str:
    """One e-node's text, its children's texts (or names) given."""
    if n.op == "Tensor":
        return n.args[0]
    if n.op == "Read":
        return f"Read({kids[0]}, {n.args[1]})"
    if n.op == "Mat":
        return f"Mat({kids[0]})"
    if n.op == "Const":
        return f"{n.args[0]}:{n.args[1]}"
    if n.op == "Reduce":
        return f"Reduce({n.args[0]}, {n.args[1]}, init={n.args[2]}, {n.args[3]}){{{kids[0]}}}"
    if n.op in ("Unary", "Binary", "Cast"):
        return f"{n.args[0]}({', '.join(kids)})" if n.op != "Cast" else f"Cast({n.args[0]}, {kids[0]})"
    if n.op == "Select":
        return f"Select(in_bounds[{n.args[0]}], {kids[0]}, {kids[1]})"
    return f"{n.op}({', '.join(kids + list(n.args))})"
