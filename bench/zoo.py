"""Model zoo: architectures nobody here wrote (bench/corpora/zoo_models.py), through polysat's three ways in.

For each model, in a fresh process with a time limit:

- ``onnx``: the model as ONNX bytes (torch's TorchScript exporter, opset 17; onnx's light models as shipped)
  through ``import_onnx``, compiled with ``--cost model``; the reference evaluator and playback of the extracted
  kernels against onnxruntime on the same inputs.
- ``export``: ``torch.export`` -> ``import_exported``, compiled with ``--cost model``; reference and playback
  against eager PyTorch.
- ``compile``: ``torch.compile(model, backend="polysat", options={"target": "playback", "cost": "model"})``
  against eager; a graph that falls back to eager is counted and its reason kept.

Each path's compile time is kept as wall seconds (``compile_s``) and as the process's CPU seconds
(``compile_cpu_s``, which a shared machine's load does not inflate).

Beside polysat's kernels, modelled time (Poly Core's price of the chosen partition) and compile time: tinygrad
0.14's kernel count and schedule time on the same ONNX bytes (bench/tinygrad_onnx.py) and torch Inductor's
(CPU) kernel count and compile time. A table is printed and JSON written.

    python -m polysat.bench.zoo [--quick] [--only a,b] [--out PATH] [--timeout CPU_S] [--wall S]

``--quick`` (CI) takes the models marked quick in bench/corpora/zoo_models.py. Outputs are compared as the seed's
``rtol = atol = 1e-3`` (fp32 outputs).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import multiprocessing
import os
import pathlib
import platform
import sys
import time
import traceback

import numpy as np

RTOL = ATOL = 1e-3


def close(got, want) -> "tuple[bool, float]":
    """(every element within atol + rtol * |want|, max |got - want|); shapes must agree. atol is scaled down
    for an output whose values are all below 1 (a 1000-class softmax: 1e-3 would accept any answer)."""
    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if g.shape != w.shape:
        return False, float("inf")
    d = np.abs(g - w)
    atol = ATOL * min(1.0, float(np.nanmax(np.abs(w))) if w.size else 1.0)
    with np.errstate(invalid="ignore"):
        ok = bool(np.all((d <= atol + RTOL * np.abs(w)) | (np.isnan(g) & np.isnan(w))))
    return ok, float(np.nanmax(d)) if d.size else 0.0


def _diag(e: BaseException) -> str:
    from polysat.ir.diagnostics import PolysatError
    if isinstance(e, PolysatError):
        d = e.diagnostics[0]
        return f"{d.code} {d.kind} at {d.at}: {d.why}"[:400]
    tb = traceback.extract_tb(e.__traceback__)
    where = f" ({tb[-1].filename.split('polysat/')[-1]}:{tb[-1].lineno})" if tb else ""
    return f"{type(e).__name__}: {e}"[:350] + where


def onnx_bytes(name: str) -> "tuple[bytes, dict]":
    """(ONNX bytes, numpy feeds by input name) of a zoo model."""
    from .corpora.zoo_models import BY_NAME, build
    m, x = build(name)
    if BY_NAME[name].family == "onnx":
        return m.SerializeToString(), x
    return export_onnx(m, x)


def export_onnx(m, x: tuple) -> "tuple[bytes, dict]":
    """(ONNX bytes, numpy feeds) of torch module m on inputs x: torch's TorchScript exporter at opset 17, as a
    user without onnxscript exports, with an adaptive average pool of any size written (``_adaptive_avg_pool2d``)."""
    import torch
    names = [f"input_{k}" for k in range(len(x))]
    f = io.BytesIO()
    torch.onnx.register_custom_op_symbolic("aten::adaptive_avg_pool2d", _adaptive_avg_pool2d, 17)
    with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        torch.onnx.export(m, x, f, dynamo=False, opset_version=17, input_names=names, do_constant_folding=True)
    return f.getvalue(), {n: t.numpy() for n, t in zip(names, x)}


def _adaptive_avg_pool2d(g, x, output_size):
    """torch's exporter writes an adaptive average pool only where each output size divides its input size
    (AlexNet and VGG-19 below 224 px fail there), so the bench exports one as a user would: a global average
    for (1, 1), else the uneven bins of the static input as two MatMuls with constant averaging matrices
    (frontend/torch_aten_nn.py ``adaptive_bins``, the same lowering polysat's torch.export importer uses)."""
    import torch
    from torch.onnx._internal.torchscript_exporter import symbolic_helper as sh
    from polysat.frontend.torch_aten_nn import adaptive_bins
    size = sh._parse_arg(output_size, "is")  # noqa: SLF001 - the exporter's own argument reader
    if list(size) == [1, 1]:
        return g.op("GlobalAveragePool", x)
    shape = sh._get_tensor_sizes(x)  # noqa: SLF001
    lead = len(shape) - 2
    flip = list(range(lead)) + [lead + 1, lead]
    ph, pw = (torch.from_numpy(np.ascontiguousarray(adaptive_bins(int(n), int(o)).T)) for n, o in zip(shape[-2:], size))
    y = g.op("MatMul", x, g.op("Constant", value_t=pw))            # (.., H, Ow)
    y = g.op("MatMul", g.op("Transpose", y, perm_i=flip), g.op("Constant", value_t=ph))  # (.., Ow, Oh)
    return g.op("Transpose", y, perm_i=flip)


def _compile_and_check(doc, feeds: dict, want: list, result: dict) -> None:
    """Compile doc with --cost model; reference and playback against want (into result)."""
    from polysat.cli import TARGETS
    from polysat.frontend import with_parameters
    from polysat.pipeline import Compilation
    t0, cpu0 = time.perf_counter(), time.process_time()
    c = Compilation(doc, cost="model")
    regions = c.regions
    result["compile_s"] = round(time.perf_counter() - t0, 2)
    result["compile_cpu_s"] = round(time.process_time() - cpu0, 2)  # what counts on a loaded machine
    result["kernels"] = len(regions)
    result["model_us"] = modelled_us(c)
    inputs = with_parameters(doc, feeds)
    names = [e["tensor"] for e in doc["signature"]["outputs"]]
    for target in ("reference", "playback"):
        got = TARGETS[target](c, inputs)
        errs = [close(got[n], w) for n, w in zip(names, want)]
        result[f"{target}_ok"] = all(ok for ok, _ in errs) and len(names) == len(want)
        result[f"{target}_err"] = max((e for _, e in errs), default=0.0)


def modelled_us(c) -> "float | None":
    """Poly Core's price of the chosen partition (the sum of its kernels' estimates), µs."""
    try:
        return round(sum(p.cost.time_est_us for p in c.priced if p.cost is not None), 2)
    except Exception:  # noqa: BLE001 - a price the row leaves out
        return None


def path_onnx(name: str) -> dict:
    import onnx
    import onnxruntime as ort
    from polysat.frontend.onnx import import_onnx
    r: dict = {}
    try:
        data, feeds = onnx_bytes(name)
        r["onnx_nodes"] = len(onnx.load_from_string(data).graph.node)
        sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        want = sess.run(None, feeds)
        doc = import_onnx(onnx.load_from_string(data), origin=f"{name}.onnx")
        _compile_and_check(doc, feeds, want, r)
    except Exception as e:  # noqa: BLE001 - the row names it
        r["error"] = _diag(e)
    return r


def path_export(name: str) -> dict:
    import torch
    from polysat.frontend.torch_export import import_exported
    from .corpora.zoo_models import build
    r: dict = {}
    try:
        m, x = build(name)
        with torch.no_grad():
            want = [m(*x).numpy()]
            ep = torch.export.export(m, x)
        doc = import_exported(ep, origin=f"{name} (torch.export)")
        placeholders = [s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
        feeds = {n: t.numpy() for n, t in zip(placeholders, x)}
        _compile_and_check(doc, feeds, want, r)
    except Exception as e:  # noqa: BLE001
        r["error"] = _diag(e)
    return r


class _Fallbacks(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.reasons: list = []

    def emit(self, record):
        msg = record.getMessage()
        if "runs eagerly" in msg:
            self.reasons.append(msg.split("runs eagerly: ", 1)[-1][:300])


def path_compile(name: str) -> dict:
    import torch
    from .corpora.zoo_models import build
    r: dict = {}
    h = _Fallbacks()
    log = logging.getLogger("polysat.torch")
    log.addHandler(h)
    try:
        m, x = build(name)
        torch._dynamo.reset()
        cm = torch.compile(m, backend="polysat", options={"target": "playback", "cost": "model"})
        with torch.no_grad():
            want = m(*x).numpy()
            t0, cpu0 = time.perf_counter(), time.process_time()
            got = cm(*x).numpy()
        r["compile_s"] = round(time.perf_counter() - t0, 2)
        r["compile_cpu_s"] = round(time.process_time() - cpu0, 2)
        r["fallbacks"] = len(h.reasons)
        r["fallback_reasons"] = h.reasons[:3]
        r["playback_ok"], r["playback_err"] = close(got, want)
    except Exception as e:  # noqa: BLE001
        r["error"] = _diag(e)
    finally:
        log.removeHandler(h)
    return r


def peer_tinygrad(name: str) -> dict:
    try:
        from .tinygrad_onnx import schedule
        data, _ = onnx_bytes(name)
        kernels, seconds, _ = schedule(data)
        return {"kernels": kernels, "schedule_s": round(seconds, 2)}
    except Exception as e:  # noqa: BLE001
        return {"error": _diag(e)}


def peer_inductor(name: str) -> dict:
    try:
        import torch
        from torch._inductor import metrics
        from .corpora.zoo_models import build
        m, x = build(name)
        torch._dynamo.reset()
        metrics.reset()
        cm = torch.compile(m, backend="inductor")
        with torch.no_grad(), contextlib.redirect_stderr(io.StringIO()):
            t0 = time.perf_counter()
            cm(*x)
        return {"kernels": int(metrics.generated_kernel_count), "compile_s": round(time.perf_counter() - t0, 2)}
    except Exception as e:  # noqa: BLE001
        return {"error": _diag(e)}


PATHS = {"onnx": path_onnx, "export": path_export, "compile": path_compile}
PEERS = {"tinygrad": peer_tinygrad, "inductor": peer_inductor}


def measure(name: str, part: str) -> dict:
    """One model's one path or peer (run in a fresh process)."""
    logging.getLogger("polysat.torch").setLevel(logging.WARNING)
    fn = PATHS.get(part) or PEERS[part]
    return fn(name)


def _one(conn, name: str, part: str) -> None:
    try:
        conn.send(measure(name, part))
    except BaseException as e:  # noqa: BLE001
        conn.send({"error": f"{type(e).__name__}: {e}"[:300]})


def run_part(name: str, part: str, timeout: float, wall: float) -> dict:
    """measure(name, part) in a fresh spawned process; a row saying so when it uses more than timeout CPU seconds
    (its work, which a shared machine's load does not inflate) or outlasts wall seconds."""
    ctx = multiprocessing.get_context("spawn")
    a, b = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_one, args=(b, name, part))
    t0 = time.perf_counter()
    p.start()
    out = None
    while out is None:
        if a.poll(1.0):
            out = a.recv()
        elif cpu_seconds(p.pid) > timeout:
            out = {"error": f"timed out after {timeout:.0f} CPU s"}
        elif time.perf_counter() - t0 > wall:
            out = {"error": f"timed out after {wall:.0f} s wall"}
    p.join(5)
    if p.is_alive():
        p.kill()
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process pid, all its threads (Linux /proc; 0 where it cannot be read)."""
    try:
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def passes(row: dict, path: str) -> bool:
    r = row.get(path, {})
    if path == "compile":
        return "error" not in r and r.get("fallbacks") == 0 and bool(r.get("playback_ok"))
    return "error" not in r and bool(r.get("reference_ok")) and bool(r.get("playback_ok"))


def table(rows: list) -> str:
    def cell(r: dict, path: str) -> str:
        if path not in r:
            return "-"  # not applicable (an ONNX graph has no torch module)
        x = r[path]
        if "error" in x:
            return "FAIL"
        if path == "compile":
            return "ok" if passes(r, path) else f"{x.get('fallbacks')} fallback(s)" if x.get("fallbacks") else "wrong"
        return "ok" if passes(r, path) else "wrong"
    head = ("| model | onnx | export | compile | polysat kernels | model µs | compile s (CPU s) | tinygrad kernels / s "
            "| inductor kernels / s |\n|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        p = r.get("onnx", {}) if "kernels" in r.get("onnx", {}) else r.get("export", {})
        tg, ind = r.get("tinygrad", {}), r.get("inductor", {})
        lines.append(f"| {r['model']} | {cell(r, 'onnx')} | {cell(r, 'export')} | {cell(r, 'compile')} "
                     f"| {p.get('kernels', '-')} | {p.get('model_us', '-')} | {p.get('compile_s', '-')} ({p.get('compile_cpu_s', '-')}) "
                     f"| {tg.get('kernels', '-')} / {tg.get('schedule_s', '-')} "
                     f"| {ind.get('kernels', '-')} / {ind.get('compile_s', '-')} |")
    fails = [(r["model"], k, r[k]["error"]) for r in rows for k in (*PATHS, *PEERS) if "error" in r.get(k, {})]
    if fails:
        lines.append("")
        lines += [f"- {m} {k}: {e}" for m, k, e in fails]
    ok = {k: sum(passes(r, k) for r in rows) for k in PATHS}
    applicable = {k: sum(1 for r in rows if k in r) for k in PATHS}
    lines.append("")
    lines.append("passed: " + ", ".join(f"{k} {ok[k]}/{applicable[k]}" for k in PATHS))
    return "\n".join(lines)


def main(argv: "list[str] | None" = None) -> int:
    from .corpora.zoo_models import ENTRIES
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the models marked quick (CI)")
    ap.add_argument("--only", default="", help="comma list of model names")
    ap.add_argument("--parts", default="onnx,export,compile,tinygrad,inductor")
    ap.add_argument("--timeout", type=float, default=300, help="CPU seconds for one model's one path")
    ap.add_argument("--wall", type=float, default=3000, help="wall seconds for one model's one path")
    ap.add_argument("--out", default=str(pathlib.Path(__file__).with_name("zoo_results.json")))
    a = ap.parse_args(argv)
    only = {x for x in a.only.split(",") if x}
    entries = [e for e in ENTRIES if (not only or e.name in only) and (e.quick or not a.quick or only)]
    parts = [p for p in a.parts.split(",") if p]
    rows, t0 = [], time.perf_counter()
    for e in entries:
        row = {"model": e.name, "family": e.family}
        for part in parts:
            if e.family == "onnx" and part in ("export", "compile", "inductor"):
                continue  # a graph, not a torch module
            row[part] = run_part(e.name, part, a.timeout, a.wall)
        rows.append(row)
        print(f"  {e.name}: {json.dumps({k: v.get('error', 'ok') for k, v in row.items() if isinstance(v, dict)})} "
              f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    print(table(rows))
    doc = {"python": platform.python_version(), "total_s": round(time.perf_counter() - t0, 1), "rows": rows}
    pathlib.Path(a.out).write_text(json.dumps(doc, indent=1, default=str), encoding="utf-8")
    print(f"total {doc['total_s']} s; wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
