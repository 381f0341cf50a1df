"""Inputs that expose rounding and domain errors, and a tolerance in units of the compared dtype.

Inputs mix ordinary values in [-2, 2] with negatives, exact halves (round-half-even cases), values
that fp16 or bf16 round differently from fp32 (1 + 2^-12, 2049, 1/3), values fp16 cannot hold at
all (7e4 overflows to inf, 3e-8 flushes to zero) and large magnitudes, so a dropped cast, a moved
rounding point or an assumed sign shows. Two values agree when they are equal (NaN equal to NaN,
same infinities) or differ by at most ``ULPS`` machine epsilon of the coarser of (the class's dtype,
the coarsest rounding both terms perform, that one capped at 1e-3) times the larger of their magnitude
bounds: the running error bound of floating-point evaluation, so an fp32 reassociation passes, an fp16
rounding moved (2^-11) passes within the project's output tolerance (rtol 1e-3), a bf16 rounding moved
(2^-8) or a rounding dropped does not, and neither does a changed value.
"""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import DType, round_to

EPS = {"fp32": 2.0 ** -23, "fp16": 2.0 ** -10, "bf16": 2.0 ** -7}
ULPS = 1.0
MOVED_ROUNDING = 1e-3  # a 16-bit rounding both terms perform may move within the output contract, rtol 1e-3
_SPECIAL = np.array([0.5, -0.5, 1.5, -2.5, 1.0 + 2.0 ** -12, 1.0 + 2.0 ** -9, 2049.0, -4097.0, 1.0 / 3.0,
                     -7.0e4, 7.0e4, 3.0e-8, -3.0e-8, 1.0e3, -1.0e4, 0.0, -0.0, 6.0e4, 12.5], dtype=np.float64)


def eps(dtype: str) -> float:
    return EPS.get(dtype, 0.0)


def tricky(shape: tuple, dtype: str, rng: np.random.Generator) -> np.ndarray:
    """An input array of the declared dtype: mostly ordinary values, about one in three special."""
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype == "i32":
        return rng.integers(-4, 5, shape).astype(np.int32)
    base = rng.uniform(-2.0, 2.0, shape)
    pick = rng.random(shape) < 0.4
    special = _SPECIAL[rng.integers(0, len(_SPECIAL), shape)]
    with np.errstate(over="ignore"):
        return round_to(np.where(pick, special, base).astype(np.float32), DType(dtype))


def agree(want: np.ndarray, got: np.ndarray, mag: np.ndarray, unit: float) -> np.ndarray:
    """Elementwise agreement of two values under the tolerance above (mag: the magnitude bound)."""
    if want.dtype == np.bool_ or got.dtype == np.bool_ or unit == 0.0:
        a, b = want.astype(np.float64), got.astype(np.float64)
        return (a == b) | (np.isnan(a) & np.isnan(b))
    a, b = want.astype(np.float64), got.astype(np.float64)
    with np.errstate(all="ignore"):
        tol = np.where(np.isfinite(mag), ULPS * unit * mag, 0.0)
        return (a == b) | (np.isnan(a) & np.isnan(b)) | (np.abs(a - b) <= tol)
