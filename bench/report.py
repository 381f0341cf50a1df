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
    """Measure every (name, model) case, print ``table(rows)`` and write ``{**meta, python, total_s, rows}``
    to ``out``."""
    rows, t0 = [], time.perf_counter()
    for name, model in cases:
        rows.append(measure(name, model))
        print(f"  {name}: done ({time.perf_counter() - t0:.1f}s)", file=sys.stderr)
    print(table(rows))
    doc = {**meta, "python": platform.python_version(), "total_s": round(time.perf_counter() - t0, 2), "rows": rows}
    pathlib.Path(out).write_text(json.dumps(doc, indent=1), encoding="utf-8")
    print(f"total {doc['total_s']}s; wrote {out}")
    return 0
