"""Shapes whose dims are ints or symbolic expressions (docs/DESIGN.md §Frontend IR, §IndexBook).

A Dim is an ``int`` or a non-constant :class:`~polysat.ir.expr.Expr` (a symbol such as ``M``, or a
derived size such as ``(H - 1)//2 + 1``). Constant expressions are always folded to ``int`` so that
equal dims compare equal.
"""
from __future__ import annotations

from math import prod
from typing import Iterable, Mapping, Union

from .expr import Expr

Dim = Union[int, Expr]
Shape = tuple


def dim(x: "int | str | Expr") -> Dim:
    if type(x) is int:
        return x
    e = Expr.of(x)
    return e.constant if e.is_const else e


def shape_of(xs: Iterable) -> Shape:
    return tuple(dim(x) for x in xs)


def is_static(s: Shape) -> bool:
    return all(isinstance(d, int) for d in s)


def numel(s: Shape) -> Dim:
    if all(type(d) is int for d in s):
        return prod(s)
    out: Expr = Expr.const(1)
    for d in s:
        out = out * Expr.of(d)
    return dim(out)


def bind(s: Shape, env: Mapping[str, int]) -> tuple:
    """Concrete shape under a symbol binding."""
    return tuple(d if isinstance(d, int) else int(d.evaluate(env)) for d in s)


def subs(s: Shape, env: Mapping[str, "int | Expr"]) -> Shape:
    return tuple(d if isinstance(d, int) else dim(d.subs(env)) for d in s)


def symbols(s: Shape) -> frozenset:
    out: set = set()
    for d in s:
        if not isinstance(d, int):
            out |= d.variables()
    return frozenset(out)


def dim_json(d: Dim):
    return d if isinstance(d, int) else str(d)


def fmt_shape(s: Shape) -> str:
    return "[" + ", ".join(str(d) for d in s) + "]"

