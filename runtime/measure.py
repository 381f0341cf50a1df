"""The measurement log (docs/DESIGN.md §Runtime): one CSV row per kernel per run, appended to the file
``POLYSAT_MEASURE_LOG`` names (default ``~/.cache/polysat/measurements.csv``; ``off`` writes nothing).

Columns: ``time`` (UTC, ISO 8601), ``source`` (``run`` or the bench), ``model``, ``kernel`` (the region),
``kind`` (its kernel kind, or ``playback`` for a region run on the CPU), ``arch``, ``shapes`` (the bound symbols,
JSON), ``flops``, ``bytes`` (device-memory bytes), ``occupancy`` (modelled) and ``estimate_us`` (the cost model's
time) from Poly Core's price of the region at those shapes, ``actual_us`` (the CUDA-event median of the kernel;
empty where it did not run on the GPU) and ``plan`` (the kernel's Schedule Plan, JSON).
"""
from __future__ import annotations

import csv
import datetime
import json
import os
from typing import Any, Iterable, Mapping

from .. import knobs

FIELDS = ("time", "source", "model", "kernel", "kind", "arch", "shapes", "flops", "bytes", "occupancy",
          "estimate_us", "actual_us", "plan")


def row(*, source: str, model: str, kernel: str, kind: str, arch: str, shapes: Mapping[str, int],
        price: "Mapping[str, Any] | None", actual_us: "float | None", plan: Any) -> dict:
    """One row; price is a Poly Core price as JSON (analyses/cost_model.py ``Cost.to_json``) or None (a kernel
    with no statement to price)."""
    cost = price or {}
    return {"time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "source": source,
            "model": model, "kernel": kernel, "kind": kind, "arch": arch,
            "shapes": json.dumps(dict(sorted(shapes.items())), separators=(",", ":")),
            "flops": cost.get("flops", ""), "bytes": cost.get("bytes", ""), "occupancy": cost.get("occupancy", ""),
            "estimate_us": "" if "time_est_us" not in cost else round(float(cost["time_est_us"]), 3),
            "actual_us": "" if actual_us is None else round(float(actual_us), 3),
            "plan": json.dumps(plan, separators=(",", ":"), sort_keys=True, default=str)}


def append(rows: Iterable[dict], path: "str | None" = None) -> "str | None":
    """Append rows to the log (a header first when the file is new); returns its path, None when off or empty."""
    rows = list(rows)
    path = path or knobs.measure_log()
    if not rows or path is None:
        return None
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    with open(path, "a", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        if new:
            w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in FIELDS})
    return path


def read(path: str) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))
