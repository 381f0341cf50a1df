"""Backend bench: the stages after the search on a deep stack of identical layers (docs/DESIGN.md §Backend,
"Identical kernels"). For weight-free LLaMA-2-7B at N layers (bench/corpora/scale_models.py, ``--cost model``)
it reports the regions, the distinct kernel texts, the CPU seconds of ``--dump=cu`` (every region, the
embedding's gather included) and then of the runtime's path (every step bound, its kernel
text made; after the dump in the same process, so its canonical bindings are already made), each point in a
fresh process. Prints a table and writes JSON.

    python -m polysat.bench.backend_scale [--layers 8,32] [--quick] [--out PATH]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import sys
import tempfile


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def point(layers: int, arch: str = "sm90") -> dict:
    """One stack measured in this process (call it in a fresh one: the backend's caches start empty)."""
    from polysat import knobs
    from polysat.backend import stages
    from polysat.bench.corpora.scale_models import build
    from polysat.pipeline import Compilation
    from polysat.runtime.kernels import source
    from polysat.runtime.model import steps_of
    with tempfile.TemporaryDirectory(prefix="polysat-backend-") as d:
        path = os.path.join(d, "m.onnx")
        with open(path, "wb") as f:
            f.write(build("llama2_7b", layers).SerializeToString())
        t0 = _cpu()
        c = Compilation(path, arch=arch, cost=knobs.DEFAULT_COST)
        regions = c.regions
        t1 = _cpu()
        doc = stages.cu_json(regions, arch, os.path.join(d, "cu"), c.bind)
        t2 = _cpu()
        steps = steps_of(regions)
        texts = {source(s.kind.name, s.binding.spec, {}, arch).source for s in steps if not s.on_cpu}
        t3 = _cpu()
    return {"layers": layers, "regions": len(regions), "on_cpu": sum(s.on_cpu for s in steps),
            "cu_files": len(doc["files"]), "runtime_texts": len(texts),
            "until_regions_cpu_s": round(t1 - t0, 2), "cu_dump_cpu_s": round(t2 - t1, 2),
            "runtime_cpu_s": round(t3 - t2, 2)}


def table(rows: list) -> str:
    cols = ("layers", "regions", "on_cpu", "cu_files", "runtime_texts", "until_regions_cpu_s", "cu_dump_cpu_s", "runtime_cpu_s")
    lines = [" | ".join(cols), " | ".join("---" for _ in cols)]
    lines += [" | ".join(str(r.get(k, "")) for k in cols) for r in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default="8,32", help="comma-separated layer counts")
    ap.add_argument("--quick", action="store_true", help="2 layers only (the CI run)")
    ap.add_argument("--arch", default="sm90")
    ap.add_argument("--out", default="bench/backend_scale_results.json")
    a = ap.parse_args(argv)
    layers = [2] if a.quick else [int(x) for x in a.layers.split(",")]
    ctx = multiprocessing.get_context("spawn")
    rows = []
    for n in layers:
        with ctx.Pool(1) as pool:
            rows.append(pool.apply(point, (n, a.arch)))
    print(table(rows))
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump({"arch": a.arch, "rows": rows}, f, indent=1)
    print(f"wrote {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
