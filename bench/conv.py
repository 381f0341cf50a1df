"""Benchmark: polysat's implicit-GEMM conv vs cuDNN (torch.nn.functional.conv2d), and Conv+ReLU+MaxPool in
one kernel vs the torch sequence conv2d -> relu -> max_pool2d.

    python bench/conv.py [--batch 32] [--dtypes fp16] [--iters 30] [--json out.json]

The ResNet-50 3x3 layers (56x56x64, 28x28x128, 14x14x256, 7x7x512, stride 1 pad 1; and the stride-2
entries of each stage), fp16 (bf16 optional) with fp32 accumulation, NCHW tensors (polysat's layout);
cuDNN runs on NCHW (``vs_cudnn_nchw``) and on channels_last (``vs_cudnn_nhwc``, its preferred layout on tensor
cores). Conv + bias + ReLU + MaxPool 2x2/2 and the ResNet stem (7x7/2 conv + bias + ReLU + 3x3/2 pad-1
max-pool) are timed fused vs torch's three calls. Random data, CUDA events around every call, warm-up
excluded, medians; TFLOP/s count the conv's 2*N*Co*Ho*Wo*C*Kh*Kw FLOPs; ratios come from the same run; each
row has the cost model's estimate and the max error of 64 sampled output pixels (every channel) against a
float64 numpy conv. Prints a table and writes JSON. Exits cleanly with a message where no GPU is present;
without PyTorch the polysat figures still come. bench/gpu_check.py runs the same cases.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from polysat.bench.gpu_report import bench_row
from polysat.bench.harness import (Data, estimate_us, log_kernels, open_device, parse_args, run_cases, timer,
                                   write_results)

# (name, C, H=W, Co, stride): the 3x3 convolutions of ResNet-50 (torchvision v1.5: stride in the 3x3)
RESNET50_3X3 = [("conv2_x", 64, 56, 64, 1), ("conv3_1", 128, 56, 128, 2), ("conv3_x", 128, 28, 128, 1),
                ("conv4_1", 256, 28, 256, 2), ("conv4_x", 256, 14, 256, 1), ("conv5_1", 512, 14, 512, 2),
                ("conv5_x", 512, 7, 512, 1)]
# (name, C, H=W, Co, kernel, stride, pad, pool kernel, pool stride, pool pad)
CONV_POOL = [("conv3x3_pool2", 64, 56, 64, 3, 1, 1, 2, 2, 0), ("conv3x3_pool2_c128", 128, 28, 128, 3, 1, 1, 2, 2, 0),
             ("resnet_stem", 3, 224, 64, 7, 2, 3, 3, 2, 1)]
SAMPLED = 64


def cases(dtypes=("fp16",), layers=tuple(RESNET50_3X3), pools=tuple(CONV_POOL), batch: int = 32) -> list[dict]:
    """One case per layer (``pool`` None) and per Conv+ReLU+MaxPool (``pool`` = its pool kernel, stride, pad)."""
    out = [{"dtype": d, "name": name, "c": c, "hw": hw, "co": co, "k": 3, "stride": s, "pad": 1, "pool": None,
            "batch": batch} for d in dtypes for name, c, hw, co, s in layers]
    out += [{"dtype": d, "name": name, "c": c, "hw": hw, "co": co, "k": k, "stride": s, "pad": p, "pool": (pk, ps, pp),
             "batch": batch} for d in dtypes for name, c, hw, co, k, s, p, pk, ps, pp in pools]
    return out


def check_cases(quick: bool) -> list[dict]:
    """What the GPU check measures: every ResNet-50 3x3 layer (the stride-1 ones with quick) and every fused
    conv + ReLU + max-pool (the first with quick), fp16, batch 32."""
    if quick:
        return cases(layers=tuple(x for x in RESNET50_3X3 if x[4] == 1), pools=tuple(CONV_POOL[:1]))
    return cases()


def label(case: dict) -> str:
    return case["name"]


def conv_at(x: np.ndarray, w: np.ndarray, bias, n: int, y: int, xx: int, stride: int, pad: int) -> np.ndarray:
    """The conv's output at pixel (n, y, xx) over every output channel, in float64 (zero padding)."""
    k = w.shape[2]
    hs, ws = y * stride - pad, xx * stride - pad
    patch = np.zeros((x.shape[1], k, k))
    h0, h1, w0, w1 = max(hs, 0), min(hs + k, x.shape[2]), max(ws, 0), min(ws + k, x.shape[3])
    patch[:, h0 - hs:h1 - hs, w0 - ws:w1 - ws] = x[n, :, h0:h1, w0:w1]
    out = np.tensordot(w.astype(np.float64), patch, axes=([1, 2, 3], [0, 1, 2]))
    return out + bias if bias is not None else out


