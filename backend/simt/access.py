"""What the SIMT plan and the code both read off a spec: its passes and their global-memory accesses.

A row runs one pass per row statistic (walking the statistic's bound axes) and a final pass (walking the
loop axes, storing the output). In a pass, a read is *vectorizable* along the pass's one walked axis a
when its last index is a itself over a dim of a's size and every other index is provably in range and
fixed for the row (an outer or unit axis, or a constant): then the V elements a lane takes are
consecutive in memory and one ``ld.global.vN`` moves them when the offset is V-aligned. A Gather is one too
when its index is fixed for the row and its other dims' map is such a read's (an embedding row).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ...ir import trampoline
from ...ir.expr import Expr
from ...ir.region import R, RNode
from .spec import SimtSpec, size_of


@dataclass(frozen=True)
class Pass:
    stat: RNode | None      # the row statistic it reduces, or None: the final (store) pass
    axes: tuple[str, ...]   # the axes its lanes walk (flattened, row-major)

    @property
    def body(self) -> RNode:
        return self.stat.src[0]


def passes(spec: SimtSpec) -> list[Pass]:
    return [Pass(s, tuple(s.arg[1])) for s in spec.stats()] + [Pass(None, spec.loop)]


def body_nodes(spec: SimtSpec, p: Pass) -> list[RNode]:
    """The nodes a pass evaluates per element (Refs followed), not below the row statistics it uses."""
    stats = {id(s) for s in spec.stats()} - ({id(p.stat)} if p.stat is not None else set())
    lets = spec.region.let_map
    top = p.body if p.stat is not None else spec.top
    out, seen, stack = [], set(), [top]
    while stack:
        n = stack.pop()
        while n.op == R.REF:
            n = lets[n.arg]
        if id(n) in seen or id(n) in stats:
            continue
        seen.add(id(n))
        out.append(n)
        stack.extend(n.src)
    return out


def _in_range(spec: SimtSpec, e: Expr, d, fixed: set) -> bool:
    e = Expr.of(e)
    if e.is_const:
        return isinstance(d, int) and 0 <= e.constant < d
    vs = e.variables()
    if len(vs) != 1:
        return False
    (v,) = vs
    return v in fixed and e == Expr.var(v) and Expr.of(spec.region.axis_sizes[v]) == Expr.of(d)


def vector_reads(spec: SimtSpec, p: Pass) -> list[RNode]:
    """The reads of pass p that move as vectors along its walked axis (module docstring)."""
    return _derived(spec, ("vector_reads", p), lambda: _vector_reads(spec, p))


def _derived(spec: SimtSpec, key, make) -> list:
    """make() once per spec and key (``SimtSpec.derived``), a fresh list each call."""
    if key not in spec.derived:
        spec.derived[key] = tuple(make())
    return list(spec.derived[key])


def _vector_reads(spec: SimtSpec, p: Pass) -> list[RNode]:
    if len(p.axes) != 1:
        return []
    (a,) = p.axes
    fixed = set(spec.outer) | set(spec.units)
    shapes = {b.name: b.memref.shape for b in spec.region.inputs}
    out = []
    for n in body_nodes(spec, p):
        if n.op == R.GATHER:  # a gathered row: its index fixed for the row, the walked axis its last dim
            tensor, at, others = n.arg
            if at == len(others) or not set(n.src[0].axes) <= fixed:
                continue
            index, shape = others, shapes[tensor][:at] + shapes[tensor][at + 1:]
        elif n.op == R.READ:
            tensor, index = n.arg
            shape = shapes[tensor]
        else:
            continue
        if not index or Expr.of(index[-1]) != Expr.var(a) or Expr.of(shape[-1]) != Expr.of(spec.region.axis_sizes[a]):
            continue
        if all(_in_range(spec, e, d, fixed) for e, d in zip(index[:-1], shape[:-1], strict=True)):
            out.append(n)
    return out


def vector_store(spec: SimtSpec) -> bool:
    """Does the final pass store V consecutive output elements per lane step? (one walked axis, the
    output's last non-unit one)"""
    if len(spec.loop) != 1:
        return False
    ys = spec.yield_.axes
    k = ys.index(spec.loop[0])
    return all(a in spec.units for a in ys[k + 1:])


def flat_offset(index: tuple, shape: tuple) -> Expr:
    off = Expr.const(0)
    for e, d in zip(index, shape, strict=True):
        off = off * Expr.of(d) + Expr.of(e)
    return off


def stride(spec: SimtSpec, index: tuple, shape: tuple, axis: str, env: Mapping[str, int]) -> int:
    """Elements between the reads at axis = 1 and axis = 0 (every other axis 0)."""
    off = flat_offset(index, shape)
    base = {a: 0 for a in spec.region.axis_sizes} | dict(env)
    return int(off.evaluate({**base, axis: 1})) - int(off.evaluate(base))


def read_stride(spec: SimtSpec, n: RNode, shape: tuple, axis: str, env: Mapping[str, int]) -> "int | None":
    """Elements between read n's loads at axis = 1 and axis = 0; None when not known before run time (a
    Gather whose index varies along axis: the loads land anywhere on the gathered dim). A Gather whose index
    does not vary along axis strides as its other dims' map does (the gathered position is fixed)."""
    if n.op == R.READ:
        return stride(spec, n.arg[1], shape, axis, env)
    tensor, at, others = n.arg
    if axis in n.src[0].axes:
        return None
    return stride(spec, others[:at] + (Expr.const(0),) + others[at:], shape, axis, env)


def work(spec: SimtSpec, top: RNode, env: Mapping[str, int], skip: set) -> tuple[float, list]:
    """(arithmetic ops, [(read or gather node, multiplicity)]) to evaluate top at one point; an inline Reduce
    multiplies its body by its trip count; nodes in skip (row statistics) cost nothing."""
    lets = spec.region.let_map
    memo: dict = {}

    def go(n: RNode, mult: float) -> trampoline.Walk:  # a walk through the lets (ir/trampoline.py: no recursion)
        while n.op == R.REF:
            n = lets[n.arg]
        if id(n) in skip:
            return 0.0
        key = (id(n), mult)
        if key in memo:
            return 0.0
        memo[key] = True
        if n.op == R.READ:
            reads.append((n, mult))
            return 0.0
        if n.op == R.GATHER:  # the tensor's load, after the index's
            reads.append((n, mult))
        if n.op == R.REDUCE:
            trip = 1
            for a in n.arg[1]:
                trip *= size_of(spec.region.axis_sizes[a], env)
            return (yield go(n.src[0], mult * trip)) + mult * trip
        if n.op == R.ONLINE:  # three walks over the keys
            trip = 3 * size_of(spec.region.axis_sizes[n.arg[0][0]], env)
            total = 0
            for s in n.src:
                total += yield go(s, mult * trip)
            return total + 4 * mult * trip
        own = mult if n.op in (R.UNARY, R.BINARY, R.SELECT) else 0.0
        total = 0
        for s in n.src:
            total += yield go(s, mult)
        return own + total

    reads: list = []
    ops = trampoline.run(go(top, 1.0))
    return ops, reads


def tiled_reduces(spec: SimtSpec) -> list[RNode]:
    """The Reduces a register-tiled final pass accumulates for a whole micro-tile at once: those its value
    reaches without passing through another Reduce (a contraction, a pooling window), children first.
    Empty when the spec has a row statistic (rows then need their group's reduction one at a time)."""
    return _derived(spec, "tiled_reduces", lambda: _tiled_reduces(spec))


def _tiled_reduces(spec: SimtSpec) -> list[RNode]:
    if spec.stats():
        return []
    lets = spec.region.let_map
    found, stack, seen = set(), [spec.top], set()
    while stack:
        n = stack.pop()
        while n.op == R.REF:
            n = lets[n.arg]
        if id(n) in seen:
            continue
        seen.add(id(n))
        if n.op == R.REDUCE:
            found.add(id(n))
        elif n.op != R.ONLINE:
            stack.extend(n.src)
    return [n for n in spec.nodes() if id(n) in found]


def reuse(spec: SimtSpec, n: RNode, tm: int, tn: int) -> int:
    """How many elements of a TM x TN micro-tile share one load of read n (its value is computed once per
    distinct point of its own axes: along the loop axes when it does not vary with them, across the tile's
    rows when it does not vary with the innermost outer axis, the one the rows of a tile differ in)."""
    axes = set(n.axes)
    return (tn if not axes & set(spec.loop) else 1) * (tm if not spec.outer or spec.outer[-1] not in axes else 1)
