"""Recognise an extracted RB-SSA region as scaled dot-product attention: Region -> AttentionSpec (issue 7).

The region must be one streamed softmax-weighted sum (``online_softmax_sum``, rules/streaming.egg) that
the yield writes with a cast, over the packed output ``O[*batch, m, dv]``:

    online_softmax_sum<j; p>(scores = [select(causal, ] mul(reduce_sum<k>(mul(cast(Q[*b, m, k]), cast(K[*b, j, k]))), scale) [, -inf)],
                             values = cast(V[*b, j, dv]))

* Q, K, V are fp16|bf16 of one type, read whole and packed (each read map the batch axes in order, then
  the two axes of its matrix in row-major order), widened to fp32; the QK^T reduction sums from 0 in fp32;
* the scale is a multiplication of the scores by an fp32 constant (either operand order; none = 1.0);
* the mask, if any, is ``select(j <= m + (N - M), scores, -inf)``: exactly the causal mask aligned
  bottom-right (the frontend's), written as an index guard (a Pred, or a select of one between true
  and false, possibly broadcast);
* P's type is the type the streaming rounds P to (V's type as the frontend lowers attention).

The spec's meaning (``attention_spec.attention_reference``) rounds P after the division by the row sum;
a ``passes=1`` region rounds it at the running max instead (fp16 only: within 1e-3), a ``passes=2``
region where the spec does. ``AttentionBinding.passes`` says which.
Anything else fails with E1504 NoKernelTemplate saying exactly what does not fit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

from ..ir.diagnostics import fail
from ..ir.dtypes import DType
from ..ir.expr import Expr
from ..ir.region import R, Region, RNode
from .attention_spec import AttentionSpec
from .gemm_spec import IN_DTYPES, OUT_DTYPES
from .region_match import Aliases, Lets, RegionBinding, axis_size, axis_var, row_major_input, the_yield


def _reject(r: Region, why: str) -> None:
    fail("NoKernelTemplate", f"region {r.name}", f"not an attention region: {why}")


@dataclass(frozen=True)
class AttentionBinding(RegionBinding):
    """A region's AttentionSpec and, for each tensor the kernel reads, the region tensor behind it."""
    spec: AttentionSpec
    passes: int = 1  # walks over the keys the region's online_softmax_sum makes (1: P rounded at the running max)


def _widened_read(r: Region, lets: Lets, n: RNode, what: str) -> RNode:
    """cast(read T, fp32) with T fp16|bf16 -> the read."""
    n = lets(n)
    if n.op == R.UNARY and n.arg == "cast" and n.dtype == DType.fp32:
        src = lets(n.src[0])
        if src.op == R.READ:
            if src.dtype not in IN_DTYPES:
                _reject(r, f"{what} {src.arg[0]!r} is {src.dtype.value}; the template takes fp16 or bf16")
            return src
    _reject(r, f"{what} is not a widened (fp16|bf16 -> fp32) read of a tensor")


def _read(r: Region, node: RNode, want: tuple, what: str) -> str:
    """The tensor of a packed, row-major read whose map is exactly the axes `want`, in order."""
    tensor, index = node.arg
    buf = row_major_input(r, tensor, what, partial(_reject, r))
    axes = tuple(axis_var(e) for e in index)
    if axes != want:
        _reject(r, f"{what} read {tensor}[{', '.join(map(str, index))}] is not [{', '.join(want)}]: the template "
                   "reads whole, packed [*batch, rows, head dim] tensors")
    sizes = r.axis_sizes
    for k, (a, d) in enumerate(zip(axes, buf.memref.shape, strict=True)):
        if d != sizes[a]:
            _reject(r, f"{what} {tensor!r} has size {d} on dim {k}, axis {a} has size {sizes[a]}")
    return tensor


def _is_neg_inf(n: RNode) -> bool:
    return n.op == R.CONST and isinstance(n.arg, float) and n.arg == -math.inf


def _guard(lets: Lets, n: RNode) -> "RNode | None":
    """The Pred of an index-guard condition: a Pred, select(Pred, true, false), either broadcast."""
    n = lets(n)
    if n.op == R.BROADCAST:
        n = lets(n.src[0])
    if n.op == R.PRED:
        return n
    if n.op == R.SELECT:
        p, a, b = (lets(s) for s in n.src)
        if p.op == R.PRED and a.op == R.CONST and b.op == R.CONST and a.arg is True and b.arg is False:
            return p
    return None


