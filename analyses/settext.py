"""Exact counts and bounds of parameter-free isl sets without isl's counting (docs/DESIGN.md §Poly Core).

Poly Core counts tiles, slices and footprints by their extents and cardinalities. isl computes both
exactly, but at a price: ``dim_min_val``/``dim_max_val`` cost about 60 µs a dim and ``count_val`` (Barvinok)
grows steeply with the dimension (a 6-d conv slice with padding guards: 1.5-2.8 s). Most of these sets
are boxes, and the rest are mostly products of small independent pieces, so:

- :func:`box_of_text` reads a box from the set's printed text (which the footprint caches print anyway
  to key their memo): one conjunct whose constraints each bound a single dim by an integer. The text
  is isl's exact rendering of the set, so the box is the set. Anything else (a union, an existential,
  a ``mod``/``floor``, a coefficient, a parameter, two dims in one constraint) returns None and the
  caller asks isl.
- :func:`separable_count` counts one basic set without existentials as the product of the counts of
  its independent dim groups (dims linked by a shared constraint), each counted by isl on its own few
  dims: a set whose constraints never mix two groups is the cartesian product of its groups.
- :func:`peeled` takes off a union's or an existential's dims that are a whole interval in every point (the
  set equals its projection times the interval), so isl counts what is left on fewer dims.

Both give exactly what isl gives (tests/test_settext.py compares them on the sets the scale graphs
price and on random ones).
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from functools import lru_cache
from math import prod

import islpy as isl

_INT = re.compile(r"-?[0-9]+\Z")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_']*\Z")
_CMP = re.compile(r"\s*(<=|>=|<|>|=)\s*")
_BAD = re.compile(r"exists|floor|mod|ceil|infty|min\(|max\(| or |not |;|->")


@lru_cache(maxsize=1 << 16)
def box_of_text(text: str) -> "tuple | None":
    """((lo, hi), ...) per set dim when ``text`` (a parameter-free isl set as isl prints it) is a box;
    an empty box prints as no constraint it can satisfy and returns None (isl decides). None unless
    every constraint bounds one dim by an integer."""
    t = text.strip()
    if not (t.startswith("{") and t.endswith("}")) or _BAD.search(t):
        return None
    body = t[1:-1].strip()
    head, _, cons = body.partition(" : ")
    lb = head.find("[")
    if lb < 0 or not head.endswith("]"):
        return None
    dims, lo, hi = {}, [], []
    for k, entry in enumerate(_split(head[lb + 1:-1])):
        name, eq, val = entry.partition("=")
        name, val = name.strip(), val.strip()
        if not eq:
            if _INT.match(name):
                lo.append(int(name))
                hi.append(int(name))
                continue
            if not _NAME.match(name) or name in dims:
                return None
            dims[name] = k
            lo.append(None)
            hi.append(None)
        elif _NAME.match(name) and _INT.match(val) and name not in dims:
            dims[name] = k
            lo.append(int(val))
            hi.append(int(val))
        else:
            return None
    if cons.strip() == "false":
        return None
    for conj in (cons.split(" and ") if cons else ()):
        parts = _CMP.split(conj.strip())
        if len(parts) < 3 or len(parts) % 2 == 0:
            return None
        for i in range(1, len(parts), 2):
            if not _bound(parts[i - 1], parts[i], parts[i + 1], dims, lo, hi):
                return None
    if any(v is None for v in lo + hi):
        return None
    return tuple(zip(lo, hi, strict=True))


def _split(inside: str) -> list:
    return [e for e in (x.strip() for x in inside.split(",")) if e] if inside.strip() else []


def _bound(left: str, op: str, right: str, dims: dict, lo: list, hi: list) -> bool:
    """Narrow lo/hi by ``left op right`` (one side an integer, the other a dim); False when it is not that."""
    left, right = left.strip(), right.strip()
    if _INT.match(left) and right in dims:
        flip = {"<=": ">=", ">=": "<=", "<": ">", ">": "<", "=": "="}[op]
        left, op, right = right, flip, left
    if left not in dims or not _INT.match(right):
        return False
    k, v = dims[left], int(right)
    if op in ("<=", "<", "="):
        top = v - 1 if op == "<" else v
        hi[k] = top if hi[k] is None else min(hi[k], top)
    if op in (">=", ">", "="):
        bot = v + 1 if op == ">" else v
        lo[k] = bot if lo[k] is None else max(lo[k], bot)
    return True


def box_card(box: tuple) -> int:
    """Points of a box (0 when any dim is empty)."""
    return prod(max(0, hi - lo + 1) for lo, hi in box)


def separable_count(s: isl.Set) -> "int | None":
    """The number of points of a single basic set with no existential and no parameter, as the product of
    isl's counts of its independent dim groups; None when the set is not of that form or is one group."""
    if s.n_basic_set() != 1 or s.dim(isl.dim_type.param):
        return None
    bs = s.get_basic_sets()[0]
    if bs.dim(isl.dim_type.div):
        return None
    n = bs.dim(isl.dim_type.set)
    parent = list(range(n))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i
    for c in bs.get_constraints():
        used = [k for k in range(n) if not c.get_coefficient_val(isl.dim_type.set, k).is_zero()]
        for k in used[1:]:
            parent[root(k)] = root(used[0])
    groups: dict = {}
    for k in range(n):
        groups.setdefault(root(k), []).append(k)
    if len(groups) < 2:
        return None
    out = 1
    for ks in groups.values():
        keep = set(ks)
        part = bs
        for k in reversed(range(n)):  # the other groups projected out (exact: the set is their product)
            if k not in keep:
                part = part.project_out(isl.dim_type.set, k, 1)
        got = isl.Set.from_basic_set(part).count_val()
        if not got.is_int():
            return None
        out *= got.to_python()
        if out == 0:
            return 0
    return out


