"""Benchmark: polysat's implicit-GEMM conv vs cuDNN (torch.nn.functional.conv2d), and Conv+ReLU+MaxPool in
one kernel vs the torch sequence conv2d -> relu -> max_pool2d.

    python bench/conv.py [--batch 32] [--dtypes fp16] [--iters 30] [--json out.json]

The ResNet-50 3x3 layers (56x56x64, 28x28x128, 14x14x256, 7x7x512, stride 1 pad 1; and the stride-2
entries of each stage), fp16 (bf16 optional) with fp32 accumulation, NCHW tensors (polysat's layout);
cuDNN runs on NCHW and on channels_last (its preferred layout on tensor cores). Conv + bias + ReLU +
MaxPool 2x2/2 and the ResNet stem (7x7/2 conv + bias + ReLU + 3x3/2 pad-1 max-pool) are timed fused vs
torch. Random data, CUDA events around every call, warm-up excluded, medians; TFLOP/s count the conv's
2*N*Co*Ho*Wo*C*Kh*Kw FLOPs; ratios come from the same run. Prints a table and writes JSON. Exits
cleanly with a message where no GPU (or no PyTorch) is present.
"""
from __future__ import annotations

import argparse
import sys

from polysat.bench.harness import dtypes, log_kernels, open_gpu, parse_args, tflops, timer, write_results

# (name, C, H=W, Co, stride): the 3x3 convolutions of ResNet-50 (torchvision v1.5: stride in the 3x3)
RESNET50_3X3 = [("conv2_x", 64, 56, 64, 1), ("conv3_1", 128, 56, 128, 2), ("conv3_x", 128, 28, 128, 1),
                ("conv4_1", 256, 28, 256, 2), ("conv4_x", 256, 14, 256, 1), ("conv5_1", 512, 14, 512, 2),
                ("conv5_x", 512, 7, 512, 1)]
# (name, C, H=W, Co, kernel, stride, pad, pool kernel, pool stride, pool pad)
CONV_POOL = [("conv3x3_pool2", 64, 56, 64, 3, 1, 1, 2, 2, 0), ("conv3x3_pool2_c128", 128, 28, 128, 3, 1, 1, 2, 2, 0),
             ("resnet_stem", 3, 224, 64, 7, 2, 3, 3, 2, 1)]


