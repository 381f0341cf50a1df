"""Progress of a long compile on stderr: the stages as they start and end, and notes inside the long ones
(saturation iterations, segments searched, the merge search's stop). Shown only when stderr is a terminal
(``POLYSAT_PROGRESS``: 1 forces it on, 0 off; knobs.py) and never by a command asked for ``--json`` unless
forced; never on stdout. It is a side channel: nothing it prints is a result, and it decides nothing.

    with progress.stage("saturated"):
        ...
        progress.note("iteration 3 (rewrite): 2,529 e-nodes, 0.4 s")
"""
from __future__ import annotations

import contextlib
import sys
import time

from .. import knobs

_state = {"quiet": False, "depth": 0, "t0": None}


def quiet(on: bool = True) -> None:
    """Silence progress for this process unless POLYSAT_PROGRESS=1 forces it (a ``--json`` command)."""
    _state["quiet"] = on


def enabled() -> bool:
    forced = knobs.progress()
    if forced is not None:
        return forced
    return not _state["quiet"] and sys.stderr is not None and sys.stderr.isatty()


def _line(text: str) -> None:
    if _state["t0"] is None:
        _state["t0"] = time.perf_counter()
    print(f"polysat [{time.perf_counter() - _state['t0']:7.1f}s] {'  ' * _state['depth']}{text}", file=sys.stderr, flush=True)


def note(text: str) -> None:
    """One line of progress inside the current stage."""
    if enabled():
        _line(text)


@contextlib.contextmanager
def stage(name: str):
    """A stage: a line when it starts and one when it ends, with its seconds (nested stages indented)."""
    if not enabled():
        yield
        return
    _line(f"{name} ...")
    t = time.perf_counter()
    _state["depth"] += 1
    try:
        yield
    finally:
        _state["depth"] -= 1
        _line(f"{name} done ({time.perf_counter() - t:.1f} s)")
