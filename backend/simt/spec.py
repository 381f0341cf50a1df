"""The SIMT kernel's problem: one RB-SSA region computed without tensor cores, seen as rows.

The region's yielded axes split into *outer* axes (one point of them is a row, owned by a group of
threads) and *loop* axes (the row's elements, which the group walks lane-strided). A Reduce whose kept
axes are all outer is a *row statistic*: the group computes it cooperatively in a pass of its own over
the Reduce's bound axes (lane partials, then a warp-shuffle / shared-memory tree), once per row, before
the values that use it. Every other Reduce (a contraction whose kept axes include a loop axis, a pooling
window, a reduction nested in another's body) runs inline, sequentially, per element. Everything else is
evaluated pointwise at the element: RB-SSA axes are named, so BroadcastInDim and Transpose only say
where a value is read, not what it is.

The outer axes are chosen from the row statistics: the axes every one of them keeps (softmax, layernorm,
log-softmax, mean/var over any axis: the kept axes); without one, all yielded axes but the last (an
elementwise chain, a contraction, a pooling window: rows are the output's rows). Unit yielded axes
(static size 1) are neither: they are bound to 0.

The rows are those of the primary yield (the one over most axes); a region's other yields are written in
the final pass where the primary's axes they lack are 0 (``walks``: an axis of theirs matched to a primary
axis of the same size).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Mapping

from ...ir.dtypes import DType
from ...ir.expr import Expr
from ...ir.region import R, Region, RNode
from ..common.plan_search import ranking_env


def follow(r: Region, n: RNode) -> RNode:
    lets = r.let_map
    while n.op == R.REF:
        n = lets[n.arg]
    return n


def reachable(r: Region, top: RNode) -> list[RNode]:
    """Every node under top once (Refs followed), children before parents."""
    out, seen = [], set()
    stack = [(follow(r, top), False)]
    while stack:
        n, done = stack.pop()
        if done:
            out.append(n)
            continue
        if id(n) in seen:
            continue
        seen.add(id(n))
        stack.append((n, True))
        stack.extend((follow(r, s), False) for s in reversed(n.src))
    return out


def reachable_all(r: Region, tops: list) -> list[RNode]:
    """Every node under any of tops once, children before parents."""
    out, seen = [], set()
    for t in tops:
        for n in reachable(r, t):
            if id(n) not in seen:
                seen.add(id(n))
                out.append(n)
    return out


def symbols_of(r: Region) -> tuple[str, ...]:
    """The size symbols the region's axis sizes, buffer shapes and index maps mention (sorted)."""
    axes = set(r.axis_sizes)
    out: set = set()

    def add(d: Any) -> None:
        if not isinstance(d, int):
            out.update(v for v in Expr.of(d).variables() if v not in axes)

    for d in r.axis_sizes.values():
        add(d)
    for b in (*r.inputs, *r.outputs):
        for d in b.memref.shape:
            add(d)
    for l in r.lets:
        for n in reachable(r, l.expr):
            if n.op in (R.READ, R.GATHER):
                for e in n.arg[-1]:  # a Read's map; a Gather's map of its other dims
                    add(e)
            elif n.op == R.PRED:
                for e in n.arg:
                    add(e)
    return tuple(sorted(out))


def size_of(d: Any, env: Mapping[str, int]) -> int:
    return d if isinstance(d, int) else int(Expr.of(d).evaluate(env))


