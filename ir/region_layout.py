"""Store an intermediate in the dim order its readers want (docs/DESIGN.md §RB-SSA: a MemRef's shape and a
yield's axes say how a value lies in memory).

Region synthesis stores a value in the order of its producer's axes: attention's output is [B, H, S, E]
while the output projection reads it as one row of H*E features per token, ``o[b, f//E, s, f - E*(f//E)]``,
which no tensor-core template takes. Stored as [B, S, H, E] instead, the same read is ``o[b, s, f]`` over
the packed view [B, S, H*E] (ir/region_squeeze.py ``packed_view``): a plain row-major matrix. The producer
writes the value with its yield's axes permuted (its kernel writes with those strides); nothing else
changes, so playback gives the same numbers.

``store_for_readers`` picks, for each intermediate (written by one yield, not a program output, read by
some region through a map that has no packed view), the permutation of its dims under which the most of
its reads have a packed view, if that is more than as it is, and rewrites the producer's yield and output
and every reader's input and reads. Reads whose present axes would change order outside a reduction body
(where operands must agree on the order) keep the tensor as it is.
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import replace

from . import trampoline
from .expr import Expr
from .region import (R, Buffer, Let, Region, RNode, Yield, binary, online_softmax_sum, read, reduce, ref,
                     select, transpose, unary, walk)
from .region_squeeze import packed_view

MAX_RANK = 6  # permutations tried: rank! (720 at most)


class _Keep(Exception):
    """This permutation would reorder a value's axes where the order matters."""


class _ReadIndex:
    """Each region's reads by tensor, walked once per region (a value read by many regions, DenseNet's
    concatenated features, is scored under every permutation of its dims without walking them again)."""

    def __init__(self):
        self.by_region: dict = {}  # id(region) -> (region, {tensor: [read maps]})

    def maps(self, r: Region, tensor: str) -> list:
        got = self.by_region.get(id(r))
        if got is None or got[0] is not r:
            by: dict = {}
            for let in r.lets:
                for n in walk(let.expr):
                    if n.op == R.READ:
                        by.setdefault(n.arg[0], {})[id(n)] = n.arg[1]
            got = self.by_region[id(r)] = (r, {t: list(m.values()) for t, m in by.items()})
        return got[1].get(tensor, [])


def _viewable(reads: dict, shape: tuple, perm: tuple) -> int:
    """How many reads (``{(index map, axis sizes): count}``) of a tensor stored with its dims in perm order have
    a packed view."""
    pshape = tuple(shape[p] for p in perm)
    return sum(k for (m, sizes), k in reads.items() if _has_packed_view(tuple(m[p] for p in perm), pshape, sizes))


def _offset_in_every_order(index: tuple, sizes: tuple, shape: tuple) -> bool:
    """Whether the read ``index`` of a row-major buffer of ``shape`` has no packed view whatever the order of its
    dims: its linear address keeps a term without an axis (which ``packed_view`` refuses) in every order, since
    each index's terms without an axis add up to a number, one of them nonzero and none of the other sign, and
    every dim is a number (so every stride is positive and those numbers never cancel). DenseNet-121: 24,735 of
    25,884 reads scored, each under every order of its dims, before."""
    if not all(isinstance(d, int) for d in shape):
        return False
    axes = {a for a, _ in sizes}
    offsets = []
    for e in index:
        free = [(m, c) for m, c in Expr.of(e).terms if not any(isinstance(a, str) and a in axes for a in m)]
        if any(m for m, _ in free):  # a symbol, or a floordiv that other dims' terms may cancel
            return False
        offsets.append(sum(c for _, c in free))
    return any(offsets) and (all(o >= 0 for o in offsets) or all(o <= 0 for o in offsets))


@functools.lru_cache(maxsize=1 << 16)
def _has_packed_view(index: tuple, shape: tuple, sizes: tuple) -> bool:
    """packed_view(...) is not None, kept: the search prices many partitions whose kernels read the same
    values through the same maps (SqueezeNet: 53k calls, 71 s, before)."""
    return packed_view(index, shape, dict(sizes)) is not None


def _rebuild(n: RNode, src: tuple, order: tuple) -> RNode:
    """n over new operands, its axes recomputed by the constructors."""
    if n.op == R.UNARY:
        return unary(n.arg, src[0], n.dtype)
    if n.op == R.BINARY:
        return binary(n.arg, src[0], src[1], n.dtype)
    if n.op == R.SELECT:
        return select(src[0], src[1], src[2], n.dtype)
    if n.op == R.REDUCE:
        op, axes, init = n.arg
        return reduce(op, axes, src[0], n.dtype, init, order)
    if n.op == R.ONLINE:
        axes, p, block, passes = n.arg
        return online_softmax_sum(axes, src[0], src[1], p, block, passes, order)
    raise _Keep  # BroadcastInDim, Transpose: fixed axes over an operand whose order moved


