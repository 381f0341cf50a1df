"""Peeling an elementwise epilogue off an accumulator, shared by the GEMM and conv recognisers.

From the yield down to the accumulator: casts, adds of a tensor read (the kind decides whether it is a bias or
a residual), and any read-free expression f(x) of one value x that dominates the accumulator. f is recognised
by evaluating it on a probe vector against scale (c*x), identity and every activation (relu, gelu_tanh,
gelu_erf, silu, sigmoid), so it does not matter how the frontend or the e-graph spells them (max(x,0),
2*sigmoid(2z)-1 for tanh, Abramowitz-Stegun erf...); any other such f (``y * y``: the value read more than
once; an activation a half-precision model computes in fp16, each op rounded) is its own ops as an ``fn``
program (:mod:`.epilogue_fn`).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ...ir import trampoline
from ...ir.dtypes import DType
from ...ir.region import R, RNode
from ...ir.trampoline import Walk
from . import epilogue_fn
from .region_match import Lets, Reject, walk
from .spec import EpilogueOp

HALF = (DType.fp16, DType.bf16)
PROBE = np.concatenate([np.linspace(-9.0, 9.0, 181), np.array([-1e-3, 1e-3, 0.0, 0.37, -2.71, 12.5, -12.5])])
_TOL = 2e-6  # |f(x) - g(x)| <= _TOL * (1 + |g(x)|) on the probe: far below fp16/bf16 rounding


def _depends(lets: Lets, acc: RNode):
    memo: dict = {}

    def walk_dep(n: RNode) -> Walk:  # a walk (ir/trampoline.py): a long chain needs no frames
        n = lets(n)
        if n is acc:
            return True
        if id(n) not in memo:
            found = False
            for s in n.src:
                if (yield walk_dep(s)):
                    found = True
                    break
            memo[id(n)] = found
        return memo[id(n)]

    def dep(n: RNode) -> bool:
        return trampoline.run(walk_dep(n))
    return dep


def _dominators(lets: Lets, top: RNode, acc: RNode, dep) -> list[RNode]:
    """Nodes below top that every path from top to acc passes through, the one nearest acc first."""
    nodes = [n for n in walk(lets, top) if n is not top and dep(n)]

    def reaches_acc_avoiding(block: RNode) -> bool:
        return any(n is acc for n in walk(lets, top, stop=block) if n is not block)
    doms = [d for d in nodes if d is acc or not reaches_acc_avoiding(d)]
    below = {id(d): sum(1 for n in walk(lets, d) if any(n is e for e in doms)) for d in doms}
    return sorted(doms, key=lambda d: below[id(d)])


def _probe(lets: Lets, top: RNode, x_node: RNode) -> np.ndarray | None:
    """f(PROBE) for the read-free fp32 expression top(x_node), or None if the block is not such a function."""
    steps = epilogue_fn.from_region(lets, top, x_node)
    return None if steps is None else epilogue_fn.evaluate(steps, PROBE)


def activation_on(kind: str, x: np.ndarray) -> np.ndarray:
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


_CANDIDATES = {k: activation_on(k, PROBE) for k in ("relu", "gelu_tanh", "gelu_erf", "silu", "sigmoid")}


def _close(f: np.ndarray, g: np.ndarray) -> bool:
    return bool(np.all(np.isfinite(f)) and np.all(np.abs(f - g) <= _TOL * (1.0 + np.abs(g))))


def identify(f: np.ndarray) -> list[EpilogueOp] | None:
    """The epilogue op(s) whose meaning is f on the probe: [] for identity, [scale], [activation], or None."""
    if _close(f, PROBE):
        return []
    c = float(np.dot(f, PROBE) / np.dot(PROBE, PROBE)) if np.all(np.isfinite(f)) else math.nan
    if math.isfinite(c) and _close(f, c * PROBE):
        return [EpilogueOp("scale", value=c)]
    for kind, g in _CANDIDATES.items():
        if _close(f, g):
            return [EpilogueOp(kind)]
    return None


MONOTONE = ("relu", "sigmoid")  # non-decreasing activations: f(max_w v) = max_w f(v)


def monotone_after(lets: Lets, top: RNode, x: RNode) -> list[EpilogueOp] | None:
    """The ops of top as a read-free function f of x when every one is non-decreasing (identity, a positive
    scale, relu, sigmoid), so that f commutes with a max over x's values; else None."""
    f = _probe(lets, top, x)
    ops = identify(f) if f is not None else None
    if ops is None or any(not (o.kind in MONOTONE or (o.kind == "scale" and o.value > 0)) for o in ops):
        return None
    return ops


