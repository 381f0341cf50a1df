"""Recognise an extracted RB-SSA region as scaled dot-product attention: Region -> AttentionBinding, or NoBind.

The region must be one streamed softmax-weighted sum (``online_softmax_sum``, rules/streaming.egg) that
the yield writes with a cast, over the packed output ``O[*batch, m, dv]``:

    online_softmax_sum<j; p>(scores = [select(causal, ] mul(reduce_sum<k>(mul(cast(Q[*b, m, k]), cast(K[*b, j, k]))), scale) [, -inf)],
                             values = cast(V[*b, j, dv]))

* the scores are read by ``common.score_match.score_part`` (Q, K, scale, causal mask);
* V is of Q's and K's type, read whole and packed like them, widened to fp32;
* P's type is the type the streaming rounds P to (V's type as the frontend lowers attention);
* with one batch axis h (the heads), O may instead be written (through a Transpose of the sum) as
  [rows, h, head dim], the heads interleaved, and Q, K and V read as column windows of row-major
  [rows, ld] matrices, head h at offset + h * hs (``AttentionSpec.cols``): a [tokens, H * d] projection
  or one piece of a fused Q/K/V projection.

The spec's meaning (``reference.reference``) rounds P after the division by the row sum;
a ``passes=1`` region rounds it at the running max instead (fp16 only: within 1e-3), a ``passes=2``
region where the spec does. ``AttentionBinding.passes`` says which.
Anything else is a NoBind saying exactly what does not fit.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

from typing import NoReturn

from ...ir.region import R, Region, RNode
from ..common.region_match import Aliases, Lets, Mismatch, RegionBinding, axis_size, recogniser, the_yield
from ..common.score_match import packed_read, score_part, widened_read, window_read
from ..common.spec import IN_DTYPES, OUT_DTYPES
from .prologue import OperandPrologue, from_operand
from .spec import AttentionSpec, head_dims_reason


def _renamed(p: "OperandPrologue | None", al: Aliases, operand: str, names: dict) -> "OperandPrologue | None":
    """p with its tensors under their kernel names: its projection the operand's (Q or K), each table one name
    shared by both prologues (names: region tensor -> kernel name)."""
    if p is None:
        return None
    def name(s):
        if s.role == "win":
            return operand
        if s.tensor not in names:
            names[s.tensor] = al(s.tensor, "t")
        return names[s.tensor]
    return replace(p, sources=tuple(s if s.role == "col" else replace(s, tensor=name(s)) for s in p.sources))


def _reject(r: Region, why: str) -> NoReturn:
    raise Mismatch(f"not an attention region: {why}")


@dataclass(frozen=True)
class AttentionBinding(RegionBinding):
    """A region's AttentionSpec and, for each tensor the kernel reads, the region tensor behind it."""
    spec: AttentionSpec
    passes: int = 1  # walks over the keys the region's online_softmax_sum makes (1: P rounded at the running max)


@recogniser
def bind(region: Region, name: "str | None" = None) -> AttentionBinding:
    """The region as an AttentionSpec plus its tensor binding, or NoBind saying why it is not one streamed
    attention."""
    r = region
    reject = partial(_reject, r)
    lets = Lets(r)
    y, out, top = the_yield(r, lets, reject)
    top = lets(top)
    if top.op == R.TRANSPOSE:  # the output stored in another order than the sum's axes
        top = lets(top.src[0])
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
    axes = top.axes if lets(r.let_map[y.src]).op == R.TRANSPOSE else y.axes
    batch, (m_ax, dv_ax) = tuple(axes[:-2]), axes[-2:]
    heads = len(batch) == 1 and tuple(y.axes) == (m_ax, batch[0], dv_ax)
    if tuple(y.axes) != batch + (m_ax, dv_ax) and not heads:
        _reject(r, f"it writes [{', '.join(y.axes)}]; the template writes [*batch, rows, head dim] or, with one "
                   "batch axis, [rows, heads, head dim]")
    windows: list = []
    reps: dict = {}  # Q, K, V -> heads sharing one window (grouped-query attention: K and V at h // rep)

    def read(node: RNode, row: str, col: str, what: str) -> str:
        if not heads:
            return packed_read(r, node, batch + (row, col), what, reject)
        tensor, window, rep = window_read(r, node, row, batch[0], col, what, reject)
        windows.append(window)
        reps[what] = rep
        return tensor

    pros: dict = {}

    def operand(node: RNode, row: str, col: str, what: str):
        """Q or K computed from its projection (rotary embeddings): a prologue (.prologue)."""
        h, dim = r.axis_sizes.get(batch[0]) if heads else None, r.axis_sizes[col]
        if not heads or not isinstance(h, int) or not isinstance(dim, int):
            reject(f"{what} is computed, not read; the prologue takes heads of a projection ([rows, heads, head "
                   "dim] output)")
        got = from_operand(r, lets, node, row, batch[0], col, h, dim)
        if isinstance(got, str):
            reject(f"{what} is computed, and not as a prologue: {got}")
        pros[what], (p, dtype) = got[0], got
        windows.append(p.window())
        reps[what] = p.rep
        return p.sources[[x.role for x in p.sources].index("win")].tensor, dtype

    sp = score_part(r, lets, top.src[0], batch, m_ax, j, reject, read, operand)
    k_ax, q, k = sp.k_axis, sp.q, sp.k
    v_read = widened_read(lets, top.src[1], "the values", reject)
    v = read(v_read, j, dv_ax, "V")
    if sp.in_dtype != v_read.dtype:
        _reject(r, f"Q, K and V are {sp.in_dtype.value}, {sp.in_dtype.value} and {v_read.dtype.value}; the template "
                   "takes one input type")
    if p not in IN_DTYPES:
        _reject(r, f"P is rounded to {p.value}; the template's second MMA takes fp16 or bf16")
    d, dv = r.axis_sizes[k_ax], r.axis_sizes[dv_ax]
    if not isinstance(d, int) or not isinstance(dv, int):
        _reject(r, f"the head dims are {d} and {dv}; the template needs static ints")
    if why := head_dims_reason(d, dv):
        _reject(r, why)
    if reps.get("Q", 1) != 1 or reps.get("K", 1) != reps.get("V", 1):
        _reject(r, f"heads share windows as Q {reps.get('Q', 1)}, K {reps.get('K', 1)}, V {reps.get('V', 1)}; the "
                   "template shares K and V heads alike (grouped-query attention), never Q's")
    al = Aliases(r)  # Q and K one tensor: bound twice
    qn, kn, vn = al(q, "q"), al(k, "k"), al(v, "v")
    tables: dict = {}
    size = partial(axis_size, r, reject=reject)
    cols = ()
    if heads:
        h = size(batch[0])
        cols = (*windows, (0, h * dv, dv)) if isinstance(h, int) else ()
    spec = AttentionSpec(name or r.name, size(m_ax), size(j), d, dv, batch=tuple(size(a) for a in batch),
                         causal=sp.causal, scale=sp.scale, in_dtype=sp.in_dtype, p_dtype=p, out_dtype=y.cast,
                         q=qn, k=kn, v=vn, o=out.name, passes=passes, cols=cols, fn=sp.fn,
                         mask=sp.mask and replace(sp.mask, tensor=al(sp.mask.tensor, "mask")),
                         q_pro=_renamed(pros.get("Q"), al, qn, tables), k_pro=_renamed(pros.get("K"), al, kn, tables),
                         kv_rep=reps.get("K", 1))
    return AttentionBinding(spec, tuple(al.pairs), passes)