def _rel_err(torch, got, want) -> float:
    got, want = got.float(), want.float()
    return ((got - want).abs().max() / want.abs().max().clamp_min(1e-6)).item()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--dtypes", default="fp16")
    args = parse_args(ap, argv, "conv_results.json")
    gpu = open_gpu("bench/conv.py", "PyTorch is needed for the cuDNN baseline", "torch.nn.functional")
    if gpu is None:
        return 0
    rt, torch = gpu
    import torch.nn.functional as F

    from polysat.backend.common.spec import EpilogueOp
    from polysat.backend.conv.launch import prepare as prepare_conv
    from polysat.backend.conv.spec import ConvSpec
    from polysat.backend.conv_pool.spec import ConvPoolSpec

    torch.backends.cudnn.benchmark = True
    dev = rt.device()
    tdt = dtypes(torch)
    timed = timer(torch, args)
    gen = torch.Generator(device="cuda").manual_seed(0)
    n = args.batch
    rows, pool_rows, measured = [], [], []
    for dname in args.dtypes.split(","):
        dt, tt = tdt[dname]
        for name, c, hw, co, stride in RESNET50_3X3:
            x = torch.randn(n, c, hw, hw, device="cuda", dtype=tt, generator=gen)
            w = torch.randn(co, c, 3, 3, device="cuda", dtype=tt, generator=gen) * (c * 9) ** -0.5
            spec = ConvSpec(f"bench_{name}_{dname}", n, c, hw, hw, co, 3, 3, stride=(stride, stride), pad=(1, 1, 1, 1),
                            in_dtype=dt, out_dtype=dt)
            ho, wo = spec.out_hw
            y = torch.empty(n, co, ho, wo, device="cuda", dtype=tt)
            launch = prepare_conv(spec, {"X": x, "W": w, "Y": y})
            x_cl, w_cl = x.to(memory_format=torch.channels_last), w.to(memory_format=torch.channels_last)
            flops = spec.flops()
            t = {"polysat": timed(launch),
                 "cudnn_nchw": timed(lambda: F.conv2d(x, w, stride=stride, padding=1)),
                 "cudnn_nhwc": timed(lambda: F.conv2d(x_cl, w_cl, stride=stride, padding=1))}
            launch()
            torch.cuda.synchronize()
            err = _rel_err(torch, y, F.conv2d(x.float(), w.float(), stride=stride, padding=1))
            row = {"dtype": dname, "layer": name, "n": n, "c": c, "hw": hw, "co": co, "stride": stride,
                   "plan": launch.kernel.plan.key(), **{f"{k}_ms": v for k, v in t.items()},
                   **{f"{k}_tflops": tflops(flops, v) for k, v in t.items()},
                   "vs_cudnn_nchw": t["cudnn_nchw"] / t["polysat"], "vs_cudnn_nhwc": t["cudnn_nhwc"] / t["polysat"],
                   "max_rel_err": err}
            rows.append(row)
            measured.append((f"conv {name} {dname}", "conv", launch, {"n": n, "c": c, "hw": hw, "co": co}, t["polysat"]))
            print(f"{dname} {name:8s} N{n} C{c:>4} {hw:>3}x{hw:<3} Co{co:>4} s{stride}  polysat "
                  f"{row['polysat_tflops']:6.1f}  cuDNN NCHW {row['cudnn_nchw_tflops']:6.1f} ({row['vs_cudnn_nchw']:5.2f}x)"
                  f"  NHWC {row['cudnn_nhwc_tflops']:6.1f} ({row['vs_cudnn_nhwc']:5.2f}x)  err {err:.1e}  {row['plan']}",
                  flush=True)
        for name, c, hw, co, k, s, p, pk, ps, pp in CONV_POOL:
            x = torch.randn(n, c, hw, hw, device="cuda", dtype=tt, generator=gen)
            w = torch.randn(co, c, k, k, device="cuda", dtype=tt, generator=gen) * (c * k * k) ** -0.5
            b = torch.randn(co, device="cuda", dtype=tt, generator=gen)
            conv = ConvSpec(f"bench_{name}_{dname}", n, c, hw, hw, co, k, k, stride=(s, s), pad=(p, p, p, p), in_dtype=dt,
                            out_dtype=dt, epilogue=(EpilogueOp("bias", "b", dtype=dt), EpilogueOp("relu")))
            spec = ConvPoolSpec(conv, conv.out_hw, (pk, pk), (ps, ps), (pp, pp))
            hp, wp = spec.out_hw
            out = torch.empty(n, co, hp, wp, device="cuda", dtype=tt)
            try:
                launch = prepare_conv(spec, {"X": x, "W": w, "b": b, "Y": out})
            except Exception as e:  # noqa: BLE001 - e.g. C = 3 has no TMA-able W: reported, the run goes on
                print(f"{dname} {name}: {e}")
                continue

            def torch_seq():
                return F.max_pool2d(torch.relu(F.conv2d(x, w, b, stride=s, padding=p)), pk, ps, pp)
            t = {"polysat_fused": timed(launch), "torch_sequence": timed(torch_seq)}
            launch()
            torch.cuda.synchronize()
            err = _rel_err(torch, out, F.max_pool2d(torch.relu(F.conv2d(x.float(), w.float(), b.float(), stride=s, padding=p)),
                                                     pk, ps, pp))
            row = {"dtype": dname, "case": name, "n": n, "c": c, "hw": hw, "co": co, "plan": launch.kernel.plan.key(),
                   **{f"{k_}_ms": v for k_, v in t.items()},
                   **{f"{k_}_tflops": tflops(conv.flops(), v) for k_, v in t.items()},
                   "speedup": t["torch_sequence"] / t["polysat_fused"], "max_rel_err": err}
            pool_rows.append(row)
            measured.append((f"conv+relu+maxpool {name} {dname}", "conv_pool", launch, {"n": n, "c": c, "hw": hw, "co": co},
                             t["polysat_fused"]))
            print(f"{dname} {name:20s} fused {t['polysat_fused']:8.3f} ms  torch conv+relu+pool {t['torch_sequence']:8.3f} ms"
                  f"  ({row['speedup']:5.2f}x)  err {err:.1e}  {row['plan']}", flush=True)
    write_results(torch, dev, args.json, batch=n, iters=args.iters, conv=rows, conv_relu_maxpool=pool_rows)
    log_kernels("bench/conv.py", dev, measured)
    return 0


if __name__ == "__main__":
    sys.exit(main())
