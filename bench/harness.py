"""What the GPU benches (bench/gemm.py, bench/conv.py, bench/attention.py, bench/simt.py) share: the common
arguments, the device (:func:`open_device`: polysat's CUDA runtime, and PyTorch where it is there with a CUDA
build — without it the polysat figures still come and every torch baseline reads "torch missing"), random
device data (:class:`Data`, never zeros), CUDA-event timing on the default stream with warm-up excluded and the
median reported (:func:`time_ms`, driver events, so no PyTorch is needed), the device-to-device copy bandwidth,
the cost model's estimate of a launch, kernels built ahead in worker processes, the JSON results file and the
measurement log (one row per polysat kernel timed, runtime/measure.py). Rows are assembled by bench/gpu_report.py.

Imported as ``polysat.bench.harness`` so that ``python bench/<name>.py`` and
``python -m polysat.bench.<name>`` both find it.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from polysat.bench.gpu_report import fail_row, median, one_line

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_MISSING = "torch missing"


def parse_args(ap: argparse.ArgumentParser, argv: list[str] | None, results: str) -> argparse.Namespace:
    """Add ``--iters``, ``--warmup`` and ``--json`` (default ``bench/<results>``) to ``ap`` and parse ``argv``."""
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json", default=os.path.join(HERE, results))
    return ap.parse_args(argv)


@dataclass
class Gpu:
    """The device a bench measures on: polysat's runtime module and Device, PyTorch (None, with ``why``, where
    it is missing or sees no GPU: its baselines are then reported as missing)."""
    rt: Any
    dev: Any
    torch: Any
    why: str = ""


def open_device(script: str, *modules: str) -> "Gpu | None":
    """The Gpu where polysat's CUDA runtime (backend/common/gpu.py) sees a device; otherwise print why (prefixed
    by ``script``) and return None. ``modules`` are further PyTorch modules the baselines need: their absence
    reads as PyTorch's."""
    from polysat.backend.common import gpu as rt
    if not rt.cuda_available():
        print(f"{script}: no CUDA GPU visible (or cuda-python missing); nothing to measure.")
        return None
    torch, why = None, ""
    try:
        import torch as t
        for m in modules:
            importlib.import_module(m)
        torch = t if t.cuda.is_available() else None
        why = "" if torch is not None else "torch sees no CUDA GPU"
    except ImportError as e:
        why = f"{TORCH_MISSING} ({e})"
    if torch is None:
        print(f"{script}: {why}; the torch baselines are left out, polysat's figures still come.")
    return Gpu(rt, rt.device(), torch, why)


class Data:
    """Random normal device tensors by bench dtype name (fp16, bf16, fp32): torch CUDA tensors where PyTorch
    is there (its baselines read them), polysat DeviceArrays otherwise; ``host`` copies one back as float32."""

    def __init__(self, torch: Any, seed: int = 0):
        self.torch, self.rng = torch, np.random.default_rng(seed)
        self.gen = torch.Generator(device="cuda").manual_seed(seed) if torch is not None else None

    def _np(self, dname: str):
        from polysat.ir.dtypes import DType
        return DType(dname).np

    def _tt(self, dname: str):
        return {"fp16": self.torch.float16, "bf16": self.torch.bfloat16, "fp32": self.torch.float32}[dname]

    def randn(self, shape: tuple, dname: str, scale: float = 1.0) -> Any:
        if self.torch is not None:
            t = self.torch.randn(*shape, device="cuda", dtype=self.torch.float32, generator=self.gen)
            return (t * scale).to(self._tt(dname)).contiguous()
        from polysat.backend.common.device_tensors import DeviceArray
        a = self.rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)
        return DeviceArray.from_numpy(a.astype(self._np(dname)))

    def empty(self, shape: tuple, dname: str) -> Any:
        if self.torch is not None:
            return self.torch.empty(*shape, device="cuda", dtype=self._tt(dname))
        from polysat.backend.common.device_tensors import DeviceArray
        return DeviceArray(tuple(shape), self._np(dname))

    def host(self, t: Any) -> np.ndarray:
        if self.torch is not None:
            self.torch.cuda.synchronize()
            return t.float().cpu().numpy()
        return t.numpy().astype(np.float32)


def times_ms(fn: Callable[[], Any], iters: int, warmup: int) -> list[float]:
    """Milliseconds of ``iters`` calls of ``fn``, each between two CUDA events recorded on the default stream
    (where polysat's launches and PyTorch's eager calls run), after ``warmup`` untimed calls."""
    from polysat.backend.common.cuda_driver import ck, driver
    drv = driver()
    start, stop = (ck(drv.cuEventCreate(0), "cuEventCreate") for _ in range(2))
    stream = drv.CUstream(0)
    try:
        for _ in range(warmup):
            fn()
        ck(drv.cuCtxSynchronize(), "cuCtxSynchronize")
        out = []
        for _ in range(iters):
            ck(drv.cuEventRecord(start, stream), "cuEventRecord")
            fn()
            ck(drv.cuEventRecord(stop, stream), "cuEventRecord")
            ck(drv.cuEventSynchronize(stop), "cuEventSynchronize")
            out.append(float(ck(drv.cuEventElapsedTime(start, stop), "cuEventElapsedTime")))
        return out
    finally:
        drv.cuEventDestroy(start)
        drv.cuEventDestroy(stop)