def peeled(s: isl.Set) -> "tuple[int, isl.Set]":
    """(n, rest): s is the product of ``rest`` (s with some dims projected out) and, on each dim projected out, the
    whole interval between its bounds, n the points of those intervals; so ``card(s) == n * card(rest)`` exactly.
    A dim is peeled when s equals its projection without the dim times the dim's extent (checked by isl): a
    footprint's row dim, which no piece of a union or existential of the other dims constrains (a rotate-half
    read: ``T[0, i1, i2]`` with floors of i2 alone), leaves isl's count a set of fewer dims (tens of ms -> µs).
    Parameter-free, non-empty, bounded sets only."""
    n, k = 1, 0
    s = s.reset_tuple_id()  # a projection drops the name; no count reads it
    while s.dim(isl.dim_type.set) > 1 and k < s.dim(isl.dim_type.set):
        lo, hi = s.dim_min_val(k), s.dim_max_val(k)
        if not (lo.is_int() and hi.is_int()):
            return n, s
        rest = s.project_out(isl.dim_type.set, k, 1)
        back = rest.insert_dims(isl.dim_type.set, k, 1).lower_bound_val(isl.dim_type.set, k, lo) \
            .upper_bound_val(isl.dim_type.set, k, hi)
        if back.is_equal(s):
            n *= hi.to_python() - lo.to_python() + 1
            s = rest
        else:
            k += 1
    return n, s


COUNT_OPERATIONS = 20000  # isl operations one count may take (about 0.5 s); past them the count is bounded instead


@contextmanager
def isl_quota(ctx: isl.Context, operations: int):
    """Run the block within ``operations`` isl operations of ctx: past them an isl call raises ``isl.Error``.
    Within an outer quota the smaller one holds; the outer limit is restored after (its count starts again)."""
    outer = ctx.get_max_operations()
    ctx.set_max_operations(min(operations, outer) if outer else operations)
    ctx.reset_operations()
    try:
        yield
    finally:
        ctx.set_max_operations(outer)
        ctx.reset_operations()


def bounded_count(s: isl.Set) -> "int | None":
    """The points of a parameter-free, non-empty set (None: unbounded), ``peeled`` then isl's count, within
    ``COUNT_OPERATIONS``; past them, the points of s's bounding box, an upper bound. isl's count of a set of many
    existentials can run for minutes (MaxViT's grid partitions: the sectors of a 1-D footprint under 8 existentials
    took over 20 minutes, and the peeling of another several), which no limit of the search would stop."""
    try:
        with isl_quota(s.get_ctx(), COUNT_OPERATIONS):
            n, rest = peeled(s)
            got = rest.count_val()
            return n * got.to_python() if got.is_int() else None  # the value cannot be read once the quota is spent
    except (isl.Error, TypeError):
        pass
    box = [(s.dim_min_val(k), s.dim_max_val(k)) for k in range(s.dim(isl.dim_type.set))]
    if not all(lo.is_int() and hi.is_int() for lo, hi in box):
        return None
    return prod(hi.to_python() - lo.to_python() + 1 for lo, hi in box)
