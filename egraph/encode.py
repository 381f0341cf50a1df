"""Canonical string encodings of term attributes, shared by the loader, the rule helpers and the
converter back to Tiny IR. Equal attributes give equal strings (dims and index expressions are
canonical :class:`~polysat.ir.expr.Expr` texts), so egglog can compare them as primitives.

shape ``[M, N, 64]``; tuple (map, perm, axes, dims) ``(i0, 2*i1 + 1)``; pads, shrink specs and guards as
``:``/``;``-separated rows (no quotes: every attribute embeds in an egglog string literal).
"""
from __future__ import annotations

import math
from functools import lru_cache

from ..ir.dtypes import DType
from ..ir.expr import Expr
from ..ir.shapes import dim


def shape(s) -> str:
    return "[" + ", ".join(str(d) for d in s) + "]"


def tup(xs) -> str:
    return "(" + ", ".join(str(x) for x in xs) + ")"


def _items(text: str) -> list:
    body = text.strip()[1:-1].strip()
    return [p.strip() for p in body.split(",")] if body else []


@lru_cache(maxsize=65536)  # the rule helpers parse the same few attribute texts again and again
def parse_shape(text: str) -> tuple:
    return tuple(dim(p) for p in _items(text))


@lru_cache(maxsize=65536)
def parse_map(text: str) -> tuple:
    return tuple(Expr.of(p) for p in _items(text))


@lru_cache(maxsize=65536)
def parse_ints(text: str) -> tuple:
    return tuple(int(p) for p in _items(text))


def pads(p) -> str:
    """``lo:hi`` per axis, ``;``-separated (no quotes, so it embeds in egglog strings)."""
    return ";".join(f"{lo}:{hi}" for lo, hi in p)


@lru_cache(maxsize=65536)
def parse_pads(text: str) -> tuple:
    return tuple((dim(lo), dim(hi)) for lo, hi in (r.split(":") for r in text.split(";"))) if text else ()


def shrink(lo, hi, step) -> str:
    return ";".join(f"{a}:{b}:{int(s)}" for a, b, s in zip(lo, hi, step, strict=True))


@lru_cache(maxsize=65536)
def parse_shrink(text: str) -> tuple:
    rows = [r.split(":") for r in text.split(";")] if text else []
    return tuple(dim(r[0]) for r in rows), tuple(dim(r[1]) for r in rows), tuple(int(r[2]) for r in rows)


def value(v) -> str:
    """A scalar constant: bools as true/false, floats with repr (inf, -inf, nan spelled out)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return repr(v)


def parse_value(text: str, dtype: DType):
    if text in ("true", "false"):
        v: object = text == "true"
    elif text in ("inf", "-inf", "nan"):
        v = float(text)
    else:
        v = float(text) if any(c in text for c in ".e") else int(text)
    if dtype == DType.bool:
        return bool(v)
    return float(v) if dtype.is_float else int(v)


def guard(g: dict) -> str:
    """A Select guard: ``j:lo:hi`` per guarded memory axis j, meaning 0 <= map[j] < D_j, where the
    map may reach [-lo, D_j + hi) (the pad a codegen gives the buffer)."""
    return ";".join(f"{j}:{lo}:{hi}" for j, (lo, hi) in sorted(g.items()))


def parse_guard(text: str) -> dict:
    return {int(j): (dim(lo), dim(hi)) for j, lo, hi in (r.split(":") for r in text.split(";"))} if text else {}


@lru_cache(maxsize=256)
def identity_map(rank: int) -> str:
    return tup(f"i{k}" for k in range(rank))
