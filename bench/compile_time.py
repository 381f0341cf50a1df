"""Compile-time bench of the e-graph stage: saturation and extraction time and e-graph size
for every example, a 12-layer MLP stack and a 12-block transformer, under ``--cost=size`` (the
loaded default partition) and ``--cost=model`` (one kernel per op loaded, fusions searched and
priced by Poly Core). Prints a table and writes ``bench/compile_time_results.json``.

    python -m polysat.bench.compile_time [--quick] [--out PATH]

``--quick`` runs the examples and the two stacks at 2 layers / blocks (the CI smoke run); the
default runs them at 12. Symbols are bound to POLYSAT_PRICE_SYMBOL_SIZE (default 256) for pricing.
"""
from __future__ import annotations

import argparse
import functools
import pathlib
import sys
import time

from polysat.bench.report import run_cases

HERE = pathlib.Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"


def models(layers: int) -> list:
    from .models import mlp_stack, transformer
    out = [(p.stem, str(p)) for p in sorted(EXAMPLES.glob("*.json"))]
    out.append((f"mlp_stack_{layers}", mlp_stack(layers)))
    out.append((f"transformer_{layers}", transformer(layers)))
    return out


def measure(name: str, model, arch: str = "sm90") -> dict:
    """One row: the pipeline (pipeline.Compilation) run to its extraction under each cost model."""
    from ..egraph.graph import export
    from ..pipeline import Compilation
    t0 = time.perf_counter()
    prog = Compilation(model, arch=arch).program
    t1 = time.perf_counter()
    row = {"model": name, "tiny_nodes": len(prog.nodes), "load_s": round(t1 - t0, 4)}
    for cost, key in (("size", "size"), ("model", "model_cost")):
        c = Compilation(model, arch=arch, cost=cost)
        c.program  # loaded above: not timed again
        t2 = time.perf_counter()
        st, rep = c.saturated
        t3 = time.perf_counter()
        x = c.extraction
        t4 = time.perf_counter()
        row[key] = {"saturate_s": round(t3 - t2, 4), "extract_s": round(t4 - t3, 4), "enodes": rep.nodes,
                    "eclasses": len(export(st).classes), "iterations": len(rep.iterations), "stop": rep.stop.value,
                    "kernels": len(x.partition.kernels)}
        s = c.search
        if s is not None:
            row[key].update({"unfused_kernels": len(s.baseline.priced), "time_est_us": round(s.best.total, 3),
                             "unfused_time_est_us": round(s.baseline.total, 3), "partitions_priced": s.evaluations})
    return row


def table(rows: list) -> str:
    head = (f"{'model':<24}{'nodes':>6} | {'size: sat s':>11}{'ext s':>7}{'enodes':>7}{'kern':>5} | "
            f"{'model: sat s':>12}{'ext s':>7}{'enodes':>7}{'kern':>5}{'fused µs':>11}{'unfused µs':>11}")
    lines = [head, "-" * len(head)]
    for r in rows:
        a, b = r["size"], r["model_cost"]
        lines.append(f"{r['model']:<24}{r['tiny_nodes']:>6} | {a['saturate_s']:>11.2f}{a['extract_s']:>7.2f}"
                     f"{a['enodes']:>7}{a['kernels']:>5} | {b['saturate_s']:>12.2f}{b['extract_s']:>7.2f}"
                     f"{b['enodes']:>7}{b['kernels']:>5}{b['time_est_us']:>11.1f}{b['unfused_time_est_us']:>11.1f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="stacks of 2 layers/blocks instead of 12")
    ap.add_argument("--out", default=str(HERE / "compile_time_results.json"))
    ap.add_argument("--arch", default="sm90")
    a = ap.parse_args(argv)
    layers = 2 if a.quick else 12
    return run_cases(models(layers), functools.partial(measure, arch=a.arch), table, a.out, layers=layers, arch=a.arch)


if __name__ == "__main__":
    sys.exit(main())
