"""Benchmark: polysat's flash-attention kernels vs torch scaled_dot_product_attention (flash backend).

    python bench/attention.py [--seqs 512,1024,2048,4096,8192,16384] [--dims 64,128] [--dtypes fp16,bf16]
                              [--causal both|yes|no] [--algos bound] [--iters 30] [--json out.json]

FlashAttention-paper convention: batch x heads chosen so that batch * seq = 16k tokens and
heads * head_dim = 2048; forward FLOPs = 4 * batch * heads * seq^2 * head_dim, halved when causal.
Random data (power draw depends on the data), CUDA events around every call, warm-up excluded,
medians reported in TFLOP/s; torch runs under ``sdpa_kernel(SDPBackend.FLASH_ATTENTION)`` in the same
run, and ``vs_sdpa_flash`` = SDPA time / polysat time. One row per algorithm, each with the cost model's
estimate and the max error of 16 sampled query rows of one head against a float64 numpy softmax(QK^T)V.
Prints a table and writes JSON. Exits cleanly with a message where no GPU is present; without PyTorch the
polysat figures still come. bench/gpu_check.py runs the same cases.
"""
from __future__ import annotations

import argparse
import sys
from functools import lru_cache

import numpy as np

from polysat.bench.gpu_report import bench_row
from polysat.bench.harness import (Data, estimate_us, log_kernels, open_device, parse_args, run_cases, timer,
                                   write_results)

TOKENS = 16384
HIDDEN = 2048
SAMPLED = 16


