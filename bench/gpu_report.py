"""The GPU check's report (``make gpu-check``, bench/gpu_check.py): its parts, bench rows with their ratios and
the cost model's estimate beside the measurement, per-test outcomes read from pytest's JUnit XML, compute-
sanitizer's error counts, report merging, and the Markdown rendering. Pure functions of their inputs (no GPU,
no PyTorch): the CPU tests feed them synthetic timings.

A bench row (:func:`bench_row`) holds the medians in ms of polysat (``polysat_ms``) and of each baseline
(``<name>_ms``, None where it could not run, with the reason in ``baselines_missing``), the throughput of each
(``<name>_tflops`` from the row's FLOPs, or ``<name>_gbps`` from its bytes), ``vs_<name>`` = baseline time /
polysat time (polysat's speed relative to the baseline: 1.0 is a tie, above 1 polysat is faster),
``vs_copy`` = polysat's GB/s / the device-to-device copy's GB/s, and ``estimate_us`` (the plan search's
roofline estimate of the launched kernel) with ``est_over_measured`` = estimate / measured polysat time (1.0:
exact); ``--merge`` adds the extraction cost model's ``model_us`` and ``model_over_measured``
(bench/gpu_estimates.py).
"""
from __future__ import annotations

import datetime
import json
import math
import os
import re
import statistics
import xml.etree.ElementTree as ET
from typing import Any, Iterable, Mapping

PARTS = ("env", "tests", "sanitize", "bench")
OK, FAIL, SKIPPED = "ok", "FAIL", "SKIPPED"
PRIMARY = "polysat"


def median(xs: Iterable[float]) -> float:
    xs = [float(x) for x in xs]
    if not xs:
        raise ValueError("no timings")
    return statistics.median(xs)


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def bench_row(bench: str, case: str, times_ms: Mapping[str, "float | None"], *, flops: "float | None" = None,
              nbytes: "float | None" = None, estimate_us: "float | None" = None, copy_gbps: "float | None" = None,
              missing: str = "", **fields: Any) -> dict:
    """One measured row: ``times_ms`` maps ``polysat`` and each baseline to its median ms (None: not run,
    ``missing`` says why); ``flops`` or ``nbytes`` is the work that throughputs count; ``fields`` are the case's
    own (dtype, shape, plan, errors)."""
    if PRIMARY not in times_ms or not _finite(times_ms[PRIMARY]):
        raise ValueError(f"{bench} {case}: no polysat time ({times_ms.get(PRIMARY)!r})")
    t = float(times_ms[PRIMARY])
    row: dict = {"bench": bench, "case": case, "status": OK, "error": "", **fields}
    for name, ms in times_ms.items():
        row[f"{name}_ms"] = float(ms) if _finite(ms) else None
        if flops:
            row[f"{name}_tflops"] = flops / (ms * 1e-3) / 1e12 if _finite(ms) else None
        if nbytes:
            row[f"{name}_gbps"] = nbytes / (ms * 1e-3) / 1e9 if _finite(ms) else None
        if name != PRIMARY:
            row[f"vs_{name}"] = float(ms) / t if _finite(ms) else None
    if flops:
        row["flops"] = float(flops)
    if nbytes:
        row["bytes"] = float(nbytes)
        row["copy_gbps"] = copy_gbps if _finite(copy_gbps) else None
        row["vs_copy"] = row[f"{PRIMARY}_gbps"] / copy_gbps if _finite(copy_gbps) else None
    missing_now = [n for n, ms in times_ms.items() if n != PRIMARY and not _finite(ms)]
    row["baselines_missing"] = f"{', '.join(missing_now)}: {missing or 'not run'}" if missing_now else ""
    row["estimate_us"] = float(estimate_us) if _finite(estimate_us) else None
    row["est_over_measured"] = row["estimate_us"] / (t * 1e3) if row["estimate_us"] else None
    return row


def one_line(r: Mapping[str, Any]) -> str:
    """A row as one printed line: throughput, ratios, estimate / measured, error, plan (or the failure)."""
    head = f"{r['bench']:15s} {r.get('dtype') or '':4s} {r['case']:>22}"
    if r["status"] != OK:
        return f"{head}  FAIL {r['error'][:300]}"
    thr = (f"{r['polysat_tflops']:7.1f} TFLOP/s" if r.get("polysat_tflops") is not None
           else f"{r.get('polysat_gbps') or 0:7.1f} GB/s")
    vs = "  ".join(f"vs {k[3:]} {v:.2f}x" for k, v in r.items() if k.startswith("vs_") and v is not None)
    return (f"{head}  {r['polysat_ms']:.4f} ms  {thr}  {vs}  est/meas {_fmt(r.get('est_over_measured'))}"
            f"  err {_fmt(r.get('max_rel_err'))}  {r.get('plan', '')}")