def sampled_err(case: dict, xh, wh, bh, yh, ho: int, wo: int, rng: np.random.Generator) -> float:
    """Max error / max |ref| over SAMPLED output pixels: the conv (+ bias, ReLU, max over the pool window)."""
    errs, scale = [], 1e-6
    for _ in range(SAMPLED):
        n, py, px = (int(rng.integers(0, s)) for s in (yh.shape[0], yh.shape[2], yh.shape[3]))
        if case["pool"] is None:
            ref = conv_at(xh, wh, None, n, py, px, case["stride"], case["pad"])
        else:
            pk, ps, pp = case["pool"]
            pts = [(py * ps - pp + i, px * ps - pp + j) for i in range(pk) for j in range(pk)]
            ref = np.max([np.maximum(conv_at(xh, wh, bh, n, y, x, case["stride"], case["pad"]), 0.0)
                          for y, x in pts if 0 <= y < ho and 0 <= x < wo], axis=0)
        errs.append(np.abs(yh[n, :, py, px] - ref).max())
        scale = max(scale, np.abs(ref).max())
    return float(max(errs) / scale)


def specs(case: dict) -> tuple:
    """(ConvSpec, the spec launched: the ConvSpec, or its ConvPoolSpec with bias + ReLU) of a case."""
    from polysat.backend.common.spec import EpilogueOp
    from polysat.backend.conv.spec import ConvSpec
    from polysat.backend.conv_pool.spec import ConvPoolSpec
    from polysat.ir.dtypes import DType
    dname, n, c, hw, co, k, s, p = (case[f] for f in ("dtype", "batch", "c", "hw", "co", "k", "stride", "pad"))
    dt, pool = DType(dname), case["pool"]
    epi = (EpilogueOp("bias", "b", dtype=dt), EpilogueOp("relu")) if pool else ()
    conv = ConvSpec(f"bench_{case['name']}_{dname}", n, c, hw, hw, co, k, k, stride=(s, s), pad=(p, p, p, p),
                    in_dtype=dt, out_dtype=dt, epilogue=epi)
    return conv, ConvPoolSpec(conv, conv.out_hw, (pool[0],) * 2, (pool[1],) * 2, (pool[2],) * 2) if pool else conv


def sources(case: dict, arch: str) -> list:
    """The KernelSource measure launches for the case on arch (to build it ahead, in parallel)."""
    from polysat.backend.conv.launch import _source
    return [_source(specs(case)[1], arch)]


def measure(gpu, case: dict, timed, data: Data, measured: list) -> list[dict]:
    from polysat.backend.conv.launch import prepare as prepare_conv
    dname, n, c, hw, co, k, s, p = (case[f] for f in ("dtype", "batch", "c", "hw", "co", "k", "stride", "pad"))
    torch, pool = gpu.torch, case["pool"]
    x = data.randn((n, c, hw, hw), dname)
    w = data.randn((co, c, k, k), dname, scale=(c * k * k) ** -0.5)
    b = data.randn((co,), dname)
    conv, spec = specs(case)
    ho, wo = conv.out_hw
    y = data.empty((n, co, *spec.out_hw), dname)
    launch = prepare_conv(spec, {"X": x, "W": w, "Y": y, **({"b": b} if pool else {})})
    t = {"polysat": timed(launch)}
    if torch is not None:
        import torch.nn.functional as F
        if pool:
            t["torch_sequence"] = timed(lambda: F.max_pool2d(torch.relu(F.conv2d(x, w, b, stride=s, padding=p)), *pool))
        else:
            x_cl, w_cl = x.to(memory_format=torch.channels_last), w.to(memory_format=torch.channels_last)
            t["cudnn_nhwc"] = timed(lambda: F.conv2d(x_cl, w_cl, stride=s, padding=p))
            t["cudnn_nchw"] = timed(lambda: F.conv2d(x, w, stride=s, padding=p))
    else:
        t.update({"torch_sequence": None} if pool else {"cudnn_nhwc": None, "cudnn_nchw": None})
    launch()
    err = sampled_err(case, data.host(x), data.host(w), data.host(b), data.host(y), ho, wo, np.random.default_rng(1))
    bench = "conv_relu_maxpool" if pool else "conv"
    measured.append((f"{bench} {case['name']} {dname}", "conv_pool" if pool else "conv", launch,
                     {"n": n, "c": c, "hw": hw, "co": co}, t["polysat"]))
    return [bench_row(bench, case["name"], t, flops=conv.flops(), estimate_us=estimate_us(launch), missing=gpu.why,
                      dtype=dname, n=n, c=c, hw=hw, co=co, k=k, stride=s, pad=p, pool=pool,
                      plan=launch.kernel.plan.key(),
                      max_rel_err=err)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--dtypes", default="fp16")
    args = parse_args(ap, argv, "conv_results.json")
    gpu = open_device("bench/conv.py", "torch.nn.functional")
    if gpu is None:
        return 0
    if gpu.torch is not None:
        gpu.torch.backends.cudnn.benchmark = True
    data, timed, measured = Data(gpu.torch), timer(args), []
    todo = cases(tuple(args.dtypes.split(",")), batch=args.batch)
    rows = run_cases("conv", todo, lambda c: measure(gpu, c, timed, data, measured), label)
    write_results(gpu, args.json, batch=args.batch, iters=args.iters, rows=rows)
    log_kernels("bench/conv.py", gpu.dev, measured)
    return 0


if __name__ == "__main__":
    sys.exit(main())
