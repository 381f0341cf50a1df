"""When two values of one e-class agree: the checker's stated NaN/inf and rounding policy.

``want`` is the class's value before the rule ran (the program's meaning), ``got`` the rule's new term;
each carries its forward error bound (``checker/bounds.py``). Element by element:
  1. where ``want`` is undetermined (an overflow of finite values, an invalid operation such as inf - inf
     or 0/0 on non-NaN values, an integer division by zero), any value refines it; where ``got``
     overflowed a finite intermediate (1/b of a subnormal b), the rewrite moved an overflow point, the
     latitude a reassociating compiler takes, and the element is not compared (an invalid operation
     ``got`` alone performs, 0/0 of an underflow, is compared: NaN is not a refinement of a value);
  2. NaN matches NaN at the same position, and only NaN: a NaN an input carried must stay a NaN, a
     finite value must not become one;
  3. an infinity must match exactly (same sign); +0 and -0 are equal;
  4. finite values agree when they differ by at most the rounding both terms perform: the sum of their
     bounds in the rounding kinds (fp32, fp16, bf16) that *both* terms have (a rounding one side drops or
     adds is a change, not a rounding; a rounding moved within its kind, a reassociation in bf16 too, passes
     at that kind's bound), and never more than GROW times the smaller of the two bounds
     or the output contract (``RTOL`` of the larger value): a rewrite may move a rounding, but an identity
     that loses the significant digits the other side keeps (``(a + b) - a = b``, a one-pass variance) does
     not agree, however large the careless side's own bound;
  5. bools and integers are exact, except an element a rounding on both sides may flip (a comparison of
     operands within their bounds of each other).
"""
from __future__ import annotations

import numpy as np

from .bounds import Val

GROW = 4.0  # a reassociation may grow the bound of the more accurate side by this factor
RTOL = 1e-3  # the project's output contract: a rewrite may always move a value by this relative amount


def common_bound(want: Val, got: Val) -> tuple:
    """(bound of want, bound of got) in the rounding kinds both terms perform."""
    shape = np.shape(want.v)
    kinds = set(want.err) & set(got.err)
    ew = sum((np.broadcast_to(want.err[k], shape) for k in kinds), np.zeros(shape))
    eg = sum((np.broadcast_to(got.err[k], shape) for k in kinds), np.zeros(shape))
    return ew, eg


def tolerance(want: Val, got: Val) -> np.ndarray:
    """The largest difference allowed at each element (rule 4 above)."""
    ew, eg = common_bound(want, got)
    with np.errstate(all="ignore"):
        a, b = np.abs(want.v.astype(np.float64)), np.abs(got.v.astype(np.float64))
        scale = np.where(np.isfinite(a) & np.isfinite(b), np.maximum(a, b), 0.0)
        cap = np.maximum(GROW * np.minimum(ew, eg), RTOL * scale)
        tol = np.minimum(ew + eg, cap)
    return np.where(np.isnan(tol), 0.0, tol)


def agree(want: Val, got: Val) -> np.ndarray:
    """Elementwise agreement of two values of one shape under the policy above."""
    a, b = want.v.astype(np.float64), got.v.astype(np.float64)
    with np.errstate(all="ignore"):
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        close = np.isfinite(a) & np.isfinite(b) & (np.abs(a - b) <= tolerance(want, got))
    ok = same | close | want.undetermined() | got.overflowed()
    if want.v.dtype == np.bool_ or want.v.dtype.kind in "iu":
        ew, eg = common_bound(want, got)
        ok |= np.isinf(ew) & np.isinf(eg)  # a comparison both sides may flip
    return ok


def describe(want: Val, got: Val, at: tuple) -> str:
    """Why the two values disagree at one element, in the policy's words."""
    a, b = np.asarray(want.v)[at].astype(np.float64), np.asarray(got.v)[at].astype(np.float64)
    if np.isnan(a) and not np.isnan(b):
        return f"a NaN (carried from an input) became {float(b)!r}: NaN must stay NaN"
    if np.isnan(b):
        return f"{float(a)!r} became NaN"
    if np.isinf(a) or np.isinf(b):
        return f"{float(a)!r} became {float(b)!r}: an infinity must match exactly"
    if want.v.dtype == np.bool_ or want.v.dtype.kind in "iu":
        return f"{float(a)!r} became {float(b)!r} (exact values)"
    ew, eg = common_bound(want, got)
    kinds = sorted(set(want.err) & set(got.err))
    only = sorted(set(want.err) ^ set(got.err))
    tol = float(tolerance(want, got)[at])
    why = (f"they differ by {abs(float(a) - float(b)):.4g}, beyond the tolerance {tol:.4g} "
           f"(rounding both sides perform: {', '.join(kinds) or 'none'}; bounds before {float(ew[at]):.4g}, "
           f"after {float(eg[at]):.4g})")
    if only:
        why += f"; a rounding into {', '.join(only)} is performed by one side only"
    elif float(ew[at] + eg[at]) > tol:
        why += "; one side lost the significant digits the other keeps"
    return why
