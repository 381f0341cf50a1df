"""Inputs that reach every case a law can break on, and the rounding units of each dtype.

A rule's test instances cycle through four input regimes (``REGIMES``), so every rule sees each:
  * ``ordinary``: values in [-2, 2] mixed with negatives, exact halves (round-half-even cases), values
    fp16/bf16 round differently from fp32 (1 + 2^-12, 2049, 1/3), values fp16 cannot hold (7e4, 3e-8)
    and large magnitudes, so a dropped cast, a moved rounding point or an assumed sign shows;
  * ``scaled``: each tensor's values times its own power of ten (1e-4 .. 1e4), so one operand is
    absorbed by another (a + b == a) and differences of nearly equal values cancel;
  * ``paired``: a tensor shaped and typed like an earlier one is that one, its negation or a copy
    perturbed in its last bits, and a lone tensor is clustered around the draw's one centre c
    (+-c(1 + d), |d| <= 2^-6 or 2^-12, 2^-4 in 16-bit types; signs one, random, a checkerboard, or stripes
    along one axis that sum to zero along it: an inner sum across the stripes is large, an outer one along
    them cancels): x - y, x == y, x != x, one-pass variances and sums
    of opposite values meet their worst case;
  * ``special``: IEEE special values sprinkled in: NaN, +-inf, +-0, subnormals and the dtype's largest
    finite value (every tensor holds a NaN and, past one element, an infinity), so masks, NaN
    propagation, overflow and signed zeros are exercised.
  * ``gentle``: plain values in [-1, 1], no special ones (a random-pool program is also compared on one such
    draw: a softmax row of them is not one-hot, so its normaliser is not 1 and dropping or inverting it shows).
Integer tensors get small values (with 0: division by zero), then wide ones (scaled: times 100 or 10^4 plus
one; special: past 2^24, which fp32 cannot hold, and the i32 extremes); bools are random.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ..ir.dtypes import DType, round_to

EPS = {"fp32": 2.0 ** -23, "fp16": 2.0 ** -10, "bf16": 2.0 ** -7}
TINY = {"fp32": float(np.finfo(np.float32).smallest_subnormal), "fp16": float(np.finfo(np.float16).smallest_subnormal),
        "bf16": float(ml_dtypes.finfo(ml_dtypes.bfloat16).smallest_subnormal)}
MAX = {"fp32": float(np.finfo(np.float32).max), "fp16": float(np.finfo(np.float16).max),
       "bf16": float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)}
REGIMES = ("ordinary", "paired", "special", "paired", "scaled", "paired")  # instance k takes REGIMES[k % 6]
_SPECIAL = np.array([0.5, -0.5, 1.5, -2.5, 1.0 + 2.0 ** -12, 1.0 + 2.0 ** -9, 2049.0, -4097.0, 1.0 / 3.0,
                     -7.0e4, 7.0e4, 3.0e-8, -3.0e-8, 1.0e3, -1.0e4, 0.0, -0.0, 6.0e4, 12.5], dtype=np.float64)


_WIDE_INTS = np.array([2 ** 24 + 1, -(2 ** 24 + 3), 2 ** 24 + 5, -(2 ** 24 + 7)], dtype=np.int64)  # odd: fp32 rounds them


def eps(dtype: str) -> float:
    """Machine epsilon of a float dtype (0 for i32 and bool: exact)."""
    return EPS.get(dtype, 0.0)


def tiny(dtype: str) -> float:
    """The dtype's smallest subnormal: the absolute error of a rounding that underflows."""
    return TINY.get(dtype, 0.0)


def tricky(shape: tuple, dtype: str, rng: np.random.Generator) -> np.ndarray:
    """An input array of the declared dtype in the ordinary regime: mostly ordinary values, about one in
    three special."""
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype == "i32":
        return rng.integers(-4, 5, shape).astype(np.int32)
    base = rng.uniform(-2.0, 2.0, shape)
    pick = rng.random(shape) < 0.4
    special = _SPECIAL[rng.integers(0, len(_SPECIAL), shape)]
    return _as(np.where(pick, special, base), dtype)


def _as(a: np.ndarray, dtype: str) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return round_to(np.asarray(a, dtype=np.float64).astype(np.float32), DType(dtype))


def _ieee(dtype: str, shape: tuple, rng: np.random.Generator) -> np.ndarray:
    vals = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 3.0 * TINY[dtype], -5.0 * TINY[dtype], MAX[dtype], -MAX[dtype]])
    return vals[rng.integers(0, len(vals), shape)]


