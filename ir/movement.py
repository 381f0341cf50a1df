"""The index map of each Tiny IR movement op: output index -> input index (docs/DESIGN.md §IndexBook).

One home for the local AxisMaps: the IndexBook composes them into reads (analyses/indexbook.py),
region synthesis folds them into RB-SSA read maps (egraph/region_synth.py) and the rule helpers
fold them into the e-graph's Read maps (egraph/ixfns.py). Each map is a tuple of Exprs, one per
input axis, over the output axes ``i0, i1, ..``; it is affine + floordiv by constants, else
:class:`NonAffine` says why.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from .expr import Expr
from .tiny import Ops, UOp


class NonAffine(Exception):
    """The movement needs a non-affine index map (the reason is the message)."""


@dataclass(frozen=True)
class LocalMap:
    exprs: tuple  # Expr per input axis, over the output axes i0..
    guard: tuple = ()  # Expr, each >= 0 on the in-bounds piece
    pad_value: Any = None  # PAD only: the value outside the guard


def var(k: int) -> Expr:
    return Expr.var(f"i{k}")


def local_map(node: UOp, src: UOp) -> LocalMap:
    fn = _LOCAL.get(node.op)
    if fn is None:
        raise KeyError(f"{node.op.name} is not a movement op")
    lm = fn(node, src)
    for e in lm.exprs + lm.guard:
        if not e.is_affine:
            raise NonAffine(f"{node.op.name} index {e} multiplies symbols with indices (not affine)")
    return lm


def permute_exprs(perm: Sequence[int]) -> tuple:
    """PERMUTE: output axis j is input axis perm[j]."""
    exprs = [Expr.const(0)] * len(perm)
    for j, p in enumerate(perm):
        exprs[p] = var(j)
    return tuple(exprs)


def expand_exprs(in_shape: tuple) -> tuple:
    """EXPAND: a size-1 input axis is read at 0, every other one at the same output axis."""
    return tuple(Expr.const(0) if d == 1 else var(k) for k, d in enumerate(in_shape))


def pad_map(in_shape: tuple, pads: Sequence, value: Any) -> LocalMap:
    """PAD: the input index is the output index minus the low pad, in bounds where the guards hold."""
    exprs, guard = [], []
    for k, ((lo, hi), d) in enumerate(zip(pads, in_shape, strict=True)):
        e = var(k) - lo
        exprs.append(e)
        if lo != 0:
            guard.append(e)
        if hi != 0:
            guard.append(Expr.of(d) - 1 - e)
    return LocalMap(tuple(exprs), tuple(guard), value)


def shrink_exprs(lo: Sequence, step: Sequence) -> tuple:
    """SHRINK: input index lo + step * output index."""
    return tuple(Expr.of(a) + var(k) * st for k, (a, st) in enumerate(zip(lo, step, strict=True)))


def flip_exprs(in_shape: tuple, axes: Iterable[int]) -> tuple:
    """FLIP: d - 1 - i along the flipped axes."""
    axes = set(axes)
    return tuple(Expr.of(d) - 1 - var(k) if k in axes else var(k) for k, d in enumerate(in_shape))


_LOCAL = {
    Ops.PERMUTE: lambda n, s: LocalMap(permute_exprs(n.arg["perm"])),
    Ops.EXPAND: lambda n, s: LocalMap(expand_exprs(s.shape)),
    Ops.PAD: lambda n, s: pad_map(s.shape, n.arg["pad"], n.arg["value"]),
    Ops.SHRINK: lambda n, s: LocalMap(shrink_exprs(n.arg["lo"], n.arg["step"])),
    Ops.FLIP: lambda n, s: LocalMap(flip_exprs(s.shape, n.arg["axes"])),
    Ops.VIEW: lambda n, s: LocalMap(tuple(n.arg["index_map"])),
    Ops.RESHAPE: lambda n, s: LocalMap(reshape_exprs(s.shape, n.shape)),
}


def reshape_exprs(old: tuple, new: tuple) -> tuple:
    """Input index per old axis over the new axes i0.. (linearize -> delinearize, group by group)."""
    old_nz = [k for k, d in enumerate(old) if d != 1]
    new_nz = [k for k, d in enumerate(new) if d != 1]
    po, pn = [Expr.const(1)], [Expr.const(1)]
    for k in old_nz:
        po.append(po[-1] * Expr.of(old[k]))
    for k in new_nz:
        pn.append(pn[-1] * Expr.of(new[k]))
    where_new = {p: b for b, p in enumerate(pn)}
    cuts = [(a, where_new[p]) for a, p in enumerate(po) if p in where_new]
    if cuts[-1] != (len(old_nz), len(new_nz)):
        raise NonAffine(f"reshape {list(map(str, old))} -> {list(map(str, new))}: element counts do not align")
    exprs = [Expr.const(0)] * len(old)
    for (a0, b0), (a1, b1) in zip(cuts, cuts[1:]):
        olds, news = old_nz[a0:a1], new_nz[b0:b1]
        if len(olds) == 1 and len(news) == 1:
            exprs[olds[0]] = var(news[0])
            continue
        lin, stride = Expr.const(0), Expr.const(1)
        for j in reversed(news):
            lin = lin + var(j) * stride
            stride = stride * Expr.of(new[j])
        ostride: Expr = Expr.const(1)
        for pos in range(len(olds) - 1, -1, -1):
            k = olds[pos]
            if not ostride.is_const:
                raise NonAffine(f"reshape {list(map(str, old))} -> {list(map(str, new))} divides by the symbolic "
                                f"stride {ostride}")
            e = lin.floordiv(ostride.constant)
            if pos > 0:
                if not Expr.of(old[k]).is_const:
                    raise NonAffine(f"reshape {list(map(str, old))} -> {list(map(str, new))} takes an index modulo "
                                    f"the symbolic size {old[k]}")
                e = e.mod(Expr.of(old[k]).constant)
            exprs[k] = e
            ostride = ostride * Expr.of(old[k])
        if not lin.is_affine:
            raise NonAffine(f"reshape {list(map(str, old))} -> {list(map(str, new))} linearizes with symbolic strides")
    return tuple(exprs)
