"""Loading cuda-python's driver bindings and checking their results (one place, coded diagnostics)."""
from __future__ import annotations

from ...ir.diagnostics import fail


def driver():
    try:
        from cuda.bindings import driver
    except ImportError:
        fail("UnknownTarget", "--target cuda", "cuda-python is not installed",
             "Install the CUDA extra: pip install 'polysat[cuda]'.")
    return driver


def ck(res, what: str):
    """Unpack a cuda-python (err, *values) tuple, failing with a diagnostic on an error."""
    err, *vals = res if isinstance(res, tuple) else (res,)
    if int(err) != 0:
        fail("UnknownTarget", "--target cuda", f"{what} failed: {err!r}",
             "Check the GPU, the driver and that no other process holds the device.")
    return vals[0] if len(vals) == 1 else tuple(vals)
