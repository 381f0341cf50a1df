"""What the GPU benches (bench/gemm.py, bench/conv.py, bench/attention.py) share: the common arguments,
the check that a GPU and PyTorch are present (with a message and exit 0 where not), CUDA-event timing
with warm-up excluded and the median reported, TFLOP/s, the dtype table, the JSON results file and the
measurement log (one row per polysat kernel timed, runtime/measure.py).

Imported as ``polysat.bench.harness`` so that ``python bench/<name>.py`` and
``python -m polysat.bench.<name>`` both find it.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_args(ap: argparse.ArgumentParser, argv: list[str] | None, results: str) -> argparse.Namespace:
    """Add ``--iters``, ``--warmup`` and ``--json`` (default ``bench/<results>``) to ``ap`` and parse ``argv``."""
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json", default=os.path.join(HERE, results))
    return ap.parse_args(argv)


def open_gpu(script: str, needs: str, *modules: str):
    """``(runtime, torch)`` where polysat's CUDA runtime (backend/common/gpu.py) and PyTorch both see a GPU; otherwise print why
    (prefixed by ``script``; ``needs`` says what PyTorch is for) and return None. ``modules`` are further
    PyTorch modules the bench needs, imported here so that their absence reads as PyTorch's."""
    from polysat.backend.common import gpu as rt
    if not rt.cuda_available():
        print(f"{script}: no CUDA GPU visible (or cuda-python missing); nothing to measure.")
        return None
    try:
        import torch
        for m in modules:
            importlib.import_module(m)
    except ImportError:
        print(f"{script}: {needs}; nothing to measure.")
        return None
    if not torch.cuda.is_available():
        print(f"{script}: PyTorch sees no CUDA GPU; nothing to measure.")
        return None
    return rt, torch


def dtypes(torch) -> dict:
    """Bench dtype name -> (polysat DType, torch dtype)."""
    from polysat.ir.dtypes import DType
    return {"fp16": (DType.fp16, torch.float16), "bf16": (DType.bf16, torch.bfloat16)}


def time_ms(torch, fn, iters: int, warmup: int) -> float:
    """Median milliseconds of ``iters`` calls of ``fn``, each between two CUDA events, after ``warmup``
    untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def timer(torch, args: argparse.Namespace):
    """``time_ms`` with the ``--iters`` and ``--warmup`` of ``args``: ``fn -> median ms``."""
    return lambda fn: time_ms(torch, fn, args.iters, args.warmup)


def tflops(flops: float, ms: float) -> float:
    return flops / (ms * 1e-3) / 1e12


def write_results(torch, dev, path: str, **fields) -> None:
    """Write ``{"device", "arch", "sms", **fields}`` as JSON to ``path`` and say so."""
    name = torch.cuda.get_device_name()
    doc = {"device": name, "arch": dev.arch, "sms": dev.sms, **fields}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
    print(f"\n{name}: wrote {path}")


def log_kernels(script: str, dev, rows: list) -> None:
    """Append one measurement-log row per polysat kernel the bench timed: rows of (model label, kind,
    Launch, shapes, median ms); says where."""
    from polysat.runtime import measure
    path = measure.append(measure.launch_row(script, label, kind, dev.arch, launch, shapes, ms)
                          for label, kind, launch, shapes, ms in rows)
    if path:
        print(f"{script}: {len(rows)} kernel measurement(s) appended to {path}")
