"""The bound inside one egglog call (docs/DESIGN.md §E-graph). egglog cannot be stopped inside a call, and the
matches of one rule in one step are all found before the saturation's checks between steps can run: a rule
whose join is quadratic in a table the checks allowed can take hours and all the memory in one step.

While a call runs, egglog releases the GIL, so a thread samples the process's CPU time and resident memory.
When the call crosses its hard bound — the saturation's memory limit, or its CPU deadline — the watchdog
reports E1505 ResourceLimit through the command's reporter (``set_reporter``: text or ``--json``) and ends
the process with exit status 1. Nothing is rolled back: the e-graph is in the middle of the call, and the
egglog object is bound to the thread that made it, so the call cannot be left running in a thread of its own.

Ending the process is a command's choice, never a library's: the watchdog runs only once a command has set
its reporter (cli.py). Called as a library (``polysat.compile``, ``torch.compile(backend="polysat")``), polysat
never ends its caller's process; the limits checked between egglog calls still hold there.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager
from typing import Callable

from ..ir.diagnostics import diag

POLL = 0.02  # seconds between samples


_REPORTER: list = [None]  # None: no command owns the process, so the watchdog stays off


def set_reporter(fn: "Callable | None") -> None:
    """fn(diagnostics) prints the watchdog's diagnostic as the running command prints its own; setting one
    arms the watchdog (a command owns the process), None disarms it."""
    _REPORTER[0] = fn


def rss_mb() -> float:
    """The process's resident memory in MiB (Linux /proc; elsewhere its peak, from resource)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20
    except (OSError, ValueError, IndexError, AttributeError):
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _crossed(cpu_until: float, rss0: float, rss_growth: float) -> "str | None":
    cpu, rss = time.process_time(), rss_mb()
    if rss - rss0 > rss_growth:
        return (f"resident memory grew by {rss - rss0:.1f} MiB since the saturation began, past its limit of "
                f"{rss_growth:g} MiB (POLYSAT_EGRAPH_MEMORY_MB)")
    if cpu > cpu_until:
        return "it ran past the saturation's CPU deadline (twice POLYSAT_EGRAPH_SECONDS, and 2 s more)"
    return None


def _end(what: str, why: str) -> None:
    d = diag("ResourceLimit", "e-graph saturation", f"one egglog call ({what}) did not finish within its bound: {why}; egglog cannot "
             "stop inside a call, so polysat stops here", "A rule whose query joins large tables (its matches grow "
             "as a product) must be fixed; or raise POLYSAT_EGRAPH_SECONDS / _MEMORY_MB.")
    try:
        _REPORTER[0]([d])
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(1)


@contextmanager
def bounded(what: str, cpu_until: float, rss0: float, rss_growth: float):
    """Run the body (one egglog call) with a thread that ends the process past ``cpu_until`` (process CPU
    seconds, ``time.process_time``) or once its resident memory exceeds ``rss0`` by ``rss_growth`` MiB; without
    a command's reporter, the body runs as is."""
    if _REPORTER[0] is None:
        yield
        return
    done = threading.Event()

    def watch() -> None:
        while not done.wait(POLL):
            why = _crossed(cpu_until, rss0, rss_growth)
            if why is not None and not done.is_set():
                _end(what, why)

    t = threading.Thread(target=watch, name="polysat-egglog-watchdog", daemon=True)
    t.start()
    try:
        yield
    finally:
        done.set()
        t.join()