def _permute_reads(r: Region, tensor: str, perm: tuple) -> Region:
    """r reading tensor with its dims in perm order (its input's shape and every read's map permuted)."""
    order = tuple(a for a, _ in (*r.iters, *r.reduce_axes))
    memo: dict = {}

    def go(n: RNode, in_body: bool) -> RNode:
        if id(n) in memo:
            return memo[id(n)]
        if n.op == R.READ and n.arg[0] == tensor:
            out = read(tensor, (n.arg[1][p] for p in perm), n.dtype, order)
        else:
            body = in_body or n.op in (R.REDUCE, R.ONLINE)
            src = []
            for s in n.src:  # a generator walk (ir/trampoline.py): trees as deep as a fused chain
                src.append((yield go(s, body)))
            src = tuple(src)
            out = n if all(a is b for a, b in zip(src, n.src)) else _rebuild(n, src, order)
        if out.axes != n.axes and not in_body:
            raise _Keep
        memo[id(n)] = out
        return out

    lets = tuple(Let(let.name, trampoline.run(go(let.expr, False))) for let in r.lets)
    return replace(r, inputs=tuple(_permuted(b, perm) if b.name == tensor else b for b in r.inputs), lets=lets)


def _permuted(b: Buffer, perm: tuple) -> Buffer:
    return replace(b, memref=replace(b.memref, shape=tuple(b.memref.shape[p] for p in perm)))


def _inversions(p: tuple) -> int:
    return sum(a > b for a, b in itertools.combinations(p, 2))


def _permute_yield(r: Region, y: Yield, perm: tuple) -> Region:
    """r writing y's output with its dims in perm order: the value transposed to the permuted axes by a new
    let, the yield's axes and the output's shape permuted."""
    v = r.let_map[y.src]
    at = tuple(v.axes.index(y.axes[p]) for p in perm)
    name = next(n for n in (f"{y.src}_t{k or ''}" for k in range(len(r.lets) + 1)) if n not in r.let_map)
    let = Let(name, transpose(ref(y.src, v), at))
    return replace(r, outputs=tuple(_permuted(o, perm) if o.name == y.dst else o for o in r.outputs),
                   lets=(*r.lets, let),
                   yields=tuple(Yield(name, x.dst, x.cast, tuple(y.axes[p] for p in perm)) if x is y else x
                                for x in r.yields))


def store_for_readers(regions: list[Region]) -> list[Region]:
    """The regions with each intermediate stored in the dim order most of its reads view as packed
    matrices (module docstring)."""
    regions = list(regions)
    index = _ReadIndex()
    for w, r in enumerate(list(regions)):
        for b in r.outputs:
            ys = [y for y in r.yields if y.dst == b.name]
            if b.program_output or len(ys) != 1 or b.memref.layout.kind != "row_major":
                continue
            rank = len(b.memref.shape)
            readers = [k for k, x in enumerate(regions) if k != w and any(i.name == b.name for i in x.inputs)]
            if not readers or rank < 2 or rank > MAX_RANK:
                continue
            shape = tuple(b.memref.shape)
            reads: dict = {}  # (index map, axis sizes) -> how many reads
            for k in readers:
                sizes = tuple(sorted(regions[k].axis_sizes.items()))
                for m in index.maps(regions[k], b.name):
                    reads[(m, sizes)] = reads.get((m, sizes), 0) + 1
            reads = {key: k for key, k in reads.items() if not _offset_in_every_order(*key, shape)}
            if not reads:  # (a concatenation's pieces, a convolution's shifted windows)
                continue
            ident = tuple(range(rank))
            base = _viewable(reads, shape, ident)
            if base == sum(reads.values()):
                continue
            score = {p: _viewable(reads, shape, p) for p in itertools.permutations(range(rank))}
            best = max(score, key=lambda p: (score[p], p[-1] == rank - 1, -_inversions(p), [-x for x in p]))
            if best == ident or score[best] <= base:
                continue
            try:
                new_readers = {k: _permute_reads(regions[k], b.name, best) for k in readers}
            except _Keep:
                continue
            regions[w] = _permute_yield(regions[w], ys[0], best)
            for k, x in new_readers.items():
                regions[k] = x
    return regions
