"""Forward error bounds: each value the checker compares carries how far it may be from the exact value
of its own term, computed from the term's ops (docs/rules.md, "How a rule is judged").

A :class:`Val` is the computed array ``v`` (what the reference evaluator gives), an absolute error
bound per rounding kind (``err["fp32"]``, ``err["fp16"]``, ``err["bf16"]``: the part of the distance to
the exact real value caused by roundings into that type; a key is present only when the term rounds
into that type somewhere) and ``und``, the elements the term leaves undetermined (an overflow of
finite values, an invalid operation such as inf - inf or 0/0 on non-NaN values, an integer division by
zero): the reference evaluator's value there is decided by where an intermediate overflowed, not by
the law, so a rewrite may give anything there. Inputs and constants are exact.

Each op adds its own rounding, ``eps(dtype) * |result| + the dtype's smallest subnormal``, to the kind
of its result dtype (transcendental ops: two of them), and propagates its operands' bounds through its
first-order sensitivity: a sum adds them (cancellation counted: the bound stays absolute while the
value shrinks), a product scales each by the other factor, exp2 by ``ln 2 |v|``, a reciprocal or
division by ``1/|b|^2`` (no bound at all, inf, where an operand's bound reaches its value), a sum over
n points adds ``(n - 1) eps32 sum |x|`` for the float32 accumulation and its final rounding. Exact ops
(negation, relu, max, min, select, every movement) round nothing. A comparison whose operands are
closer than their bounds may flip: that element of the bool carries an infinite bound in its
operands' kinds, and a ``Where`` on it may take either branch.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .numerics import eps, tiny

LN2 = float(np.log(2.0))
_EXACT_UNARY = ("NEG", "RELU")
_TRANSCENDENTAL = ("EXP2", "LOG2", "SQRT", "RSQRT", "RECIPROCAL", "POW")


@dataclass
class Val:
    v: np.ndarray
    err: dict = field(default_factory=dict)  # rounding kind -> float64 absolute bound (same shape as v)
    und: "np.ndarray | None" = None  # bool: elements left undetermined (None: none)
    mask: "np.ndarray | None" = None  # defined elements of a partial read (None: all)
    ovf: "np.ndarray | None" = None  # bool: elements an overflow of finite values decided (a subset of und)

    def total(self) -> np.ndarray:
        """The whole error bound (every kind)."""
        out = np.zeros(np.shape(self.v))
        for e in self.err.values():
            out = out + e
        return out

    def undetermined(self) -> np.ndarray:
        return np.zeros(np.shape(self.v), dtype=bool) if self.und is None else self.und

    def overflowed(self) -> np.ndarray:
        return np.zeros(np.shape(self.v), dtype=bool) if self.ovf is None else self.ovf


def _ovf(v: np.ndarray, kids: list) -> "np.ndarray | None":
    """Overflowed: an operand's overflowed element, or a non-finite result of finite operands."""
    shape = np.shape(v)
    out = np.zeros(shape, dtype=bool)
    for k in kids:
        if k.ovf is not None:
            out |= np.broadcast_to(k.ovf, shape)
    if v.dtype.kind == "f" or v.dtype.name == "bfloat16":
        fin = np.ones(shape, dtype=bool)
        for k in kids:
            if k.v.dtype.kind == "f" or k.v.dtype.name == "bfloat16":
                fin &= np.broadcast_to(np.isfinite(_f64(k.v)), shape)
        out |= ~np.isfinite(_f64(v)) & ~np.isnan(_f64(v)) & fin
    return out if out.any() else None


def _with_ovf(x: Val, kids: list) -> Val:
    x.ovf = _ovf(x.v, kids)
    return x


def exact(v: np.ndarray) -> Val:
    return Val(v, {}, None)


def _f64(a) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def _clean(e: np.ndarray) -> np.ndarray:
    """A bound is never NaN (an undefined sensitivity is no bound: inf) and never negative."""
    e = np.abs(np.asarray(e, dtype=np.float64))
    return np.where(np.isnan(e), np.inf, e)


def _kind(v: np.ndarray) -> str:
    return {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}.get(v.dtype.name, "")


def _round(err: dict, v: np.ndarray, ulps: float = 1.0) -> dict:
    """err plus the rounding of result v into its own type."""
    k = _kind(v)
    if not k:
        return err
    out = dict(err)
    with np.errstate(all="ignore"):
        av = np.abs(_f64(v))
        r = np.where(np.isfinite(av), ulps * eps(k) * av + tiny(k), 0.0)
    out[k] = out.get(k, 0.0) + r
    return out


