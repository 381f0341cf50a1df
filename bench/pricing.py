"""Pricing bench: how long the cost model (analyses/price.py ``price``) takes to price every region of
tests/data/prices.json.gz from cold caches — the kernels of the examples and bench models and the regions
the ``--cost model`` search prices on the way — and the analyses' share of the transformer_1 search
(``price`` and ``regions_from_partition``, CPU seconds), each in its own process. Prints the figures and
writes JSON. CPU seconds, not wall time: the machine may be shared.

    python -m polysat.bench.pricing [--out PATH] [--no-search]
"""
from __future__ import annotations

import argparse
import gzip
import json
import pathlib
import platform
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
FIXTURE = HERE.parent / "tests" / "data" / "prices.json.gz"


def price_fixture() -> dict:
    from polysat.analyses.price import price
    from polysat.analyses.poly_region import PolyRegion
    rows = json.loads(gzip.decompress(FIXTURE.read_bytes()))
    regions = [(PolyRegion.from_json(r["region"]), r["arch"]) for r in rows]
    t = time.process_time()
    for r, arch in regions:
        price(r, arch)
    cpu = time.process_time() - t
    return {"regions": len(regions), "cpu_s": round(cpu, 3), "ms_per_region": round(1e3 * cpu / len(regions), 2)}


def search_share() -> dict:
    """CPU seconds of the transformer_1 ``--cost model`` search, and of the analyses it calls."""
    from polysat.pricing import kernels
    from polysat.pipeline import Compilation
    from polysat.bench.models import transformer
    spent = {"price": 0.0, "regions_from_partition": 0.0}
    real = {name: getattr(kernels, name) for name in spent}

    def timed(name):
        def f(*a, **k):
            t = time.process_time()
            try:
                return real[name](*a, **k)
            finally:
                spent[name] += time.process_time() - t
        return f
    for name in spent:
        setattr(kernels, name, timed(name))
    try:
        c = Compilation(transformer(1), cost="model")
        t = time.process_time()
        _ = c.search
        total = time.process_time() - t
    finally:
        for name, fn in real.items():
            setattr(kernels, name, fn)
    return {"search_cpu_s": round(total, 3), **{f"{k}_cpu_s": round(v, 3) for k, v in spent.items()},
            "kernels": len(c.priced)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="pricing.json")
    ap.add_argument("--no-search", action="store_true", help="only price the fixture regions")
    ap.add_argument("--part", choices=("fixture", "search"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.part:  # one measurement in this process, printed as JSON
        print(json.dumps(price_fixture() if a.part == "fixture" else search_share()))
        return 0
    doc = {"python": platform.python_version()}
    for part in ("fixture",) + (() if a.no_search else ("search",)):  # each from cold caches: its own process
        out = subprocess.run([sys.executable, "-m", "polysat.bench.pricing", "--part", part], check=True,
                             capture_output=True, text=True).stdout
        doc["fixture" if part == "fixture" else "transformer_1"] = json.loads(out.strip().splitlines()[-1])
    f = doc["fixture"]
    print(f"price {f['regions']} regions from cold caches: {f['cpu_s']:.2f} s CPU ({f['ms_per_region']} ms each)")
    if "transformer_1" in doc:
        s = doc["transformer_1"]
        print(f"transformer_1 --cost model search: {s['search_cpu_s']:.2f} s CPU; price {s['price_cpu_s']:.2f} s, "
              f"regions_from_partition {s['regions_from_partition_cpu_s']:.2f} s")
    pathlib.Path(a.out).write_text(json.dumps(doc, indent=1), encoding="utf-8")
    print(f"wrote {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
