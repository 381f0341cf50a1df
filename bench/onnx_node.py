"""The ONNX backend node tests run through polysat's Backend on each CPU target: a table of pass /
fail / declined per op, and the reasons cases were declined. Writes ``bench/onnx_node_results.json``.

    python -m polysat.bench.onnx_node [--targets reference,playback] [--per-op N] [--out PATH]

``--per-op N`` runs at most N cases of each op (the CI sample); the default runs them all.
"""
from __future__ import annotations

import argparse
import collections
import json
import pathlib
import time

HERE = pathlib.Path(__file__).resolve().parent


def run(target: str, cases: list, per_op: int | None = None) -> dict:
    from ..commands.onnx_backend import PlaybackBackend, ReferenceBackend, case_key, run_case
    backend = {"reference": ReferenceBackend, "playback": PlaybackBackend}[target]
    per: dict = collections.defaultdict(lambda: {"pass": 0, "fail": 0, "declined": 0})
    details = []
    taken: collections.Counter = collections.Counter()
    t0 = time.perf_counter()
    for t in cases:
        key = case_key(t)
        if per_op is not None and taken[key] >= per_op:
            continue
        verdict, why = run_case(backend, t)
        if verdict != "declined":
            taken[key] += 1
        per[key][verdict] += 1
        if verdict != "pass":
            details.append({"case": t.name, "op": key, "verdict": verdict, "why": why})
    return {"target": target, "seconds": round(time.perf_counter() - t0, 2), "per_op": dict(per), "details": details}


def summary(res: dict) -> str:
    p = sum(v["pass"] for v in res["per_op"].values())
    f = sum(v["fail"] for v in res["per_op"].values())
    d = sum(v["declined"] for v in res["per_op"].values())
    return (f"{res['target']}: {p} pass, {f} fail ({p / max(1, p + f):.1%} of {p + f} run), {d} declined, "
            f"{res['seconds']} s")


def main(argv=None) -> int:
    from ..commands.onnx_backend import node_cases
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--targets", default="reference,playback")
    ap.add_argument("--per-op", type=int, default=None)
    ap.add_argument("--out", default=str(HERE / "onnx_node_results.json"))
    a = ap.parse_args(argv)
    cases = node_cases()
    results = [run(t, cases, a.per_op) for t in a.targets.split(",")]
    for r in results:
        print(summary(r))
        print(f"  {'op':24} {'pass':>5} {'fail':>5} {'decl':>5}")
        for op, v in sorted(r["per_op"].items()):
            print(f"  {op:24} {v['pass']:5} {v['fail']:5} {v['declined']:5}")
        for d in r["details"]:
            if d["verdict"] == "fail":
                print(f"  FAIL {d['case']}: {d['why'][:200]}")
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
