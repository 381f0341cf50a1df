"""Recognise an extracted RB-SSA region as softmax scores: Region -> ScoresBinding, or NoBind (the first region
of the two-region form of attention, where P is materialised and P V is a GEMM region).

The region must yield, with a cast to P's type, over the packed output ``P[*batch, m, j]``:

    div(e, bcast(reduce_sum<j>(e)))   with   e = exp2(mul(sub(S, bcast(reduce_max<j>(S))), log2(e)))

* S is the score part ``scale * Q K^T`` (masked causally or not), read by ``common.score_match.score_part``;
* both row reductions run over one key axis, in fp32, from their neutral elements (max from -inf, sum
  from 0), and are broadcast back along j; the max is taken of the same S that is subtracted from, the
  sum of the same e that is divided: either over j itself, or over a fresh reduce axis of j's size on
  which the reduced expression recomputes S or e (common.region_match.same_value; the extraction picks that form
  for some shapes, e.g. a batch of one);
* the exp2 argument is multiplied by fp32 log2(e) (either operand order), so e = exp(S - max).

Anything else is a NoBind saying exactly what does not fit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

from typing import NoReturn

from ...ir.dtypes import DType
from ...ir.region import R, Region, RNode
from ..common.region_match import Aliases, Lets, Mismatch, RegionBinding, axis_size, recogniser, same_value, the_yield
from ..common.score_match import score_part, window_read
from ..common.spec import OUT_DTYPES
from ..attention.spec import head_dims_reason
from .spec import ScoresSpec

LOG2E = 1.0 / math.log(2.0)


def _reject(r: Region, why: str) -> NoReturn:
    raise Mismatch(f"not a softmax_scores region: {why}")


@dataclass(frozen=True)
class ScoresBinding(RegionBinding):
    """A region's ScoresSpec and, for each tensor the kernel reads, the region tensor behind it."""
    spec: ScoresSpec


def _what(n: RNode) -> str:
    if n.op in (R.UNARY, R.BINARY):
        return f"{n.op.value} {n.arg}"
    if n.op == R.REDUCE:
        return f"reduce_{n.arg[0]}"
    return n.op.value


def _binary(lets: Lets, n: RNode, fn: str, what: str, reject) -> tuple[RNode, RNode]:
    n = lets(n)
    if n.op != R.BINARY or n.arg != fn or n.dtype != DType.fp32:
        reject(f"{what} is {_what(n)}, not an fp32 {fn}")
    a, b = n.src
    return lets(a), lets(b)


def _row_reduce(r: Region, lets: Lets, n: RNode, op: str, j: str, axes: tuple, what: str, reject) -> tuple:
    """bcast(reduce_op<k>(x)) back over axes -> (x, k): k is the key axis j, or a reduce axis of j's size
    over which x recomputes what it reduces (same_value with k renamed j decides)."""
    n = lets(n)
    if n.op != R.BROADCAST:
        reject(f"{what} is {_what(n)}, not a row {op} broadcast back over the keys")
    result_axes, _shape, bdims = n.arg
    red = lets(n.src[0])
    if red.op != R.REDUCE or red.arg[0] != op:
        reject(f"{what} broadcasts {_what(red)}, not a row {op}")
    _op, raxes, init = red.arg
    if len(raxes) != 1 or not (raxes[0] == j or raxes[0] in dict(r.reduce_axes)
                               and r.axis_sizes[raxes[0]] == r.axis_sizes[j]):
        reject(f"the row {op} reduces over [{', '.join(raxes)}], not over the keys [{j}] alone")
    neutral = -math.inf if op == "max" else 0.0
    if red.dtype != DType.fp32 or init != neutral:
        reject(f"the row {op} is not an fp32 {op} from {neutral}")
    if tuple(result_axes) != axes or tuple(result_axes[d] for d in bdims) != tuple(red.axes) \
            or tuple(red.axes) != tuple(a for a in axes if a != j):
        reject(f"the row {op} is not broadcast back along the keys onto [{', '.join(axes)}]")
    return lets(red.src[0]), raxes[0]


