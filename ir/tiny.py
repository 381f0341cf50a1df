"""Tiny IR: tinygrad's UOp vocabulary as frozen, hashable nodes (docs/DESIGN.md §Tiny IR).

A node is ``{id, uop, src, arg, tag}``; its dtype and shape are derived by :mod:`.infer` when the
node is built, so every UOp in a :class:`Program` is well typed. Binary operands are same-shape
(broadcasts are explicit EXPANDs), REDUCE removes its axes and carries its accumulation dtype.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from .dtypes import DType
from .shapes import Shape


class Ops(enum.Enum):
    # I/O and constants
    INPUT = "INPUT"
    CONST = "CONST"
    # movement (views: no copy)
    RESHAPE = "RESHAPE"
    PERMUTE = "PERMUTE"
    EXPAND = "EXPAND"
    PAD = "PAD"
    SHRINK = "SHRINK"
    FLIP = "FLIP"
    VIEW = "VIEW"
    # unary
    CAST = "CAST"
    NEG = "NEG"
    RELU = "RELU"
    EXP2 = "EXP2"
    LOG2 = "LOG2"
    SQRT = "SQRT"
    RSQRT = "RSQRT"
    RECIPROCAL = "RECIPROCAL"
    # binary
    ADD = "ADD"
    SUB = "SUB"
    MUL = "MUL"
    FDIV = "FDIV"
    MAX = "MAX"
    MIN = "MIN"
    POW = "POW"
    CMPLT = "CMPLT"
    CMPEQ = "CMPEQ"
    CMPNE = "CMPNE"
    # ternary
    WHERE = "WHERE"
    # reductions
    REDUCE = "REDUCE"
    CONTRACT = "CONTRACT"
    # a data-dependent read (non-affine: a region boundary)
    GATHER = "GATHER"

    def __repr__(self) -> str:
        return f"Ops.{self.name}"


class GroupOp:
    Movement = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP, Ops.VIEW})
    Unary = frozenset({Ops.CAST, Ops.NEG, Ops.RELU, Ops.EXP2, Ops.LOG2, Ops.SQRT, Ops.RSQRT, Ops.RECIPROCAL})
    Binary = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX, Ops.MIN, Ops.POW,
                        Ops.CMPLT, Ops.CMPEQ, Ops.CMPNE})
    Ternary = frozenset({Ops.WHERE})
    Compare = frozenset({Ops.CMPLT, Ops.CMPEQ, Ops.CMPNE})
    Commutative = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.MIN, Ops.CMPEQ, Ops.CMPNE})
    Elementwise = Unary | Binary | Ternary
    Reduce = frozenset({Ops.REDUCE, Ops.CONTRACT})
    Leaf = frozenset({Ops.INPUT, Ops.CONST})
    Indirect = frozenset({Ops.GATHER})  # reads at indices computed at run time


REDUCE_OPS = ("SUM", "MAX", "MIN")


class Arg(Mapping):
    """An immutable, hashable mapping of a node's attributes (values are tuples, not lists)."""

    __slots__ = ("_items", "_d")

    def __init__(self, d: Mapping[str, Any] | None = None):
        items = tuple(sorted((d or {}).items()))
        object.__setattr__(self, "_items", items)
        object.__setattr__(self, "_d", dict(items))

    def __getitem__(self, k: str) -> Any:
        return self._d[k]

    def __iter__(self) -> Iterator[str]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Arg) and self._items == other._items

    def __repr__(self) -> str:
        return f"Arg({self._d!r})"

    def __setattr__(self, *_):
        raise AttributeError("Arg is immutable")


@dataclass(frozen=True)
class UOp:
    id: str
    op: Ops
    src: tuple  # node ids
    arg: Arg
    dtype: DType
    shape: Shape
    tag: str | None = None

    @property
    def ndim(self) -> int:
        return len(self.shape)


@dataclass(frozen=True)
class Program:
    """A pure DAG of UOps in topological order, with the named outputs of its signature."""

    nodes: tuple  # UOp, topological order
    outputs: tuple  # ((tensor name, node id), ...)

    def __post_init__(self):
        object.__setattr__(self, "_by_id", {n.id: n for n in self.nodes})

    def __hash__(self) -> int:  # programs key the per-program caches (lru_cache of the program): hashed once
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.nodes, self.outputs))
            object.__setattr__(self, "_hash", h)
        return h

    def __getitem__(self, node_id: str) -> UOp:
        return self._by_id[node_id]  # type: ignore[attr-defined]

    def __contains__(self, node_id: str) -> bool:
        return node_id in self._by_id  # type: ignore[attr-defined]

    @property
    def inputs(self) -> tuple:
        """The INPUT nodes, in program order."""
        return tuple(n for n in self.nodes if n.op == Ops.INPUT)

    def consumers(self) -> dict:
        out: dict = {n.id: [] for n in self.nodes}
        for n in self.nodes:
            for s in n.src:
                out[s].append(n.id)
        return out

    def symbols(self) -> frozenset:
        from .shapes import symbols
        out: set = set()
        for n in self.inputs:
            out |= symbols(n.shape)
        return frozenset(out)
