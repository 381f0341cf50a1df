"""Building Tiny IR programs node by node, with right-aligned broadcasting made explicit.

The frontend lowering and the Tiny IR loader both insert RESHAPE+EXPAND for broadcasts through
:func:`Builder.broadcast`, so the rule (and its E1001) lives in one place (docs/DESIGN.md §Tiny IR).
"""
from __future__ import annotations

from typing import Any, Sequence

from .diagnostics import fail
from .dtypes import DType, promote
from .shapes import Dim, fmt_shape
from .infer import make_uop
from .tiny import Ops, Program, UOp


class Builder:
    def __init__(self, prefix: str = "n"):
        self.nodes: list[UOp] = []
        self._taken: set[str] = set()
        self._reserved: set[str] = set()
        self._prefix = prefix
        self._count = 0
        self._memo: dict = {}  # (op, src, arg) -> node, so identical views/consts are shared

    # ---- plumbing ---------------------------------------------------------------------------
    def reserve(self, ids) -> None:
        """Ids the caller will define later: fresh() never hands them out."""
        self._reserved |= set(ids)

    def fresh(self, hint: str | None = None) -> str:
        if hint and hint not in self._taken and hint not in self._reserved:
            self._taken.add(hint)
            return hint
        while True:
            nid = f"{self._prefix}{self._count}"
            self._count += 1
            if nid not in self._taken and nid not in self._reserved:
                self._taken.add(nid)
                return nid

    def add(self, op: Ops, src: Sequence[UOp], arg: dict | None = None, *, at: str, nid: str | None = None,
            tag: str | None = None) -> UOp:
        node = make_uop("?", op, list(src), arg, tag, at=at)
        key = (op, node.src, node.arg)
        if nid is None and key in self._memo and op != Ops.INPUT:
            return self._memo[key]
        nid_final = nid or self.fresh()
        if tag is None and at != nid_final:
            tag = at  # the user's node this one was lowered from (diagnostics and dumps name it)
        node = UOp(nid_final, node.op, node.src, node.arg, node.dtype, node.shape, tag)
        if nid is not None:
            if nid in self._taken:
                fail("DuplicateDefinition", at, f"node id {nid!r} is defined twice")
            self._taken.add(nid)
        self._memo.setdefault(key, node)
        self.nodes.append(node)
        return node

    def program(self, outputs: Sequence[tuple[str, UOp]]) -> Program:
        live = _live(self.nodes, [n for _, n in outputs])
        return Program(tuple(n for n in self.nodes if n.id in live), tuple((name, n.id) for name, n in outputs))

    # ---- leaves -----------------------------------------------------------------------------
    def input(self, tensor_id: str, dtype: DType, shape: Sequence[Dim], *, at: str, nid: str | None = None) -> UOp:
        return self.add(Ops.INPUT, [], {"tensor_id": tensor_id, "dtype": dtype, "shape": tuple(shape)}, at=at, nid=nid)

    def const(self, value: Any, dtype: DType, shape: Sequence[Dim] = (), *, at: str) -> UOp:
        return self.add(Ops.CONST, [], {"value": value, "dtype": dtype, "shape": tuple(shape)}, at=at)

    def const_like(self, value: Any, x: UOp, *, at: str, dtype: DType | None = None) -> UOp:
        return self.const(value, dtype or x.dtype, x.shape, at=at)

    # ---- movement ---------------------------------------------------------------------------
    def reshape(self, x: UOp, shape: Sequence[Dim], *, at: str) -> UOp:
        if tuple(shape) == x.shape:
            return x
        return self.add(Ops.RESHAPE, [x], {"result_shape": tuple(shape)}, at=at)

    def permute(self, x: UOp, perm: Sequence[int], *, at: str) -> UOp:
        if list(perm) == list(range(x.ndim)):
            return x
        return self.add(Ops.PERMUTE, [x], {"perm": tuple(perm)}, at=at)

    def expand(self, x: UOp, shape: Sequence[Dim], *, at: str) -> UOp:
        if tuple(shape) == x.shape:
            return x
        return self.add(Ops.EXPAND, [x], {"result_shape": tuple(shape)}, at=at)

    def pad(self, x: UOp, pads: Sequence[tuple], value: Any = 0, *, at: str) -> UOp:
        if all(lo == 0 and hi == 0 for lo, hi in pads):
            return x
        return self.add(Ops.PAD, [x], {"pad": tuple(tuple(p) for p in pads), "value": value}, at=at)

    def shrink(self, x: UOp, lo: Sequence[Dim], hi: Sequence[Dim], step: Sequence[int] | None = None, *, at: str) -> UOp:
        step = tuple(step or [1] * x.ndim)
        if all(l == 0 for l in lo) and tuple(hi) == x.shape and all(s == 1 for s in step):
            return x
        return self.add(Ops.SHRINK, [x], {"lo": tuple(lo), "hi": tuple(hi), "step": step}, at=at)

    def flip(self, x: UOp, axes: Sequence[int], *, at: str) -> UOp:
        return x if not axes else self.add(Ops.FLIP, [x], {"axes": tuple(axes)}, at=at)

    def view(self, x: UOp, shape: Sequence[Dim], index_map: Sequence[Any], *, at: str) -> UOp:
        return self.add(Ops.VIEW, [x], {"result_shape": tuple(shape), "index_map": tuple(index_map)}, at=at)

    # ---- compute ----------------------------------------------------------------------------
    def cast(self, x: UOp, to: DType, *, at: str) -> UOp:
        return x if x.dtype == to else self.add(Ops.CAST, [x], {"to": to}, at=at)

    def alu(self, op: Ops, *xs: UOp, at: str) -> UOp:
        return self.add(op, list(self.broadcast(list(xs), at=at)), at=at)

    def reduce(self, x: UOp, op: str, axes: Sequence[int], dtype: DType, *, at: str) -> UOp:
        return self.add(Ops.REDUCE, [x], {"op": op, "axes": tuple(axes), "dtype": dtype}, at=at)

    def gather(self, x: UOp, idx: UOp, axis: int, elements: bool = False, *, at: str) -> UOp:
        return self.add(Ops.GATHER, [x, idx], {"axis": axis, "elements": elements}, at=at)

    def promote(self, xs: list[UOp], *, at: str) -> list[UOp]:
        dt = xs[0].dtype
        for x in xs[1:]:
            dt = promote(dt, x.dtype)
        return [self.cast(x, dt, at=at) for x in xs]

    def broadcast_shape(self, shapes: list[tuple], *, at: str) -> tuple:
        rank = max(len(s) for s in shapes)
        out = []
        for k in range(rank):
            sizes = [s[len(s) - rank + k] for s in shapes if len(s) - rank + k >= 0]
            big = [d for d in sizes if d != 1]
            if any(d != big[0] for d in big):
                fail("BroadcastMismatch", at, "right-aligned broadcast of " + " and ".join(fmt_shape(s) for s in shapes)
                     + f": sizes {' vs '.join(str(d) for d in dict.fromkeys(big))} differ on axis {k - rank}")
            out.append(big[0] if big else 1)
        return tuple(out)

    def broadcast(self, xs: list[UOp], *, at: str) -> list[UOp]:
        """Right-aligned broadcast: prepend size-1 axes (RESHAPE), then EXPAND."""
        if all(x.shape == xs[0].shape for x in xs):
            return xs
        target = self.broadcast_shape([x.shape for x in xs], at=at)
        out = []
        for x in xs:
            if x.shape != target:
                x = self.reshape(x, (1,) * (len(target) - x.ndim) + tuple(x.shape), at=at)
                x = self.expand(x, target, at=at)
            out.append(x)
        return out


def _live(nodes: list[UOp], roots: list[UOp]) -> set:
    by_id = {n.id: n for n in nodes}
    live: set = set()
    stack = [r.id for r in roots]
    while stack:
        nid = stack.pop()
        if nid in live:
            continue
        live.add(nid)
        stack.extend(by_id[nid].src)
    return live