def _log2e_product(lets: Lets, n: RNode, reject) -> RNode:
    """mul(x, log2 e) in either order -> x."""
    a, b = _binary(lets, n, "mul", "the exp2 argument", reject)
    for x, c in ((a, b), (b, a)):
        if c.op == R.CONST and c.dtype == DType.fp32 and isinstance(c.arg, float) and \
                math.isclose(c.arg, LOG2E, rel_tol=1e-6):
            return x
    reject("the exp2 argument is not (scores - row max) times log2(e)")


@recogniser
def bind(region: Region, name: "str | None" = None) -> ScoresBinding:
    """The region as a ScoresSpec plus its tensor binding, or NoBind saying why it is not
    one row softmax of scaled Q K^T scores written to memory."""
    r = region
    reject = partial(_reject, r)
    lets = Lets(r)
    y, out, top = the_yield(r, lets, reject)
    axes = tuple(y.axes)
    if len(axes) < 2 or set(lets(top).axes) != set(axes):
        reject(f"it yields a value over [{', '.join(lets(top).axes)}] to [{', '.join(axes)}]")
    if out.memref.layout.kind != "row_major" or tuple(out.memref.shape) != tuple(r.axis_sizes[a] for a in axes):
        reject(f"its output {out.name!r} is not the packed row-major [{', '.join(axes)}] tensor")
    if y.cast not in OUT_DTYPES:
        reject(f"it writes {y.cast.value}; the template writes P as fp16, bf16 or fp32")
    batch, (m_ax, j) = axes[:-2], axes[-2:]
    e, den = _binary(lets, top, "div", "the yielded value", reject)
    summed, k = _row_reduce(r, lets, den, "sum", j, axes, "the divisor", reject)
    if not same_value(lets, summed, e, {k: j}):
        reject("the divisor is not the row sum of the dividend")
    if e.op != R.UNARY or e.arg != "exp2" or e.dtype != DType.fp32:
        reject(f"the dividend is {_what(e)}, not an fp32 exp2")
    s, mx = _binary(lets, _log2e_product(lets, e.src[0], reject), "sub", "the shifted scores", reject)
    maxed, k = _row_reduce(r, lets, mx, "max", j, axes, "the subtracted row statistic", reject)
    if not same_value(lets, maxed, s, {k: j}):
        reject("the subtracted row max is not the max of the scores it is subtracted from")
    windows: list = []

    def window(node, row: str, col: str, what: str) -> str:
        tensor, w, rep = window_read(r, node, row, batch[0], col, what, reject)
        if rep != 1:
            reject(f"{what} is read at heads // {rep} (grouped-query); the kind reads one window per head")
        windows.append(w)
        return tensor

    try:
        sp = score_part(r, lets, s, batch, m_ax, j, reject)
    except Mismatch:
        if len(batch) != 1:
            raise
        sp = score_part(r, lets, s, batch, m_ax, j, reject, window)  # Q and K heads of row-major matrices
    if sp.fn or sp.mask is not None:
        reject("its scores are a function of the sum or masked by a tensor; the kind takes scale * Q K^T, causal")
    d = r.axis_sizes[sp.k_axis]
    if not isinstance(d, int):
        reject(f"the head dim is {d}; the template needs a static int")
    if why := head_dims_reason(d):
        reject(why)
    al = Aliases(r)  # Q and K one tensor: bound twice
    qn, kn = al(sp.q, "q"), al(sp.k, "k")
    size = partial(axis_size, r, reject=reject)
    spec = ScoresSpec(name or r.name, size(m_ax), size(j), d, batch=tuple(size(a) for a in batch),
                      causal=sp.causal, scale=sp.scale, in_dtype=sp.in_dtype, p_dtype=y.cast, q=qn, k=kn, p=out.name,
                      cols=tuple(windows))
    return ScoresBinding(spec, tuple(al.pairs))