def _combine(parts: list, shape: tuple) -> dict:
    """sum_i c_i * err_i per kind (parts: (sensitivity array, operand Val))."""
    out: dict = {}
    for c, x in parts:
        for k, e in x.err.items():
            with np.errstate(all="ignore"):
                t = np.where(e == 0, 0.0, _clean(c) * e)
            out[k] = np.broadcast_to(out.get(k, 0.0) + t, shape)
    return {k: _clean(e) for k, e in out.items()}


def _und_elementwise(v: np.ndarray, kids: list) -> "np.ndarray | None":
    """Undetermined: an operand's undetermined element, or a non-finite result of operands none of
    which was NaN that is NaN (an invalid operation) or that all were finite (an overflow)."""
    shape = np.shape(v)
    und = np.zeros(shape, dtype=bool)
    for k in kids:
        if k.und is not None:
            und |= np.broadcast_to(k.und, shape)
    if v.dtype.kind != "f" and v.dtype.name != "bfloat16":
        return und if und.any() else None
    fv = _f64(v)
    floats = [_f64(k.v) for k in kids if k.v.dtype.kind == "f" or k.v.dtype.name == "bfloat16"]
    any_nan = np.zeros(shape, dtype=bool)
    all_finite = np.ones(shape, dtype=bool)
    for a in floats:
        any_nan |= np.broadcast_to(np.isnan(a), shape)
        all_finite &= np.broadcast_to(np.isfinite(a), shape)
    und |= (np.isnan(fv) & ~any_nan) | (~np.isfinite(fv) & all_finite)
    return und if und.any() else None


def unary(op: str, x: Val, v: np.ndarray) -> Val:
    av, ax = np.abs(_f64(v)), np.abs(_f64(x.v))
    ex = x.total()
    with np.errstate(all="ignore"):
        if op in _EXACT_UNARY:
            return _with_ovf(Val(v, dict(x.err), _und_elementwise(v, [x])), [x])
        if op == "EXP2":
            c = LN2 * av * np.exp2(np.minimum(ex, 64.0))
        elif op == "LOG2":
            c = np.where(ax > ex, 1.0 / (LN2 * (ax - ex)), np.inf)
        elif op == "SQRT":
            c = np.where(ax > ex, 1.0 / (np.sqrt(ax - ex) + np.sqrt(ax)), np.inf)
        elif op == "RSQRT":
            c = np.where(ax > ex, 0.5 * av / (ax - ex) * np.sqrt(ax / (ax - ex)), np.inf)
        elif op == "RECIPROCAL":
            c = np.where(ax > ex, 1.0 / (ax * (ax - ex)), np.inf)
        else:
            c = np.full(np.shape(v), np.inf)
    err = _combine([(c, x)], np.shape(v))
    return _with_ovf(Val(v, _round(err, v, 2.0 if op in _TRANSCENDENTAL else 1.0), _und_elementwise(v, [x])), [x])


def binary(op: str, a: Val, b: Val, v: np.ndarray) -> Val:
    shape = np.shape(v)
    if op in ("CMPLT", "CMPEQ", "CMPNE"):
        return compare_op(a, b, v)
    if op in ("MAX", "MIN"):
        err = {k: np.maximum(np.broadcast_to(a.err.get(k, 0.0), shape), np.broadcast_to(b.err.get(k, 0.0), shape))
               for k in set(a.err) | set(b.err)}
        return _with_ovf(Val(v, err, _und_elementwise(v, [a, b])), [a, b])
    fa, fb = _f64(a.v), _f64(b.v)
    ea, eb = a.total(), b.total()
    with np.errstate(all="ignore"):
        if op in ("ADD", "SUB"):
            ca, cb = np.ones(shape), np.ones(shape)
        elif op == "MUL":
            ca, cb = np.abs(fb) + eb, np.abs(fa)
        elif op == "FDIV":
            ok = np.abs(fb) > eb
            ca = np.where(ok, 1.0 / (np.abs(fb) - eb), np.inf)
            cb = np.where(ok, (np.abs(fa) + ea) / (np.abs(fb) * (np.abs(fb) - eb)), np.inf)
        elif op == "POW":
            ca = np.where(np.abs(fa) > ea, np.abs(fb * _f64(v) / fa) * 2.0, np.inf)
            cb = np.abs(np.log(np.abs(fa)) * _f64(v)) * 2.0
        else:
            ca = cb = np.full(shape, np.inf)
    err = _combine([(ca, a), (cb, b)], shape)
    und = _und_elementwise(v, [a, b])
    if op == "FDIV" and v.dtype.kind in "iu":
        zero = np.broadcast_to(fb == 0, shape)
        und = zero if und is None else und | zero
        return _with_ovf(Val(v, err, und if und.any() else None), [a, b])
    return _with_ovf(Val(v, _round(err, v, 2.0 if op in _TRANSCENDENTAL else 1.0), und), [a, b])


