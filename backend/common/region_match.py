"""Reading an extracted RB-SSA region the way every kernel kind's recogniser does: Refs followed to their
lets, the one yield, axis variables and sizes, the row-major inputs, the aliases of a tensor bound in two
roles, and the binding of spec tensors back to region tensors.

A kind's ``bind(region)`` returns its binding or a :class:`NoBind` with the reason ("not a GEMM-family
region: it has 2 reductions; ..."). Inside a recogniser the first mismatch found ends the match: the helpers
here take ``reject(why)``, which raises :class:`Mismatch`, and :func:`recogniser` turns it into the NoBind.
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import Any, Callable, Mapping, NoReturn

import numpy as np

from ...ir import trampoline
from ...ir.expr import Expr
from ...ir.region import R, Region, RNode
from ...ir.trampoline import Walk
from .spec import EpilogueOp

Reject = Callable[[str], NoReturn]


@dataclass(frozen=True)
class NoBind:
    """A kind's typed "no": the region is not one of its kernels, and why."""
    reason: str


class Mismatch(Exception):
    """The early exit of a recogniser (its message is the reason); :func:`recogniser` makes it a NoBind."""


def recogniser(match: Callable[..., Any]) -> Callable[..., Any]:
    """match(region, ...) -> binding, raising Mismatch on the first mismatch, as a function that returns the
    binding or NoBind(reason)."""
    @functools.wraps(match)
    def bind(*args: Any, **kw: Any) -> Any:
        try:
            return match(*args, **kw)
        except Mismatch as m:
            return NoBind(str(m))
    return bind


class Lets:
    """Follows Ref nodes to the let they name, so the matcher sees one expression DAG."""

    def __init__(self, r: Region):
        self.map = r.let_map

    def __call__(self, n: RNode) -> RNode:
        while n.op == R.REF:
            n = self.map[n.arg]
        return n

    def children(self, n: RNode) -> tuple:
        return tuple(self(s) for s in n.src)


def walk(lets: Lets, top: RNode, stop: RNode | None = None) -> list[RNode]:
    """Every node reachable from top (Refs followed), not descending below stop."""
    out, seen, stack = [], set(), [top]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        out.append(n)
        if n is not stop:
            stack.extend(lets.children(n))
    return out


def same_value(lets: Lets, a: RNode, b: RNode, rename: Mapping[str, str] | None = None) -> bool:
    """a, with its axes renamed (rename), computes the same value as b at every point: equal expressions
    once Refs are followed and broadcasts and transposes dropped (RB-SSA axes are named, so a broadcast or a
    transpose only says where a value is read, not what it is). A reduction over a fresh key axis that recomputes the scores it reduces
    is then the same reduction as one over the scores themselves."""
    ren = {k: Expr.var(v) for k, v in (rename or {}).items()}
    names = dict(rename or {})

    def key(n: RNode, memo: dict, subs: dict, nm: dict) -> Walk:  # a walk (ir/trampoline.py): no frame per op
        n = lets(n)
        if id(n) in memo:
            return memo[id(n)]
        while n.op in (R.BROADCAST, R.TRANSPOSE):
            n = lets(n.src[0])
        kids = []
        for c in n.src:
            kids.append((yield key(c, memo, subs, nm)))
        kids = tuple(kids)
        if n.op == R.READ:
            out = ("read", n.arg[0], tuple(str(e.subs(subs)) for e in n.arg[1]), n.dtype)
        elif n.op == R.PRED:
            out = ("pred", tuple(sorted(str(g.subs(subs)) for g in n.arg)))
        elif n.op == R.REDUCE:
            op, axes, init = n.arg
            out = ("reduce", op, tuple(nm.get(x, x) for x in axes), init, n.dtype, kids)
        elif n.op == R.ONLINE:
            axes, *rest = n.arg
            out = ("online", tuple(nm.get(x, x) for x in axes), tuple(rest), kids)
        else:
            out = (n.op.value, n.arg, n.dtype, kids)
        memo[id(n)] = out
        return out

    return trampoline.run(key(a, {}, ren, names)) == trampoline.run(key(b, {}, {}, {}))


def axis_var(e: Expr) -> str | None:
    """The axis name when e is a bare variable, else None."""
    vs = e.variables()
    if len(vs) == 1:
        v = next(iter(vs))
        if e == Expr.var(v):
            return v
    return None


def axis_size(r: Region, axis: str, reject: Reject) -> "int | str":
    """An axis size as a spec size: an int or a symbol name."""
    d = r.axis_sizes[axis]
    if isinstance(d, int):
        return d
    name = axis_var(Expr.of(d))
    if name is None:
        reject(f"axis {axis} has the composite size {d}; the template takes ints or single symbols")
    return name


def the_yield(r: Region, lets: Lets, reject: Reject) -> tuple[Any, Any, RNode]:
    """(the one yield, the one output, the let node it yields)."""
    if len(r.yields) != 1 or len(r.outputs) != 1:
        reject(f"it writes {len(r.outputs)} outputs; the template writes one")
    y = r.yields[0]
    if y.src not in lets.map:
        reject(f"it yields {y.src!r}, which no let defines")
    return y, r.outputs[0], lets.map[y.src]


def row_major_input(r: Region, tensor: str, what: str, reject: Reject):
    """The region input read as `tensor`, which must be row-major."""
    buf = next((b for b in r.inputs if b.name == tensor), None)
    if buf is None:
        reject(f"it reads {tensor!r}, which is not one of its inputs")
    if buf.memref.layout.kind != "row_major":
        reject(f"{what} {tensor!r} has layout {buf.memref.layout.kind}; the template reads row-major tensors")
    return buf


class Aliases:
    """The spec's name for each region tensor in each role: itself, or ``T.role`` when T already has a role
    (x @ x^T, x @ W + x, conv(x) + x, Q and K one tensor): the template binds each parameter once, the runner
    passes the buffer twice. ``pairs``: (spec name, region tensor), in binding order."""

    def __init__(self, r: Region):
        self.taken = {b.name for b in (*r.inputs, *r.outputs)}
        self.used = {r.outputs[0].name}
        self.pairs: list[tuple[str, str]] = []

    def __call__(self, tensor: str, role: str) -> str:
        names = (tensor if k == 0 else f"{tensor}.{role}" + (str(k) if k > 1 else "") for k in itertools.count())
        alias = next(x for x in names if x not in self.used and (x == tensor or x not in self.taken))
        self.used.add(alias)
        self.pairs.append((alias, tensor))
        return alias

    def epilogue(self, ops: tuple[EpilogueOp, ...]) -> tuple[EpilogueOp, ...]:
        """The epilogue with each tensor it reads under its spec name (role: the op's kind)."""
        return tuple(EpilogueOp(op.kind, self(op.tensor, op.kind), op.axis, op.dtype, op.value) if op.tensor else op
                     for op in ops)


@dataclass(frozen=True)
class RegionBinding:
    """A region's spec and, for each tensor the kernel reads, the region tensor behind it."""
    spec: Any
    tensors: tuple  # ((spec tensor name, region tensor name), ...), in spec.inputs order

    def arrays(self, arrays: Mapping[str, Any], env: Mapping[str, int] | None = None, reshape=np.reshape) -> dict:
        """{spec tensor name: the region tensor's array in the spec's shape} (size-1 dims a read fixes at 0
        dropped; reshape is numpy's or a device view's)."""
        shapes = self.spec.shapes(env)
        out = {}
        for name, tensor in self.tensors:
            x = arrays[tensor]
            out[name] = x if tuple(x.shape) == shapes[name] else reshape(x, shapes[name])
        return out