def draw_inputs(tensors: list, rng: np.random.Generator, regime: str) -> dict:
    """Input arrays for tensors [(name, shape, dtype)] in one regime (see the module docstring)."""
    out: dict = {}
    seen: list = []
    centre = float(rng.choice((3.0, 100.0, 1000.0, 7.5, 2000.0)))
    for name, shape, dtype in tensors:
        shape = tuple(int(d) for d in shape)
        if dtype in ("bool", "i32"):
            if dtype == "i32" and regime == "special":  # past 2^24 too: not every i32 is an fp32
                wide = rng.integers(-3000, 3001, shape)
                a = np.where(rng.random(shape) < 0.3, rng.choice(_WIDE_INTS, shape), wide).astype(np.int32)
                if a.size:  # one in every tensor, as a NaN in a float one
                    a.reshape(-1)[int(rng.integers(a.size))] = int(rng.choice(_WIDE_INTS))
                out[name] = a
            elif dtype == "i32" and regime == "scaled":  # times 1, 100 or 10^4, plus one: odd past 2^24 too
                out[name] = (rng.integers(-3000, 3001, shape) * int(10 ** rng.choice((0, 2, 4))) + 1).astype(np.int32)
            elif dtype == "i32" and regime == "paired" and (twin := _twin(seen, shape, dtype)) is not None:
                out[name] = (out[twin] if rng.random() < 0.5 else -out[twin]).astype(np.int32)
            else:
                out[name] = tricky(shape, dtype, rng)
            seen.append((name, shape, dtype))
            continue
        if regime == "scaled":
            a = tricky(shape, "fp32", rng).astype(np.float64) * 10.0 ** int(rng.choice((-4, -2, 0, 2, 4)))
        elif regime == "paired":
            twin = _twin(seen, shape, dtype)
            if twin is not None and rng.random() < 0.9:
                x = out[twin].astype(np.float64)
                k = int(rng.choice(3, p=(0.2, 0.6, 0.2)))
                d = 1.0 + rng.uniform(-1, 1, shape) * 2.0 ** -int(rng.choice((9, 12, 20)))
                a = x if k == 0 else -x * d if k == 1 else x * d
            else:  # clustered around the draw's one centre: x - c cancels for every pair of tensors
                pick = rng.random() * (0.6 if dtype in ("fp16", "bf16") else 1.0) + (0.4 if dtype in ("fp16", "bf16") else 0.0)
                sign = (float(rng.choice((-1.0, 1.0))) if pick < 0.35 else np.where(rng.random(shape) < 0.5, -1.0, 1.0)
                        if pick < 0.5 else 1.0 - 2.0 * (_parity(shape, rng, True) % 2) if pick < 0.7
                        else _stripes(shape, rng))
                spread = 2.0 ** -int(rng.choice((4, 6) if dtype in ("fp16", "bf16") else (6, 12)))  # a spread the dtype holds
                a = centre * sign * (1.0 + rng.uniform(-1, 1, shape) * spread)
        elif regime == "special":
            a = np.where(rng.random(shape) < 0.3, _ieee(dtype, shape, rng), tricky(shape, "fp32", rng).astype(np.float64))
            flat = a.reshape(-1)
            if flat.size:  # a NaN and an infinity in every tensor, whatever its size
                at = rng.permutation(flat.size)
                flat[at[0]] = np.nan
                if flat.size > 1:
                    flat[at[1]] = float(rng.choice((np.inf, -np.inf)))
        elif regime == "gentle":
            a = rng.uniform(-1.0, 1.0, shape)
        else:
            a = tricky(shape, "fp32", rng).astype(np.float64)
        out[name] = _as(a, dtype)
        seen.append((name, shape, dtype))
    return out


def _parity(shape: tuple, rng: np.random.Generator, board: bool) -> np.ndarray:
    """Index parity: of all indices (a checkerboard: every sum cancels) or of one random axis."""
    idx = np.indices(shape) if shape else np.zeros((1,), dtype=int)
    return idx.sum(axis=0) if board or not shape else idx[int(rng.integers(len(shape)))]


def _stripes(shape: tuple, rng: np.random.Generator) -> np.ndarray:
    """Signs along one random axis that sum to exactly zero along it (+1, -1, .., and a 0 last on an axis of
    odd length), the same across the other axes: a sum along the axis cancels while sums across it grow,
    so a nested sum that rounds its large inner sums before the outer one cancels them shows the rounding."""
    if not shape:
        return np.ones(())
    ax = int(rng.integers(len(shape)))
    n = shape[ax]
    w = np.array([(-1.0) ** k for k in range(n)])
    if n % 2:
        w[-1] = 0.0 if n > 1 else 1.0
    return np.broadcast_to(w.reshape([n if k == ax else 1 for k in range(len(shape))]), shape)


def _twin(seen: list, shape: tuple, dtype: str) -> "str | None":
    for name, s, d in seen:
        if s == shape and d == dtype:
            return name
    return None
