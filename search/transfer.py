"""A searched segment's decisions carried to a segment of the same structure (docs/DESIGN.md §Fusion,
"Segments").

Two distinct segments of one program may differ only by their extents (the bottleneck blocks of a ResNet's
stages: the same ops, wiring, axes and index maps at other channel counts and image sizes;
``Segment.structure``). Their canonical programs then name the same values by the same node ids, so a
decision of one segment's search (a site fused: ``Mat`` of a value; a softmax-weighted sum streamed) names
its value by the program nodes of the value's e-class, and the decision of the other segment that names the
same nodes is the same decision. ``carried`` maps a decision set that way; the search of the second segment
prices it as its first candidate after the two baselines and keeps it when it is legal there and priced at
or below both (search/model.py), instead of searching again.
"""
from __future__ import annotations

from ..egraph.graph import export
from .sites import site_values, sites, stream_sites


def keys(view, state, st: dict, streams) -> dict:
    """Site class -> (kind, the program node ids of the value it decides); a value no program node spells
    (made by a rule) has no node ids and is never carried."""
    nodes: dict = {}
    for nid, i in state.index.items():
        nodes.setdefault(view.by_index[i], set()).add(nid)
    value_of = site_values(view, st)
    out = {}
    for c in st:
        if c in value_of:
            out[c] = ("mat", frozenset(nodes.get(value_of[c], ())))
        elif c in streams:
            out[c] = ("stream", frozenset(nodes.get(c, ())))
    return out


def carried(source: tuple, view, state, st: dict, streams) -> "frozenset | None":
    """``source`` (EGraphState, decision set) of a segment of the same structure -> the same decisions in this
    segment's e-graph (``view`` of ``state``, its sites ``st`` and stream sites), or None when one of them names
    no value here, or a value two sites here decide."""
    src_state, fused = source
    src_view = export(src_state)
    src_sites = sites(src_view)
    src_keys = keys(src_view, src_state, src_sites, frozenset(stream_sites(src_view)))
    here: dict = {}
    for c, k in keys(view, state, st, streams).items():
        here[k] = None if k in here else c  # two sites of one value: not carried
    out = set()
    for c in fused:
        k = src_keys.get(c)
        if k is None or not k[1] or here.get(k) is None:
            return None
        out.add(here[k])
    return frozenset(out)
