"""Quantities derived from the IndexBook for the cost model and the plan search (seed 000 §4.6, §7.1).

* :func:`axis_roles` — parallel (output) vs reduce axes of a value's iteration space;
* :func:`tail_axes` — the axes a tile does not divide (or whose size is symbolic): tile ends need
  predication there;
* :func:`halo` — per source, per source axis: how far the footprint of one tile reaches beyond the
  part that advances with the tile (what adjacent tiles both read, from pad/slice/window reads),
  in elements per axis and in bytes for one tile.

All work on the Expr AxisMaps by interval arithmetic over a tile box (exact for affine maps), so
they cost microseconds; symbolic sizes need a binding ``env``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from ..ir.diagnostics import fail
from ..ir.shapes import Dim
from ..ir.tiny import Ops
from .indexbook import REDUCE, IndexBook, ValueInfo
from .isl_util import bounds


def _size(d: Dim, env: Mapping[str, int] | None, at: str) -> int:
    if isinstance(d, int):
        return d
    if env is None or d.variables() - set(env):
        fail("UnboundSymbol", at, f"size {d} needs a value for {', '.join(sorted(d.variables()))}")
    return int(d.evaluate(env))


def axis_roles(book: IndexBook, value_id: str) -> dict:
    """{"parallel": [names], "reduce": [names]}: every output axis of a pure value is parallel."""
    info = book[value_id]
    return {"parallel": [a.name for a in info.space if a.kind != REDUCE],
            "reduce": [a.name for a in info.space if a.kind == REDUCE]}


def _tile_of(info: ValueInfo, tile: "Sequence[int] | Mapping[str, int]") -> dict:
    if isinstance(tile, Mapping):
        return dict(tile)
    if len(tile) > len(info.space):
        fail("InvalidAttribute", info.value_id, f"tile {list(tile)} has more entries than axes {list(info.space_names)}")
    return {a.name: t for a, t in zip(info.space, tile)}


def tail_axes(book: IndexBook, value_id: str, tile: "Sequence[int] | Mapping[str, int]",
              env: Mapping[str, int] | None = None) -> list:
    """Axis names whose size the tile does not divide (a symbolic size without env always may not)."""
    info = book[value_id]
    t = _tile_of(info, tile)
    out = []
    for a in info.space:
        if a.name not in t:
            continue
        if t[a.name] < 1:
            fail("InvalidAttribute", value_id, f"tile size {t[a.name]} for axis {a.name} must be >= 1")
        if isinstance(a.size, int) or env is not None:
            if _size(a.size, env, value_id) % t[a.name]:
                out.append(a.name)
        else:
            out.append(a.name)
    return out


def tile_reads(book: IndexBook, value_id: str) -> tuple:
    """The reads one tile of value_id performs: a REDUCE over a MUL reads the MUL's operands
    (the contraction computes the product in registers), anything else reads its inputs."""
    info = book[value_id]
    node = book.program[value_id]
    if node.op == Ops.REDUCE:
        mul = book.program[node.src[0]]
        if mul.op == Ops.MUL and not book[mul.id].non_scop:
            (red_in,) = info.inputs
            return tuple(book.compose(info.box, red_in.map, (), (), acc) for acc in book[mul.id].inputs)
    return info.inputs


@dataclass(frozen=True)
class Halo:
    value_id: str  # the source read (all reads of it together)
    span: tuple  # elements per source axis one tile reaches
    per_axis: tuple  # halo elements per source axis
    bytes: int  # halo elements of one tile times the source's item size


def halo(book: IndexBook, value_id: str, tile: "Sequence[int] | Mapping[str, int]",
         env: Mapping[str, int] | None = None) -> list:
    """Halo of each source value_id reads, for a tile of its parallel axes (reduce axes taken whole).

    The reads of one source (a window, or several shifted pad/slice views of it) index each source
    axis by ``sum_j c_j*i_j + (offsets, reduce terms)``. One tile's footprint spans ``span``
    elements on that axis while neighbouring tiles advance by ``sum_j |c_j|*t_j``; the excess is
    the halo (conv 3x3 stride 1: tile 8 spans 10 rows, halo 2; stride 2: spans 17, advances 16,
    halo 1; ``x[i-1] + x[i+1]``: spans 10, halo 2). Axes indexed by reduce axes alone have none."""
    info = book[value_id]
    t = _tile_of(info, tile)
    box, par = {}, [a.name for a in info.space if a.kind != REDUCE]
    for a in info.space:
        n = _size(a.size, env, value_id)
        box[a.name] = (0, min(t.get(a.name, n), n) - 1) if a.kind != REDUCE else (0, n - 1)
    groups: dict = {}
    for acc in tile_reads(book, value_id):
        groups.setdefault(acc.value_id, []).append(acc)
    out = []
    for src_id, accs in groups.items():
        spans, halos = [], []
        for k in range(book.program[src_id].ndim):
            exprs = [acc.map[k].subs(env or {}) for acc in accs]
            ivals = [bounds(e, box) for e in exprs]
            if any(lo is None or hi is None for lo, hi in ivals):
                spans.append(1)  # unknown (symbolic offset): count no halo rather than guess
                halos.append(0)
                continue
            span = max(hi for _, hi in ivals) - min(lo for lo, _ in ivals) + 1
            advance = max(sum(abs(e.coeff(v)) * (box[v][1] + 1) for v in par) for e in exprs)
            moves = any(e.coeff(v) for e in exprs for v in par)
            spans.append(span)
            halos.append(max(0, span - advance) if moves else 0)
        core = math.prod(s - h for s, h in zip(spans, halos))
        nbytes = (math.prod(spans) - core) * book.program[src_id].dtype.itemsize
        out.append(Halo(src_id, tuple(spans), tuple(halos), nbytes))
    return out


def halo_json(halos: list) -> list:
    return [{"value_id": h.value_id, "span": list(h.span), "per_axis": list(h.per_axis), "bytes": h.bytes}
            for h in halos]

