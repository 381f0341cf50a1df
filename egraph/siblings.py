"""Helpers of ``rules/siblings.egg``: sibling contractions that read one operand become one kernel
(docs/DESIGN.md §Fusion, sibling contractions).

Contractions ``y_j = sum_k a[m, k] b_j[k, n]`` reading the same A (the Q/K/V projections of one
LayerNorm output) are one GEMM over the concatenation of their B operands along N. The rules state
it on the outputs: ``c = concat_N(y_1, .., y_p)`` (each piece padded with zeros to the full width,
the pieces added), and each original value is a slice of ``Mat(c)``. A group of siblings is keyed
by its A and collects its weights' names (``name-union``, the merge of ``sibling-names``), so the
rules concatenate the whole group, once, in name order. The helpers compute the pads and slice maps;
like every rule helper (egraph/ixfns.py) they answer ``""`` (here ``None``) when the rule does not
apply, and they register into ixfns' table so the egglog prelude binds them like the others.
"""
from __future__ import annotations

from ..ir.expr import Expr
from . import encode as E
from .ixfns import helper


@helper("sibling-ok")
def sibling_ok(ax: str, body_shape: str, dims: str) -> "str | None":
    """"yes" when ``BroadcastInDim(a0, body_shape, dims)`` is the A operand of a contraction
    reducing ``ax``: the body is ``[.., N, K]`` with K (the last axis) the only reduced axis, and A
    reads every axis but N (so the contraction's output ``[.., N]`` may grow along N)."""
    r = len(E.parse_shape(body_shape))
    if r < 2 or E.parse_ints(ax) != (r - 1,):
        return None
    return "yes" if E.parse_ints(dims) == tuple(k for k in range(r) if k != r - 2) else None


@helper("name-union")
def name_union(a: str, b: str) -> str:
    """The sorted union of two ``;``-separated name lists (the merge of a group's weight names)."""
    return ";".join(sorted(set(a.split(";")) | set(b.split(";")) - {""}))


@helper("names-are")
def names_are(names: str, *pieces: str) -> "str | None":
    """"yes" when the group's names are exactly ``pieces``, given in increasing order."""
    ps = [p for p in pieces if p]
    return "yes" if names.split(";") == ps and ps == sorted(set(ps)) else None


def _shapes(s1: str, s2: str, s3: str) -> "list | None":
    shapes = [E.parse_shape(s) for s in (s1, s2, s3) if s]
    if len({(len(s), s[:-1]) for s in shapes}) != 1 or not shapes[0]:
        return None
    return shapes


@helper("concat-pad")
def concat_pad(s1: str, s2: str, s3: str, j: str) -> "str | None":
    """The pads of piece j (0-based) of ``concat_N`` of values of shapes s1, s2 and s3 (``""``: a
    pair), equal but for the last axis: the widths before it low, those after it high."""
    shapes = _shapes(s1, s2, s3)
    if shapes is None:
        return None
    k, widths = int(j), [s[-1] for s in shapes]
    rows = [(0, 0)] * (len(shapes[0]) - 1)
    return E.pads(rows + [(sum(widths[:k]), sum(widths[k + 1:]))])


@helper("concat-slice")
def concat_slice(s1: str, s2: str, s3: str, j: str) -> "str | None":
    """The read map of piece j in that concatenation: the identity, shifted along the last axis by
    the widths before it."""
    shapes = _shapes(s1, s2, s3)
    if shapes is None:
        return None
    k, r = int(j), len(shapes[0])
    last = Expr.var(f"i{r - 1}") + sum(s[-1] for s in shapes[:k])
    return E.tup([f"i{q}" for q in range(r - 1)] + [str(last)])