def addend_source(lets: Lets, n: RNode) -> RNode:
    """What the non-accumulator side of an epilogue add is under [BroadcastInDim of] [cast fp32 of] (a read,
    for a bias or a residual)."""
    n = lets(n)
    if n.op == R.BROADCAST:
        n = lets(n.src[0])
    if n.op == R.UNARY and n.arg == "cast" and n.dtype == DType.fp32:
        n = lets(n.src[0])
    return n


def peel_epilogue(lets: Lets, top: RNode, acc: RNode, out_dtype: DType, addend: Callable[[RNode], EpilogueOp],
                  reject: Reject, strip: Callable[[RNode], RNode] | None = None) -> tuple[EpilogueOp, ...]:
    """The elementwise ops from the accumulator up to top, first applied first: casts, adds of addend(the
    other side) (bias, residual; in fp32, or in fp16 / bf16 as the fp32 add and a cast), and read-free f(x)
    recognised by their values on the probe (scale, activations). strip(t) skips nodes the kind sees through (a new t) or returns t."""
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
            if t.dtype in HALF and src.dtype == DType.fp32:
                if not (first and t.dtype == out_dtype):  # a cast the yield repeats is no extra rounding
                    ops.append(EpilogueOp("cast", dtype=t.dtype))
                t, first = src, False
                continue
            if t.dtype == DType.fp32 and src.dtype in (*HALF, DType.fp32):
                t, first = src, False
                continue
            reject(f"the epilogue casts {src.dtype.value} to {t.dtype.value}")
        if t.op == R.BINARY and t.arg == "add" and t.dtype in HALF and sum(map(dep, kids)) == 1 \
                and all(k.dtype == t.dtype for k in kids):
            # a 16-bit add of two 16-bit values is the fp32 add rounded: the addend, then a cast
            main, other = kids if dep(kids[0]) else kids[::-1]
            if not (first and t.dtype == out_dtype):
                ops.append(EpilogueOp("cast", dtype=t.dtype))
            ops.append(addend(other))
            t, first = main, False
            continue
        if t.dtype not in (DType.fp32, *HALF):
            reject(f"the epilogue computes {t.op.value} {t.arg} in {t.dtype.value}; the template's epilogue is fp32 "
                   "(a 16-bit step: its fp32 op rounded)")
        if t.op == R.BINARY and t.arg == "add" and sum(map(dep, kids)) == 1:
            main, other = kids if dep(kids[0]) else kids[::-1]
            ops.append(addend(other))
            t, first = main, False
            continue
        doms = _dominators(lets, t, acc, dep)
        for d in doms:
            f = _probe(lets, t, d)
            found = identify(f) if f is not None else None
            if found is not None:
                ops.extend(found)
                t = d
                break
        else:  # no named op: the widest read-free function of a dominator, as its program (read any number of times)
            for d in doms:
                steps = epilogue_fn.from_region(lets, t, d)
                if steps is not None:
                    ops.append(EpilogueOp("fn", steps=steps))
                    t = d
                    break
            else:
                reject(f"the epilogue step {t.op.value} {t.arg or ''} is not a bias, residual, cast or read-free "
                       "fp32 function of the accumulator")
        first = False
    return tuple(reversed(ops))