def cases(dtypes=("fp16", "bf16"), dims=(64, 128), seqs=(512, 1024, 2048, 4096, 8192, 16384), causals=(False, True),
          algos=("bound",)) -> list[dict]:
    """The cases; algo ``bound``: the algorithm the attention kind binds for a model of the case's dtype and mask
    (``bound_algo``), which is what a compiled model runs."""
    return [{"dtype": dt, "d": d, "seq": s, "causal": c, "algo": bound_algo(dt, c) if a == "bound" else a,
             "batch": max(1, TOKENS // s), "heads": HIDDEN // d}
            for dt in dtypes for d in dims for s in seqs for c in causals for a in algos]


@lru_cache(maxsize=None)
def bound_algo(dtype: str, causal: bool) -> str:
    """The attention algorithm a compiled model runs for attention in ``dtype``: the walks over the keys of the
    streamed softmax the rules give it (rules/streaming.egg: fp16 one, an online softmax rounding P at the running
    max; bf16 two, since moving its rounding is not within tolerance), read from the kind's binding of a small
    model's kernel (compiled on the CPU)."""
    from polysat.backend.attention.kind import ALGO_OF_PASSES
    from polysat.backend.kinds import bind_shared
    from polysat.bench.gpu_estimates import attention_doc
    from polysat.pipeline import Compilation
    c = Compilation(attention_doc({"batch": 1, "heads": 1, "seq": 128, "d": 64, "causal": causal, "dtype": dtype}),
                    arch="sm90", cost="model")
    (region,) = c.regions
    kind, shared = bind_shared(region)
    assert kind.name == "attention", kind.name
    return ALGO_OF_PASSES[shared.binding.passes]


def check_cases(quick: bool) -> list[dict]:
    """What the GPU check measures: head dims 64 and 128, seq 1k-16k, causal and not; fp16 and bf16 (fp16 and
    seq 1k, 4k, 16k with quick)."""
    if quick:
        return cases(dtypes=("fp16",), seqs=(1024, 4096, 16384))
    return cases(seqs=(1024, 2048, 4096, 8192, 16384))


def label(case: dict) -> str:
    return f"d{case['d']} s{case['seq']}{' causal' if case['causal'] else ''} {case['algo']}"


def sampled_err(data: Data, q, k, v, o, causal: bool, rng: np.random.Generator) -> float:
    """Max error / max |ref| over SAMPLED query rows of head (0, 0), ref in float64."""
    def head(t):  # head (0, 0) only: the copy back stays small (torch slices on the device)
        return (data.host(t[0, 0]) if data.torch is not None else data.host(t)[0, 0]).astype(np.float64)
    qh, kh, vh, oh = (head(t) for t in (q, k, v, o))
    rows = rng.choice(qh.shape[0], size=min(SAMPLED, qh.shape[0]), replace=False)
    s = qh[rows] @ kh.T / np.sqrt(qh.shape[1])
    if causal:
        s = np.where(np.arange(kh.shape[0])[None, :] <= rows[:, None], s, -np.inf)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    ref = (p / p.sum(axis=1, keepdims=True)) @ vh
    return float(np.abs(oh[rows] - ref).max() / max(np.abs(ref).max(), 1e-6))


def spec_of(case: dict):
    from polysat.backend.attention.spec import AttentionSpec
    from polysat.ir.dtypes import DType
    dname, d, s = case["dtype"], case["d"], case["seq"]
    dt = DType(dname)
    return AttentionSpec(f"bench_{dname}_d{d}", s, s, d, d, batch=(case["batch"], case["heads"]),
                         causal=case["causal"], scale=d ** -0.5, in_dtype=dt, p_dtype=dt, out_dtype=dt)


def sources(case: dict, arch: str) -> list:
    """The KernelSource measure launches for the case on arch (to build it ahead, in parallel)."""
    from polysat.backend.attention.launch import _plan_and_source, concrete_spec
    return [_plan_and_source(concrete_spec(spec_of(case), None), arch, case["algo"])]


def measure(gpu, case: dict, timed, data: Data, measured: list) -> list[dict]:
    from polysat.backend.attention.launch import prepare as prepare_attention
    dname, d, s, causal, batch, heads = (case[f] for f in ("dtype", "d", "seq", "causal", "batch", "heads"))
    torch = gpu.torch
    q, k, v = (data.randn((batch, heads, s, d), dname) for _ in range(3))
    o = data.empty((batch, heads, s, d), dname)
    spec = spec_of(case)
    launch = prepare_attention(spec, {"Q": q, "K": k, "V": v, "O": o}, algo=case["algo"])
    t = {"polysat": timed(launch), "sdpa_flash": None}
    if torch is not None:
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            t["sdpa_flash"] = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    launch()
    err = sampled_err(data, q, k, v, o, causal, np.random.default_rng(1))
    flops = 4.0 * batch * heads * s * s * d / (2 if causal else 1)
    measured.append((f"attention {case['algo']} {dname} d{d} s{s}{' causal' if causal else ''}", "attention", launch,
                     {"batch": batch, "heads": heads, "seq": s, "d": d}, t["polysat"]))
    return [bench_row("attention", label(case), t, flops=flops, estimate_us=estimate_us(launch), missing=gpu.why,
                      **case, plan=launch.kernel.plan.key(), max_rel_err=err)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seqs", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--causal", default="both", choices=("both", "yes", "no"))
    ap.add_argument("--algos", default="bound",
                    help="comma list: online_softmax,streaming_softmax_2pass, or bound (what a compiled model of the "
                         "dtype runs: fp16 online_softmax, bf16 streaming_softmax_2pass)")
    args = parse_args(ap, argv, "attention_results.json")
    gpu = open_device("bench/attention.py", "torch.nn.functional", "torch.nn.attention")
    if gpu is None:
        return 0
    todo = cases(tuple(args.dtypes.split(",")), tuple(int(x) for x in args.dims.split(",") if x),
                 tuple(int(x) for x in args.seqs.split(",") if x),
                 {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal],
                 tuple(a for a in args.algos.split(",") if a))
    data, timed, measured = Data(gpu.torch), timer(args), []
    rows = run_cases("attention", todo, lambda c: measure(gpu, c, timed, data, measured), label)
    write_results(gpu, args.json, iters=args.iters, tokens=TOKENS, hidden=HIDDEN, rows=rows)
    log_kernels("bench/attention.py", gpu.dev, measured)
    return 0


if __name__ == "__main__":
    sys.exit(main())