@dataclass(frozen=True)
class SimtSpec:
    """A region as rows. ``outer``: the row axes (yield order); ``loop``: the axes a group walks in the
    final pass (yield order); ``units``: unit yielded axes bound to 0; ``stats``: how many row statistics
    (cooperative passes) each row needs. Hashable: plans are cached per spec."""
    KIND = "simt"
    name: str
    region: Region
    outer: tuple[str, ...]
    loop: tuple[str, ...]
    units: tuple[str, ...]
    symbols: tuple[str, ...]
    walks: tuple = ()       # per other yield: (output, ((its axis, the primary axis it walks with), ...))

    # ---- the protocol every kind's spec keeps -----------------------------------------------------------
    @property
    def yield_(self):
        """The primary yield: the one over the most axes (the first such); the rows and the final pass walk
        its axes, and every other yield's axes are among them."""
        ys = self.region.yields
        return max(ys, key=lambda y: (len(y.axes), -ys.index(y)))

    @property
    def extras(self) -> tuple:
        """The other yields, in region order (each written where the primary's axes it lacks are 0)."""
        return tuple(y for y in self.region.yields if y is not self.yield_)

    def walk_of(self, y) -> dict[str, str]:
        """Each of y's axes the primary lacks (not of size 1) -> the primary axis it walks with."""
        return dict(dict(self.walks).get(y.dst, ()))

    @property
    def out(self):
        return self.buffer(self.yield_.dst)

    def buffer(self, name: str):
        return next(b for b in self.region.outputs if b.name == name)

    @property
    def outputs(self) -> tuple[str, ...]:
        """Every tensor the kernel writes, in region order (``c`` is the primary's)."""
        return tuple(b.name for b in self.region.outputs)

    @property
    def c(self) -> str:
        return self.out.name

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(b.name for b in self.region.inputs)

    def shapes(self, env: Mapping[str, int] | None = None) -> dict[str, tuple[int, ...]]:
        env = self.env(env)
        return {b.name: tuple(size_of(d, env) for d in b.memref.shape) for b in (*self.region.inputs, *self.region.outputs)}

    def dtypes(self) -> dict[str, DType]:
        return {b.name: b.memref.dtype for b in (*self.region.inputs, *self.region.outputs)}

    def env(self, env: Mapping[str, int] | None) -> dict[str, int]:
        """env with every unbound symbol at the plan search's hint size."""
        return ranking_env(self.symbols, env)

    def axis_size(self, axis: str, env: Mapping[str, int] | None = None) -> int:
        return size_of(self.region.axis_sizes[axis], self.env(env))

    def rows(self, env: Mapping[str, int] | None = None) -> int:
        n = 1
        for a in self.outer:
            n *= self.axis_size(a, env)
        return n

    def tile_rows(self, tm: int, env: Mapping[str, int] | None = None) -> int:
        """Row tiles a group computes with a micro-tile of tm rows along the innermost outer axis."""
        if tm == 1 or not self.outer:
            return self.rows(env)
        n = -(-self.axis_size(self.outer[-1], env) // tm)
        for a in self.outer[:-1]:
            n *= self.axis_size(a, env)
        return n

    def row_len(self, env: Mapping[str, int] | None = None) -> int:
        n = 1
        for a in self.loop:
            n *= self.axis_size(a, env)
        return n

    @property
    def top(self) -> RNode:
        return self.region.let_map[self.yield_.src]

    def top_of(self, y) -> RNode:
        return self.region.let_map[y.src]

    @cached_property
    def derived(self) -> dict:
        """Facts derived from the spec alone, kept once computed (``access.py``: a pass's vector reads, the
        tiled Reduces): the plan search asks for them once per candidate plan."""
        return {}

    @cached_property
    def _nodes(self) -> tuple:
        return tuple(reachable_all(self.region, [self.top_of(y) for y in (self.yield_, *self.extras)]))

    @cached_property
    def _stats(self) -> tuple:
        outer = set(self.outer)
        return tuple(n for n in self._nodes if n.op == R.REDUCE and set(n.axes) <= outer)

    def nodes(self) -> list[RNode]:
        """Every node the yields reach, children first (the primary's first); walked once per spec."""
        return list(self._nodes)

    def stats(self) -> list[RNode]:
        """The row statistics in dependency order: Reduces whose kept axes are all outer."""
        return list(self._stats)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.KIND, "name": self.name, "region": self.region.name, "outer": list(self.outer),
                "loop": list(self.loop), "unit_axes": list(self.units), "symbols": list(self.symbols),
                "row_statistics": [{"op": s.arg[0], "over": list(s.arg[1])} for s in self.stats()],
                "inputs": {b.name: b.memref.dtype.value for b in self.region.inputs},
                "output": {self.c: self.out.memref.dtype.value},
                **({"also_writes": {y.dst: list(y.axes) for y in self.extras}} if self.extras else {})}
