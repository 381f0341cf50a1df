"""The cost model's prices do not move under a rewrite for speed: every region stored in
tests/data/prices.json.gz (the kernels of the examples and bench models, and the regions the search prices
on the way) is priced again and must give the same Cost, field by field (floats to 1e-9 relative)."""
import gzip
import importlib.util
import json
import math
import os

import pytest

from polysat.analyses.price import price
from polysat.analyses.poly_region import PolyRegion

_spec = importlib.util.spec_from_file_location("polysat_test_price_fixture",
                                               os.path.join(os.path.dirname(__file__), "price_fixture.py"))
fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixture)
FIXTURE, cost_json = fixture.FIXTURE, fixture.cost_json

ROWS = json.load(gzip.open(FIXTURE, "rt"))


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def test_fixture_covers_every_model_and_both_costs():
    sources = {x.split(":")[0] for r in ROWS for x in r["sources"]}
    for model in ("transformer_1", "mlp_stack_3", "gemm_bias_relu.json", "attention.json", "conv_relu_maxpool.json"):
        assert {f"{model} --cost model", f"{model} --cost size"} <= sources
    assert {r["arch"] for r in ROWS} == {"sm80", "sm90"}


@pytest.mark.parametrize("chunk", range(8))
def test_prices_are_unchanged(chunk):
    bad = []
    for row in ROWS[chunk::8]:
        got = cost_json(price(PolyRegion.from_json(row["region"]), row["arch"]))
        diff = {k: (v, got[k]) for k, v in row["cost"].items() if not _same(v, got[k])}
        if diff:
            bad.append((row["sources"][0], row["arch"], diff))
    assert not bad, bad[:3]


def test_no_roofline_term_is_negative():
    """An epilogue's SFU work (SiLU's exp) is serial after the main loop, counted once at the SFU rate: it was
    once subtracted from the FP32 term too, which went negative on conv3x3_s2_silu."""
    bad = [(r["sources"][0], k, v) for r in ROWS for k, v in r["cost"]["terms"] + r["cost"]["penalties"] if v < 0]
    assert not bad, bad[:3]