def fail_row(bench: str, case: str, error: "BaseException | str", **fields: Any) -> dict:
    """A row whose measurement failed: the error instead of figures (the other rows go on)."""
    err = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return {"bench": bench, "case": case, "status": FAIL, "error": err[:2000], **fields}


def part(status: str, reason: str = "", seconds: float = 0.0, **fields: Any) -> dict:
    return {"status": status, "reason": reason, "seconds": round(float(seconds), 2), **fields}


def skipped(reason: str) -> dict:
    return part(SKIPPED, reason)


# ---- tests: pytest's JUnit XML --------------------------------------------------------------------------------
def junit_rows(xml_text: str) -> list[dict]:
    """Per test case ``{"test", "outcome" (passed | failed | error | skipped), "seconds", "message"}``."""
    root = ET.fromstring(xml_text)
    out = []
    for tc in root.iter("testcase"):
        if not tc.get("name"):  # pytest interrupted (a time limit) writes an empty one
            continue
        name = f"{tc.get('classname', '')}::{tc.get('name', '')}".strip(":")
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = tc.find(tag)
            if el is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
                message = (el.get("message") or el.text or "").strip().splitlines()[0][:500] if (
                    el.get("message") or el.text) else ""
                break
        out.append({"test": name, "outcome": outcome, "seconds": round(float(tc.get("time") or 0), 3),
                     "message": message})
    return out


def test_counts(rows: list[dict]) -> dict:
    counts = {k: 0 for k in ("passed", "failed", "error", "skipped")}
    for r in rows:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    return counts