def compare_op(a: Val, b: Val, v: np.ndarray) -> Val:
    """A comparison: exact, except where the operands are within their bounds of each other (it may flip)."""
    shape = np.shape(v)
    e = np.broadcast_to(a.total(), shape) + np.broadcast_to(b.total(), shape)
    with np.errstate(all="ignore"):
        near = (e > 0) & ~(np.abs(_f64(a.v) - _f64(b.v)) > e)
    kinds = set(a.err) | set(b.err)
    err = {k: np.where(near, np.inf, 0.0) for k in kinds} if near.any() else {}
    return _with_ovf(Val(v, err, _und_elementwise(v, [a, b])), [a, b])


def where(c: Val, a: Val, b: Val, v: np.ndarray) -> Val:
    shape = np.shape(v)
    cond = np.broadcast_to(np.asarray(c.v, dtype=bool), shape)
    err = {}
    for k in set(a.err) | set(b.err):
        err[k] = np.where(cond, np.broadcast_to(a.err.get(k, 0.0), shape), np.broadcast_to(b.err.get(k, 0.0), shape))
    if c.err:  # a flippable condition: either branch
        with np.errstate(all="ignore"):
            gap = np.abs(_f64(a.v) - _f64(b.v)) + np.broadcast_to(a.total(), shape) + np.broadcast_to(b.total(), shape)
        for k, ec in c.err.items():
            err[k] = _clean(np.broadcast_to(err.get(k, 0.0), shape) + np.where(np.broadcast_to(ec, shape) > 0, gap, 0.0))
    und = None
    parts = [x.und for x in (a, b) if x.und is not None]
    if parts or c.und is not None:
        ua = np.broadcast_to(a.undetermined(), shape)
        ub = np.broadcast_to(b.undetermined(), shape)
        und = np.where(cond, ua, ub) | np.broadcast_to(c.undetermined(), shape)
    ovf = np.where(cond, np.broadcast_to(a.overflowed(), shape), np.broadcast_to(b.overflowed(), shape)) \
        | np.broadcast_to(c.overflowed(), shape)
    return Val(v, err, und if und is not None and und.any() else None, ovf=ovf if ovf.any() else None)


def cast(x: Val, v: np.ndarray) -> Val:
    """A conversion: exact into a wider type; a rounding into a narrower float; truncation into i32."""
    src, dst = x.v.dtype, v.dtype
    err = dict(x.err)
    und = _und_elementwise(v, [x])
    if dst.kind in "iu":
        if src.kind == "f" or src.name == "bfloat16":
            e = x.total()
            with np.errstate(all="ignore"):
                fx = _f64(x.v)
                spread = np.maximum(np.abs(np.trunc(fx + e) - _f64(v)), np.abs(np.trunc(fx - e) - _f64(v)))
            err = {k: np.where(spread > 0, spread, 0.0) for k in x.err} if x.err else {}
        return _with_ovf(Val(v, err, und), [x])
    if dst == np.bool_:
        return _with_ovf(Val(v, {}, und), [x])
    back = _f64(v)
    with np.errstate(all="ignore"):
        moved = ~(back == _f64(x.v)) & np.isfinite(back)
    if moved.any() or _wider(src, dst) is False:
        return _with_ovf(Val(v, _round(err, v), und), [x])
    return _with_ovf(Val(v, err, und), [x])


def _wider(src, dst) -> "bool | None":
    """Whether dst holds every value of src (None when unknown)."""
    order = {"bool": 0, "float16": 1, "bfloat16": 1, "float32": 2}
    if src.name in order and dst.name in order and (src.name, dst.name) != ("float16", "bfloat16") \
            and (src.name, dst.name) != ("bfloat16", "float16"):
        return order[dst.name] >= order[src.name]
    return None