def time_ms(fn: Callable[[], Any], iters: int, warmup: int) -> float:
    """The median of :func:`times_ms`."""
    return median(times_ms(fn, iters, warmup))


def timer(args: argparse.Namespace) -> Callable[[Callable[[], Any]], float]:
    """``time_ms`` with the ``--iters`` and ``--warmup`` of ``args``: ``fn -> median ms``."""
    return lambda fn: time_ms(fn, args.iters, args.warmup)


def copy_gbps(timed: Callable[[Callable[[], Any]], float], nbytes: int = 1 << 30) -> float:
    """The device-to-device copy bandwidth in GB/s, counting the bytes read and the bytes written (cuMemcpyDtoD
    of ``nbytes`` on the default stream): the ceiling of a memory-bound kernel."""
    from polysat.backend.common.cuda_driver import ck, driver
    from polysat.backend.common.device_tensors import DeviceArray
    drv = driver()
    src, dst = DeviceArray((nbytes,), np.uint8), DeviceArray((nbytes,), np.uint8)
    d, s_, stream = drv.CUdeviceptr(dst.ptr), drv.CUdeviceptr(src.ptr), drv.CUstream(0)
    ms = timed(lambda: ck(drv.cuMemcpyDtoDAsync(d, s_, nbytes, stream), "cuMemcpyDtoDAsync"))
    return 2 * nbytes / (ms * 1e-3) / 1e9


def estimate_us(launch: Any) -> "float | None":
    """The cost model's time for a prepared launch: its plan search's roofline estimate (runtime/measure.py)."""
    from polysat.runtime.measure import plan_price
    return plan_price(launch.kernel).get("time_est_us")


def run_cases(bench: str, todo: list, one: Callable[[Any], list], label: Callable[[Any], str],
              say: Callable[[str], Any] = lambda s: print(s, flush=True), rows: "list | None" = None) -> list[dict]:
    """The rows of every case (``one(case)`` measures it), appended to ``rows`` as they come (a new list by
    default) and returned; a case that fails is a FAIL row with its error, and the others go on. Says each row."""
    rows = [] if rows is None else rows
    for case in todo:
        try:
            got = one(case)
        except Exception as e:  # noqa: BLE001 - one failing kernel is a FAIL row, not the end of the bench
            got = [fail_row(bench, label(case), e, dtype=case.get("dtype"))]
        for r in got:
            rows.append(r)
            say(one_line(r))
    return rows


def _build_one(job: tuple) -> str:
    """Build one kernel into the kernel cache (in a worker process): '' or the error."""
    source, skeleton, arch, cc = job
    try:
        from types import SimpleNamespace

        from polysat.backend.common.kernel_cache import cubin_for
        cubin_for(SimpleNamespace(source=source, skeleton=skeleton), arch, tuple(cc))
        return ""
    except Exception as e:  # noqa: BLE001 - the case's own launch reports it again, as a FAIL row
        return f"{type(e).__name__}: {e}"[:500]


def build_kernels(jobs: list[tuple], workers: int) -> list[str]:
    """Build (source, skeleton, arch, cc) jobs into the kernel cache in ``workers`` fresh processes (spawned: no
    CUDA context is inherited; NVRTC or nvcc needs none), so that the timing loop that follows only loads
    cubins; the errors, '' for each success."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    if not jobs:
        return []
    with ProcessPoolExecutor(max_workers=max(1, workers), mp_context=multiprocessing.get_context("spawn")) as ex:
        return list(ex.map(_build_one, jobs))


def tflops(flops: float, ms: float) -> float:
    return flops / (ms * 1e-3) / 1e12


def device_name(ordinal: int = 0) -> str:
    """The GPU's name as its driver gives it (cuDeviceGetName)."""
    from polysat.backend.common.cuda_driver import ck, driver
    drv = driver()
    raw = ck(drv.cuDeviceGetName(256, ck(drv.cuDeviceGet(ordinal), "cuDeviceGet")), "cuDeviceGetName")
    return bytes(raw).split(b"\0")[0].decode(errors="replace").strip()


def write_results(gpu: Gpu, path: str, **fields) -> None:
    """Write ``{"device", "arch", "sms", **fields}`` as JSON to ``path`` and say so."""
    name = device_name()
    doc = {"device": name, "arch": gpu.dev.arch, "sms": gpu.dev.sms, "torch": gpu.why or "present", **fields}
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
