"""Reading the score part of an attention region: ``S = scale * Q K^T``, causally masked or not. Shared by
the recognisers of the streamed single-region form (attention.bind) and of the two-region form's first
region (scores.bind):

    [select(causal, ] mul(reduce_sum<k>(mul(cast(Q[*b, m, k]), cast(K[*b, j, k]))), scale) [, -inf)]

* Q and K are fp16|bf16 of one type, read whole and packed (each read map the batch axes in order, then the
  two axes of its matrix in row-major order), widened to fp32; the reduction sums from 0 in fp32;
* the scale is a multiplication of the scores by an fp32 constant (either operand order; none = 1.0);
* the mask, if any, is ``select(j <= m + (N - M), scores, -inf)``: exactly the causal mask aligned
  bottom-right (the frontend's), written as an index guard (a Pred, or a select of one between true and
  false, possibly broadcast or transposed), or ``select(mask[m, j], scores, -inf)`` of a bool tensor read
  (an exporter's mask; ``ScorePart.mask``), possibly in 16 bits under a cast to fp32;
* instead of the scale, the scores may be any read-free function of the sum (``ScorePart.fn``, an
  epilogue_fn program: an exporter's ``cast:fp16(sum) / sqrt(d)`` in fp16, each 16-bit step rounded);
* ``operand(node, row, col, what)`` (the caller's, optional) takes a Q or K operand that is not a widened
  read (attention's Q/K prologue: rotary embeddings) and returns the tensor it reads.

Every helper takes ``reject(why)`` (the caller's, raising Mismatch).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ...ir.dtypes import DType
from ...ir.expr import Expr
from ...ir.region import R, Region, RNode
from ...ir.region_squeeze import linear_address
from .region_match import Lets, Reject, axis_var, row_major_input
from .spec import IN_DTYPES


@dataclass(frozen=True)
class ScorePart:
    causal: bool
    scale: float
    q: str          # region tensor read as Q
    k: str          # region tensor read as K
    k_axis: str     # the head-dim (contraction) axis
    in_dtype: DType
    fn: tuple = ()  # the scores as an epilogue_fn program of the fp32 sum ("v",) (then scale is 1.0)
    mask: "Any" = None  # a bool tensor the scores are masked by (gemm.prologue.Source over (m, j): mk or k)


def widened_read(lets: Lets, n: RNode, what: str, reject: Reject) -> RNode:
    """cast(read T, fp32) with T fp16|bf16 -> the read."""
    n = lets(n)
    if n.op == R.UNARY and n.arg == "cast" and n.dtype == DType.fp32:
        src = lets(n.src[0])
        if src.op == R.READ:
            if src.dtype not in IN_DTYPES:
                reject(f"{what} {src.arg[0]!r} is {src.dtype.value}; the template takes fp16 or bf16")
            return src
    reject(f"{what} is not a widened (fp16|bf16 -> fp32) read of a tensor")


def packed_read(r: Region, node: RNode, want: tuple, what: str, reject: Reject) -> str:
    """The tensor of a packed, row-major read whose map is exactly the axes `want`, in order."""
    tensor, index = node.arg
    buf = row_major_input(r, tensor, what, reject)
    axes = tuple(axis_var(e) for e in index)
    if axes != want:
        reject(f"{what} read {tensor}[{', '.join(map(str, index))}] is not [{', '.join(want)}]: the template "
               "reads whole, packed [*batch, rows, head dim] tensors")
    sizes = r.axis_sizes
    for k, (a, d) in enumerate(zip(axes, buf.memref.shape, strict=True)):
        if d != sizes[a]:
            reject(f"{what} {tensor!r} has size {d} on dim {k}, axis {a} has size {sizes[a]}")
    return tensor


def is_neg_inf(n: RNode) -> bool:
    return n.op == R.CONST and isinstance(n.arg, float) and n.arg == -math.inf


def _guard(lets: Lets, n: RNode) -> "RNode | None":
    """The Pred of an index-guard condition: a Pred, select(Pred, true, false), either broadcast or transposed."""
    n = lets(n)
    while n.op in (R.BROADCAST, R.TRANSPOSE):
        n = lets(n.src[0])
    if n.op == R.PRED:
        return n
    if n.op == R.SELECT:
        p, a, b = (lets(s) for s in n.src)
        if p.op == R.PRED and a.op == R.CONST and b.op == R.CONST and a.arg is True and b.arg is False:
            return p
    return None


def _nodes(lets: Lets, node: RNode, into=lambda n: True):
    """Every node under node once (through lets), not descending below a node ``into`` refuses."""
    stack, seen = [node], set()
    while stack:
        n = lets(stack.pop())
        if id(n) not in seen:
            seen.add(id(n))
            yield n
            if into(n):
                stack.extend(n.src)


def read_axes(lets: Lets, node: RNode) -> frozenset:
    """Every axis the reads under node index."""
    return frozenset(v for n in _nodes(lets, node) if n.op == R.READ for e in n.arg[1] for v in e.variables())


def _sum_under(lets: Lets, s: RNode) -> "RNode | None":
    """The one reduction under the read-free chain s (None: none, or several)."""
    found = [n for n in _nodes(lets, s, lambda n: n.op != R.REDUCE) if n.op == R.REDUCE]
    return found[0] if len(found) == 1 else None


def _scores(r: Region, lets: Lets, s: RNode, m_ax: str, j: str, reject: Reject) -> tuple:
    """(causal, scale, QK^T reduce node, fn, mask) of the scores."""
    from . import epilogue_fn
    from ..gemm.prologue import source
    s = lets(s)
    if s.op == R.UNARY and s.arg == "cast" and s.dtype == DType.fp32 and lets(s.src[0]).op == R.SELECT \
            and lets(s.src[0]).dtype in IN_DTYPES:  # a 16-bit masked select widened: exact
        s = lets(s.src[0])
    causal, mask, fn = False, None, ()
    if s.op == R.SELECT and lets(s.src[0]).op == R.READ and lets(s.src[0]).dtype == DType.bool:
        p, x, other = s.src
        mask = source(r, lets(p), m_ax, j)
        if mask is None or mask.role == "m" or not is_neg_inf(lets(other)):
            reject(f"the scores are masked by {lets(p).arg[0]!r} read otherwise than over [{m_ax}, {j}] or [{j}]")
        s = lets(x)
    elif s.op == R.SELECT:
        p, x, other = s.src
        g = _guard(lets, p)
        if g is None or not is_neg_inf(lets(other)):
            reject("the scores are masked by something other than an index guard with -inf")
        (e,) = g.arg if len(g.arg) == 1 else (None,)
        sizes = r.axis_sizes
        want = Expr.of(sizes[j]) - Expr.of(sizes[m_ax]) + Expr.var(m_ax) - Expr.var(j)
        if e is None or e != want:
            reject(f"the mask keeps {' and '.join(f'{x} >= 0' for x in g.arg)}; the template's causal mask keeps "
                   f"{want} >= 0 (key j <= query i + (n - m), aligned bottom-right)")
        causal, s = True, lets(x)
    scale = 1.0
    if s.op == R.BINARY and s.arg == "mul" and s.dtype == DType.fp32:
        a, b = (lets(x) for x in s.src)
        if b.op == R.CONST and b.dtype == DType.fp32:
            scale, s = float(b.arg), a
        elif a.op == R.CONST and a.dtype == DType.fp32:
            scale, s = float(a.arg), b
    if s.op != R.REDUCE and (red := _sum_under(lets, s)) is not None:
        fn = epilogue_fn.from_region(lets, s, red) or ()
        if fn:
            scale, s = 1.0, red
    if s.op != R.REDUCE:
        what = f"a read of {s.arg[0]!r}" if s.op == R.READ else \
            (f"{s.op.value} {s.arg}" if s.op in (R.UNARY, R.BINARY) else s.op.value)
        reject(f"the scores are {what}, not a scaled Q K^T contraction")
    op, axes, init = s.arg
    if op != "sum" or init != 0 or s.dtype != DType.fp32 or len(axes) != 1:
        reject("the scores' reduction is not one fp32 sum from 0 over the head dim")
    body = lets(s.src[0])
    if not (body.op == R.BINARY and body.arg == "mul"):
        reject("the scores' reduction body is not a product of Q and K")
    if not math.isfinite(scale):
        reject(f"the scale {scale} is not finite")
    return causal, scale, s, fn, mask


def window_read(r: Region, node: RNode, row: str, head: str, col: str, what: str, reject: Reject) -> tuple:
    """(tensor, (offset, ld, hs), rep) of a read that takes, for head h, the column window [offset + (h // rep)*hs,
    offset + h*hs + |col|) of a row-major [|row|, ld] matrix (the tensor's bytes): a head of a [tokens,
    H * d] projection, or of one piece of a fused Q/K/V projection. Static ints, inside each row."""
    tensor, index = node.arg
    buf = row_major_input(r, tensor, what, reject)
    coef, rep = {}, 1
    for mono, c in linear_address(index, buf.memref.shape).terms:
        q = head_share(mono, head)
        if q is not None:  # head h reads head h // q (grouped-query attention: a KV head shared by q heads)
            mono, rep = (head,), q
        if len(mono) > 1 or (mono and mono[0] not in (row, head, col)):
            reject(f"{what} read {tensor}[{', '.join(map(str, index))}] is not a column window of rows over "
                   f"[{row}, {head}, {col}]: the template reads rows of heads at static strides")
        coef[mono[0] if mono else ""] = c
    sizes = r.axis_sizes
    off, ld, hs, unit = coef.get("", 0), coef.get(row, 0), coef.get(head, 0), coef.get(col, 0)
    heads, width, rows = sizes[head], sizes[col], sizes[row]
    if isinstance(heads, int) and heads % rep:
        reject(f"{what} read {tensor}: {heads} heads do not share {rep} to a KV head")
    heads = heads // rep if isinstance(heads, int) else heads
    total = Expr.const(1)
    for d in buf.memref.shape:
        total = total * Expr.of(d)
    if (unit != 1 or ld <= 0 or hs <= 0 or off < 0 or not isinstance(heads, int) or not isinstance(width, int)
            or off + (heads - 1) * hs + width > ld or total != Expr.of(rows) * ld):
        reject(f"{what} read {tensor}[{', '.join(map(str, index))}] is not a column window of a row-major "
               f"[{row}, ld] matrix (offset {off}, ld {ld}, head stride {hs})")
    return tensor, (off, ld, hs), rep


def head_share(mono: tuple, head: str) -> "int | None":
    """q when the monomial is the one atom ``head // q`` (q > 1), else None."""
    if len(mono) != 1 or isinstance(mono[0], str):
        return None
    a = mono[0]
    num, q = getattr(a, "num", None), getattr(a, "q", None)
    return q if num is not None and num == Expr.var(head) and isinstance(q, int) and q > 1 else None


def score_part(r: Region, lets: Lets, s: RNode, batch: tuple, m_ax: str, j: str, reject: Reject,
               read=None, operand=None) -> ScorePart:
    """The scores s over [*batch, m_ax, j] as a ScorePart, or reject(why). read(node, row, col, what): the
    tensor Q (K) is read from over rows row and head-dim col (default: packed_read over batch + (row, col));
    operand(node, row, col, what) -> (tensor, dtype): an operand that is not a widened read (None: rejected)."""
    read = read or (lambda node, row, col, what: packed_read(r, node, batch + (row, col), what, reject))
    causal, scale, qk, fn, mask = _scores(r, lets, s, m_ax, j, reject)
    (k_ax,) = qk.arg[1]
    x, w = lets(qk.src[0]).src
    if m_ax not in read_axes(lets, x):
        x, w = w, x
    got = []
    for t, row, what in ((x, m_ax, "Q"), (w, j, "K")):
        t = lets(t)
        src = lets(t.src[0]) if t.op == R.UNARY and t.arg == "cast" and t.src else None
        if operand is not None and (src is None or src.op != R.READ):
            got.append(operand(t, row, k_ax, what))
            continue
        rd = widened_read(lets, t, "a Q K^T operand", reject)
        got.append((read(rd, row, k_ax, what), rd.dtype))
    (q, qt), (k, kt) = got
    if qt != kt:
        reject(f"Q and K are {qt.value} and {kt.value}; the template takes one input type")
    return ScorePart(causal, scale, q, k, k_ax, qt, fn, mask)
