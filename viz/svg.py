"""A small SVG writer and a layered layout for DAGs, so the pictures need no Graphviz binary.

``layers`` places the boxes of a DAG in rows (a box's row is its longest distance from a root) and
orders each row by the mean position of the boxes above it (two sweeps of the barycenter heuristic);
``Svg`` collects shapes and writes a standalone document a browser opens.
"""
from __future__ import annotations

from html import escape

from ..ir.toposort import postorder

CHAR_W = 6.6  # px per character of the 11 px monospace font the pictures use
FONT = "font-family=\"DejaVu Sans Mono, Menlo, Consolas, monospace\""


def text_width(s: str, size: float = 11) -> float:
    return len(s) * CHAR_W * size / 11


class Svg:
    def __init__(self) -> None:
        self.items: list = []
        self.w = self.h = 0.0

    def _grow(self, x: float, y: float) -> None:
        self.w, self.h = max(self.w, x), max(self.h, y)

    def rect(self, x, y, w, h, fill="#fff", stroke="#444", width=1.0, rx=4, title: str = "", dash: bool = False):
        t = f"<title>{escape(title)}</title>" if title else ""
        d = ' stroke-dasharray="4 3"' if dash else ""
        self.items.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="{rx}" fill="{fill}" '
                          f'stroke="{stroke}" stroke-width="{width}"{d}>{t}</rect>')
        self._grow(x + w, y + h)

    def text(self, x, y, s: str, size=11, anchor="start", fill="#111", bold=False, title: str = ""):
        t = f"<title>{escape(title)}</title>" if title else ""
        b = ' font-weight="bold"' if bold else ""
        self.items.append(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" {FONT} text-anchor="{anchor}" '
                          f'fill="{fill}"{b}>{escape(s)}{t}</text>')
        self._grow(x + (text_width(s, size) if anchor == "start" else text_width(s, size) / 2), y + 4)

    def line(self, x1, y1, x2, y2, stroke="#888", width=1.0, arrow=False, dash=False):
        a = ' marker-end="url(#arrow)"' if arrow else ""
        d = ' stroke-dasharray="4 3"' if dash else ""
        self.items.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{stroke}" '
                          f'stroke-width="{width}"{a}{d}/>')
        self._grow(max(x1, x2), max(y1, y2))

    def curve(self, x1, y1, x2, y2, stroke="#888", width=1.0, arrow=True, title: str = ""):
        """A vertical S-curve from (x1, y1) down (or up) to (x2, y2)."""
        my = (y1 + y2) / 2
        a = ' marker-end="url(#arrow)"' if arrow else ""
        t = f"<title>{escape(title)}</title>" if title else ""
        self.items.append(f'<path d="M{x1:.1f},{y1:.1f} C{x1:.1f},{my:.1f} {x2:.1f},{my:.1f} {x2:.1f},{y2:.1f}" '
                          f'fill="none" stroke="{stroke}" stroke-width="{width}"{a}>{t}</path>')

    def circle(self, x, y, r, fill="#1f77b4", title: str = ""):
        t = f"<title>{escape(title)}</title>" if title else ""
        self.items.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r:.1f}" fill="{fill}" stroke="#222">{t}</circle>')
        self._grow(x + r, y + r)

    def render(self, margin: float = 20) -> str:
        w, h = self.w + margin, self.h + margin
        head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0f}" height="{h:.0f}" '
                f'viewBox="0 0 {w:.0f} {h:.0f}">\n<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" '
                'markerWidth="8" markerHeight="8" markerUnits="userSpaceOnUse" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
                'fill="#666"/></marker></defs>\n<rect width="100%" height="100%" fill="white"/>\n')
        return head + "\n".join(self.items) + "\n</svg>\n"


def layers(ids: list, children: dict) -> list:
    """Rows of a DAG's ids (children: id -> ids below it): row = longest path from a root, each row
    ordered by the barycenter of its parents' positions in the row above."""
    depth = {i: 0 for i in ids}
    parents: dict = {i: [] for i in ids}
    for i in ids:
        for c in children.get(i, ()):
            if c in parents and c != i:
                parents[c].append(i)
    order = _topo(ids, children)
    for i in order:
        for c in children.get(i, ()):
            if c in depth and c != i:
                depth[c] = max(depth[c], depth[i] + 1)
    rows: list = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for i in order:
        rows[depth[i]].append(i)
    for _ in range(2):
        pos = {i: k for row in rows for k, i in enumerate(row)}
        for row in rows[1:]:
            row.sort(key=lambda i: sum(pos[p] for p in parents[i]) / len(parents[i]) if parents[i] else pos[i])
            pos.update({i: k for k, i in enumerate(row)})
    return rows


def _topo(ids: list, children: dict) -> list:
    """Parents before children (cycles, which an e-graph may hold, are broken where first met)."""
    return postorder(ids, lambda i: [c for c in children.get(i, ()) if c in children])[::-1]


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
