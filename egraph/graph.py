"""The exported e-graph: e-classes and e-nodes decoded from egglog's frozen tables (docs/DESIGN.md §E-graph).

Extraction, cost models and the soundness checker read this view instead of calling back into
egglog: ``freeze()`` copies the tables in milliseconds and every e-node is decoded once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from .schema import CHILDREN, MEMORY
from .state import EGraphState


@dataclass(frozen=True)
class ENode:
    op: str  # egglog constructor name
    args: tuple  # the string attributes, in constructor order
    children: tuple  # e-class ids of the Term arguments, in order
    eclass: int
    order: int  # position in the export (stable tie-break: loaded terms come first)

    @property
    def is_memory(self) -> bool:
        return self.op in MEMORY


@dataclass
class EGraphView:
    classes: dict  # class id -> [ENode]
    shape: dict  # class id -> shape string
    dtype: dict  # class id -> dtype string
    by_index: dict  # N index -> class id
    nodes: int
    vetoed: frozenset = frozenset()  # read classes a rule vetoes fusing ((fuse-veto e) = 1, rules/fusion.egg)
    conflicts: tuple = ()  # (Mat site classes no partition fuses together, the Reduce the path starts in or None)


def export(st: EGraphState) -> EGraphView:
    if not isinstance(st, EGraphState):  # a segmented program (search/stitch.py): its stitched view
        return st.export()
    if st.view is not None:  # (its e-graph given back: egraph/state.py pooled_state)
        return st.view
    g = st.eg._egraph  # noqa: SLF001
    fz = g.freeze().functions  # (a new dict of every table per access of .functions: taken once)
    ids: dict = {}

    def cid(v) -> int:
        return ids.setdefault(v, len(ids))

    strings: dict = {}  # value -> its string (an attribute value recurs across rows: decoded once)

    def text(v) -> str:
        out = strings.get(v)
        if out is None:
            out = strings[v] = g.value_to_string(v)
        return out

    classes: dict = {}
    order = 0
    for name, kids in CHILDREN.items():
        f = fz.get(name)
        if f is None:
            continue
        for row in f.rows:
            if getattr(row, "subsumed", False):
                continue
            ins = row.inputs
            ch = tuple(cid(ins[k]) for k in kids)
            args = tuple(text(v) for k, v in enumerate(ins) if k not in kids)
            c = cid(row.output)
            classes.setdefault(c, []).append(ENode(name, args, ch, c, order))
            order += 1
    by_index = {g.value_to_i64(r.inputs[0]): cid(r.output) for r in fz["N"].rows}
    shape = {cid(r.inputs[0]): text(r.inputs[1]) for r in fz["has-shape"].rows}
    dtype = {cid(r.inputs[0]): text(r.inputs[1]) for r in fz["has-dtype"].rows}
    veto = fz.get("fuse-veto")
    vetoed = frozenset(cid(r.inputs[0]) for r in (veto.rows if veto is not None else ()) if g.value_to_i64(r.output))
    conflicts = _conflicts(g, fz, cid)
    for c in list(ids.values()):
        classes.setdefault(c, [])
    return EGraphView(classes, shape, dtype, by_index, order, vetoed, conflicts)


class Conflict(NamedTuple):
    """One (fuse-conflict P r) fact of rules/fusion.egg: the Mat site classes of P, the class of the Reduce
    whose body the path starts from (None for a value's root), the reduction r it reaches, and for a
    value's root the value (the root of the kernel the path starts in)."""
    sites: frozenset
    root: "int | None"
    reduce: int
    top: "int | None" = None  # the value whose kernel the path starts from (a value's root, (Top x))


def _conflicts(g, fz: dict, cid) -> tuple:
    """The (fuse-conflict P r) facts of rules/fusion.egg, each as a Conflict."""
    cons = fz.get("Site")
    rows = fz.get("fuse-conflict")
    if cons is None or rows is None:
        return ()
    link = {r.output: r.inputs for r in cons.rows}  # (every path's; the conflicts' few are walked)
    root = {r.output: r.inputs[0] for r in (fz["Root"].rows if "Root" in fz else ())}
    top = {r.output: r.inputs[0] for r in (fz["Top"].rows if "Top" in fz else ())}

    def members(v, r) -> Conflict:
        sites = []
        while v in link:
            c, v = link[v]
            sites.append(cid(c))
        return Conflict(frozenset(sites), cid(root[v]) if v in root else None, cid(r), cid(top[v]) if v in top else None)
    found = dict.fromkeys(members(r.inputs[0], r.inputs[1]) for r in rows.rows)
    # (in a canonical order: the table's row order follows the e-graph's history, which a pooled e-graph's
    # earlier segments change, and the search reads the conflicts in order)
    return tuple(sorted(found, key=lambda c: (c.reduce, -1 if c.root is None else c.root,
                                              -1 if c.top is None else c.top, sorted(c.sites))))
