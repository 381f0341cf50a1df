"""The time bound of the stages after the search (Poly Core analysis, pricing, region synthesis, plans, GPU IR, .cu
rendering): ``POLYSAT_STAGE_SECONDS`` of wall-clock time per stage (knobs.py).

The pipeline opens a bound around each of those stages (``within``); their loops over kernels, regions and
statements call ``check`` between steps. Past the bound, the stage stops with E1505 ResourceLimit naming the
stage, the seconds it ran and the step it reached (its stop reason); no stage runs unbounded (docs/DESIGN.md
§Diagnostics). Outside any bound ``check`` costs one comparison and never stops.
"""
from __future__ import annotations

import time
from contextlib import contextmanager

from .diagnostics import fail

_OPEN: list = []  # (stage, deadline, seconds) of the bounds open now, innermost last


@contextmanager
def within(stage: str, seconds: float):
    """Run the body under a bound of ``seconds`` for ``stage`` (a nested bound keeps the earlier deadline)."""
    end = time.monotonic() + seconds
    if _OPEN:
        end = min(end, _OPEN[-1][1])
    _OPEN.append((stage, end, seconds))
    try:
        yield
    finally:
        _OPEN.pop()


def check(step: str) -> None:
    """E1505 when the innermost open bound has passed; ``step`` names where the stage stopped."""
    if _OPEN and time.monotonic() > _OPEN[-1][1]:
        stage, _, seconds = _OPEN[-1]
        fail("ResourceLimit", f"stage {stage}", f"stopped at {step}: the stage ran past its bound of {seconds:g} s "
             "(POLYSAT_STAGE_SECONDS)", "Raise POLYSAT_STAGE_SECONDS, or compile a smaller model (or split it).")
