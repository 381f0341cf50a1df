"""Benchmark: polysat's SIMT kernels (the non-MMA kind: softmax, layernorm, an elementwise chain) in GB/s, vs
PyTorch eager and vs the device-to-device copy bandwidth.

    python bench/simt.py [--quick] [--iters 30] [--json out.json]

Each case is a model compiled through the whole pipeline (front end, e-graph, regions) at large shapes; its one
region binds to the SIMT kind and is launched on device tensors. GB/s count the fewest bytes the region must
move (each input read once, each output written once, at the spec's dtypes); ``vs_copy`` is that rate over
the copy's (bytes read + written by cuMemcpyDtoD of 1 GiB), ``vs_torch`` = torch time / polysat time.
Random data, CUDA events, warm-up excluded, medians; each row has the cost model's estimate and the max error
against the CPU playback of the same region on 256 sampled rows. Exits cleanly with a message where no GPU is
present; without PyTorch the polysat figures still come. bench/gpu_check.py runs the same cases.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from polysat.bench.gpu_report import bench_row
from polysat.bench.harness import (Data, copy_gbps, estimate_us, log_kernels, open_device, parse_args, run_cases,
                                   timer, write_results)

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
SAMPLED_ROWS = 256

ELEMENTWISE = {  # Y = silu(X) * Z + X: three fused elementwise ops, two inputs, one output
    "signature": {"inputs": [{"tensor": "X"}, {"tensor": "Z"}], "outputs": [{"tensor": "Y"}]},
    "tensors": {"X": {"dtype": "fp16", "shape": ["R", "C"]}, "Z": {"dtype": "fp16", "shape": ["R", "C"]}},
    "graph": [{"op": "Elementwise", "name": "silu", "fn": "silu", "inputs": ["X"], "outputs": ["S"]},
              {"op": "Elementwise", "name": "mul", "fn": "mul", "inputs": ["S", "Z"], "outputs": ["P"]},
              {"op": "Elementwise", "name": "add", "fn": "add", "inputs": ["P", "X"], "outputs": ["Y"]}]}


def _torch_fn(name: str, torch, t: dict):
    import torch.nn.functional as F
    if name == "softmax":
        return lambda: torch.softmax(t["X"], dim=-1)
    if name == "layernorm":
        return lambda: F.layer_norm(t["X"], (t["X"].shape[-1],), t["gamma"], t["beta"], 1e-5)
    return lambda: F.silu(t["X"]) * t["Z"] + t["X"]


def cases(quick: bool = False) -> list[dict]:
    """softmax over rows of 4096 (8192 with quick: 16k), layernorm over 768 (64k tokens), the elementwise chain
    (64M elements), fp16 as the examples declare."""
    rows = 8192 if quick else 16384
    return [{"name": "softmax", "model": os.path.join(EXAMPLES, "softmax.json"), "bind": {"R": rows, "C": 4096},
             "dtype": "fp16"},
            {"name": "layernorm", "model": os.path.join(EXAMPLES, "layernorm.json"), "bind": {"T": 65536},
             "dtype": "fp16"},
            {"name": "elementwise", "model": ELEMENTWISE, "bind": {"R": rows, "C": 4096}, "dtype": "fp16"}]


def check_cases(quick: bool) -> list[dict]:
    return cases(quick)


def label(case: dict) -> str:
    return f"{case['name']} " + "x".join(f"{k}{v}" for k, v in case["bind"].items())


def _region(case: dict):
    """(region, spec, env) of the case's model: its one region, which must bind to the SIMT kind."""
    from polysat.backend.common.canonical import canonical
    from polysat.pipeline import Compilation
    from polysat.runtime.model import steps_of
    (step,) = steps_of(Compilation(case["model"], cost="model").regions)
    if step.kind is None or step.kind.name != "simt":
        raise RuntimeError(f"{case['name']}: the region binds to {step.kind.name if step.kind else step.binding}, "
                           "not simt")
    return canonical(step.region)[0], step.binding.spec, dict(case["bind"])  # the region in its spec's names


def sources(case: dict, arch: str) -> list:
    """The KernelSource measure launches for the case on arch (to build it ahead, in parallel)."""
    from polysat.runtime.kernels import source
    _, spec, env = _region(case)
    return [source("simt", spec, env, arch)]


def measure(gpu, case: dict, timed, data: Data, measured: list, copy: float) -> list[dict]:
    from polysat.bench.gpu_launch import rel_err
    from polysat.ir.playback import _RegionRun
    from polysat.runtime.kernels import prepare
    region, spec, env = _region(case)
    shapes, dts = spec.shapes(env), spec.dtypes()
    t = {n: data.randn(tuple(shapes[n]), dts[n].value) for n in spec.inputs}
    t.update({n: data.empty(tuple(shapes[n]), dts[n].value) for n in spec.outputs})
    launch = prepare("simt", spec, t, env)
    times = {"polysat": timed(launch), "torch": None}
    if gpu.torch is not None:
        times["torch"] = timed(_torch_fn(case["name"], gpu.torch, t))
    launch()
    rows = np.random.default_rng(1).choice(shapes[spec.c][0], size=SAMPLED_ROWS, replace=False)
    host = {n: data.host(t[n]) for n in (*spec.inputs, *spec.outputs)}
    ins = {b.name: host[b.name][rows] if np.ndim(host[b.name]) == len(shapes[spec.c]) else host[b.name]
           for b in region.inputs}
    want = _RegionRun(region, ins, {**env, **_row_env(case, SAMPLED_ROWS)}).run()
    err = max(rel_err(host[n][rows], want[n]) for n in spec.outputs if n in want)
    nbytes = sum(int(np.prod(shapes[n], dtype=np.int64)) * dts[n].itemsize for n in (*spec.inputs, *spec.outputs))
    measured.append((f"simt {label(case)}", "simt", launch, env, times["polysat"]))
    return [bench_row("simt", label(case), times, nbytes=nbytes, estimate_us=estimate_us(launch), copy_gbps=copy,
                      missing=gpu.why, dtype="fp16", plan=launch.kernel.plan.key(), max_rel_err=err)]


def _row_env(case: dict, rows: int) -> dict:
    """The case's symbols with the row symbol (the first) at the sampled row count."""
    first = next(iter(case["bind"]))
    return {first: rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = parse_args(ap, argv, "simt_results.json")
    gpu = open_device("bench/simt.py", "torch.nn.functional")
    if gpu is None:
        return 0
    data, timed, measured = Data(gpu.torch), timer(args), []
    copy = copy_gbps(timed)
    print(f"device-to-device copy: {copy:.0f} GB/s (read + written)")
    rows = run_cases("simt", cases(args.quick), lambda c: measure(gpu, c, timed, data, measured, copy), label)
    write_results(gpu, args.json, iters=args.iters, copy_gbps=copy, rows=rows)
    log_kernels("bench/simt.py", gpu.dev, measured)
    return 0


if __name__ == "__main__":
    sys.exit(main())
