"""The ``--cost model`` search never returns a partition priced above one kernel per op or above the
``--cost size`` partition, whatever limit stops it (docs/DESIGN.md §Cost model; issue 26 item 1)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polysat.checker.randprog import motif_programs, random_program
from polysat.ir.tiny_json import dump_tiny
from polysat.pipeline import Compilation
from polysat.pricing.kernels import total_us
from polysat.search.merge import SearchLimits

SLACK = 1e-9  # relative: the same kernels priced twice agree to rounding


def _prices(doc) -> tuple:
    """(chosen µs, one kernel per op µs, --cost size µs, the merge search's stop reason)."""
    s = Compilation(doc, cost="model").search
    size = total_us(Compilation(doc, cost="size").priced)
    return s.best.total, s.baseline.total, size, s.stop


def _not_above(chosen: float, *others: float) -> bool:
    return all(chosen <= o * (1 + SLACK) + SLACK for o in others)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(4, 12))
def test_random_programs_never_price_above_either_baseline(seed, size):
    p = random_program(np.random.default_rng(seed), size)
    chosen, unfused, sized, _ = _prices(dump_tiny(p))
    assert _not_above(chosen, unfused, sized), (seed, chosen, unfused, sized)


@pytest.mark.parametrize("k", range(4))
def test_motifs_stopped_at_once_keep_the_cheaper_baseline(k, monkeypatch):
    """A merge search stopped before it prices anything beyond its first path still returns a partition
    at or below both complete partitions priced first, and says which limit stopped it."""
    monkeypatch.setattr(SearchLimits, "from_knobs", classmethod(lambda cls: cls(prices=0, seconds=0.0)))
    p = motif_programs(np.random.default_rng(11))[k]
    chosen, unfused, sized, stop = _prices(dump_tiny(p))
    assert _not_above(chosen, unfused, sized), (k, chosen, unfused, sized)
    assert stop == "exhausted" or "limit" in stop
