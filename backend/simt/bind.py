"""Recognise a region as a SIMT kernel: Region -> SimtBinding, or NoBind saying why not.

The SIMT kind takes any region the tensor-core kinds leave, as long as each output is written by one yield
as a packed row-major tensor over axes among the primary yield's (the one over most axes: a LayerNorm that
also writes its row means, a value both written and read on) and reads row-major inputs through affine maps, or
at an index read at run time on one dim (a Gather: an embedding lookup, GatherElements) (a streamed softmax-weighted sum the
attention kind leaves is evaluated per output element, in three walks over its keys). It chooses the row split (spec.py) the cost model prices faster: the outer axes every row
statistic keeps (else every yielded axis but the last), or one row per output element when a Reduce keeps
every yielded axis (then reduced by the row's lanes together: a matvec, a skinny contraction).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn

from ...ir.dtypes import DType
from ...ir.expr import Expr
from ...ir.region import R, Region
# shared pieces, at their current homes
from ..common.region_match import Mismatch, RegionBinding, recogniser
from .emit import BOOL_BINARY, COMPARE
from .plan import search
from .spec import SimtSpec, follow, reachable_all, symbols_of

DTYPES = (DType.fp16, DType.bf16, DType.fp32, DType.i32, DType.bool)


def _reject(r: Region, why: str) -> NoReturn:
    raise Mismatch(f"not a SIMT region: {why}")


@dataclass(frozen=True)
class SimtBinding(RegionBinding):
    spec: SimtSpec


def _unit(d) -> bool:
    return isinstance(d, int) and d == 1


def split_rows(r: Region, yaxes: tuple, tops: list) -> list[tuple[tuple, tuple, tuple]]:
    """The (outer, loop, units) splits of the yielded axes worth pricing (spec.py): the axes every row statistic
    keeps (else all but the last); and, when a Reduce keeps every yielded axis (a contraction, a pooling
    window, a matvec), one row per output element, that Reduce then a row statistic of G lanes."""
    sizes = r.axis_sizes
    units = tuple(a for a in yaxes if _unit(sizes[a]))
    live = tuple(a for a in yaxes if a not in units)
    nodes = reachable_all(r, tops)
    stats = [set(n.axes) for n in nodes if n.op == R.REDUCE and set(n.axes) <= set(live) and set(n.axes) != set(live)]
    if stats:
        keep = set.intersection(*stats)
        outer = tuple(a for a in live if a in keep)
    else:
        outer = live[:-1]
    out = [(outer, tuple(a for a in live if a not in outer), units)]
    if live and outer != live and any(n.op == R.REDUCE and set(n.axes) == set(live) for n in nodes):
        out.append((live, (), units))
    return out


def _check_yield(r: Region, y, out) -> None:
    sizes = r.axis_sizes
    if y.src not in r.let_map:
        _reject(r, f"it yields {y.src!r}, which no let defines")
    if len(set(y.axes)) != len(y.axes) or any(a not in sizes for a in y.axes):
        _reject(r, f"its yield axes [{', '.join(y.axes)}] are not distinct region axes")
    if out.memref.layout.kind != "row_major" or tuple(out.memref.shape) != tuple(sizes[a] for a in y.axes):
        _reject(r, f"its output {out.name!r} is not the packed row-major [{', '.join(y.axes)}] tensor")
    top = r.let_map[y.src]
    if set(top.axes) - set(y.axes):
        _reject(r, f"it yields a value over [{', '.join(top.axes)}] to [{', '.join(y.axes)}]")


def _walk_along(r: Region, y, primary) -> tuple:
    """Which primary axis each of another yield's axes walks with: its own name when the primary has it,
    else a primary axis of the same size not taken yet (the one at the same place from the end first, so
    the last axes stay together); size-1 axes are 0. ((axis, primary axis), ...) for the renamed ones."""
    sizes = r.axis_sizes
    taken = {a for a in y.axes if a in primary.axes}
    out = []
    for k, a in enumerate(reversed(y.axes)):
        if a in primary.axes or _unit(sizes[a]):
            continue
        same = [b for b in primary.axes if b not in taken and Expr.of(sizes[b]) == Expr.of(sizes[a])]
        if not same:
            _reject(r, f"it writes {y.dst!r} over [{', '.join(y.axes)}] and {primary.dst!r} over "
                       f"[{', '.join(primary.axes)}]: no axis of {primary.dst!r} has the size of {a!r}, and one "
                       "kernel walks one output's axes")
        at = primary.axes[-1 - k] if k < len(primary.axes) else None
        b = at if at in same else same[-1]
        taken.add(b)
        out.append((a, b))
    return tuple(out)


def _check_gather(r: Region, n) -> None:
    """A Gather the kernel reads: an input tensor, an i32 index, an affine map of the other dims."""
    tensor, axis, others = n.arg
    shapes = {b.name: b.memref.shape for b in r.inputs}
    if tensor not in shapes:
        _reject(r, f"it gathers from {tensor!r}, which is not one of its inputs")
    if len(others) + 1 != len(shapes[tensor]) or not 0 <= axis < len(shapes[tensor]):
        _reject(r, f"its gather from {tensor!r} has {len(others) + 1} indices on axis {axis} for rank "
                   f"{len(shapes[tensor])}")
    index = follow(r, n.src[0])
    if index.dtype != DType.i32:
        _reject(r, f"its gather from {tensor!r} has {index.dtype.value} indices (the kernel reads i32 indices)")
    if not all(Expr.of(e).is_affine for e in others):
        _reject(r, f"it gathers from {tensor} through a non-affine map of the other dims")


@recogniser
def bind(region: Region, name: "str | None" = None) -> SimtBinding:
    r = region
    outs = {b.name: b for b in r.outputs}
    if not r.yields or len(r.yields) != len(r.outputs) or {y.dst for y in r.yields} != set(outs):
        _reject(r, f"it writes {len(r.outputs)} outputs with {len(r.yields)} yields; the kernel writes each output "
                   "from one yield")
    for y in r.yields:
        _check_yield(r, y, outs[y.dst])
    primary = max(r.yields, key=lambda y: (len(y.axes), -r.yields.index(y)))  # SimtSpec.yield_
    walks = tuple((y.dst, _walk_along(r, y, primary)) for y in r.yields if y is not primary)
    for b in (*r.inputs, *r.outputs):
        if b.memref.layout.kind != "row_major":
            _reject(r, f"{b.name!r} has layout {b.memref.layout.kind}; the kernel reads and writes row-major tensors")
        if b.memref.dtype not in DTYPES:
            _reject(r, f"{b.name!r} is {b.memref.dtype.value}")
    tops = [r.let_map[y.src] for y in (primary, *(y for y in r.yields if y is not primary))]
    for n in reachable_all(r, tops):
        if n.op == R.READ and not all(Expr.of(e).is_affine for e in n.arg[1]):
            _reject(r, f"it reads {n.arg[0]} through a non-affine map")
        if n.op == R.GATHER:
            _check_gather(r, n)
        if n.op == R.REDUCE and n.dtype is None:
            _reject(r, "a Reduce has no accumulation dtype")
        if n.op == R.BINARY and n.dtype == DType.bool and n.arg not in (*BOOL_BINARY, *COMPARE):
            _reject(r, f"a {n.arg} of bool values (a kernel computes {', '.join(BOOL_BINARY)} on bool)")
        if n.op == R.REDUCE and n.arg[0] not in ("sum", "max", "min"):
            _reject(r, f"reduce op {n.arg[0]!r}")
    specs = [SimtSpec(name or r.name, r, outer, loop, units, symbols_of(r), walks)
             for outer, loop, units in split_rows(r, tuple(primary.axes), tops)]
    # the split is a property of the binding, shared by both archs: priced on sm90 at the hint sizes
    spec = min(specs, key=lambda s: dict(search(s, "sm90").best.est)["time_s"]) if len(specs) > 1 else specs[0]
    return SimtBinding(spec, tuple((b.name, b.name) for b in r.inputs))
