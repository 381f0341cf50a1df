"""A region without its size-1 axes: the same computation over the same packed buffers.

The extraction keeps a model's size-1 dims (a batch of one, a single head): the region then iterates a
unit axis, reads its tensors at index 0 along their size-1 dims and broadcasts reduced values back over
the unit axis. None of that changes a byte of any row-major buffer, but it hides the shape a kernel kind
recognises (a GEMM whose batch is 1 is a GEMM). ``squeeze_units`` rewrites the region with every
iteration or reduction axis of static size 1 fixed at 0 and removed, every static size-1 dim of its
row-major buffers dropped (reads lose the index there, which is 0), broadcasts that only re-add unit
axes removed, and reductions over unit axes only replaced by their body. Buffers keep their names, so a
binding of the squeezed region reads the original arrays reshaped (RegionBinding.arrays).

The same holds for a head split or merge: an input read as ``t[s, 64*h + d]`` (one dim of 768 = 12 heads
of 64) or ``t[s, e//64, e - 64*(e//64)]`` reads the same row-major bytes as ``t[s, h, d]`` over
[S, 12, 64] or ``t[s, e]`` over [S, 768]. After the unit axes go, each row-major input whose every read's
linear address is a sum ``c_a * a`` of distinct axes whose coefficients chain as packed strides (1, then
the previous coefficient times that axis's size, the last one times its size the buffer's size) is read
through that view instead (:func:`packed_view`): one plain axis per dim, what the kinds' templates take.
"""
from __future__ import annotations

from dataclasses import replace

from . import trampoline
from .expr import Expr, FloorDiv
from .region import (R, Buffer, Let, Region, RNode, Yield, binary, broadcast, const, online_softmax_sum,
                     pred, read, ref, reduce, select, transpose, unary, walk)


def _unit(size) -> bool:
    return isinstance(size, int) and size == 1


def squeeze_units(region: Region) -> Region | None:
    """The region with its static size-1 axes and buffer dims removed and its inputs read through their
    packed views (module docstring); None if neither changes anything. Unit axes stay when one cannot be
    removed without changing the meaning (a non-row-major buffer with a size-1 dim, a read that does not
    fix a size-1 dim at 0)."""
    squeezed = _squeeze(region)
    viewed = _view_inputs(squeezed or region)
    return viewed or squeezed


def linear_address(index, shape) -> Expr:
    """The row-major element offset of ``t[index]`` in a buffer of ``shape``."""
    out, stride = Expr.const(0), Expr.const(1)
    for e, d in reversed(list(zip(index, shape, strict=True))):
        out, stride = out + Expr.of(e) * stride, stride * Expr.of(d)
    return out


def packed_view(index, shape, sizes) -> "tuple[tuple, tuple] | None":
    """(view shape, view index) reading the same elements of a row-major ``shape`` buffer as ``index``
    with one plain axis per dim, or None when the address is not such a packed chain (a constant offset,
    a floordiv left, two axes with one stride, a gap, a view smaller than the buffer). ``sizes``: axis ->
    size."""
    coef: dict = {}
    for mono, c in linear_address(index, shape).terms:
        axes = [a for a in mono if isinstance(a, str) and a in sizes]
        if len(axes) != 1 or any(isinstance(a, FloorDiv) for a in mono):
            return None
        rest = list(mono)
        rest.remove(axes[0])
        coef[axes[0]] = coef.get(axes[0], Expr.const(0)) + Expr.from_terms({tuple(rest): c})
    chain, stride = [], Expr.const(1)
    while coef:
        hit = [a for a, c in coef.items() if c == stride]
        if len(hit) != 1:
            return None
        chain.append(hit[0])
        stride = stride * Expr.of(sizes[hit[0]])
        del coef[hit[0]]
    total = Expr.const(1)
    for d in shape:
        total = total * Expr.of(d)
    if stride != total or not chain:
        return None
    chain.reverse()
    return tuple(sizes[a] for a in chain), tuple(Expr.var(a) for a in chain)


def _view_inputs(region: Region) -> Region | None:
    """region with each row-major input whose reads all have one packed view (the same shape, the same
    present axes) read through it; None if no input changes."""
    sizes = region.axis_sizes
    reads: dict = {}
    for let in region.lets:
        for n in walk(let.expr):
            if n.op == R.READ:
                reads.setdefault(n.arg[0], {})[id(n)] = n
    views: dict = {}
    for b in region.inputs:
        if b.memref.layout.kind != "row_major" or b.name not in reads:
            continue
        got = {k: packed_view(n.arg[1], b.memref.shape, sizes) for k, n in reads[b.name].items()}
        shapes = {v[0] if v else None for v in got.values()}
        if None in shapes or len(shapes) != 1 or shapes == {tuple(b.memref.shape)}:
            continue
        new = {k: read(b.name, v[1], reads[b.name][k].dtype, sizes) for k, v in got.items()}
        if all(new[k].axes == reads[b.name][k].axes for k in new):
            views[b.name] = (next(iter(shapes)), new)
    if not views:
        return None
    by_id = {k: n for _, new in views.values() for k, n in new.items()}
    memo: dict = {}

    def go(n: RNode) -> RNode:
        if id(n) not in memo:
            src = []
            for s in n.src:  # a generator walk (ir/trampoline.py): trees as deep as a fused chain
                src.append((yield go(s)))
            src = tuple(src)
            memo[id(n)] = by_id.get(id(n)) or (n if all(a is b for a, b in zip(src, n.src))
                                               else RNode(n.op, src, n.arg, n.dtype, n.axes))
        return memo[id(n)]

    def buf(b: Buffer) -> Buffer:
        return replace(b, memref=replace(b.memref, shape=views[b.name][0])) if b.name in views else b

    return replace(region, inputs=tuple(buf(b) for b in region.inputs),
                   lets=tuple(Let(let.name, trampoline.run(go(let.expr))) for let in region.lets))


