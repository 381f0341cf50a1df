"""Work counted, not timed: the Python and C function calls a piece of code makes. The same input always gives the
same count (once caches are warm), so a test can bound how work grows with a program where a clock would flake on a
loaded machine."""
from __future__ import annotations

import sys
from typing import Callable


def calls_made(work: Callable[[], object]) -> int:
    count = 0

    def tally(frame, event, arg):
        nonlocal count
        if event in ("call", "c_call"):
            count += 1
    sys.setprofile(tally)
    try:
        work()
    finally:
        sys.setprofile(None)
    return count
