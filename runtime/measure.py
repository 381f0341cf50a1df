"""The measurement log (docs/DESIGN.md §Runtime): one CSV row per kernel per run, appended to the file
``POLYSAT_MEASURE_LOG`` names (default ``~/.cache/polysat/measurements.csv``; ``off`` writes nothing).

Columns: ``time`` (UTC, ISO 8601), ``source`` (``run`` or the bench), ``model``, ``kernel`` (the region),
``ops`` (the model's op names it computes, comma-separated), ``kind`` (its kernel kind, or ``playback`` for a
region run on the CPU), ``arch``, ``shapes`` (the bound symbols, JSON), ``flops``, ``bytes`` (device-memory
bytes), ``occupancy`` (modelled) and ``estimate_us`` (the cost model's time) from Poly Core's price of the
region at those shapes — a bench, which launches kernel specs rather than a model's regions, logs its plan
search's roofline estimate instead (:func:`plan_price`) —, ``actual_us`` (the CUDA-event median of the
kernel; empty where it did not run on the GPU) and ``plan`` (the kernel's Schedule Plan, JSON).
"""
from __future__ import annotations

import csv
import datetime
import json
import os
from typing import Any, Iterable, Mapping

from .. import knobs

MAX_THREADS_PER_SM = 2048  # sm80 and sm90: occupancy = resident threads / this

FIELDS = ("time", "source", "model", "kernel", "ops", "kind", "arch", "shapes", "flops", "bytes", "occupancy",
          "estimate_us", "actual_us", "plan")


def row(*, source: str, model: str, kernel: str, kind: str, arch: str, shapes: Mapping[str, int],
        ops: Iterable[str] = (), price: "Mapping[str, Any] | None", actual_us: "float | None", plan: Any) -> dict:
    """One row; price is a Poly Core price as JSON (analyses/price.py ``Cost.to_json``) or None (a kernel
    with no statement to price)."""
    cost = price or {}
    return {"time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "source": source,
            "model": model, "kernel": kernel, "ops": ",".join(ops), "kind": kind, "arch": arch,
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


def plan_price(ks: Any) -> dict:
    """A kernel's price from its Schedule Plan's roofline estimate (the numbers its plan search ranked it by):
    flops, bytes, modelled time and occupancy (resident CTAs x threads / MAX_THREADS_PER_SM) where known."""
    plan = ks.plan
    est = dict(getattr(plan, "est", ()) or getattr(getattr(plan, "gemm", None), "est", ()) or ())
    out: dict = {}
    flops = est.get("flops", est.get("flops_useful"))
    if flops is not None:
        out["flops"] = int(flops)
    if "bytes" in est:
        out["bytes"] = int(est["bytes"])
    if "time_s" in est:
        out["time_est_us"] = float(est["time_s"]) * 1e6
    if "ctas_per_sm" in est:
        out["occupancy"] = round(min(1.0, float(est["ctas_per_sm"]) * ks.threads / MAX_THREADS_PER_SM), 4)
    return out


def launch_row(source: str, model: str, kind: str, arch: str, launch: Any, shapes: Mapping[str, int],
               ms: "float | None") -> dict:
    """The row of a prepared Launch (backend/common/launch.py) a bench timed at ms milliseconds (median)."""
    ks = launch.kernel
    return row(source=source, model=model, kernel=ks.name, kind=kind, arch=arch, shapes=shapes, price=plan_price(ks),
               actual_us=None if ms is None else ms * 1e3, plan=ks.plan.to_json(ks.spec))