def reduce(op: str, axes: tuple, body: Val, v: np.ndarray, acc: str) -> Val:
    """A reduction over axes, accumulated in float32 and rounded once into acc (the reference evaluator)."""
    shape = np.shape(v)
    if not axes:
        return Val(v, dict(body.err), body.und, ovf=body.ovf)
    n = int(np.prod([body.v.shape[k] for k in axes]))
    if op == "SUM":
        err = {k: _clean(e.sum(axis=axes)).reshape(shape) for k, e in ((k, np.broadcast_to(e, body.v.shape))
                                                                     for k, e in body.err.items())}
        if body.v.dtype.kind == "f" or body.v.dtype.name == "bfloat16":
            with np.errstate(all="ignore"):
                mag = np.abs(_f64(body.v))
                mag = np.where(np.isfinite(mag), mag, 0.0).sum(axis=axes).reshape(shape)
                if _kind(body.v) != acc and acc in ("fp16", "bf16"):
                    err[acc] = err.get(acc, 0.0) + eps(acc) * mag  # every term rounded into acc first
            err["fp32"] = err.get("fp32", 0.0) + max(n - 1, 0) * eps("fp32") * mag
        elif _kind(v):  # an integer body summed into a float: float32 partial sums
            with np.errstate(all="ignore"):
                mag = np.abs(_f64(body.v)).sum(axis=axes).reshape(shape)
            err[acc] = err.get(acc, 0.0) + eps(acc) * mag  # every term rounded into acc first
            err["fp32"] = err.get("fp32", 0.0) + max(n - 1, 0) * eps("fp32") * mag
        err = _round(err, v)
    else:
        err = {k: np.broadcast_to(e, body.v.shape).max(axis=axes).reshape(shape) for k, e in body.err.items()}
    und = None
    if body.und is not None:
        und = body.und.any(axis=axes).reshape(shape)
    if v.dtype.kind == "f" or v.dtype.name == "bfloat16":
        with np.errstate(all="ignore"):
            fb = _f64(body.v)
            fin = np.isfinite(fb).all(axis=axes).reshape(shape)
            nan_in = np.isnan(fb).any(axis=axes).reshape(shape)
            over = (~np.isfinite(_f64(v)) & fin) | (np.isnan(_f64(v)) & ~nan_in)  # overflow, or inf - inf
        und = over if und is None else und | over
        # an overflow of the accumulation: an infinity from finite terms, or a NaN from terms with no NaN and
        # infinities of one sign only (a partial sum overflowed into the other sign's infinity)
        both = (np.isposinf(fb).any(axis=axes) & np.isneginf(fb).any(axis=axes)).reshape(shape)
        ovf = body.overflowed().any(axis=axes).reshape(shape) | (~np.isfinite(_f64(v)) & ~np.isnan(_f64(v)) & fin) \
            | (np.isnan(_f64(v)) & ~nan_in & ~both)
    else:
        ovf = body.overflowed().any(axis=axes).reshape(shape)
    return Val(v, err, und if und is not None and und.any() else None, ovf=ovf if ovf.any() else None)


def softmax_sum(p: str, s: Val, vv: Val, v: np.ndarray) -> Val:
    """SoftmaxSum(p, passes, s, v): P rounded to p weighs v (sum_j P_j = 1), so the rounding of P moves
    the result by at most eps(p) max_j |v|; an error e in s moves P by about 2 e relative."""
    shape = np.shape(v)
    with np.errstate(all="ignore"):
        av = np.abs(_f64(v))
        mv = np.abs(_f64(vv.v))
        mv = np.where(np.isfinite(mv), mv, 0.0).max(axis=-1)
        base = np.where(np.isfinite(av), av, 0.0) + mv
    es = {k: np.broadcast_to(e, s.v.shape).max(axis=-1)[..., None] for k, e in s.err.items()}
    ev = {k: np.broadcast_to(e, vv.v.shape).max(axis=-1) for k, e in vv.err.items()}
    err: dict = {}
    for k in set(es) | set(ev):
        err[k] = _clean(np.broadcast_to(2.0 * es.get(k, 0.0) * mv + ev.get(k, 0.0), shape))
    err[p] = err.get(p, 0.0) + 2.0 * eps(p) * base
    err["fp32"] = err.get("fp32", 0.0) + 8.0 * eps("fp32") * base
    und = np.broadcast_to(s.undetermined().any(axis=-1)[..., None], shape) | vv.undetermined().any(axis=-1)
    with np.errstate(all="ignore"):
        fin = np.broadcast_to(np.isfinite(_f64(s.v)).all(axis=-1)[..., None], shape) & np.isfinite(_f64(vv.v)).all(axis=-1)
    und = und | (~np.isfinite(_f64(v)) & fin) | (np.isnan(_f64(v)) & ~np.isnan(_f64(vv.v)).any(axis=-1))
    ovf = np.broadcast_to(s.overflowed().any(axis=-1)[..., None], shape) | vv.overflowed().any(axis=-1)
    return Val(v, err, und if und.any() else None, ovf=ovf if ovf.any() else None)
