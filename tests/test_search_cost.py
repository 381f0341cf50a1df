"""What the ``--cost model`` search spends on the candidates it never takes (search/model.py, search/merge.py):
an illegal candidate is judged on its chosen terms, never converted to Tiny IR, and a mixture's experts are
joined into their concatenation in one round of the polish, with each expert's join priced once."""
from __future__ import annotations

import pytest

from polysat.bench.corpora.scale_models import soft_moe
from polysat.frontend.onnx import import_onnx
from polysat.pipeline import Compilation
from polysat.search import branches
from polysat.search import merge as merge_mod
from polysat.search import model as search_model
from polysat.search.reprice import Repricer


def _moe(experts: int):
    return import_onnx(soft_moe(experts, tokens=32, d=64, hidden=128), origin="moe.onnx")


@pytest.fixture(autouse=True)
def whole(monkeypatch):
    """The mixture searched whole: what the search spends on one wide program (its experts side by side are
    otherwise parallel segments, search/branches.py, tests/test_branches.py)."""
    monkeypatch.setattr(branches, "parallel", lambda prog: None)


def test_only_the_candidates_priced_are_converted_to_tiny_ir(monkeypatch):
    """Every candidate the search converts to Tiny IR it prices (the illegal ones, a second GEMM fused into the
    first once per expert, are judged on their terms), and the search still fuses the experts' kernels."""
    calls = {"tiny": 0, "priced": 0}
    to_tiny, reprice = search_model.to_tiny, Repricer.__call__

    def counted_tiny(*a, **k):
        calls["tiny"] += 1
        return to_tiny(*a, **k)

    def counted_price(*a, **k):  # a candidate priced (search/reprice.py: its kernels met before keep their prices)
        calls["priced"] += 1
        return reprice(*a, **k)
    monkeypatch.setattr(search_model, "to_tiny", counted_tiny)
    monkeypatch.setattr(Repricer, "__call__", counted_price)
    s = Compilation(_moe(4), cost="model").search
    searched = dict(calls)
    # the one-kernel-per-op extraction is converted for the merge search's space, and priced on demand where its floor
    # is above the default partition (search/merge.py partition_floor): here, by Search.baseline
    assert len(s.best.priced) < len(s.baseline.priced) and s.best.total < s.baseline.total
    assert calls["tiny"] == searched["tiny"] == calls["priced"] and searched["priced"] >= 2, (searched, calls)


def test_the_polish_joins_the_experts_in_one_round(monkeypatch):
    """Eight experts' joins all go into the concatenation's group: the polish joins them in a few rounds, not one
    expert a round, and prices each distinct group once."""
    rounds = []
    search = merge_mod.merge_search

    def counted(items, price, lower, legal, limits=merge_mod.SearchLimits(), prefer=lambda k: True, **kw):
        rounds.append(limits.prices)
        return search(items, price, lower, legal, limits, prefer, **kw)
    monkeypatch.setattr(merge_mod, "merge_search", counted)
    s = Compilation(_moe(8), cost="model").search
    polish_rounds = rounds.count(0)  # each round of the polish realizes its joins by a search with no new price
    assert "join(s)" in s.stop and "time limit" not in s.stop, s.stop
    joins = int(s.stop.split("then ")[1].split(" join")[0])
    assert joins >= 8 and polish_rounds <= 4, (joins, polish_rounds, s.stop)
