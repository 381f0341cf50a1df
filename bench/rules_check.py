"""Bench of ``polysat rules --check``: the time to check each shipped rule file alone (``--only``), the
whole shipped set (its false positives, the median seconds per rule), and per seed the catch rate on the
known-bad rules of ``tests/bad_rules`` (the ``new-*`` ones apart) and the pass rate on ``tests/sound_rules``;
how many shipped rules are proved (index maps, with isl) and how many tested. Wall and CPU seconds are both
reported with the load average, since the checker shares its machine. Prints a table and writes ``bench/rules_check_results.json``.

    python -m polysat.bench.rules_check [--out PATH] [--seed N]
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import time

HERE = pathlib.Path(__file__).resolve().parent
TESTS = HERE.parent / "tests"


def timed(**kw) -> tuple:
    from ..checker.check import check_rules
    w, c = time.perf_counter(), time.process_time()
    rep = check_rules(**kw)
    return rep, round(time.perf_counter() - w, 2), round(time.process_time() - c, 2)


def main(argv: "list | None" = None) -> int:
    from ..egraph.rulefiles import RULES_DIR
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(HERE / "rules_check_results.json"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=lambda t: [int(x) for x in t.split(",")], default=[0, 1, 2, 3],
                    help="seeds of the tests/bad_rules and tests/sound_rules rows")
    a = ap.parse_args(argv)
    rows = []
    for f in sorted(RULES_DIR.glob("*.egg")):
        rep, wall, cpu = timed(only=[f.name], seed=a.seed)
        rows.append({"check": f"--only {f.name}", "rules": len(rep.verdicts), "exit": rep.exit_status,
                     "wall_s": wall, "cpu_s": cpu})
    rep, wall, cpu = timed(seed=a.seed)
    rows.append({"check": "shipped set", "rules": len(rep.verdicts), "exit": rep.exit_status, "wall_s": wall,
                 "cpu_s": cpu, "unexercised": [v.rule.name for v in rep.verdicts if v.fired < rep.cases],
                 "false_positives": [v.rule.name for v in rep.verdicts if v.unsound],
                 "median_s_per_rule": round(statistics.median(v.seconds for v in rep.verdicts), 3),
                 "proved": sum(v.method == "proved" for v in rep.verdicts),
                 "tested": sum(v.method == "tested" for v in rep.verdicts),
                 "index_rules_only_tested": [v.rule.name for v in rep.verdicts if v.index_rule and v.method == "tested"]})
    for seed in a.seeds:
        for folder, want in (("bad_rules", "unsound"), ("sound_rules", "sound")):
            d = str(TESTS / folder)
            rep, wall, cpu = timed(dirs=[d], only=[d], seed=seed)
            hit = [v for v in rep.verdicts if v.unsound == (want == "unsound") and not v.error]
            new = [v for v in rep.verdicts if v.rule.name.startswith("new-")]
            rows.append({"check": f"tests/{folder} seed {seed}", "rules": len(rep.verdicts), "exit": rep.exit_status,
                         "wall_s": wall, "cpu_s": cpu, want: f"{len(hit)}/{len(rep.verdicts)}",
                         **({"new_caught": f"{sum(v.unsound for v in new)}/{len(new)}"} if new else {}),
                         "median_s_per_rule": round(statistics.median(v.seconds for v in rep.verdicts), 3),
                         "missed": [v.rule.name for v in rep.verdicts if v not in hit]})
    print(f"{'check':<28} {'rules':>5} {'exit':>4} {'wall s':>8} {'cpu s':>7}  notes")
    for r in rows:
        notes = {k: v for k, v in r.items() if k not in ("check", "rules", "exit", "wall_s", "cpu_s")}
        print(f"{r['check']:<28} {r['rules']:>5} {r['exit']:>4} {r['wall_s']:>8} {r['cpu_s']:>7}  {notes or ''}")
    doc = {"load_average": os.getloadavg(), "cpus": os.cpu_count(), "seed": a.seed, "rows": rows}
    pathlib.Path(a.out).write_text(json.dumps(doc, indent=1), encoding="utf-8")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