# ---- sanitize: compute-sanitizer's summary ----------------------------------------------------------------------
# memcheck and synccheck close with "ERROR SUMMARY: N errors"; racecheck with "RACECHECK SUMMARY: H hazards displayed
# (N errors, W warnings)" and no ERROR SUMMARY (as compute-sanitizer 2025.3 printed on an H200)
_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+error|RACECHECK SUMMARY:[^(\n]*\(\s*(\d+)\s+error")


def sanitizer_errors(text: str) -> "int | None":
    """The error count of compute-sanitizer's ``ERROR SUMMARY: N errors`` line, or racecheck's ``RACECHECK
    SUMMARY: ... (N errors, W warnings)`` (the largest, where several processes printed one); None where there is
    none (the tool did not finish)."""
    found = [int(a or b) for a, b in _SUMMARY.findall(text)]
    return max(found) if found else None


def sanitize_status(rc: int, text: str, timed_out: bool = False) -> tuple[str, "int | None", str]:
    """(status, errors, why) of one compute-sanitizer run of a launch driver: ok only with an ERROR SUMMARY of
    0 errors and exit status 0 (the driver's own output check passed too)."""
    errors = sanitizer_errors(text)
    if timed_out:
        return FAIL, errors, "timed out"
    if errors is None:
        return FAIL, None, f"no ERROR or RACECHECK SUMMARY (exit status {rc})"
    if errors:
        return FAIL, errors, f"{errors} error(s)"
    if rc != 0:
        return FAIL, errors, f"exit status {rc} (the launch or its output check failed)"
    return OK, 0, ""


# ---- the report ---------------------------------------------------------------------------------------------
def new_report(env: Mapping[str, Any]) -> dict:
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "env": dict(env),
            "parts": {}}


def merge(reports: list[dict]) -> dict:
    """One report of several runs' (e.g. the tests and sanitize parts of one call, the bench of another): the
    last run's env, and each part from the last run that has it not SKIPPED (else the last run that has it)."""
    if not reports:
        raise ValueError("nothing to merge")
    out = {"date": reports[-1]["date"], "env": dict(reports[-1]["env"]), "parts": {}, "merged_from": []}
    for r in reports:
        out["merged_from"].append(r.get("date", ""))
        for name, p in r.get("parts", {}).items():
            if name not in out["parts"] or p.get("status") != SKIPPED:
                out["parts"][name] = p
    return out


def overall(report: Mapping[str, Any]) -> str:
    """FAIL if any part failed, ok if any ran and none failed, SKIPPED if none ran (env, which always runs,
    does not count)."""
    st = [p.get("status") for name, p in report.get("parts", {}).items() if name != "env"]
    return FAIL if FAIL in st else OK if OK in st else SKIPPED


def results_filename(device: str) -> str:
    """bench/results/<device>.json: the device name in lower case, runs of other characters as one '-'."""
    return re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-") + ".json"


def results_doc(report: Mapping[str, Any]) -> dict:
    """bench/results/<device>.json: device, driver, date and every bench row."""
    env = report.get("env", {})
    bench = report.get("parts", {}).get("bench", {})
    return {"device": env.get("device"), "driver": env.get("driver"), "cuda": env.get("cuda"),
            "date": report.get("date"), "torch": env.get("torch"), "copy_gbps": bench.get("copy_gbps"),
            "rows": bench.get("rows", [])}


def _fmt(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"
    return str(x)


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(_fmt(c).replace("|", "/") for c in r) + " |" for r in rows]
    return out


def _bench_md(rows: list[dict]) -> list[str]:
    out = []
    for bench in dict.fromkeys(r["bench"] for r in rows):
        rs = [r for r in rows if r["bench"] == bench]
        unit = next((u for u in ("tflops", "gbps") if any(f"polysat_{u}" in r for r in rs)), "tflops")
        bases = list(dict.fromkeys(k[3:] for r in rs for k in r if k.startswith("vs_")))
        model = any("model_over_measured" in r for r in rs)
        head = ["case", "dtype", "polysat ms", {"tflops": "TFLOP/s", "gbps": "GB/s"}[unit],
                *[f"vs {b}" for b in bases], "plan est/meas", *(["model/meas"] if model else []), "err", "status"]
        body = [[r["case"], r.get("dtype"), r.get("polysat_ms"), r.get(f"polysat_{unit}"),
                 *[r.get(f"vs_{b}") for b in bases], r.get("est_over_measured"),
                 *([r.get("model_over_measured")] if model else []), r.get("max_rel_err"),
                 r["status"] if r["status"] == OK else f"FAIL: {r['error'][:120]}"] for r in rs]
        out += ["", f"### {bench}", "", *_table(head, body)]
        missing = sorted({r["baselines_missing"] for r in rs if r.get("baselines_missing")})
        out += [f"\nbaselines missing: {m}" for m in missing]
    return out


def markdown(report: Mapping[str, Any]) -> str:
    env, parts = report.get("env", {}), report.get("parts", {})
    out = ["# polysat GPU check", "", f"{report.get('date')}: **{overall(report)}**", ""]
    out += [f"- {k}: {_fmt(v)}" for k, v in env.items()]
    for name in PARTS:
        p = parts.get(name)
        if p is None:
            continue
        out += ["", f"## {name}: {p['status']}" + (f" ({p['reason']})" if p.get("reason") else "")
                + (f", {p['seconds']} s" if p.get("seconds") else "")]
        if name == "tests" and p.get("tests"):
            out += ["", f"counts: {p.get('counts')}", ""]
            out += _table(["test", "outcome", "s", "message"],
                          [[t["test"], t["outcome"], t["seconds"], t["message"][:160]] for t in p["tests"]])
        if name == "sanitize" and p.get("runs"):
            out += [""] + _table(["item", "tool", "status", "errors", "s", "why"],
                                 [[r["item"], r["tool"], r["status"], r.get("errors"), r.get("seconds"), r.get("why")]
                                  for r in p["runs"]])
        if name == "bench" and p.get("rows"):
            out += ["", f"device-to-device copy: {_fmt(p.get('copy_gbps'))} GB/s (read + written). vs X: X's time / "
                    "polysat's time (above 1: polysat is faster); plan est/meas: the plan search's roofline "
                    "estimate of the kernel / polysat's measured time; model/meas: the cost model's price of the "
                    "computation (--cost model, every kernel of it) / the measured time; err: max error of sampled "
                    "outputs / max |reference| (float64)."]
            out += _bench_md(p["rows"])
    return "\n".join(out) + "\n"


def write(report: Mapping[str, Any], out_dir: str) -> dict:
    """report.json, report.md and <device>.json (the bench/results file) under out_dir; their paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {"json": os.path.join(out_dir, "report.json"), "md": os.path.join(out_dir, "report.md")}
    with open(paths["json"], "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1, default=str)
    with open(paths["md"], "w", encoding="utf-8") as f:
        f.write(markdown(report))
    bench = report.get("parts", {}).get("bench", {})
    if bench.get("rows"):
        paths["results"] = os.path.join(out_dir, results_filename(str(report["env"].get("device") or "unknown")))
        with open(paths["results"], "w", encoding="utf-8") as f:
            json.dump(results_doc(report), f, indent=1, default=str)
    return paths
