"""Benchmark: polysat's generated GEMM kernels vs cuBLAS (torch.matmul) and vs torch GEMM + bias + ReLU.

    python bench/gemm.py [--dtypes fp16,bf16] [--sizes 1024,2048,4096,8192] [--iters 30] [--json out.json]

fp16 and bf16 inputs (fp32 accumulation; fp32 inputs with --dtypes fp32: 3xTF32, also against cuBLAS's TF32
GEMM), square sizes and odd shapes, random data (power draw depends on the data), CUDA events around every
call, warm-up excluded, medians reported in TFLOP/s. Per shape
two rows: the plain GEMM vs ``torch.matmul``, and GEMM + bias + ReLU fused in one kernel vs
``torch.relu(torch.addmm(bias, a, b))`` (and vs the plain cuBLAS GEMM); each with the cost model's estimate
and the max error of 64 sampled rows against a float64 product. Prints a table, writes JSON and appends one
measurement-log row per polysat kernel (POLYSAT_MEASURE_LOG). Exits cleanly with a message where no GPU is
present; without PyTorch the polysat figures still come. bench/gpu_check.py runs the same cases.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from polysat.bench.gpu_report import bench_row
from polysat.bench.harness import (Data, estimate_us, log_kernels, open_device, parse_args, run_cases, timer,
                                   write_results)

ODD_SHAPES = [(4095, 4097, 1000), (4095, 4097, 4096), (1000, 3000, 2000), (8192, 1024, 8192), (127, 8192, 4096),
              (3333, 2222, 1111)]
SAMPLED_ROWS = 64


def cases(dtypes=("fp16", "bf16"), sizes=(1024, 2048, 4096, 8192), odd=tuple(ODD_SHAPES)) -> list[dict]:
    """The (dtype, m, n, k) cases, square sizes first."""
    shapes = [(s, s, s) for s in sizes] + list(odd)
    return [{"dtype": d, "m": m, "n": n, "k": k} for d in dtypes for m, n, k in shapes]


def check_cases(quick: bool) -> list[dict]:
    """What the GPU check measures: 4096^3 and 8192^3 (4096^3 alone with quick) and 4095x4097x1000, fp16 and bf16;
    4096^3 with fp32 operands (3xTF32), against cuBLAS's SGEMM and its TF32 GEMM."""
    return cases(sizes=(4096,) if quick else (4096, 8192), odd=((4095, 4097, 1000),)) + \
        cases(("fp32",), (4096,), ())


def sampled_err(data: Data, a, b, bias, out, relu: bool, rng: np.random.Generator) -> float:
    """Max |out - ref| / max |ref| over SAMPLED_ROWS random rows, ref = A B (+ bias, ReLU) in float64."""
    ah, bh, oh = data.host(a), data.host(b), data.host(out)
    rows = rng.choice(ah.shape[0], size=min(SAMPLED_ROWS, ah.shape[0]), replace=False)
    ref = ah[rows].astype(np.float64) @ bh.astype(np.float64)
    if relu:
        ref = np.maximum(ref + data.host(bias).astype(np.float64), 0.0)
    return float(np.abs(oh[rows] - ref).max() / max(np.abs(ref).max(), 1e-6))


def label(case: dict) -> str:
    return f"{case['m']}x{case['n']}x{case['k']}"


def specs(case: dict) -> tuple:
    """(plain, fused + bias + ReLU) GemmSpecs of a case."""
    from polysat.backend.common.spec import EpilogueOp
    from polysat.backend.gemm.spec import GemmSpec
    from polysat.ir.dtypes import DType
    dname, m, n, k = case["dtype"], case["m"], case["n"], case["k"]
    dt = DType(dname)
    return (GemmSpec(f"bench_{dname}", m, n, k, in_dtype=dt, out_dtype=dt),
            GemmSpec(f"bench_{dname}_bias_relu", m, n, k, in_dtype=dt, out_dtype=dt,
                     epilogue=(EpilogueOp("bias", "bias", dtype=dt), EpilogueOp("relu"))))


def sources(case: dict, arch: str) -> list:
    """The KernelSources measure launches for the case on arch (to build them ahead, in parallel)."""
    from polysat.backend.gemm.launch import _plan_and_source, concrete_spec
    return [_plan_and_source(concrete_spec(s, None), arch) for s in specs(case)]


def measure(gpu, case: dict, timed, data: Data, measured: list) -> list[dict]:
    """The two rows of one case (plain, fused); appends (label, kind, launch, shapes, ms) to measured."""
    from polysat.backend.gemm.launch import prepare as prepare_gemm
    dname, m, n, k = case["dtype"], case["m"], case["n"], case["k"]
    torch = gpu.torch
    a, b = data.randn((m, k), dname), data.randn((k, n), dname)
    bias = data.randn((n,), dname)
    c, cf = data.empty((m, n), dname), data.empty((m, n), dname)
    plain, fused = specs(case)
    lp = prepare_gemm(plain, {"A": a, "B": b, "C": c})
    lf = prepare_gemm(fused, {"A": a, "B": b, "bias": bias, "C": cf})
    t_p, t_f = timed(lp), timed(lf)
    # fp32: cuBLAS's SGEMM (TF32 off, torch's default)
    t_cublas = timed(lambda: torch.matmul(a, b)) if torch is not None else None
    t_eager = timed(lambda: torch.relu(torch.addmm(bias, a, b))) if torch is not None else None
    peers = {"cublas": t_cublas}
    if dname == "fp32" and torch is not None:  # and cuBLAS's TF32 GEMM (one TF32 product: less accurate than 3xTF32)
        allowed = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            peers["cublas_tf32"] = timed(lambda: torch.matmul(a, b))
        finally:
            torch.backends.cuda.matmul.allow_tf32 = allowed
    lp()
    lf()
    rng = np.random.default_rng(1)
    shape = label(case)
    common = {"dtype": dname, "m": m, "n": n, "k": k, "flops": 2.0 * m * n * k, "missing": gpu.why}
    rows = [bench_row("gemm", shape, {"polysat": t_p, **peers}, estimate_us=estimate_us(lp),
                      plan=lp.kernel.plan.key(), max_rel_err=sampled_err(data, a, b, bias, c, False, rng), **common),
            bench_row("gemm_bias_relu", shape, {"polysat": t_f, "torch_bias_relu": t_eager, "cublas": t_cublas},
                      estimate_us=estimate_us(lf), plan=lf.kernel.plan.key(),
                      max_rel_err=sampled_err(data, a, b, bias, cf, True, rng), **common)]
    shapes = {"m": m, "n": n, "k": k}
    measured += [(f"gemm {dname} {shape}", "gemm", lp, shapes, t_p),
                 (f"gemm+bias+relu {dname} {shape}", "gemm", lf, shapes, t_f)]
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--sizes", default="1024,2048,4096,8192")
    ap.add_argument("--no-odd", action="store_true", help="skip the odd shapes")
    args = parse_args(ap, argv, "gemm_results.json")
    gpu = open_device("bench/gemm.py")
    if gpu is None:
        return 0
    sizes = tuple(int(x) for x in args.sizes.split(",") if x)
    todo = cases(tuple(args.dtypes.split(",")), sizes, () if args.no_odd else tuple(ODD_SHAPES))
    data, timed, measured = Data(gpu.torch), timer(args), []
    rows = run_cases("gemm", todo, lambda c: measure(gpu, c, timed, data, measured), label)
    write_results(gpu, args.json, iters=args.iters, rows=rows)
    log_kernels("bench/gemm.py", gpu.dev, measured)
    return 0


if __name__ == "__main__":
    sys.exit(main())