def _squeeze(region: Region) -> Region | None:
    """The region with its static size-1 axes and buffer dims removed; None if it has none or they stay."""
    units = {a for a, s in (*region.iters, *region.reduce_axes) if _unit(s)}
    buffers = (*region.inputs, *region.outputs)
    unit_dims = {b.name: tuple(k for k, d in enumerate(b.memref.shape) if _unit(d)) for b in buffers}
    if not units and not any(unit_dims.values()):
        return None
    if any(unit_dims[b.name] and b.memref.layout.kind != "row_major" for b in buffers):
        return None
    zero = {a: Expr.const(0) for a in units}
    names = tuple(a for a, _ in (*region.iters, *region.reduce_axes) if a not in units)
    order = tuple(a for a, _ in region.iters if a not in units)
    lets: dict[str, RNode] = {}
    alias: dict[str, str] = {}  # a let that became another let's value: its uses read that let
    memo: dict[int, RNode] = {}

    def drop(axes) -> tuple:
        return tuple(a for a in axes if a not in units)

    def go(n: RNode) -> RNode:
        if id(n) in memo:
            return memo[id(n)]
        src = []
        for s in n.src:  # a generator walk (ir/trampoline.py)
            src.append((yield go(s)))
        src = tuple(src)
        if n.op == R.READ:
            tensor, index = n.arg
            index = tuple(e.subs(zero) for e in index)
            dims = unit_dims.get(tensor, ())
            if any(not (index[k].is_const and index[k].constant == 0) for k in dims):
                raise _Keep
            out = read(tensor, (e for k, e in enumerate(index) if k not in dims), n.dtype, names)
        elif n.op == R.CONST:
            out = const(n.arg, n.dtype)
        elif n.op == R.REF:
            name = alias.get(n.arg, n.arg)
            out = ref(name, lets[name])
        elif n.op == R.PRED:
            guards = tuple(e.subs(zero) for e in n.arg)
            if any(g.is_const and g.constant < 0 for g in guards):
                raise _Keep  # a guard false everywhere: leave such a region as it is
            out = pred((g for g in guards if not g.is_const), names)
        elif n.op == R.UNARY:
            out = unary(n.arg, src[0], n.dtype)
        elif n.op == R.BINARY:
            out = binary(n.arg, src[0], src[1], n.dtype)
        elif n.op == R.SELECT:
            out = select(src[0], src[1], src[2], n.dtype)
        elif n.op == R.REDUCE:
            op, axes, init = n.arg
            kept = drop(axes)
            if kept:
                out = reduce(op, kept, src[0], n.dtype, init, order)
            elif src[0].dtype == n.dtype and init == {"sum": 0.0, "max": float("-inf"), "min": float("inf")}.get(op):
                out = src[0]  # a reduction over unit axes only: its one element
            else:
                raise _Keep
        elif n.op == R.BROADCAST:
            result_axes, result_shape, _ = n.arg
            keep = [k for k, a in enumerate(result_axes) if a not in units]
            out = broadcast(src[0], (result_axes[k] for k in keep), (result_shape[k] for k in keep))
            if out.arg[0] == src[0].axes:
                out = src[0]  # it only re-added unit axes
        elif n.op == R.TRANSPOSE:
            want = drop(n.axes)
            out = src[0] if want == src[0].axes else transpose(src[0], (src[0].axes.index(a) for a in want))
        elif n.op == R.ONLINE:
            axes, p_dtype, block, passes = n.arg
            out = online_softmax_sum(drop(axes), src[0], src[1], p_dtype, block, passes, order)
        else:  # pragma: no cover - every op is handled above
            raise _Keep
        memo[id(n)] = out
        return out

    try:
        new_lets = []
        for let in region.lets:
            e = trampoline.run(go(let.expr))
            if e.op == R.REF:
                alias[let.name] = e.arg
                continue
            lets[let.name] = e
            new_lets.append(Let(let.name, e))
    except _Keep:
        return None

    def buf(b: Buffer) -> Buffer:
        shape = tuple(d for k, d in enumerate(b.memref.shape) if k not in unit_dims[b.name])
        return replace(b, memref=replace(b.memref, shape=shape))

    return Region(region.name, tuple((a, s) for a, s in region.iters if a not in units),
                  tuple((a, s) for a, s in region.reduce_axes if a not in units),
                  tuple(buf(b) for b in region.inputs), tuple(buf(b) for b in region.outputs), tuple(new_lets),
                  tuple(Yield(alias.get(y.src, y.src), y.dst, y.cast, drop(y.axes)) for y in region.yields),
                  region.fp32_pipes)


class _Keep(Exception):
    """This region's unit axes stay (squeezing would change what it computes)."""

