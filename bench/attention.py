"""Benchmark: polysat's flash-attention kernels vs torch scaled_dot_product_attention (flash backend).

    python bench/attention.py [--seqs 512,1024,2048,4096,8192,16384] [--dims 64,128] [--dtypes fp16,bf16]
                              [--causal both|yes|no] [--algos online_softmax] [--iters 30] [--json out.json]

FlashAttention-paper convention: batch x heads chosen so that batch * seq = 16k tokens and
heads * head_dim = 2048; forward FLOPs = 4 * batch * heads * seq^2 * head_dim, halved when causal.
Random data (power draw depends on the data), CUDA events around every call, warm-up excluded,
medians reported in TFLOP/s; torch runs under ``sdpa_kernel(SDPBackend.FLASH_ATTENTION)`` in the same
run, and the ratio is polysat / SDPA-flash. Each row also reports the max error against SDPA. Prints a
table and writes JSON. Exits cleanly with a message where no GPU (or no PyTorch) is present.
"""
from __future__ import annotations

import argparse
import sys

from polysat.bench.harness import dtypes, log_kernels, open_gpu, parse_args, tflops, timer, write_results

TOKENS = 16384
HIDDEN = 2048


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seqs", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--causal", default="both", choices=("both", "yes", "no"))
    ap.add_argument("--algos", default="online_softmax", help="comma list: online_softmax,streaming_softmax_2pass")
    args = parse_args(ap, argv, "attention_results.json")
    gpu = open_gpu("bench/attention.py", "PyTorch (with torch.nn.attention) is needed for the SDPA baseline",
                   "torch.nn.functional", "torch.nn.attention")
    if gpu is None:
        return 0
    rt, torch = gpu
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from polysat.backend.attention.launch import prepare as prepare_attention
    from polysat.backend.attention.spec import AttentionSpec

    dev = rt.device()
    tdt = dtypes(torch)
    timed = timer(torch, args)
    causals = {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]
    algos = [a for a in args.algos.split(",") if a]
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows, measured = [], []
    print(f"{'dtype':>5} {'d':>4} {'seq':>6} {'causal':>6} {'batch':>5} {'heads':>5} | "
          + " | ".join(f"{a[:14]:>14}" for a in algos) + f" | {'sdpa-flash':>10} | {'ratio':>6} | err")
    for dname in args.dtypes.split(","):
        dt, tt = tdt[dname]
        for d in (int(x) for x in args.dims.split(",") if x):
            heads = HIDDEN // d
            for s in (int(x) for x in args.seqs.split(",") if x):
                batch = max(1, TOKENS // s)
                q, k, v = (torch.randn(batch, heads, s, d, device="cuda", dtype=tt, generator=gen) for _ in range(3))
                for causal in causals:
                    flops = 4.0 * batch * heads * s * s * d / (2 if causal else 1)
                    spec = AttentionSpec(f"bench_{dname}_d{d}", s, s, d, d, batch=(batch, heads), causal=causal,
                                         scale=d ** -0.5, in_dtype=dt, p_dtype=dt, out_dtype=dt)

                    def sdpa(q=q, k=k, v=v, causal=causal):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                        t_ref = timed(sdpa)
                        ref = sdpa().float()
                    row = {"dtype": dname, "d": d, "seq": s, "causal": causal, "batch": batch, "heads": heads,
                           "flops": flops, "sdpa_flash_ms": t_ref, "sdpa_flash_tflops": tflops(flops, t_ref)}
                    for algo in algos:
                        o = torch.empty_like(q)
                        launch = prepare_attention(spec, {"Q": q, "K": k, "V": v, "O": o}, algo=algo)
                        t = timed(launch)
                        launch()
                        torch.cuda.synchronize()
                        err = ((o.float() - ref).abs().max() / ref.abs().max()).item()
                        row[f"{algo}_ms"] = t
                        row[f"{algo}_tflops"] = tflops(flops, t)
                        row[f"{algo}_plan"] = launch.kernel.plan.key()
                        row[f"{algo}_max_rel_err"] = err
                        measured.append((f"attention {algo} {dname} d{d} s{s}{' causal' if causal else ''}", "attention",
                                         launch, {"batch": batch, "heads": heads, "seq": s, "d": d}, t))
                    best = max(row[f"{a}_tflops"] for a in algos)
                    row["ratio_vs_sdpa_flash"] = best / row["sdpa_flash_tflops"]
                    rows.append(row)
                    print(f"{dname:>5} {d:>4} {s:>6} {str(causal):>6} {batch:>5} {heads:>5} | "
                          + " | ".join(f"{row[a + '_tflops']:14.1f}" for a in algos)
                          + f" | {row['sdpa_flash_tflops']:10.1f} | {row['ratio_vs_sdpa_flash']:6.2f} | "
                          + " ".join(f"{row[a + '_max_rel_err']:.1e}" for a in algos)
                          + f"  {row[algos[0] + '_plan']}", flush=True)
                del q, k, v
    write_results(torch, dev, args.json, iters=args.iters, tokens=TOKENS, hidden=HIDDEN, rows=rows)
    log_kernels("bench/attention.py", dev, measured)
    return 0


if __name__ == "__main__":
    sys.exit(main())
