"""The fixed prices of tests/data/prices.json.gz: every kernel the pipeline prices for the examples and the
bench models (``--cost model`` and ``--cost size``, on sm90 and sm80), and every region the ``--cost model``
search prices on the way (on sm90), each stored as its Poly Core region and its full Cost. Prices are pure
functions of the region, so the test re-prices the stored regions (whatever partition the search picks
today) and a faster cost model must give the same Cost.

Regenerate (only in a commit that means to change prices, saying why):
    python -m polysat.tests.price_fixture
"""
from __future__ import annotations

import glob
import gzip
import json
import os

from polysat.analyses import price as cost_model
from polysat.analyses.price import Cost
from polysat.analyses.poly_region import PolyRegion

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "data", "prices.json.gz")
ARCHS = ("sm90", "sm80")


def models() -> dict:
    from polysat.bench.models import mlp_stack, transformer
    out = {os.path.basename(p): p for p in sorted(glob.glob(os.path.join(HERE, "..", "examples", "*.json")))}
    out["transformer_1"] = transformer(1)
    out["mlp_stack_3"] = mlp_stack(3)
    return out


def cost_json(c: Cost) -> dict:
    """Every field of a Cost, unrounded."""
    return {k: (list(map(list, v)) if k in ("tile", "terms", "penalties") else list(v) if k == "stops" else v)
            for k, v in c.__dict__.items()}


def collect() -> list:
    from polysat.pricing.kernels import canonical
    from polysat.pipeline import Compilation
    seen: dict = {}

    def keep(region: PolyRegion, source: str):
        text = json.dumps(region.to_json(), sort_keys=True)
        seen.setdefault(text, (region, []))[1].append(source)
    real = cost_model._best
    for name, model in models().items():
        for cost in ("model", "size"):
            searched: list = []

            def spy(region, dev, _searched=searched):
                _searched.append(region)
                return real(region, dev)
            cost_model._best = spy
            try:
                c = Compilation(model, cost=cost)
                priced = c.priced
            finally:
                cost_model._best = real
            for p in priced:
                if p.region is not None:
                    keep(canonical(p.region), f"{name} --cost {cost}: kernel {p.kernel.name}")
            for r in searched:
                keep(r, f"{name} --cost {cost}: searched")
    out = []
    for region, sources in seen.values():
        for arch in ARCHS if any("kernel" in x for x in sources) else ARCHS[:1]:
            out.append({"sources": sources, "arch": arch, "region": region.to_json(),
                        "cost": cost_json(cost_model.price(region, arch))})
    return out


if __name__ == "__main__":
    rows = collect()
    with gzip.open(FIXTURE, "wt") as f:
        json.dump(rows, f, sort_keys=True, separators=(",", ":"))
    print(f"{len(rows)} prices -> {FIXTURE}")
