"""The e-graph term language: one sort ``Term`` for Tiny IR and RB-SSA values (docs/DESIGN.md
§Tiny IR, §RB-SSA).

Constructors are declared here in Python with stable egglog names (``egg_fn=``) so that rule files
(``rules/*.egg``) can name them. Attributes are canonical strings (``encode.py``): shapes
``[M, N, K]``, index maps ``(i0, i2)`` over the output axes, axis lists ``(2,)``; rules match them
structurally and compute new ones through the pure helpers of ``ixfns.py``.

Two constructors are memory, not values: ``Tensor(name)`` (a program input) and ``Mat(x)`` (the
value x written to memory by its own kernel: the kernel-boundary term). Values read memory only
through ``Read(mem, shape, map)``: element i is ``mem[map(i)]``.

Tiny IR vocabulary: Const, Reshape, Permute, Expand, Pad, Shrink, Flip, View, Unary, Binary, Where,
Cast, Reduce. RB-SSA vocabulary: Read, Select (index-guarded: ``guard`` is a conjunction of
``lo <= e(i) < hi``), BroadcastInDim, Transpose, Reduce(op, axes, init, dtype, body), Unary, Binary,
Cast. Streaming (docs/DESIGN.md §Streaming): ``SoftmaxSum(p, passes, s, v)``, the softmax-weighted sum over the last
axis j of s ([*x, N], fp32) and of v ([*x, Dv, N], fp32), result [*x, Dv] fp32, with
e_j = exp2((s[x, j] - max_j s[x, j])·log2 e) and l = sum_j e_j, P rounded to the 16-bit float p:
passes "1" (online, FlashAttention's recurrence) ``sum_j round_p(e_j) v[x, d, j] / l``, one pass over j
with a running max and sum; passes "2" ``sum_j round_p(e_j / l) v[x, d, j]``, a first pass over j for
the max and the sum, a second for P·V (P rounded exactly where the two-kernel softmax rounds it).
``rules/streaming.egg`` finds both.
``N(i)`` is the unextractable id constructor used by the flat loader.
"""
from __future__ import annotations

from egglog import EGraph, Expr, StringLike, function, i64Like


class Term(Expr, egg_sort="Term"):
    """A tensor value (or, for Tensor/Mat, a memory buffer)."""


@function(egg_fn="N", unextractable=True)
def N(i: i64Like) -> Term: ...


# ---- memory ----------------------------------------------------------------------------------
@function(egg_fn="Tensor")
def Tensor(name: StringLike) -> Term: ...


@function(egg_fn="Mat")
def Mat(x: Term) -> Term: ...


@function(egg_fn="Read")
def Read(mem: Term, shape: StringLike, imap: StringLike) -> Term: ...


# ---- leaves ----------------------------------------------------------------------------------
@function(egg_fn="Const")
def Const(value: StringLike, dtype: StringLike, shape: StringLike) -> Term: ...


# ---- Tiny IR movement ------------------------------------------------------------------------
@function(egg_fn="Reshape")
def Reshape(x: Term, shape: StringLike) -> Term: ...


@function(egg_fn="Permute")
def Permute(x: Term, perm: StringLike) -> Term: ...


@function(egg_fn="Expand")
def Expand(x: Term, shape: StringLike) -> Term: ...


@function(egg_fn="Pad")
def Pad(x: Term, pads: StringLike, value: StringLike) -> Term: ...


@function(egg_fn="Shrink")
def Shrink(x: Term, spec: StringLike) -> Term: ...


@function(egg_fn="Flip")
def Flip(x: Term, axes: StringLike) -> Term: ...


@function(egg_fn="View")
def View(x: Term, shape: StringLike, imap: StringLike) -> Term: ...


# ---- RB-SSA movement -------------------------------------------------------------------------
@function(egg_fn="Transpose")
def Transpose(x: Term, perm: StringLike) -> Term: ...


@function(egg_fn="BroadcastInDim")
def BroadcastInDim(x: Term, shape: StringLike, dims: StringLike) -> Term: ...


@function(egg_fn="Select")
def Select(guard: StringLike, then: Term, other: Term) -> Term: ...


# ---- compute ---------------------------------------------------------------------------------
@function(egg_fn="Unary")
def Unary(op: StringLike, x: Term) -> Term: ...


@function(egg_fn="Binary")
def Binary(op: StringLike, a: Term, b: Term) -> Term: ...


@function(egg_fn="Where")
def Where(c: Term, a: Term, b: Term) -> Term: ...


@function(egg_fn="Cast")
def Cast(dtype: StringLike, x: Term) -> Term: ...


@function(egg_fn="Reduce")
def Reduce(op: StringLike, axes: StringLike, init: StringLike, dtype: StringLike, body: Term) -> Term: ...


# ---- streaming -------------------------------------------------------------------------------
@function(egg_fn="SoftmaxSum")
def SoftmaxSum(p: StringLike, passes: StringLike, s: Term, v: Term) -> Term: ...


CONSTRUCTORS = (N, Tensor, Mat, Read, Const, Reshape, Permute, Expand, Pad, Shrink, Flip, View, Transpose,
                BroadcastInDim, Select, Unary, Binary, Where, Cast, Reduce, SoftmaxSum)

# egg name -> positions of Term children (the other arguments are strings)
CHILDREN: dict = {
    "Tensor": (), "Mat": (0,), "Read": (0,), "Const": (), "Reshape": (0,), "Permute": (0,), "Expand": (0,),
    "Pad": (0,), "Shrink": (0,), "Flip": (0,), "View": (0,), "Transpose": (0,), "BroadcastInDim": (0,),
    "Select": (1, 2), "Unary": (1,), "Binary": (1, 2), "Where": (0, 1, 2), "Cast": (1,), "Reduce": (4,),
    "SoftmaxSum": (2, 3),
}
MEMORY = frozenset({"Tensor", "Mat"})  # buffers, not values


def declare_all(eg: EGraph) -> None:
    """Send every constructor's declaration to egglog (declarations are lazy; rule files need them)."""
    for f in CONSTRUCTORS:
        eg._callable_to_egg(f)  # noqa: SLF001 — the documented way to force a declaration