def _scores(r: Region, lets: Lets, s: RNode, m_ax: str, j: str) -> tuple:
    """(causal, scale, QK^T reduce node) of the scores."""
    s = lets(s)
    causal = False
    if s.op == R.SELECT:
        p, x, other = s.src
        g = _guard(lets, p)
        if g is None or not _is_neg_inf(lets(other)):
            _reject(r, "the scores are masked by something other than an index guard with -inf")
        (e,) = g.arg if len(g.arg) == 1 else (None,)
        sizes = r.axis_sizes
        want = Expr.of(sizes[j]) - Expr.of(sizes[m_ax]) + Expr.var(m_ax) - Expr.var(j)
        if e is None or e != want:
            _reject(r, f"the mask keeps {' and '.join(f'{x} >= 0' for x in g.arg)}; the template's causal mask keeps "
                       f"{want} >= 0 (key j <= query i + (n - m), aligned bottom-right)")
        causal, s = True, lets(x)
    scale = 1.0
    if s.op == R.BINARY and s.arg == "mul" and s.dtype == DType.fp32:
        a, b = (lets(x) for x in s.src)
        if b.op == R.CONST and b.dtype == DType.fp32:
            scale, s = float(b.arg), a
        elif a.op == R.CONST and a.dtype == DType.fp32:
            scale, s = float(a.arg), b
    if s.op != R.REDUCE:
        what = f"a read of {s.arg[0]!r}" if s.op == R.READ else \
            (f"{s.op.value} {s.arg}" if s.op in (R.UNARY, R.BINARY) else s.op.value)
        _reject(r, f"the scores are {what}, not a scaled Q K^T contraction")
    op, axes, init = s.arg
    if op != "sum" or init != 0 or s.dtype != DType.fp32 or len(axes) != 1:
        _reject(r, "the scores' reduction is not one fp32 sum from 0 over the head dim")
    body = lets(s.src[0])
    if not (body.op == R.BINARY and body.arg == "mul"):
        _reject(r, "the scores' reduction body is not a product of Q and K")
    if not math.isfinite(scale):
        _reject(r, f"the scale {scale} is not finite")
    return causal, scale, s


def attention_binding(region: Region, name: "str | None" = None) -> AttentionBinding:
    """The region as an AttentionSpec plus its tensor binding, or E1504 NoKernelTemplate saying why it is
    not one streamed attention."""
    r = region
    reject = partial(_reject, r)
    lets = Lets(r)
    y, out, top = the_yield(r, lets, reject)
    top = lets(top)
    if top.op != R.ONLINE:
        what = f"{top.op.value} {top.arg}" if top.op in (R.UNARY, R.BINARY) else top.op.value
        _reject(r, f"it yields {what}, not a streamed softmax-weighted sum (online_softmax_sum); epilogues are "
                   "not part of the template")
    (j,), p, _block, passes = top.arg
    if len(y.axes) < 2 or set(top.axes) != set(y.axes):
        _reject(r, f"it yields a value over [{', '.join(top.axes)}] to [{', '.join(y.axes)}]")
    if out.memref.layout.kind != "row_major" or tuple(out.memref.shape) != tuple(r.axis_sizes[a] for a in y.axes):
        _reject(r, f"its output {out.name!r} is not the packed row-major [{', '.join(y.axes)}] tensor")
    if y.cast not in OUT_DTYPES:
        _reject(r, f"it writes {y.cast.value}; the template writes fp16, bf16 or fp32")
    batch, (m_ax, dv_ax) = tuple(y.axes[:-2]), y.axes[-2:]
    causal, scale, qk = _scores(r, lets, top.src[0], m_ax, j)
    (k_ax,) = qk.arg[1]
    x, w = (_widened_read(r, lets, s, "a Q K^T operand") for s in lets(qk.src[0]).src)
    if m_ax not in (axis_var(e) for e in x.arg[1]):
        x, w = w, x
    q = _read(r, x, batch + (m_ax, k_ax), "Q")
    k = _read(r, w, batch + (j, k_ax), "K")
    v_read = _widened_read(r, lets, top.src[1], "the values")
    v = _read(r, v_read, batch + (j, dv_ax), "V")
    if not (x.dtype == w.dtype == v_read.dtype):
        _reject(r, f"Q, K and V are {x.dtype.value}, {w.dtype.value} and {v_read.dtype.value}; the template "
                   "takes one input type")
    if p not in IN_DTYPES:
        _reject(r, f"P is rounded to {p.value}; the template's second MMA takes fp16 or bf16")
    d, dv = r.axis_sizes[k_ax], r.axis_sizes[dv_ax]
    if not isinstance(d, int) or not isinstance(dv, int):
        _reject(r, f"the head dims are {d} and {dv}; the template needs static ints")
    al = Aliases(r)  # Q and K one tensor: bound twice
    qn, kn, vn = al(q, "q"), al(k, "k"), al(v, "v")
    size = partial(axis_size, r, reject=reject)
    spec = AttentionSpec(name or r.name, size(m_ax), size(j), d, dv, batch=tuple(size(a) for a in batch),
                         causal=causal, scale=scale, in_dtype=x.dtype, p_dtype=p, out_dtype=y.cast,
                         q=qn, k=kn, v=vn, o=out.name, passes=passes)
    return AttentionBinding(spec, tuple(al.pairs), passes)


def attention_spec_from_region(region: Region, name: "str | None" = None) -> AttentionSpec:
    """The AttentionSpec that computes the region, or E1504 NoKernelTemplate saying why it is not attention."""
    return attention_binding(region, name).spec
