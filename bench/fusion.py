"""Fusion bench: polysat's ``--cost model`` partition beside tinygrad 0.14's scheduler on the same graphs.

For every example, a few small cases that stress the partition search (sibling GEMMs over one input,
Conv -> ReLU -> Conv, softmax over a middle axis) and the bench transformer (bench/models.py) at 1 and
12 blocks: polysat's kernel count, modelled time (Poly Core, ``--cost model``; the ``--cost size``
partition and the one-kernel-per-op partition priced the same way beside it), device bytes moved and
e-graph compile time (load + saturation + search, from the Tiny IR program: the modules are imported
and the Frontend -> Tiny graph built first, as tinygrad is imported and its tensor graph built before
its clock; ``frontend_s`` in the JSON is that build), next to tinygrad's kernel count and schedule time
for the same model written in tinygrad (bench/tinygrad_graph.py; ``PYTHON`` device, schedule only,
nothing executes), measured in the same process (a fresh one per case, so no cache warmed by an earlier
case helps either side). Real models (``onnx_*``: examples/onnx_models.py's four, and BERT / GPT-2
layers at d 256, S 128) are compared on one ONNX graph: the same serialized bytes go to
``import_onnx`` (``import_s``, outside compile_s) and to tinygrad's own ONNX runner
(bench/tinygrad_onnx.py; its parse and build are ``frontend_s``), the row keeps their sha256. Prints a
table with the ratios and writes JSON.

    python -m polysat.bench.fusion [--quick] [--out PATH] [--arch sm90]

``--quick`` (CI) drops the 12-block transformer. Symbols are bound to POLYSAT_PRICE_SYMBOL_SIZE
(default 256), for polysat's prices and for tinygrad's shapes alike. A case polysat fails on is a
row with its diagnostic, not a crash; so is a graph tinygrad cannot schedule (the ONNX node its
runner failed at is named under the table).
"""
from __future__ import annotations

import argparse
import functools
import importlib
import json
import pathlib
import sys
import time

from polysat.bench.report import run_cases, tinygrad_errors

HERE = pathlib.Path(__file__).resolve().parent
IMPORTS = ("egglog", "islpy", "polysat.egraph.api", "polysat.search.model", "polysat.egraph.saturate",
           "polysat.egraph.extract", "polysat.egraph.totiny", "polysat.egraph.rule_lint",
           "polysat.egraph.region_synth", "polysat.analyses.price", "polysat.analyses.poly_from_view",
           "polysat.analyses.polyview", "polysat.analyses.indexbook", "polysat.ir.region_layout",
           "polysat.ir.region_narrow", "polysat.backend.kinds",
           # the kernel kinds the pricing binds a region to (backend/kinds.py loads them on first use)
           *(f"polysat.backend.{k}.kind" for k in ("gemm", "attention", "scores", "conv", "conv_pool", "simt")))
EXAMPLES = HERE.parent / "examples"


def cases(quick: bool) -> list:
    from .models import conv_relu_conv, sibling_gemms, softmax_axis, transformer
    out = [(p.stem, json.loads(p.read_text(encoding="utf-8"))) for p in sorted(EXAMPLES.glob("*.json"))]
    out += [("sibling_gemms", sibling_gemms()), ("conv_relu_conv", conv_relu_conv()), ("resnet_block", conv_relu_conv(residual=True)),
            
            ("softmax_axis1", softmax_axis([2, 6, 3], 1)), ("transformer_1", transformer(1))]
    out += onnx_cases()
    if not quick:
        out.append(("transformer_12", transformer(12)))
    return out


def onnx_cases() -> list:
    """The real models of examples/onnx_models.py as serialized ONNX bytes (one graph for both sides),
    and BERT and GPT-2 layers at width 256, sequence 128, 4 heads (a few seconds each: in --quick too)."""
    from ..examples.onnx_models import MODELS, bert_encoder, gpt2_block
    out = [(f"onnx_{n}", MODELS[n]().SerializeToString()) for n in sorted(MODELS)]
    return out + [("onnx_bert_d256_s128", bert_encoder(s=128, d=256, h=4).SerializeToString()),
                  ("onnx_gpt2_d256_s128", gpt2_block(s=128, d=256, h=4).SerializeToString())]


def _load_modules() -> None:
    for mod in IMPORTS:  # as tinygrad's import, Python's module loading is not compile time
        importlib.import_module(mod)


def polysat_row(model: dict, arch: str) -> dict:
    """polysat's partitions of model: --cost model (searched), --cost size and one kernel per op, each
    priced by Poly Core; compile time of the model search (load + saturation + search)."""
    from ..pricing.kernels import total_us
    from ..ir.diagnostics import PolysatError
    from ..pipeline import Compilation
    _load_modules()
    try:
        tf = time.perf_counter()
        c = Compilation(model, arch=arch, cost="model")
        _ = c.program  # Frontend -> Tiny IR: the graph, built before the clock as tinygrad's tensors are
        t0 = time.perf_counter()
        _ = c.saturated
        t1 = time.perf_counter()
        s = c.search
        compile_s = time.perf_counter() - t0
        search_s = time.perf_counter() - t1
        size = Compilation(model, arch=arch, cost="size").priced
    except PolysatError as e:
        return {"error": str(e).splitlines()[0][:160]}
    moved = sum(p.cost.bytes for p in s.best.priced if p.cost is not None)
    st = c.saturated[0]
    segs = getattr(st, "segments", None)  # a segmented program (search/segment.py): blocks, distinct ones searched
    return {"params": c.params, "kernels": len(s.best.priced), "time_est_us": round(s.best.total, 3),
            "size_kernels": len(size), "size_time_est_us": round(total_us(size), 3),
            "unfused_kernels": len(s.baseline.priced), "unfused_time_est_us": round(s.baseline.total, 3),
            "bytes": moved, "compile_s": round(compile_s, 3), "search_s": round(search_s, 3),
            "frontend_s": round(t0 - tf, 3),
            "partitions_priced": s.evaluations, "groups_priced": s.groups_priced, "search_stop": s.stop,
            "segments": len(segs) if segs else 1, "segments_searched": len(st.states) if segs else 1}


