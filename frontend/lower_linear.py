"""Lowerings of GEMM, Attention and Einsum to the naive Tiny IR form (docs/DESIGN.md §Frontend IR).

Every contraction is movement -> MUL -> REDUCE(SUM) with tinygrad's ``dot`` order:
insert a size-1 axis, move K last, multiply with right-aligned broadcast, sum the last axis.
Convolutions and pools (windows) are ``lower_window.py``.
"""
from __future__ import annotations

from ..ir.diagnostics import fail
from ..ir.dtypes import DType, promote
from ..ir.expr import Expr
from ..ir.shapes import Dim, dim, fmt_shape
from ..ir.tiny import Ops, UOp
from .lower import REQUIRED, Attr, Ctx, lowering
from .lower_elementwise import Math, softmax_fp32


def widen(ctx: Ctx, x: UOp, w: UOp, acc: DType) -> tuple:
    """Operands of a contraction, cast to the accumulation dtype when it is wider.

    "FP16/BF16 in, FP32 accumulate" means exact products summed in fp32 (what mma.sync/wgmma do), so
    the naive form is MUL(movement(CAST(x)), movement(CAST(w))) -> REDUCE(SUM): a widening cast is
    exact, and Poly-View / the e-graph treat it as part of the operand's read."""
    x, w = ctx.b.promote([x, w], at=ctx.at)
    if acc.is_float and x.dtype.is_float and acc != x.dtype and promote(acc, x.dtype) == acc:
        x, w = ctx.b.cast(x, acc, at=ctx.at), ctx.b.cast(w, acc, at=ctx.at)
    return x, w


def dot(ctx: Ctx, x: UOp, w: UOp, acc: DType) -> UOp:
    """tinygrad ``x.dot(w)``: 1-D operands and broadcast batch dims included."""
    b, at = ctx.b, ctx.at
    n1, n2 = x.ndim, w.ndim
    if n1 == 0 or n2 == 0:
        fail("AxisSizeMismatch", at, "GEMM operands need at least one axis")
    kw = w.shape[-min(n2, 2)]
    if x.shape[-1] != kw:
        fail("AxisSizeMismatch", at, f"GEMM contracts axis of size {x.shape[-1]} (A {fmt_shape(x.shape)}) "
             f"with {kw} (B {fmt_shape(w.shape)})", "A's last axis must equal B's second-to-last (or only) axis.")
    x, w = widen(ctx, x, w, acc)
    one = (1,) * min(n1 - 1, n2 - 1, 1)
    x = b.reshape(x, x.shape[:-1] + one + x.shape[-1:], at=at)
    w = b.reshape(w, w.shape[:-2] + one + w.shape[-min(n2, 2):], at=at)
    perm = list(range(w.ndim))
    j = w.ndim - min(n2, 2)
    perm[-1], perm[j] = perm[j], perm[-1]
    w = b.permute(w, perm, at=at)
    prod = b.alu(Ops.MUL, x, w, at=at)
    return b.reduce(prod, "SUM", (prod.ndim - 1,), acc, at=at)


