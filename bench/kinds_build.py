"""Which kernel kind computes each region of a model, and what its kernels cost to build (no GPU needed).

For each model of the chosen groups (bench/kinds_models.py: the examples, the bench MLP stack and
transformer, the ONNX and torch.export architectures, one or more models per frontend op) and each
``--cost``: the regions, the kind each binds to (or its E1504 reason: only a region that reads through
run-time indices may have one), the chosen plan per arch. Every distinct kernel source (deduplicated by
its hash: the same region shape under two models or costs is built once) is built with nvcc for
``sm_80`` and ``sm_90a``; per (kind, arch) the table gives the regions, the distinct kernels, how many
built, the largest register count and shared memory (ptxas' static smem plus the plan's dynamic smem)
and the spill bytes. Writes ``bench/kinds_build_results.json``.

    python -m polysat.bench.kinds_build [--groups examples,bench,onnx,torch,ops] [--archs sm80,sm90]
                                        [--cost size,model] [--no-build]

``--no-build`` binds and renders only (seconds; the E1504 check alone).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import re
import sys
import time
from collections import defaultdict

HERE = pathlib.Path(__file__).resolve().parent
_SMEM = re.compile(r"(\d+) bytes smem")


def kernels(models: dict, archs: list[str], costs: list[str]) -> dict:
    """Bind and render every region of every model under every cost: {"rows": [per region and arch],
    "no_kernel": [regions with E1504 and the reason], "failed": [models that did not compile], "sources":
    {digest: (kind, arch, source, dynamic smem bytes)}}."""
    from ..backend.kinds import bind
    from ..backend.stages import _search
    from ..ir.diagnostics import PolysatError
    from ..pipeline import Compilation
    rows, no_kernel, failed, sources = [], [], [], {}
    for name, model in models.items():
        for cost in costs:
            try:
                regions = Compilation(model, cost=cost).regions
            except PolysatError as e:
                failed.append({"model": name, "cost": cost, "error": str(e).splitlines()[0]})
                continue
            print(f"  {name} (--cost {cost}): {len(regions)} regions", file=sys.stderr, flush=True)
            for r in regions:
                try:
                    kind, b = bind(r)
                except PolysatError as e:
                    no_kernel.append({"model": name, "cost": cost, "region": r.name, "reason": str(e).splitlines()[0]})
                    continue
                for arch in archs:
                    plan = _search(kind, b.spec, arch, ()).best
                    ks = kind.render(b.spec, plan)
                    digest = hashlib.sha256(f"{arch}\n{ks.source}".encode()).hexdigest()[:16]
                    sources.setdefault(digest, (kind.name, arch, ks.source, int(ks.smem_bytes)))
                    rows.append({"model": name, "cost": cost, "region": r.name, "kind": kind.name, "arch": arch,
                                 "plan": plan.key(), "kernel": digest})
    return {"rows": rows, "no_kernel": no_kernel, "failed": failed, "sources": sources}


def build(sources: dict, workers: int = 2) -> dict:
    """digest -> {"ok", "registers", "spill_bytes", "smem_bytes", "seconds"} of each distinct source."""
    from ..backend.common.nvcc import check_many
    keys = sorted(sources)
    reps = check_many([(sources[k][2], sources[k][1]) for k in keys], workers=workers)
    out = {}
    for k, rep in zip(keys, reps, strict=True):
        smem = max((int(x) for x in _SMEM.findall(rep.log)), default=0) + sources[k][3]
        out[k] = {"ok": rep.ok, "registers": rep.registers, "spill_bytes": rep.spills, "smem_bytes": smem,
                  "seconds": round(rep.seconds, 2), **({} if rep.ok else {"log": rep.log[-1500:]})}
    return out


def table(found: dict, built: dict) -> dict:
    """Per "kind/arch": regions, distinct kernels, built, max registers, max smem, spill bytes (all kernels)."""
    regions, distinct = defaultdict(int), defaultdict(set)
    for row in found["rows"]:
        regions[(row["kind"], row["arch"])] += 1
        distinct[(row["kind"], row["arch"])].add(row["kernel"])
    out = {}
    for (kind, arch), ks in sorted(distinct.items()):
        b = [built[k] for k in ks if k in built]
        out[f"{kind}/{arch}"] = {"regions": regions[(kind, arch)], "kernels": len(ks), "built": sum(x["ok"] for x in b),
                                 "max_registers": max((x["registers"] for x in b), default=None),
                                 "max_smem_bytes": max((x["smem_bytes"] for x in b), default=None),
                                 "spill_bytes": sum(x["spill_bytes"] for x in b)}
    return out


def _print(res: dict) -> None:
    print(f"{res['models']} models x cost {','.join(res['costs'])}: {len(res['rows'])} (region, arch) kernels, "
          f"{res['distinct']} distinct, {res['seconds']} s")
    for f in res["failed"]:
        print(f"  COMPILE FAILED {f['model']} (--cost {f['cost']}): {f['error']}")
    for e in res["no_kernel"]:
        print(f"  E1504 {e['model']} (--cost {e['cost']}) {e['region']}: {e['reason'][:160]}")
    for k, b in res["kernels"].items():
        if not b["ok"] or b["spill_bytes"]:
            print(f"  {'BUILD FAILED' if not b['ok'] else 'SPILLS'} kernel {k}: {b.get('log', '')[-400:]}")
    print(f"  {'kind/arch':<24} {'regions':>7} {'kernels':>7} {'built':>5} {'max regs':>8} {'max smem':>8} {'spills':>6}")
    for k, s in res["table"].items():
        print(f"  {k:<24} {s['regions']:>7} {s['kernels']:>7} {s['built']:>5} {str(s['max_registers']):>8} "
              f"{str(s['max_smem_bytes']):>8} {s['spill_bytes']:>6}")


def main(argv=None) -> int:
    from .kinds_models import GROUPS, groups
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", default=",".join(GROUPS))
    ap.add_argument("--archs", default="sm80,sm90")
    ap.add_argument("--cost", default="size,model", help="one cost or several, comma-separated (size,model)")
    ap.add_argument("--no-build", action="store_true", help="bind and render only")
    ap.add_argument("--out", default=str(HERE / "kinds_build_results.json"))
    ap.add_argument("--found", default=None, help="a JSON of the bound and rendered kernels: read when it exists "
                    "(the build alone), else written (binding the imported models under --cost model takes minutes)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    models = groups(args.groups.split(","))
    costs = args.cost.split(",")
    if args.found and pathlib.Path(args.found).exists():
        found = json.loads(pathlib.Path(args.found).read_text(encoding="utf-8"))
    else:
        found = kernels(models, args.archs.split(","), costs)
        if args.found:
            pathlib.Path(args.found).write_text(json.dumps(found), encoding="utf-8")
    built = {} if args.no_build else build(found["sources"])
    res = {"models": len(models), "costs": costs, "archs": args.archs.split(","), "table": table(found, built),
           "failed": found["failed"], "no_kernel": found["no_kernel"], "distinct": len(found["sources"]),
           "kernels": built, "rows": found["rows"],
           "seconds": round(time.perf_counter() - t0, 1)}
    _print(res)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(res, f, indent=1)
    bad = (res["failed"] or res["no_kernel"]
           or any(not b["ok"] or b["spill_bytes"] for b in built.values()))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