def tinygrad_row(model: dict, params: dict) -> dict:
    from .tinygrad_graph import schedule
    try:
        k, secs = schedule(model, params)
    except Exception as e:  # noqa: BLE001 — a graph tinygrad cannot schedule is a row, not a crash
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"}
    return {"kernels": k, "schedule_s": round(secs, 3)}


def _params_of(model: dict) -> dict:
    from ..pipeline import Compilation
    return Compilation(model).params


def tinygrad_onnx_row(model: bytes, params: dict) -> dict:
    """tinygrad's side of an ONNX case: its own ONNX frontend on the same bytes (bench/tinygrad_onnx.py)."""
    from .tinygrad_onnx import schedule
    try:
        k, secs, front = schedule(model, params)
    except Exception as e:  # noqa: BLE001 — an op tinygrad's runner cannot take is a row, not a crash
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"}
    return {"kernels": k, "schedule_s": round(secs, 3), "frontend_s": round(front, 3)}


def measure_onnx(name: str, model: bytes, arch: str) -> dict:
    """An ONNX case: polysat imports the bytes (``import_s``, outside compile_s as the Frontend build is)
    and compiles them as any model; tinygrad's ONNX runner schedules the same bytes."""
    import hashlib

    import onnx

    from ..frontend.onnx import import_onnx
    from ..ir.diagnostics import PolysatError
    _load_modules()
    t0 = time.perf_counter()
    try:
        doc = import_onnx(onnx.load_from_string(model), origin=f"{name}.onnx")
    except PolysatError as e:
        ps = {"error": str(e).splitlines()[0][:160]}
    else:
        import_s = time.perf_counter() - t0
        ps = polysat_row(doc, arch)
        if "error" not in ps:
            ps["import_s"] = round(import_s, 3)
    tg = tinygrad_onnx_row(model, ps.get("params") or {})
    return _ratios({"model": name, "onnx_sha256": hashlib.sha256(model).hexdigest()[:16], "onnx_bytes": len(model),
                    "polysat": ps, "tinygrad": tg})


def measure(name: str, model: "dict | bytes", arch: str) -> dict:
    if isinstance(model, bytes):
        return measure_onnx(name, model, arch)
    ps = polysat_row(model, arch)
    tg = tinygrad_row(model, ps.get("params") or _params_of(model))
    return _ratios({"model": name, "polysat": ps, "tinygrad": tg})


def _ratios(row: dict) -> dict:
    ps, tg = row["polysat"], row["tinygrad"]
    if "error" not in ps and "error" not in tg:
        row["kernel_ratio"] = round(ps["kernels"] / max(1, tg["kernels"]), 3)
        row["compile_ratio"] = round(ps["compile_s"] / max(1e-9, tg["schedule_s"]), 3)
    if "error" not in ps:
        row["model_vs_size"] = round(ps["time_est_us"] / max(1e-9, ps["size_time_est_us"]), 3)
    return row


def table(rows: list) -> str:
    head = (f"{'model':<22}| {'tg kern':>7}{'tg s':>7} | {'ps kern':>7}{'ps s':>8}{'search s':>9}{'model µs':>10}{'size µs':>10}"
            f"{'unfused µs':>11}{'MB':>9} | {'kern x':>7}{'time x':>8}{'m/size':>7} | search stop")
    lines = [head, "-" * len(head)]
    for r in rows:
        ps, tg = r["polysat"], r["tinygrad"]
        tgs = f"{tg['kernels']:>7}{tg['schedule_s']:>7.2f}" if "error" not in tg else f"{'error':>14}"
        if "error" in ps:
            lines.append(f"{r['model']:<22}| {tgs} | error: {ps['error']}")
            continue
        ratios = (f"{r['kernel_ratio']:>7.2f}{r['compile_ratio']:>8.2f}" if "kernel_ratio" in r else f"{'':>15}")
        ratios += f"{r['model_vs_size']:>7.2f}"
        lines.append(f"{r['model']:<22}| {tgs} | {ps['kernels']:>7}{ps['compile_s']:>8.2f}{ps['search_s']:>9.2f}"
                     f"{ps['time_est_us']:>10.1f}{ps['size_time_est_us']:>10.1f}{ps['unfused_time_est_us']:>11.1f}"
                     f"{ps['bytes'] / 1e6:>9.2f} | {ratios:<22} | {ps['search_stop']}, {ps['groups_priced']} priced")
    lines += tinygrad_errors(rows, "model")
    lines.append("kern x = polysat kernels / tinygrad kernels; time x = polysat compile s / tinygrad schedule s; "
                 "m/size = --cost model µs / --cost size µs (Poly Core prices); ps s = load + saturation + search from Tiny IR, "
                 "search s = the search alone; search stop = why the merge search ended (search/merge.py), with the groups it priced")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="leave out the 12-block transformer (the CI run)")
    ap.add_argument("--out", default=str(HERE / "fusion_results.json"))
    ap.add_argument("--arch", default="sm90")
    ap.add_argument("--only", default="", help="comma-separated case names to run")
    a = ap.parse_args(argv)
    only = {s for s in a.only.split(",") if s}
    chosen = [(n, m) for n, m in cases(a.quick) if not only or n in only]
    return run_cases(chosen, functools.partial(measure, arch=a.arch), table, a.out, quick=a.quick, arch=a.arch)


if __name__ == "__main__":
    sys.exit(main())
