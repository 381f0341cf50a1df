"""``--dump=regions_svg``: the chosen partition as a picture. Each kernel (one RB-SSA region) is a box
listing the user's ops it computes and, in blue, the model inputs it reads with their bytes; an arrow
from one kernel to another is a tensor written to memory and read back, labelled with the user's name
for it and its bytes (symbols at the pricing size). With a cost model's prices, a box also shows the
modelled time and what bounds it.
"""
from __future__ import annotations

import math

from ..ir.shapes import bind
from ..ir.tiny import Ops
from .svg import Svg, human_bytes, layers, text_width

KERNEL_FILL, EDGE = "#fff4e6", "#495057"


def tensor_bytes(node, params: dict) -> int:
    return math.prod(bind(node.shape, params)) * node.dtype.itemsize


def regions_svg(prog, part, names: dict, tensors: dict, params: dict, priced: "list | None" = None,
                title: str = "") -> str:
    """prog, part: the extraction; names: node id -> the user's op; tensors: node id -> tensor name;
    params: symbol sizes; priced: pricing.kernels.Priced per kernel, or None."""
    cost = {p.kernel.name: p.cost for p in priced or [] if p.cost is not None}
    made = {o: k.name for k in part.kernels for o in k.outputs}
    ids = [k.name for k in part.kernels]  # model inputs are listed inside the kernels that read them
    children: dict = {i: [] for i in ids}
    for k in part.kernels:
        for src in k.inputs:
            frm = made.get(src, src)
            if frm in children:
                children[frm].append(k.name)
    rows = layers(ids, children)
    lines: dict = {}
    for k in part.kernels:
        ops = list(dict.fromkeys(names.get(n, n) for n in sorted(k.nodes, key=_order(prog))
                                 if prog[n].op not in (Ops.CONST,) and prog[n].op not in _MOVES))
        ops = ops or list(dict.fromkeys(names.get(n, n) for n in k.nodes))
        c = cost.get(k.name)
        head = k.name + (f"  {c.time_est_us:.3g} us, {c.bound}" if c is not None else "")
        reads = [f"reads {tensors.get(i, i)} {human_bytes(tensor_bytes(prog[i], params))}"
                 for i in k.inputs if prog[i].op == Ops.INPUT]
        lines[k.name] = [head] + _wrap(ops, 34) + reads
    svg = Svg()
    svg.text(10, 18, title or f"{len(part.kernels)} kernels", size=13, bold=True)
    svg.text(10, 34, "box = kernel (the user's ops it computes, the model inputs it reads); arrow = tensor in memory, "
             f"bytes at {', '.join(f'{k}={v}' for k, v in sorted(params.items())) or 'static sizes'}", size=11, fill="#555")
    box: dict = {}
    y = 56.0
    for row in rows:
        x, row_h = 10.0, 0.0
        for i in row:
            ls = lines[i]
            w = max(text_width(s, 11) for s in ls) + 16
            h = 16 * len(ls) + 8
            svg.rect(x, y, w, h, fill=KERNEL_FILL, stroke="#e8590c", width=1.2, rx=4, title="\n".join(ls))
            for j, s in enumerate(ls):
                svg.text(x + 8, y + 17 + 16 * j, s, size=11, bold=(j == 0),
                         fill="#1864ab" if s.startswith("reads ") else "#111")
            box[i] = (x, y, w, h)
            x += w + 36
            row_h = max(row_h, h)
        y += row_h + 70
    for k in part.kernels:
        kx, ky, kw, _ = box[k.name]
        srcs = sorted((s for s in k.inputs if made.get(s, s) in box), key=lambda s: box[made.get(s, s)][0])
        for j, src in enumerate(srcs):
            frm = made.get(src, src)
            if frm not in box:
                continue
            fx, fy, fw, fh = box[frm]
            x1, y1 = fx + fw / 2, fy + fh
            x2, y2 = kx + kw * (j + 1) / (len(srcs) + 1), ky
            label = f"{tensors.get(src, src)} {human_bytes(tensor_bytes(prog[src], params))}"
            svg.curve(x1, y1, x2, y2, stroke=EDGE, width=1.1, title=label)
            svg.text(x2 + 4, y2 - 8 - 13 * j, label, size=10, fill="#1864ab")
    for k in part.kernels:  # program outputs leave at the bottom of their kernel
        for o in k.outputs:
            if any(nid == o for _, nid in prog.outputs):
                kx, ky, kw, kh = box[k.name]
                label = f"{tensors.get(o, o)} {human_bytes(tensor_bytes(prog[o], params))} (output)"
                svg.line(kx + kw / 2, ky + kh, kx + kw / 2, ky + kh + 26, stroke=EDGE, width=1.1, arrow=True)
                svg.text(kx + kw / 2 + 4, ky + kh + 22, label, size=10, fill="#2b8a3e")
    return svg.render()


_MOVES = {Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP, Ops.VIEW}


def _order(prog):
    pos = {n.id: k for k, n in enumerate(prog.nodes)}
    return lambda i: pos.get(i, 0)


def _wrap(words: list, width: int) -> list:
    out, cur = [], ""
    for w in words:
        if cur and len(cur) + 2 + len(w) > width:
            out.append(cur + ",")
            cur = w
        else:
            cur = f"{cur}, {w}" if cur else w
    return out + ([cur] if cur else [])
