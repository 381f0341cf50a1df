"""Which kernel kind computes each region of a model, and what its kernels cost to build (no GPU needed).

For each model: the regions (``--cost`` size or model), the kind each binds to, the chosen plan, and per
(kind, arch) the nvcc / ptxas figures of the generated ``.cu``: registers, shared memory (ptxas' static smem
plus the plan's dynamic smem), spill bytes. Prints a table and writes ``bench/kinds_build_results.json``.

    python -m polysat.bench.kinds_build [--models transformer1,mlp2,examples] [--archs sm80,sm90] [--cost size,model]

``transformer1`` is the bench transformer (bench/models.py) with one block (the twelve blocks repeat it),
``mlp2`` the bench MLP stack with two layers.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import re
from collections import defaultdict

HERE = pathlib.Path(__file__).resolve().parent
_SMEM = re.compile(r"(\d+) bytes smem")


def _models(names: list[str]) -> list:
    from .models import mlp_stack, transformer
    out = []
    for n in names:
        if n == "examples":
            out += [(p.stem, str(p)) for p in sorted((HERE.parent / "examples").glob("*.json"))]
        elif n.startswith("transformer"):
            out.append((n, transformer(int(n[len("transformer"):] or 12))))
        elif n.startswith("mlp"):
            out.append((n, mlp_stack(int(n[len("mlp"):] or 12))))
    return out


def measure(name: str, model, archs: list[str], cost: str) -> dict:
    from ..backend.kinds import bind
    from ..backend.common.nvcc import check_many
    from ..backend.stages import _search
    from ..pipeline import Compilation
    regions = Compilation(model, cost=cost).regions
    rows, jobs = [], []
    for r in regions:
        kind, b = bind(r)
        for arch in archs:
            plan = _search(kind, b.spec, arch, ()).best
            ks = kind.render(b.spec, plan)
            rows.append({"region": r.name, "kind": kind.name, "arch": arch, "plan": plan.key(),
                         "dyn_smem_bytes": int(ks.smem_bytes)})
            jobs.append((ks.source, arch))
    for row, rep in zip(rows, check_many(jobs, workers=2), strict=True):
        smem = max((int(x) for x in _SMEM.findall(rep.log)), default=0)
        row.update(ok=rep.ok, registers=rep.registers, spill_bytes=rep.spills, smem_bytes=smem + row["dyn_smem_bytes"])
    return {"model": name, "cost": cost, "regions": rows}


def summary(result: dict) -> dict:
    by = defaultdict(list)
    for r in result["regions"]:
        by[(r["kind"], r["arch"])].append(r)
    return {f"{k}/{a}": {"kernels": len(v), "built": sum(x["ok"] for x in v),
                         "registers": [min(x["registers"] for x in v), max(x["registers"] for x in v)],
                         "smem_bytes": [min(x["smem_bytes"] for x in v), max(x["smem_bytes"] for x in v)],
                         "spill_bytes": sum(x["spill_bytes"] for x in v)} for (k, a), v in sorted(by.items())}


def _print(res: dict, n_archs: int) -> None:
    print(f"{res['model']} (--cost {res['cost']}): {len(res['regions']) // n_archs} regions")
    for r in res["regions"]:
        print(f"  {r['region']:>5} {r['kind']:<16} {r['arch']} {r['plan']:<28} regs {r['registers']:>3} "
              f"smem {r['smem_bytes']:>6} spill {r['spill_bytes']} {'ok' if r['ok'] else 'BUILD FAILED'}")
    for k, s in res["summary"].items():
        print(f"  {k:<22} kernels {s['kernels']:>3} built {s['built']:>3} regs {s['registers']} "
              f"smem {s['smem_bytes']} spills {s['spill_bytes']}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="transformer1,mlp2")
    ap.add_argument("--archs", default="sm80,sm90")
    ap.add_argument("--cost", default="size", help="one cost or several, comma-separated (size,model)")
    ap.add_argument("--out", default=str(HERE / "kinds_build_results.json"))
    args = ap.parse_args(argv)
    results = []
    archs = args.archs.split(",")
    for name, model in _models(args.models.split(",")):
        for cost in args.cost.split(","):
            res = measure(name, model, archs, cost)
            res["summary"] = summary(res)
            results.append(res)
            _print(res, len(archs))
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
