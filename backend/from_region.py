"""Recognise an extracted RB-SSA region as a GEMM-family kernel: Region -> GemmSpec (seed 000 §6.8.1, §8, §10 step 6).

The region must be one C-CON1 contraction (seed 000 §6.3.1): ``let acc = reduce(sum, k){ mul(cast(read A),
cast(read B)) }`` over fp16|bf16 operands widened to fp32, with one reduce axis, followed by an epilogue
applied elementwise to the accumulator, and one yield with a cast. Axis roles come from the yield: its last
two axes are (m, n), the ones before are batch axes; the operand that reads m is A, the one that reads n is B.

* Read maps must be permutations of axis variables (plus constant 0 on size-1 dims): the order of (m, k)
  gives A's ``row``/``col`` layout, (k, n) B's; an operand that reads no batch axis is ``broadcast``.
* Epilogue, peeled from the yield down to the accumulator: ``add`` of a read of a 1-D tensor along n or m
  (bias) or of a same-shape read (residual); a cast to fp16/bf16 and back (cast); and any other step is a
  read-free expression f(x) of one value x that dominates the accumulator. f is recognised by evaluating
  it on a probe vector against scale (c*x), identity and every activation (relu, gelu_tanh, gelu_erf, silu,
  sigmoid) -- robust to how the frontend or the e-graph spells them (max(x,0), 2*sigmoid(2z)-1 for tanh,
  Abramowitz-Stegun erf...).

A tensor in two roles (x @ x^T, x @ W + x) is bound under an alias (``X.b``, ``X.residual``): the
:class:`GemmBinding` maps each spec tensor back to the region tensor, so the runner passes one buffer twice.
Anything else fails with E1504 NoKernelTemplate saying exactly what does not fit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Callable

import numpy as np

from ..ir.diagnostics import fail
from ..ir.dtypes import DType
from ..ir.region import R, Region, RNode
from .gemm_spec import EpilogueOp, GemmSpec
from .region_match import Aliases, Lets, Reject, RegionBinding, axis_size, axis_var, row_major_input, the_yield, walk

_HALF = (DType.fp16, DType.bf16)
_PROBE = np.concatenate([np.linspace(-9.0, 9.0, 181), np.array([-1e-3, 1e-3, 0.0, 0.37, -2.71, 12.5, -12.5])])
_TOL = 2e-6  # |f(x) - g(x)| <= _TOL * (1 + |g(x)|) on the probe: far below fp16/bf16 rounding


def _reject(r: Region, why: str) -> None:
    fail("NoKernelTemplate", f"region {r.name}", f"not a GEMM-family region: {why}")


def _read_axes(r: Region, node: RNode, what: str) -> tuple[str, tuple[str, ...]]:
    """(tensor, the axis variables of its read map in order), checking the map is a packed permutation."""
    tensor, index = node.arg
    buf = row_major_input(r, tensor, what, partial(_reject, r))
    sizes = r.axis_sizes
    axes = []
    for k, (e, d) in enumerate(zip(index, buf.memref.shape, strict=True)):
        v = axis_var(e)
        if v is None:
            if e.is_const and e.constant == 0 and d == 1:
                continue  # a size-1 dim: dropped from the operand's shape
            _reject(r, f"{what} read {tensor}[{', '.join(map(str, index))}]: index {k} ({e}) is not an axis "
                       "variable; the template needs reads that are permutations of the axes")
        if v in axes:
            _reject(r, f"{what} read {tensor}[{', '.join(map(str, index))}] uses axis {v} twice")
        if d != sizes[v]:
            _reject(r, f"{what} {tensor!r} has size {d} on dim {k}, axis {v} has size {sizes[v]}; "
                       "the template reads whole, packed tensors")
        axes.append(v)
    return tensor, tuple(axes)


def _operand(r: Region, lets: Lets, n: RNode) -> tuple[RNode, DType]:
    """A contraction operand: cast(read T, fp32) with T fp16|bf16."""
    n = lets(n)
    if n.op == R.UNARY and n.arg == "cast" and n.dtype == DType.fp32:
        src = lets(n.src[0])
        if src.op == R.READ and src.dtype in _HALF:
            return src, src.dtype
    if n.op == R.READ:
        _reject(r, f"operand {n.arg[0]!r} is {n.dtype.value}; the MMA template takes fp16 or bf16 operands")
    _reject(r, "the reduce body multiplies something other than two (widened) reads")


def _accumulator(r: Region, lets: Lets, top: RNode) -> RNode:
    reds = [n for n in walk(lets, top) if n.op == R.REDUCE]
    if len(reds) != 1:
        _reject(r, f"it has {len(reds)} reductions; a GEMM has exactly one")
    acc = reds[0]
    op, axes, init = acc.arg
    if op != "sum" or init != 0 or acc.dtype != DType.fp32:
        _reject(r, f"its reduction is {op} (init {init}, {acc.dtype.value if acc.dtype else '?'}); "
                   "a GEMM sums from 0 in fp32")
    if len(axes) != 1:
        _reject(r, f"its reduction binds {len(axes)} axes; the template contracts exactly one")
    body = lets(acc.src[0])
    if not (body.op == R.BINARY and body.arg == "mul"):
        _reject(r, "the reduce body is not a product (C-CON1)")
    return acc


# ---- the epilogue ---------------------------------------------------------------------------------

def _depends(lets: Lets, acc: RNode):
    memo: dict = {}

    def dep(n: RNode) -> bool:
        n = lets(n)
        if n is acc:
            return True
        if id(n) not in memo:
            memo[id(n)] = any(dep(s) for s in n.src)
        return memo[id(n)]
    return dep


def _dominators(lets: Lets, top: RNode, acc: RNode, dep) -> list[RNode]:
    """Nodes below top that every path from top to acc passes through, the one nearest acc first."""
    nodes = [n for n in walk(lets, top) if n is not top and dep(n)]

    def reaches_acc_avoiding(block: RNode) -> bool:
        return any(n is acc for n in walk(lets, top, stop=block) if n is not block)
    doms = [d for d in nodes if d is acc or not reaches_acc_avoiding(d)]
    below = {id(d): sum(1 for n in walk(lets, d) if any(n is e for e in doms)) for d in doms}
    return sorted(doms, key=lambda d: below[id(d)])


_UNARY = {"neg": np.negative, "relu": lambda x: np.maximum(x, 0.0), "exp2": np.exp2, "log2": np.log2,
          "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x), "reciprocal": lambda x: 1.0 / x}
_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "max": np.maximum,
           "min": np.minimum, "pow": np.power, "cmplt": np.less, "cmpeq": np.equal, "cmpne": np.not_equal}


def _probe(lets: Lets, top: RNode, x_node: RNode) -> np.ndarray | None:
    """f(_PROBE) for the read-free fp32 expression top(x_node), or None if the block is not such a function."""
    memo: dict = {}

    def ev(n: RNode):
        n = lets(n)
        if n is x_node:
            return _PROBE
        if id(n) in memo:
            return memo[id(n)]
        if n.op == R.CONST and n.dtype in (DType.fp32, DType.bool):
            v = np.float64(n.arg) if n.dtype == DType.fp32 else bool(n.arg)
        elif n.op == R.UNARY and n.dtype == DType.fp32 and (n.arg in _UNARY or n.arg == "cast"):
            a = ev(n.src[0])
            if a is None or (n.arg == "cast" and lets(n.src[0]).dtype not in (DType.fp32, DType.bool)):
                return None
            v = np.asarray(a, np.float64) if n.arg == "cast" else _UNARY[n.arg](a)
        elif n.op == R.BINARY and n.arg in _BINARY and n.dtype in (DType.fp32, DType.bool):
            a, b = ev(n.src[0]), ev(n.src[1])
            if a is None or b is None:
                return None
            v = _BINARY[n.arg](a, b)
        elif n.op == R.SELECT and n.dtype == DType.fp32 and lets(n.src[0]).op != R.PRED:
            p, a, b = (ev(s) for s in n.src)
            if p is None or a is None or b is None:
                return None
            v = np.where(p, a, b)
        else:
            return None  # reads, reductions, broadcasts, index guards, narrow dtypes: not a pointwise f(x)
        memo[id(n)] = v
        return v

    with np.errstate(all="ignore"):
        out = ev(top)
    return None if out is None else np.broadcast_to(np.asarray(out, np.float64), _PROBE.shape)


def _activation(kind: str, x: np.ndarray) -> np.ndarray:
    if kind == "relu":
        return np.maximum(x, 0.0)
    if kind == "sigmoid":
        return 1.0 / (1.0 + np.exp(-x))
    if kind == "silu":
        return x / (1.0 + np.exp(-x))
    if kind == "gelu_tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    if kind == "gelu_erf":
        return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))
    raise KeyError(kind)


_CANDIDATES = {k: _activation(k, _PROBE) for k in ("relu", "gelu_tanh", "gelu_erf", "silu", "sigmoid")}


def _close(f: np.ndarray, g: np.ndarray) -> bool:
    return bool(np.all(np.isfinite(f)) and np.all(np.abs(f - g) <= _TOL * (1.0 + np.abs(g))))


def identify(f: np.ndarray) -> list[EpilogueOp] | None:
    """The epilogue op(s) whose meaning is f on the probe: [] for identity, [scale], [activation], or None."""
    if _close(f, _PROBE):
        return []
    c = float(np.dot(f, _PROBE) / np.dot(_PROBE, _PROBE)) if np.all(np.isfinite(f)) else math.nan
    if math.isfinite(c) and _close(f, c * _PROBE):
        return [EpilogueOp("scale", value=c)]
    for kind, g in _CANDIDATES.items():
        if _close(f, g):
            return [EpilogueOp(kind)]
    return None


def addend_source(lets: Lets, n: RNode) -> RNode:
    """What the non-accumulator side of an epilogue add is under [BroadcastInDim of] [cast fp32 of] (a read,
    for a bias or a residual)."""
    n = lets(n)
    if n.op == R.BROADCAST:
        n = lets(n.src[0])
    if n.op == R.UNARY and n.arg == "cast" and n.dtype == DType.fp32:
        n = lets(n.src[0])
    return n


def _addend(r: Region, lets: Lets, n: RNode, m_ax: str, n_ax: str, out_axes: tuple) -> EpilogueOp:
    """bias / residual from the non-accumulator side of an add: [BroadcastInDim of] [cast fp32 of] a read."""
    n = addend_source(lets, n)
    if n.op != R.READ:
        _reject(r, "the epilogue adds a term that is not a tensor read (bias along n or m, or a residual)")
    if n.dtype not in (*_HALF, DType.fp32):
        _reject(r, f"the epilogue tensor {n.arg[0]!r} is {n.dtype.value}; bias and residual are fp16, bf16 or fp32")
    tensor, axes = _read_axes(r, n, "epilogue tensor")
    if axes == (n_ax,):
        return EpilogueOp("bias", tensor, "n", n.dtype)
    if axes == (m_ax,):
        return EpilogueOp("bias", tensor, "m", n.dtype)
    if axes == out_axes:
        return EpilogueOp("residual", tensor, dtype=n.dtype)
    _reject(r, f"the epilogue adds {tensor}[{', '.join(map(str, n.arg[1]))}], which is neither a bias along "
               f"{n_ax} or {m_ax} nor a residual over [{', '.join(out_axes)}]")


def peel_epilogue(lets: Lets, top: RNode, acc: RNode, out_dtype: DType, addend: Callable[[RNode], EpilogueOp],
                  reject: Reject, strip: Callable[[RNode], RNode] | None = None) -> tuple[EpilogueOp, ...]:
    """The elementwise ops from the accumulator up to top, first applied first: casts, adds of addend(the
    other side) (bias, residual), and read-free f(x) recognised by their values on the probe (scale,
    activations). strip(t) skips nodes the kind sees through (a new t) or returns t."""
    dep = _depends(lets, acc)
    ops: list[EpilogueOp] = []  # outermost first
    t = lets(top)
    first = True
    while t is not acc:
        if strip is not None:
            t2 = strip(t)
            if t2 is not t:
                t = t2
                continue
        kids = lets.children(t)
        if t.op == R.UNARY and t.arg == "cast":
            src = kids[0]
            if t.dtype in _HALF and src.dtype == DType.fp32:
                if not (first and t.dtype == out_dtype):  # a cast the yield repeats is no extra rounding
                    ops.append(EpilogueOp("cast", dtype=t.dtype))
                t, first = src, False
                continue
            if t.dtype == DType.fp32 and src.dtype in (*_HALF, DType.fp32):
                t, first = src, False
                continue
            reject(f"the epilogue casts {src.dtype.value} to {t.dtype.value}")
        if t.dtype != DType.fp32:
            reject(f"the epilogue computes {t.op.value} {t.arg} in {t.dtype.value}; the template's epilogue is fp32")
        if t.op == R.BINARY and t.arg == "add" and sum(map(dep, kids)) == 1:
            main, other = kids if dep(kids[0]) else kids[::-1]
            ops.append(addend(other))
            t, first = main, False
            continue
        for d in _dominators(lets, t, acc, dep):
            f = _probe(lets, t, d)
            found = identify(f) if f is not None else None
            if found is not None:
                ops.extend(found)
                t = d
                break
        else:
            reject(f"the epilogue step {t.op.value} {t.arg or ''} is not a bias, residual, cast, scale or "
                   "activation (relu, gelu_tanh, gelu_erf, silu, sigmoid) of the accumulator")
        first = False
    return tuple(reversed(ops))


# ---- the region -----------------------------------------------------------------------------------

def gemm_binding(region: Region, name: str | None = None) -> "GemmBinding":
    """The region as a GemmSpec plus its tensor binding, or E1504 NoKernelTemplate saying why it is not
    GEMM-family."""
    r = region
    reject = partial(_reject, r)
    lets = Lets(r)
    y, out, top = the_yield(r, lets, reject)
    if len(y.axes) < 2:
        _reject(r, "its output has fewer than two axes (a GEMM writes [*batch, m, n])")
    if set(lets(top).axes) != set(y.axes):
        _reject(r, f"it yields a value over [{', '.join(lets(top).axes)}] to [{', '.join(y.axes)}]")
    if out.memref.layout.kind != "row_major":
        _reject(r, f"its output has layout {out.memref.layout.kind}")
    if tuple(out.memref.shape) != tuple(r.axis_sizes[a] for a in y.axes):
        _reject(r, f"its output {out.name!r} is not the packed [{', '.join(y.axes)}] tensor")
    batch_axes, (m_ax, n_ax) = tuple(y.axes[:-2]), y.axes[-2:]
    acc = _accumulator(r, lets, top)
    (k_ax,) = acc.arg[1]
    if set(acc.axes) != set(y.axes):
        _reject(r, f"the reduction keeps axes [{', '.join(acc.axes)}], the output has [{', '.join(y.axes)}]")
    (x, xdt), (w, wdt) = (_operand(r, lets, s) for s in lets(acc.src[0]).src)
    if xdt != wdt:
        _reject(r, f"the operands are {xdt.value} and {wdt.value}; the MMA takes one input type")
    rx, ry = (_read_axes(r, n, "operand") for n in (x, w))
    if m_ax in ry[1]:
        rx, ry = ry, rx
    (a_name, a_axes), (b_name, b_axes) = rx, ry

    def layout(axes: tuple, row: tuple, what: str) -> tuple[str, bool]:
        core = tuple(a for a in axes if a not in batch_axes)
        batch = tuple(a for a in axes if a in batch_axes)
        if sorted(core) != sorted(row):
            _reject(r, f"operand {what} reads axes [{', '.join(axes)}]; it must read [{', '.join(row)}] "
                       f"(in some order) plus the batch axes")
        if batch not in ((), batch_axes) or axes[:len(batch)] != batch:
            _reject(r, f"operand {what} reads batch axes [{', '.join(batch)}] of [{', '.join(batch_axes)}]; "
                       "the template needs all of them, leading and in order, or none (broadcast)")
        return ("row" if core == row else "col"), not batch and bool(batch_axes)

    a_layout, a_bcast = layout(a_axes, (m_ax, k_ax), repr(a_name))
    b_layout, b_bcast = layout(b_axes, (k_ax, n_ax), repr(b_name))
    if a_bcast and b_bcast:
        _reject(r, "neither operand reads the batch axes (the batch would only repeat one product)")
    epilogue = peel_epilogue(lets, top, acc, y.cast, lambda n: _addend(r, lets, n, m_ax, n_ax, tuple(y.axes)), reject)
    if y.cast not in (DType.fp16, DType.bf16, DType.fp32):
        _reject(r, f"it writes {y.cast.value}; the template writes fp16, bf16 or fp32")
    al = Aliases(r)  # x @ x^T, x @ W + x: one tensor in two roles
    a_spec, b_spec = al(a_name, "a"), al(b_name, "b")
    size = partial(axis_size, r, reject=reject)
    spec = GemmSpec(name or r.name, size(m_ax), size(n_ax), size(k_ax),
                    batch=tuple(size(a) for a in batch_axes), in_dtype=xdt, out_dtype=y.cast,
                    a_layout=a_layout, b_layout=b_layout, a_broadcast=a_bcast, b_broadcast=b_bcast,
                    epilogue=al.epilogue(epilogue), a=a_spec, b=b_spec, c=out.name)
    return GemmBinding(spec, tuple(al.pairs))


@dataclass(frozen=True)
class GemmBinding(RegionBinding):
    """A region's GemmSpec and, for each tensor the kernel reads, the region tensor behind it."""
    spec: GemmSpec


def gemm_spec_from_region(region: Region, name: str | None = None) -> GemmSpec:
    """The GemmSpec that computes the region, or E1504 NoKernelTemplate saying why it is not GEMM-family."""
    return gemm_binding(region, name).spec