def _swap_last2(ctx: Ctx, x: UOp) -> UOp:
    if x.ndim < 2:
        return x
    perm = list(range(x.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return ctx.b.permute(x, perm, at=ctx.at)


ACC = Attr("fp16 | bf16 | fp32 | i32 | bool", "fp32", "the accumulation dtype (and the output's)")


@lowering("GEMM", inputs=(2, 2), attrs={
    "trans_a": Attr("bool", False, "swap A's last two axes first"),
    "trans_b": Attr("bool", False, "swap B's last two axes first"),
    "acc_dtype": ACC})
def gemm(ctx: Ctx, ins: list) -> list:
    """C = A @ B (numpy matmul: 1-D operands, broadcast batch dims), products exact, summed in
    acc_dtype; 16-bit operands with fp32 accumulation are widened exactly first."""
    a, w = ins
    if ctx.bool_attr("trans_a"):
        a = _swap_last2(ctx, a)
    if ctx.bool_attr("trans_b"):
        w = _swap_last2(ctx, w)
    return [dot(ctx, a, w, ctx.dtype_attr("acc_dtype"))]


def need_rank(ctx: Ctx, x: UOp, rank: int, what: str) -> None:
    if x.ndim != rank:
        fail("AxisSizeMismatch", ctx.at, f"{what} must have rank {rank}, got {fmt_shape(x.shape)}")


def causal_mask(ctx: Ctx, m: Dim, n: Dim) -> UOp:
    """mask[i, j] = j <= i + (N - M) (bottom-right aligned), from movement alone:
    ones[N] padded with M-1 falses, viewed at t = j - i + M - 1 (in range; true iff t < N)."""
    b, at = ctx.b, ctx.at
    ones = b.const(True, DType.bool, (n,), at=at)
    padded = b.pad(ones, ((0, dim(Expr.of(m) - 1)),), False, at=at)
    return b.view(padded, (m, n), (f"i1 - i0 + {Expr.of(m) - 1}",), at=at)


@lowering("Attention", inputs=(3, 3), attrs={
    "scale": Attr("number", default_text="1/sqrt(D)", doc="multiplies Q K^T before the softmax"),
    "causal": Attr("bool", False, "mask key j > query i + (N - M) (bottom-right aligned)")})
def attention(ctx: Ctx, ins: list) -> list:
    """softmax(scale * Q K^T [causal mask]) V; P is cast to V's dtype before P V, as flash kernels do."""
    q, k, v = ins
    for t, name in ((q, "Q (B, H, M, D)"), (k, "K (B, H, N, D)"), (v, "V (B, H, N, Dv)")):
        need_rank(ctx, t, 4, name)
    bsz, h, m_, d = q.shape
    n_ = k.shape[2]
    if k.shape[:2] != (bsz, h) or v.shape[:2] != (bsz, h) or k.shape[3] != d or v.shape[2] != n_:
        fail("AxisSizeMismatch", ctx.at, f"Q {fmt_shape(q.shape)}, K {fmt_shape(k.shape)}, V {fmt_shape(v.shape)} "
             "do not agree on B, H, N or D")
    scale = ctx.attr("scale", None)
    if scale is None:
        if not isinstance(d, int):
            fail("InvalidAttribute", ctx.at, "scale defaults to 1/sqrt(D), which needs a static D; give \"scale\"")
        scale = d ** -0.5
    if not isinstance(scale, (int, float)) or isinstance(scale, bool):
        fail("InvalidAttribute", ctx.at, f"scale must be a number, got {scale!r}")
    b, at, mth = ctx.b, ctx.at, Math(ctx.b, ctx.at)
    s = dot(ctx, q, b.permute(k, (0, 1, 3, 2), at=at), DType.fp32)  # (B, H, M, N)
    s = mth.op(Ops.MUL, s, float(scale))
    if ctx.bool_attr("causal"):
        mask = b.expand(b.reshape(causal_mask(ctx, m_, n_), (1, 1, m_, n_), at=at), s.shape, at=at)
        s = mth.op(Ops.WHERE, mask, s, float("-inf"))
    p = softmax_fp32(mth, s, 3)
    if v.dtype in (DType.fp16, DType.bf16):
        p = b.cast(p, v.dtype, at=at)
    return [dot(ctx, p, v, DType.fp32)]


def _einsum_terms(ctx: Ctx, eq: str, ranks: list) -> tuple:
    """(each operand's letters, the output's) of an explicit or implicit equation; an ellipsis stands for the
    operand's dims its letters leave, aligned from the right across operands (numpy's broadcasting), and leads the
    implicit output."""
    if not isinstance(eq, str):
        fail("InvalidAttribute", ctx.at, f"equation {eq!r} is not a string")
    eq = eq.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    n = len(ranks)
    def letters(t: str) -> bool:  # letters around at most one ellipsis (or nothing: a scalar)
        return t.count("...") <= 1 and all(c.isalpha() for c in t.replace("...", ""))
    if len(terms) != n or not all(map(letters, terms)) or not letters(out):
        fail("InvalidAttribute", ctx.at, f"equation {eq!r} does not name {n} operand(s) with letters")
    spare = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in eq]
    dots = [r - len(t.replace("...", "")) for t, r in zip(terms, ranks) if "..." in t]
    wide = max(dots, default=0)
    if any(k < 0 for k in dots) or wide > len(spare):
        fail("AxisSizeMismatch", ctx.at, f"equation {eq!r}: an operand has fewer dims than its letters")
    lead = "".join(spare[:wide])
    terms = [t.replace("...", lead[wide - (r - len(t.replace("...", ""))):]) if "..." in t else t
             for t, r in zip(terms, ranks)]
    if arrow:
        out = out.replace("...", lead)
    else:  # implicit output: the ellipsis's dims, then the letters used once, alphabetically
        letters = "".join(terms)
        out = lead + "".join(sorted(c for c in set(letters) if letters.count(c) == 1 and c not in lead))
    if any(len(set(t)) != len(t) for t in terms) or len(set(out)) != len(out) or set(out) - set("".join(terms)):
        fail("InvalidAttribute", ctx.at, f"equation {eq!r}: a repeated letter within one operand (a diagonal) "
             "or an output letter no operand has is not supported")
    return terms, out


@lowering("Einsum", inputs=(1, 2), attrs={
    "equation": Attr("str", REQUIRED, "letters, e.g. \"bij,bjk->bik\", an ellipsis for leading dims (\"...ij,...jk\"), no diagonals"),
    "acc_dtype": Attr("dtype", default_text="fp32 (i32 for integer inputs)", doc="the dtype of the products and sums")})
def einsum(ctx: Ctx, ins: list) -> list:
    """Operands permuted to (output letters, summed letters), broadcast, multiplied, summed (fp32)."""
    terms, out = _einsum_terms(ctx, ctx.attr("equation"), [x.ndim for x in ins])
    b, at = ctx.b, ctx.at
    acc = ctx.dtype_attr("acc_dtype", "fp32" if ins[0].dtype.is_float else "i32")
    ins = list(widen(ctx, ins[0], ins[1], acc)) if len(ins) == 2 else [b.cast(ins[0], acc, at=at)]
    summed = "".join(c for c in dict.fromkeys("".join(terms)) if c not in out)
    order = out + summed
    sizes: dict = {}
    for t, x in zip(terms, ins, strict=True):
        if len(t) != x.ndim:
            fail("AxisSizeMismatch", at, f"operand {t!r} of the equation has {len(t)} letters, the tensor is {fmt_shape(x.shape)}")
        for c, s in zip(t, x.shape, strict=True):
            if s != 1 and sizes.get(c, 1) not in (1, s):
                fail("AxisSizeMismatch", at, f"letter {c!r} names sizes {sizes[c]} and {s}")
            if s != 1 or c not in sizes:
                sizes[c] = s
    full = tuple(sizes[c] for c in order)
    xs = []
    for t, x in zip(terms, ins, strict=True):
        mine = [c for c in order if c in t]
        x = b.permute(x, [t.index(c) for c in mine], at=at)
        x = b.reshape(x, tuple(x.shape[mine.index(c)] if c in t else 1 for c in order), at=at)
        xs.append(b.expand(x, full, at=at))
    y = xs[0] if len(xs) == 1 else b.alu(Ops.MUL, *xs, at=at)
    if summed:
        y = b.reduce(y, "SUM", tuple(range(len(out), len(order))), acc, at=at)
    return [y]
