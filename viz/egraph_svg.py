"""``--dump=egraph_svg``: the saturated e-graph as a picture. Each e-class is a cluster (a box holding
its e-nodes side by side, labelled with its shape), an e-node points at the classes of its children,
and the term extraction chose is drawn in orange: its e-nodes filled, their edges thick. Classes are
laid out in rows from the program's outputs down to the tensors they read; a class's tooltip names
the user's op it was loaded from. Very large e-graphs are cut to the classes nearest the outputs
(``knobs.viz_max_classes``, default 400), which the title says.
"""
from __future__ import annotations

from .. import knobs
from .svg import Svg, layers, text_width

CHOSEN, CHOSEN_EDGE, PLAIN = "#ffd8a8", "#e8590c", "#f1f3f5"


def _label(n) -> str:
    a = n.args
    if n.op == "Tensor":
        return f"Tensor {a[0]}"
    if n.op in ("Unary", "Binary", "Cast") and a:
        return f"{n.op} {a[0]}"
    if n.op == "Reduce" and a:
        return f"Reduce {a[0]} {a[1]}"
    if n.op == "Const" and a:
        return f"Const {a[0]}"
    if n.op == "Read" and len(a) > 1:
        return f"Read {a[1]}"
    return n.op


def _key(n) -> tuple:
    return n.eclass, n.op, n.args, n.children


def egraph_svg(view, chosen: dict, roots: tuple, class_names: "dict | None" = None, title: str = "") -> str:
    """view: egraph.graph.EGraphView; chosen: class -> chosen ENode; roots: the output classes;
    class_names: class -> the user's op (tooltips and cluster captions)."""
    limit = knobs.viz_max_classes()
    class_names = class_names or {}
    keep, frontier = [], list(dict.fromkeys(roots))
    seen = set(frontier)
    while frontier and len(keep) < limit:  # breadth first from the outputs
        c = frontier.pop(0)
        keep.append(c)
        for n in view.classes.get(c, []):
            for ch in n.children:
                if ch not in seen:
                    seen.add(ch)
                    frontier.append(ch)
    kept = set(keep)
    children = {c: [ch for n in view.classes.get(c, []) for ch in n.children if ch in kept] for c in keep}
    rows = layers(keep, children)
    chosen_nodes = {_key(n) for n in chosen.values()}
    svg = Svg()
    total = len(view.classes)
    head = title or "e-graph"
    svg.text(10, 18, f"{head}: {total} e-classes, {view.nodes} e-nodes"
             + (f" (the {len(keep)} classes nearest the outputs shown)" if len(keep) < total else ""), size=13, bold=True)
    svg.text(10, 34, "cluster = e-class (shape, the user's op); box = e-node; orange = the extracted term", size=11,
             fill="#555")
    node_pos: dict = {}  # (class, k) -> (x, bottom y)
    class_top: dict = {}
    y = 50.0
    for row in rows:
        x = 10.0
        row_h = 0.0
        for c in row:
            nodes = view.classes.get(c, [])
            cap = f"c{c} {view.shape.get(c, '')} {class_names.get(c, '')}".strip()
            widths = [max(40.0, text_width(_label(n), 10) + 10) for n in nodes] or [40.0]
            w = max(sum(widths) + 6 * (len(widths) + 1), text_width(cap, 9) + 8)
            h = 44.0
            is_chosen_class = c in chosen
            svg.rect(x, y, w, h, fill="#fff", stroke=CHOSEN_EDGE if is_chosen_class else "#adb5bd",
                     width=1.6 if is_chosen_class else 1.0, rx=6, title=cap)
            svg.text(x + 4, y + 11, cap, size=9, fill="#495057")
            class_top[c] = (x + w / 2, y)
            nx = x + 6
            for k, n in enumerate(nodes):
                on = _key(n) in chosen_nodes
                svg.rect(nx, y + 16, widths[k], 22, fill=CHOSEN if on else PLAIN, stroke=CHOSEN_EDGE if on else "#868e96",
                         width=1.2 if on else 0.8, rx=3, title=f"{n.op}({', '.join(n.args)})")
                svg.text(nx + widths[k] / 2, y + 31, _label(n), size=10, anchor="middle")
                node_pos[(c, k)] = (nx + widths[k] / 2, y + 38, on)
                nx += widths[k] + 6
            x += w + 14
            row_h = max(row_h, h)
        y += row_h + 46
    for c in keep:  # edges last, over the boxes
        for k, n in enumerate(view.classes.get(c, [])):
            x1, y1, on = node_pos[(c, k)]
            for ch in n.children:
                if ch in class_top:
                    x2, y2 = class_top[ch]
                    if y2 <= y1:  # an edge up (a cycle through a rewrite): draw it dashed-thin
                        svg.curve(x1, y1, x2, y2, stroke="#ced4da", width=0.6, arrow=False)
                    else:
                        svg.curve(x1, y1, x2, y2, stroke=CHOSEN_EDGE if on else "#adb5bd", width=2.0 if on else 0.7)
    return svg.render()


def class_names_of(state, view) -> dict:
    """class -> the user's op of the program node loaded into it (first one)."""
    from ..ir.user_names import node_names
    names = node_names(state.program)
    out: dict = {}
    for nid, i in state.index.items():
        c = view.by_index.get(i)
        if c is not None and c not in out and nid in names:
            out[c] = names[nid]
    return out
