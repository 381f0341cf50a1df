"""Benchmark: polysat's generated GEMM kernels vs cuBLAS (torch.matmul) and vs torch GEMM + bias + ReLU.

    python bench/gemm.py [--dtypes fp16,bf16] [--sizes 1024,2048,4096,8192] [--iters 30] [--json out.json]

fp16 and bf16 inputs (fp32 accumulation), square sizes and odd shapes, random data (power draw
depends on the data), CUDA events around every call, medians reported in TFLOP/s. Prints a table,
writes JSON and appends one measurement-log row per polysat kernel (POLYSAT_MEASURE_LOG). Exits cleanly with a message where no GPU (or no PyTorch) is present.
"""
from __future__ import annotations

import argparse
import sys

from polysat.bench.harness import dtypes, log_kernels, open_gpu, parse_args, tflops, timer, write_results

ODD_SHAPES = [(4095, 4097, 4096), (1000, 3000, 2000), (8192, 1024, 8192), (127, 8192, 4096), (3333, 2222, 1111)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--sizes", default="1024,2048,4096,8192")
    ap.add_argument("--no-odd", action="store_true", help="skip the odd shapes")
    args = parse_args(ap, argv, "gemm_results.json")
    gpu = open_gpu("bench/gemm.py", "PyTorch is needed for the cuBLAS baseline")
    if gpu is None:
        return 0
    rt, torch = gpu

    from polysat.backend.common.spec import EpilogueOp
    from polysat.backend.gemm.launch import prepare as prepare_gemm
    from polysat.backend.gemm.spec import GemmSpec

    dev = rt.device()
    shapes = [(s, s, s) for s in (int(x) for x in args.sizes.split(",") if x)]
    if not args.no_odd:
        shapes += ODD_SHAPES
    tdt = dtypes(torch)
    timed = timer(torch, args)
    rows, measured = [], []
    gen = torch.Generator(device="cuda").manual_seed(0)
    for dname in args.dtypes.split(","):
        dt, tt = tdt[dname]
        for m, n, k in shapes:
            a = torch.randn(m, k, device="cuda", dtype=tt, generator=gen)
            b = torch.randn(k, n, device="cuda", dtype=tt, generator=gen)
            bias = torch.randn(n, device="cuda", dtype=tt, generator=gen)
            c = torch.empty(m, n, device="cuda", dtype=tt)
            cf = torch.empty(m, n, device="cuda", dtype=tt)
            plain = GemmSpec(f"bench_{dname}", m, n, k, in_dtype=dt, out_dtype=dt)
            fused = GemmSpec(f"bench_{dname}_bias_relu", m, n, k, in_dtype=dt, out_dtype=dt,
                             epilogue=(EpilogueOp("bias", "bias", dtype=dt), EpilogueOp("relu")))
            lp = prepare_gemm(plain, {"A": a, "B": b, "C": c})
            lf = prepare_gemm(fused, {"A": a, "B": b, "bias": bias, "C": cf})
            flops = 2.0 * m * n * k
            t = {
                "polysat": timed(lp),
                "cublas": timed(lambda: torch.matmul(a, b)),
                "polysat_bias_relu": timed(lf),
                "torch_bias_relu": timed(lambda: torch.relu(torch.addmm(bias, a, b))),
            }
            ref = torch.matmul(a.float(), b.float())
            lp()
            lf()
            torch.cuda.synchronize()
            err = ((c.float() - ref).abs().max() / ref.abs().max()).item()
            err_f = ((cf.float() - torch.relu(ref + bias.float())).abs().max() / ref.abs().max()).item()
            row = {"dtype": dname, "m": m, "n": n, "k": k, "plan": lp.kernel.plan.key(), "plan_fused": lf.kernel.plan.key(),
                   **{f"{key}_ms": v for key, v in t.items()},
                   **{f"{key}_tflops": tflops(flops, v) for key, v in t.items()},
                   "max_rel_err": err, "max_rel_err_fused": err_f}
            rows.append(row)
            shapes = {"m": m, "n": n, "k": k}
            measured += [(f"gemm {dname} {m}x{n}x{k}", "gemm", lp, shapes, t["polysat"]),
                         (f"gemm+bias+relu {dname} {m}x{n}x{k}", "gemm", lf, shapes, t["polysat_bias_relu"])]
            print(f"{dname} {m:>5}x{n:>5}x{k:>5}  polysat {row['polysat_tflops']:7.1f}  cuBLAS {row['cublas_tflops']:7.1f}"
                  f"  ({row['polysat_tflops'] / row['cublas_tflops']:5.1%})  | fused {row['polysat_bias_relu_tflops']:7.1f}"
                  f"  torch+bias+relu {row['torch_bias_relu_tflops']:7.1f}  | err {err:.1e}  {row['plan']}", flush=True)
    write_results(torch, dev, args.json, iters=args.iters, rows=rows)
    log_kernels("bench/gemm.py", dev, measured)
    return 0


if __name__ == "__main__":
    sys.exit(main())
