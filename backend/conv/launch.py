"""Run generated conv and conv + pool kernels on a CUDA GPU through cuda-python (`polysat[cuda]`).

The same machinery as the GEMM runtime (backend/runtime.py, backend/launch.py): kernels compile through
``kernel_cache``, the driver API loads and launches them, W's tensor map (sm90) is encoded on the host
from the kernel's TmaOperand ([Co, K] or, grouped, [G, Cog, K], 128B swizzle).

  ``run(spec, inputs, out=None, plan=None)``: numpy arrays in -> numpy array out; device tensors in
  -> the output device tensor. ``spec`` is a ConvSpec or a ConvPoolSpec.
  ``prepare(spec, tensors, plan=None)``: everything resolved once; calling the result launches again.
"""
from __future__ import annotations

import ctypes
from functools import lru_cache
from typing import Any, Mapping

from ...ir.diagnostics import fail
from ..common.gpu import Device, device, load_function, tensor_map
from ..common.launch import INT32_MAX, Launch, device_pointers, pack, run_on_gpu
from ..conv_pool.spec import ConvPoolSpec
from .plan import ConvPlan, search
from .reference import check_inputs
from .render import ConvKernelSource, launch_sizes, render
from .spec import ConvSpec


@lru_cache(maxsize=256)
def _source(spec, arch: str) -> ConvKernelSource:
    return render(spec, search(spec, arch).best)


def _check_int32(spec) -> None:
    conv = spec.conv if isinstance(spec, ConvPoolSpec) else spec
    ho, wo = conv.out_hw
    for what, v in (("N*Ho*Wo", conv.n * ho * wo), ("C/groups*H*W", conv.cg * conv.h * conv.w),
                    ("N*Co*Ho*Wo", conv.n * conv.co * ho * wo)):
        if v > INT32_MAX:
            fail("UnaddressableShape", f"conv {conv.name!r}", f"{what} = {v} exceeds the kernel's 32-bit indexing",
                 "Split the batch.")


def prepare(spec: "ConvSpec | ConvPoolSpec", tensors: Mapping[str, Any], plan: ConvPlan | None = None,
                 dev: Device | None = None) -> Launch:
    """tensors: device tensors for every input and the output (spec.c), by name."""
    dev = dev or device()
    _check_int32(spec)
    ks = render(spec, plan) if plan is not None else _source(spec, dev.arch)
    if ks.skeleton == "sm90" and dev.arch != "sm90":
        fail("UnknownTarget", "--target cuda", "an sm90 plan cannot run on this GPU")
    conv = spec.conv if isinstance(spec, ConvPoolSpec) else spec
    need = {conv.x: 2, conv.wt: 16 if ks.skeleton == "sm90" else 2 * ks.plan.gemm.vec_b}
    ptrs, keep = device_pointers("conv launch", spec, tensors, need)
    sizes = launch_sizes(spec, ks.plan)
    roles = {"X": conv.x, "W": conv.wt, "C": spec.c}

    def arg(p):
        if p.kind == "tmap":
            return tensor_map(ks.tma[0], ptrs[conv.wt], sizes, conv.in_dtype)
        return ctypes.c_uint64(ptrs[roles.get(p.role, p.role)]) if p.kind == "ptr" else ctypes.c_int32(sizes[p.role])

    storage, argv = pack(ks.params, arg)
    grid = ks.grid(sizes, dev.sms)
    if grid[1] > 65535 or grid[2] > 65535:
        fail("UnaddressableShape", "conv launch", f"grid {grid} exceeds the launch limits (65535 in y and z)",
             "Split the batch.")
    return Launch(ks, load_function(ks, dev), grid, storage, argv, keep)


def run(spec: "ConvSpec | ConvPoolSpec", inputs: Mapping[str, Any], *, out: Any = None,
             plan: ConvPlan | None = None, stream: int = 0):
    """The conv (+ pool) on the GPU. numpy in -> numpy out; device tensors in -> device tensor out."""
    dev = device()
    conv = spec.conv if isinstance(spec, ConvPoolSpec) else spec
    return run_on_gpu(spec, inputs, lambda x: check_inputs(conv, x),
                      lambda tensors: prepare(spec, tensors, plan, dev), out, stream)
