"""The CPU benches' common run: measure each case, print the table, write the JSON (compile_time.py,
fusion.py)."""
from __future__ import annotations

import json
import pathlib
import platform
import sys
import time
from typing import Callable, Iterable


def run_cases(cases: Iterable, measure: Callable[[str, dict], dict], table: Callable[[list], str], out: str,
              **meta) -> int:
    """Measure every (name, model) case, each in a fresh process (no price or schedule cache warmed by
    an earlier case; ``measure`` must be a picklable module-level callable, e.g. a functools.partial),
    print ``table(rows)`` and write ``{**meta, python, total_s, rows}`` to ``out``."""
    import multiprocessing
    rows, t0 = [], time.perf_counter()
    ctx = multiprocessing.get_context("spawn")
    for name, model in cases:
        with ctx.Pool(1) as pool:
            rows.append(pool.apply(measure, (name, model)))
        print(f"  {name}: done ({time.perf_counter() - t0:.1f}s)", file=sys.stderr)
    print(table(rows))
    doc = {**meta, "python": platform.python_version(), "total_s": round(time.perf_counter() - t0, 2), "rows": rows}
    pathlib.Path(out).write_text(json.dumps(doc, indent=1), encoding="utf-8")
    print(f"total {doc['total_s']}s; wrote {out}")
    return 0


def tinygrad_errors(rows: list, name: str) -> list:
    """A line under a table for each row whose tinygrad side failed (``row[name]`` names the row)."""
    return [f"{r[name]}: tinygrad {r['tinygrad']['error']}" for r in rows if "error" in r["tinygrad"]]
