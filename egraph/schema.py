"""The e-graph term language: one sort ``Term`` for Tiny IR and RB-SSA values (docs/DESIGN.md
§Tiny IR, §RB-SSA).

Constructors are declared here once (``DECLS``) and sent to egglog as the text ``SCHEMA`` (one program:
egglog's Python declarations cost ~15 ms a process), so that rule files (``rules/*.egg``) can name them.
Attributes are canonical strings (``encode.py``): shapes ``[M, N, K]``, index maps ``(i0, i2)`` over the
output axes, axis lists ``(2,)``; rules match them structurally and compute new ones through the pure helpers of
``ixfns.py``.

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

T = "Term"  # an argument that is a term; "String" one that is a canonical string (encode.py)
S = "String"

# constructor -> its arguments' sorts, in order (Term children, String attributes)
DECLS: dict = {
    # memory
    "Tensor": (S,), "Mat": (T,), "Read": (T, S, S),  # Read(mem, shape, map)
    # leaves
    "Const": (S, S, S),  # value, dtype, shape
    # Tiny IR movement
    "Reshape": (T, S), "Permute": (T, S), "Expand": (T, S), "Pad": (T, S, S), "Shrink": (T, S), "Flip": (T, S),
    "View": (T, S, S),  # x, shape, map
    # RB-SSA movement
    "Transpose": (T, S), "BroadcastInDim": (T, S, S), "Select": (S, T, T),  # guard, then, other
    # compute
    "Unary": (S, T), "Binary": (S, T, T), "Where": (T, T, T), "Cast": (S, T),
    "Reduce": (S, S, S, S, T),  # op, axes, init, dtype, body
    # streaming
    "SoftmaxSum": (S, S, T, T),  # p, passes, s, v
}

# the schema as egglog text: the sort, the flat loader's unextractable id constructor, then DECLS
SCHEMA = "(sort Term)\n(constructor N (i64) Term :unextractable)\n" + "".join(
    f"(constructor {name} ({' '.join(args)}) Term)\n" for name, args in DECLS.items())

# egg name -> positions of Term children (the other arguments are strings)
CHILDREN: dict = {name: tuple(k for k, a in enumerate(args) if a == T) for name, args in DECLS.items()}
MEMORY = frozenset({"Tensor", "Mat"})  # buffers, not values
