"""Shared test settings: hypothesis profiles (CI is 2 cores, so property runs stay bounded), and a recursion
limit low enough that a walk recursing once per op of a few hundred ops crosses it.

`ci` (the default) is derandomized: the same examples every run, so a landing never depends on luck;
`dev` (HYPOTHESIS_PROFILE=dev) draws fresh examples each run to keep exploring.
"""
import os
import sys

import pytest
from hypothesis import HealthCheck, settings

_examples = int(os.environ.get("POLYSAT_HYPOTHESIS_EXAMPLES", "40"))
settings.register_profile("ci", max_examples=_examples, deadline=None, derandomize=True, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=_examples, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def low_recursion_limit():
    """Python's recursion limit set 250 frames above the caller's depth (restored after): a walk that recursed
    once per op of a 400-op chain would cross it, as a 5,000-op chain crosses the default 1,000."""
    limit, depth, f = sys.getrecursionlimit(), 0, sys._getframe()
    while f is not None:
        depth, f = depth + 1, f.f_back
    sys.setrecursionlimit(depth + 250)
    yield
    sys.setrecursionlimit(limit)
