"""Scale bench: polysat's ``--cost model`` compile beside tinygrad 0.14's scheduler on large weight-free ONNX
graphs (bench/corpora/scale_models.py: LLaMA-2-7B / LLaMA-3-8B dims at 1 to 32 layers, GPT-2 small to XL,
ResNet-50/101/152 at batch 32, a soft mixture-of-experts layer with 2 to 64 experts and a stack of 4 such layers
of 32, U-Nets of 4 and 6 levels, each also cut into its levels: ``_live8``, POLYSAT_SEGMENT_LIVE=8).

Each graph is serialized once here and the same bytes go to both sides, each side in a fresh process
(spawned: no cache warmed by an earlier run, its peak RSS its own) with a wall-clock limit:

- polysat: ``import_onnx``, then the pipeline up to the chosen partition priced (Frontend -> Tiny IR,
  saturation, search, the kernels priced), ``--cost model``. CPU seconds of all of it; then, outside
  the clock, the one-kernel-per-op partition's price (the search's baseline) and the ``--cost size``
  partition's price (its own compile) for the never-worse check.
- tinygrad: ``OnnxRunner`` on the bytes, the weights as unrealized ``Tensor.empty`` inputs (token ids
  valid), the outputs scheduled (``schedule_linear``); CPU seconds of parse, build and schedule.

Per row: CPU seconds and peak RSS of each side (the process's maximum resident set, its imports
included), kernels, polysat's modelled time (Poly Core, µs) beside the one-kernel-per-op and ``--cost size``
prices, the saturation's and the search's stop reasons, and ``worse``: the chosen partition priced above
either baseline (must never happen). A table is printed and JSON written.

    python -m polysat.bench.scale [--quick] [--only NAME,..] [--out PATH] [--timeout S] [--no-size] [--dtype fp16] [--repeat N]

``--repeat N``: each side run N times, the sides alternating, each run in a fresh process; a side's CPU seconds are the
median of its runs (all of them in the JSON), since CPU time on a shared machine swings by a fifth from run to run.

``--quick`` (CI, well under two minutes): the smallest points (one LLaMA-2-7B layer, one GPT-2 small
layer, a two-expert soft MoE).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import pathlib
import platform
import resource
import statistics
import sys
import time

from ..knobs import segment_live
from .report import tinygrad_errors

HERE = pathlib.Path(__file__).resolve().parent


HALF = ("llama2_7b", "llama3_8b")  # the builders that also write a half-precision model (--dtype fp16)


def points(quick: bool, dtype: str = "fp32") -> list:
    """(name, builder name, args) of every graph, the quick ones first; with ``dtype`` fp16, the LLaMA
    graphs only, written in half precision (weights, activations and the rotary tables fp16; the RMSNorms
    and softmaxes cast up to fp32 and back, as transformers' modules do) and named ``..._fp16``."""
    if dtype != "fp32":
        return [(f"{n}_{dtype}", b, args + (dtype,)) for n, b, args in points(quick) if b in HALF]
    out = [("llama2_7b_L1", "llama2_7b", (1,)), ("gpt2_small_L1", "gpt2", ("small", 1)),
           ("soft_moe_e2", "soft_moe", (2,))]
    if quick:
        return out
    out += [(f"llama2_7b_L{n}", "llama2_7b", (n,)) for n in (2, 8, 32)]
    out += [(f"llama3_8b_L{n}", "llama3_8b", (n,)) for n in (1, 32)]
    out += [(f"gpt2_{s}", "gpt2", (s,)) for s in ("small", "medium", "large", "xl")]
    out += [(f"resnet{d}", "resnet", (d,)) for d in (50, 101, 152)]
    out += [(f"soft_moe_e{e}", "soft_moe", (e,)) for e in (4, 8, 16, 32, 64)]
    out += [("soft_moe_e32_L4", "soft_moe", (32, 256, 768, 3072, 2, 4))]  # 4 layers in depth, 32 experts each
    return out + [(f"unet_{n}{tail}", "unet", (n,)) for n in (4, 6) for tail in ("", "_live8")]


# the knobs a point's polysat side runs under: the U-Net cut into its levels (search/segment.py's second pass)
ENV = {f"unet_{n}_live8": {"segment_live": 8} for n in (4, 6)}  # knobs.segment_live


def _peak_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def polysat_side(model: bytes, arch: str, size: bool) -> dict:
    """polysat's compile of the ONNX bytes to a priced partition (see the module docstring)."""
    import onnx

    from ..frontend.onnx import import_onnx
    from ..ir.diagnostics import PolysatError
    from ..pipeline import Compilation
    from ..pricing.kernels import total_us
    from .fusion import _load_modules
    _load_modules()
    t0 = time.process_time()
    try:
        doc = import_onnx(onnx.load_from_string(model), origin="scale.onnx")
        t1 = time.process_time()
        c = Compilation(doc, arch=arch, cost="model")
        _ = c.program
        t2 = time.process_time()
        sat = c.saturated
        t3 = time.process_time()
        s = c.search
        t4 = time.process_time()
        chosen = total_us(c.priced)
        cpu = time.process_time() - t0
        row = {"cpu_s": round(cpu, 2), "import_s": round(t1 - t0, 2), "frontend_s": round(t2 - t1, 2),
               "saturation_s": round(t3 - t2, 2), "search_s": round(t4 - t3, 2),
               "price_s": round(time.process_time() - t4, 2), "peak_mb": _peak_mb(),
               "kernels": len(s.best.priced), "time_est_us": round(chosen, 3),
               "saturation_stop": sat[1].stop.value, "search_stop": s.stop, "groups_priced": s.groups_priced,
               "segments": len(getattr(sat[0], "segments", ()) or (1,)),
               "segments_searched": len(getattr(sat[0], "states", ()) or (1,))}
        row["unfused_kernels"], row["unfused_us"] = len(s.baseline.priced), round(s.baseline.total, 3)
        if size:
            row["size_us"] = round(total_us(Compilation(doc, arch=arch, cost="size").priced), 3)
    except PolysatError as e:
        return {"error": str(e).splitlines()[0][:200], "cpu_s": round(time.process_time() - t0, 2),
                "peak_mb": _peak_mb()}
    row["worse"] = any(chosen > b * (1 + 1e-9) + 1e-9 for b in (row["unfused_us"], row.get("size_us", chosen)))
    return row


def tinygrad_side(model: bytes) -> dict:
    """tinygrad's parse, build and schedule of the same bytes, weights unrealized (bench/tinygrad_onnx.py)."""
    from tinygrad.helpers import Context

    from .tinygrad_graph import kernel_count
    from .tinygrad_onnx import DEVICE, feeds, outputs
    with Context(DEV=DEVICE, SCACHE=0):
        import tinygrad.nn.onnx  # noqa: F401 — imported before the clock, as polysat's modules are
    t0 = time.process_time()
    try:
        with Context(DEV=DEVICE, SCACHE=0):
            outs = outputs(model, feeds(model, empty_floats=True))
            linear = outs[0].schedule_linear(*outs[1:])
    except Exception as e:  # noqa: BLE001 — a graph tinygrad cannot take is a row, not a crash
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"}
    return {"cpu_s": round(time.process_time() - t0, 2), "peak_mb": _peak_mb(), "kernels": kernel_count(linear)}


def _side(job: tuple) -> dict:
    which, model, arch, size, env = job
    if "segment_live" in env:  # a fresh process: the knobs are this point's alone
        segment_live(env["segment_live"])
    return polysat_side(model, arch, size) if which == "polysat" else tinygrad_side(model)


def _fresh(job: tuple, timeout: float) -> dict:
    """``_side(job)`` in a fresh spawned process, killed after ``timeout`` wall seconds."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        res = pool.apply_async(_side, (job,))
        try:
            return res.get(timeout)
        except multiprocessing.TimeoutError:
            return {"error": f"timeout after {timeout:g} s wall"}


def measure(name: str, builder: str, args: tuple, arch: str = "sm90", timeout: float = 600.0,
            size: bool = True, repeat: int = 1) -> dict:
    """One row: the graph built and serialized once, each side in its own fresh process, ``repeat`` times. The sides
    alternate (polysat, tinygrad, polysat, ...), so a slow spell of a shared machine falls on both; with more than
    one run a side's ``cpu_s`` is the median of its ``cpu_runs``, its peak RSS the largest, the rest its first run's
    (the ``--cost size`` price is compiled in the first run only), and ``cpu_ratios`` the ratio of each round."""
    from .corpora.scale_models import build
    model = build(builder, *args).SerializeToString()
    row = {"graph": name, "onnx_bytes": len(model), "env": ENV.get(name, {})}
    runs: dict = {"polysat": [], "tinygrad": []}
    for k in range(repeat):
        for which in runs:
            runs[which].append(_fresh((which, model, arch, size and k == 0,
                                       row["env"] if which == "polysat" else {}), timeout))
    for which, got in runs.items():
        bad = [r for r in got if "error" in r]
        row[which] = dict(bad[0] if bad else got[0])
        if len(got) > 1 and not bad:
            row[which].update(cpu_runs=[r["cpu_s"] for r in got], cpu_s=statistics.median(r["cpu_s"] for r in got),
                              peak_mb=max(r["peak_mb"] for r in got))
    ps, tg = row["polysat"], row["tinygrad"]
    if "error" not in ps and "error" not in tg:
        row["cpu_ratio"] = round(ps["cpu_s"] / max(1e-9, tg["cpu_s"]), 3)
        if "cpu_runs" in ps:
            row["cpu_ratios"] = [round(a / max(1e-9, b), 3) for a, b in zip(ps["cpu_runs"], tg["cpu_runs"])]
    return row


def table(rows: list) -> str:
    head = (f"{'graph':<20}| {'tg s':>7}{'tg MB':>7}{'tg kern':>8} | {'ps s':>7}{'ps MB':>7}{'kern':>6}{'model µs':>11}"
            f"{'1/op µs':>11}{'size µs':>11}{'cpu x':>7} | stops (saturation; search)")
    lines = [head, "-" * len(head)]
    for r in rows:
        ps, tg = r["polysat"], r["tinygrad"]
        tgs = f"{tg['cpu_s']:>7.2f}{tg['peak_mb']:>7.0f}{tg['kernels']:>8}" if "error" not in tg else f"{'error':>22}"
        if "error" in ps:
            lines.append(f"{r['graph']:<20}| {tgs} | error: {ps['error']}")
            continue
        worse = "  WORSE THAN A BASELINE" if ps["worse"] else ""
        lines.append(f"{r['graph']:<20}| {tgs} | {ps['cpu_s']:>7.2f}{ps['peak_mb']:>7.0f}{ps['kernels']:>6}"
                     f"{ps['time_est_us']:>11.1f}{ps['unfused_us']:>11.1f}{ps.get('size_us', float('nan')):>11.1f}"
                     f"{r.get('cpu_ratio', float('nan')):>7.2f} | {ps['saturation_stop']}; {ps['search_stop']}{worse}")
    lines += tinygrad_errors(rows, "graph")
    lines.append("s = CPU seconds (polysat: ONNX import to priced partition; tinygrad: parse, build, schedule); MB = peak "
                 "RSS of the side's fresh process; model µs = the chosen partition (Poly Core); 1/op µs = one kernel "
                 "per op; size µs = the --cost size partition; cpu x = polysat s / tinygrad s (with --repeat: medians)")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the smallest points only (the CI run)")
    ap.add_argument("--only", default="", help="comma-separated graph names to run")
    ap.add_argument("--out", default=str(HERE / "scale_results.json"))
    ap.add_argument("--arch", default="sm90")
    ap.add_argument("--timeout", type=float, default=900.0, help="wall seconds per side and graph")
    ap.add_argument("--no-size", action="store_true", help="skip the --cost size partition's compile")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run each side this many times, alternating, each in a fresh process; CPU s is the median")
    ap.add_argument("--dtype", default="fp32", choices=("fp32", "fp16"),
                    help="fp16: the LLaMA graphs only, as a half-precision export (names end in _fp16)")
    a = ap.parse_args(argv)
    if a.repeat < 1:
        ap.error(f"--repeat {a.repeat}: a side runs at least once")
    only = {s for s in a.only.split(",") if s}
    todo = [p for p in points(a.quick and not only, a.dtype) if not only or p[0] in only]
    rows, t0 = [], time.perf_counter()
    for name, builder, args in todo:
        rows.append(measure(name, builder, args, a.arch, a.timeout, not a.no_size, a.repeat))
        print(f"  {name}: done ({time.perf_counter() - t0:.1f}s)", file=sys.stderr)
    print(table(rows))
    doc = {"quick": a.quick, "arch": a.arch, "dtype": a.dtype, "python": platform.python_version(),
           "total_s": round(time.perf_counter() - t0, 2), "rows": rows}
    pathlib.Path(a.out).write_text(json.dumps(doc, indent=1), encoding="utf-8")
    print(f"total {doc['total_s']}s; wrote {a.out}")
    return 1 if any(r["polysat"].get("worse") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
