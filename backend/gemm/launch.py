"""Run generated GEMM kernels on a CUDA GPU through cuda-python (`polysat[cuda]`).

Kernels compile through ``kernel_cache`` (NVRTC or nvcc, cached on disk by source hash + arch), the
driver API loads and launches them, and TMA descriptors are encoded on the host
(cuTensorMapEncodeTiled). Device tensors are ``device_tensors``'s.

Python API:
  ``run(spec, inputs, env=None)``: numpy arrays in -> numpy array out; device tensors
  (``__cuda_array_interface__`` or DLPack, e.g. torch CUDA tensors) in -> a :class:`DeviceArray`
  (or the ``out=`` tensor) out.
  ``prepare(spec, tensors, env)``: everything resolved once; calling the result launches again
  (for benchmarks and CUDA-graph capture).
The plan is specialised to the concrete shape of each call, and cached per shape.
"""
from __future__ import annotations

import ctypes
from functools import lru_cache
from typing import Any, Mapping

from ...ir.diagnostics import fail
from ..common.gpu import Device, concrete, device, load_function, tensor_map
from ..common.launch import Launch, device_pointers, pack, run_on_gpu
from ..common.mma_plan import SchedulePlan
from ..common.render import KernelSource
from .plan import choose_plan, fits_runtime
from .reference import check_inputs
from .render import render
from .spec import GemmSpec, batch_map, packed_dims, partial_batch, strides


def concrete_spec(spec: GemmSpec, env: Mapping[str, int] | None) -> GemmSpec:
    """spec with every symbol replaced by its value (the plan is specialised per concrete shape)."""
    return concrete(spec, env, ("m", "n", "k"))


@lru_cache(maxsize=256)
def _plan_and_source(spec: GemmSpec, arch: str) -> KernelSource:
    return render(spec, choose_plan(spec, arch))


def prepare(spec: GemmSpec, tensors: Mapping[str, Any], env: Mapping[str, int] | None = None,
                 plan: SchedulePlan | None = None, dev: Device | None = None) -> Launch:
    """tensors: device tensors for every input and the output (spec.c), by name."""
    dev = dev or device()
    cspec = concrete_spec(spec, env)
    ks = render(cspec, plan) if plan is not None else _plan_and_source(cspec, dev.arch)
    if ks.skeleton == "sm90" and dev.arch != "sm90":
        fail("UnknownTarget", "--target cuda", "an sm90 plan cannot run on this GPU")
    if not fits_runtime(ks.plan, cspec, None):
        fail("InvalidAttribute", "gemm launch", f"the plan's vector widths do not divide this shape ({', '.join(ks.plan.assumes)})",
             "Let run() choose the plan for the concrete shape (plan=None).")
    sizes = cspec.sizes()
    need = {cspec.a: 2 * ks.plan.vec_a, **{b: 2 * ks.plan.vec_b for b in cspec.b_names}}
    if ks.skeleton == "sm90":
        need = {cspec.a: 16, **{b: 16 for b in cspec.b_names}}
    if cspec.a_prologue is not None:  # A computed from these (16-byte loads; a per-row source element-aligned)
        del need[cspec.a]
        need.update({s.tensor: 16 if s.role != "m" else s.dtype.itemsize for s in cspec.a_prologue.sources})
    need[cspec.c] = 2 * cspec.out_dtype.itemsize  # paired stores
    ptrs, keep = device_pointers("gemm launch", cspec, tensors, need)
    # B, or each piece of a B concatenated along N (role Bj: the piece's own tensor, its own width)
    roles = {"A": cspec.a, "B": cspec.b, "C": cspec.c, **{f"B{j}": p for j, (p, _) in enumerate(cspec.b_pieces)}}
    widths = {f"B{j}": w for j, (_, w) in enumerate(cspec.b_pieces)}
    tmaps = {}
    (a_div, a_mod), (b_div, b_mod) = batch_map(cspec, "a"), batch_map(cspec, "b")
    bmap = {"a_bdiv": a_div, "a_bmod": a_mod if partial_batch(cspec, "a") else 0,
            "b_bdiv": b_div, "b_bmod": b_mod if partial_batch(cspec, "b") else 0}
    if ks.skeleton == "sm90":
        for op in ks.tma:
            own = {**sizes, "n": widths[op.role]} if op.role in widths else {**sizes, **bmap}
            tmaps[op.role] = tensor_map(op, ptrs[roles[op.role]], own, cspec.in_dtype)
    b, m, n, k = sizes["batch"], sizes["m"], sizes["n"], sizes["k"]
    scalars = {"M": m, "N": n, "K": k, "batch": b, **_strides(cspec), **bmap}

    def arg(p):
        if p.kind == "tmap":
            return tmaps[p.role]
        if p.kind == "ptr":
            return ctypes.c_uint64(ptrs[roles.get(p.role, p.role)])
        return ctypes.c_int32(scalars[p.role]) if p.kind == "i32" else ctypes.c_int64(scalars[p.role])

    storage, argv = pack(ks.params, arg)
    grid = ks.grid(sizes, dev.sms)
    if grid[1] > 65535 or grid[2] > 65535:
        fail("UnaddressableShape", "gemm launch", f"grid {grid} exceeds the limit 65535 in y (M tiles) or z (batch)")
    return Launch(ks, load_function(ks, dev), grid, storage, argv, keep)


def _strides(spec: GemmSpec) -> dict[str, int]:
    """The kernels' stride arguments (elements; sm90 takes C's): batch strides (0: broadcast), the operands' row
    strides (0: packed, the kernel derives them) and C's row and batch strides."""
    (a_ld, a_bs), (b_ld, b_bs), (c_ld, c_bs) = (strides(spec, r) if not spec.b_pieces or r != "b" else (0, 0)
                                                 for r in "abc")
    return {"a_bstride": a_bs, "b_bstride": b_bs, "c_ld": c_ld, "c_bstride": c_bs,
            "a_ld": a_ld if spec.dims("a") != packed_dims(spec, "a") else 0,
            "b_ld": b_ld if spec.dims("b") != packed_dims(spec, "b") else 0}


def run(spec: GemmSpec, inputs: Mapping[str, Any], env: Mapping[str, int] | None = None, *,
             out: Any = None, plan: SchedulePlan | None = None, stream: int = 0):
    """Compute the GEMM on the GPU. numpy in -> numpy out; device tensors in -> device tensor out."""
    dev = device()
    cspec = concrete_spec(spec, env)
    return run_on_gpu(cspec, inputs, lambda x: check_inputs(cspec, x),
                      lambda tensors: prepare(cspec, tensors, None, plan, dev), out, stream)
