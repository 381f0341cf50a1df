"""The backend stages of the pipeline over extracted RB-SSA regions (docs/DESIGN.md §Backend).

Each region (one kernel) is bound to the kernel kind that computes it (:mod:`.kinds`: GEMM, conv,
attention ...) and its spec, then
  ``plan_json``  -> ``--dump=plan``: one Schedule Plan per region, with its ranked / pruned candidates;
  ``gpu_json``   -> ``--dump=gpu``: the GPU IR (statements with async tokens) of each region's best plan;
  ``write_cu``   -> ``--dump=cu``: one standalone ``.cu`` file per region;
  ``run_cuda``   -> ``--target cuda``: the regions run in order on the GPU; tensors passed between regions
                    stay on the device, only program outputs come back.
``bind`` (symbol -> int, the user's ``--bind``) fixes sizes the regions leave symbolic: plans are searched
for those sizes (unbound symbols rank at plan_search.HINT_SIZE; kernels stay generic in their symbols).
A region without a template is E1504 NoKernelTemplate for the dumps; when running, it runs on the CPU
(playback) with a message naming the region and the E1504 reason, and the model still runs. No visible GPU
is E1502 UnknownTarget.
"""
from __future__ import annotations

import os
import sys
from functools import lru_cache
from typing import Any, Callable, Mapping

import numpy as np

from ..ir.diagnostics import PolysatError, fail
from ..ir.dtypes import round_to
from ..ir.region import Region
from .kinds import KernelKind, bind


def _env_key(bind: Mapping[str, int] | None) -> tuple:
    return tuple(sorted((bind or {}).items()))


@lru_cache(maxsize=256)
def _search(kind: KernelKind, spec: Any, arch: str, env_key: tuple) -> Any:
    return kind.search(spec, arch, dict(env_key) or None)


def _bound(regions) -> list[tuple[Region, KernelKind, Any]]:
    """Every region's kernel kind and binding (E1504 for a region no template computes)."""
    out = []
    for r in regions:
        kind, binding = bind(r)
        out.append((r, kind, binding))
    return out


def plan_json(regions, arch: str = "sm90", bind: Mapping[str, int] | None = None) -> dict:
    """`--dump=plan`: {"arch", "plans": [{"region", "kind", "spec", <plan>, "ranked", "pruned"...}, ...]}."""
    plans = []
    for r, kind, b in _bound(regions):
        res = _search(kind, b.spec, arch, _env_key(bind))
        plans.append({"region": r.name, "kind": kind.name, "spec": b.spec.to_json(), **res.to_json(b.spec)})
    return {"arch": arch, "plans": plans}


def gpu_json(regions, arch: str = "sm90", bind: Mapping[str, int] | None = None) -> dict:
    """`--dump=gpu`: {"arch", "kernels": [{"region", "kind", "spec", <GPU IR of the best plan>}, ...]}."""
    kernels = []
    for r, kind, b in _bound(regions):
        plan = _search(kind, b.spec, arch, _env_key(bind)).best
        kernels.append({"region": r.name, "kind": kind.name, "spec": b.spec.to_json(),
                        **kind.gpu_ir(b.spec, plan).to_json()})
    return {"arch": arch, "kernels": kernels}


def kernel_sources(regions, arch: str = "sm90", bind: Mapping[str, int] | None = None) -> list:
    """The CUDA text (KernelSource) of each region's best plan (what `--dump=cu` writes and the compile checks build)."""
    return [kind.render(b.spec, _search(kind, b.spec, arch, _env_key(bind)).best) for _, kind, b in _bound(regions)]


def write_kernel(ks: Any, out_dir: str) -> str:
    """One kernel's standalone .cu file under out_dir (named after the kernel); returns its path."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{ks.name}.cu")
    with open(path, "w", encoding="utf-8") as f:
        f.write(ks.source)
    return path


def write_cu(regions, arch: str = "sm90", out_dir: str = ".", bind: Mapping[str, int] | None = None) -> list[str]:
    """`--dump=cu`: one standalone .cu per region under out_dir; returns the paths."""
    os.makedirs(out_dir, exist_ok=True)
    return [write_kernel(ks, out_dir) for ks in kernel_sources(regions, arch, bind)]


# ---- running ---------------------------------------------------------------------------------------

class _DeviceView:
    """Another shape over the same packed device buffer (size-1 dims added or dropped between regions)."""

    def __init__(self, base: Any, shape: tuple):
        self.base, self.shape = base, tuple(shape)

    @property
    def __cuda_array_interface__(self) -> dict:
        return {**self.base.__cuda_array_interface__, "shape": self.shape, "strides": None}


def _bound_or_cpu(regions) -> list[tuple[Region, "KernelKind | None", Any]]:
    """_bound, except that a region no kind takes gets kind None and its E1504 diagnostic (it runs on the CPU)."""
    out = []
    for r in regions:
        try:
            out.append((r, *bind(r)))
        except PolysatError as e:
            if e.diagnostics[0].kind != "NoKernelTemplate":
                raise
            out.append((r, None, e.diagnostics[0]))
    return out


def _on_cpu(r: Region, why, on_device: dict, env: Mapping[str, int], upload: Callable, download: Callable) -> dict:
    """Region r played back on the host (its inputs downloaded, its outputs uploaded); says so on stderr."""
    from ..ir.playback import _RegionRun
    print(f"polysat: region {r.name} has no CUDA kernel ({why.code} {why.kind}: {why.why}); it runs on the CPU "
          "(playback)", file=sys.stderr)
    host = {b.name: np.asarray(download(on_device[b.name])).reshape(
        tuple(int(d) if isinstance(d, int) else int(d.evaluate(env)) for d in b.memref.shape)) for b in r.inputs}
    with np.errstate(all="ignore"):
        made = _RegionRun(r, host, dict(env)).run()
    return {name: upload(np.ascontiguousarray(a)) for name, a in made.items()}


def run_regions(regions, inputs: Mapping[str, np.ndarray], *, upload: Callable, alloc: Callable,
                reshape: Callable, launch: Callable, download: Callable) -> dict[str, np.ndarray]:
    """The regions in order on some device (a region no kind takes: on the CPU): upload(host array) -> tensor,
    alloc(shape, np dtype) -> tensor, reshape(tensor, shape) -> view, launch(kind, spec, tensors, env, out) runs
    one kernel, download(tensor) -> host array.
    Tensors made by one region are read by the next without leaving the device."""
    from ..ir.playback import bind_region_symbols
    regions = list(regions)
    bound = _bound_or_cpu(regions)  # every region's kernel is known before anything runs
    env = bind_region_symbols(regions, inputs)
    on_device: dict[str, Any] = {}
    outputs: dict[str, np.ndarray] = {}
    for r, kind, binding in bound:
        for b in r.inputs:
            if b.name not in on_device:
                if b.name not in inputs:
                    fail("MissingInput", b.name, f"region {r.name} reads {b.name!r}, which is neither given nor "
                         "written by an earlier region")
                host = np.ascontiguousarray(round_to(np.asarray(inputs[b.name]), b.memref.dtype)).astype(b.memref.dtype.np)
                on_device[b.name] = upload(host)
        if kind is None:
            on_device.update(_on_cpu(r, binding, on_device, env, upload, download))
            for b in r.outputs:
                if b.program_output:
                    outputs[b.name] = np.asarray(download(on_device[b.name]))
            continue
        spec = binding.spec
        several = getattr(spec, "outputs", None)  # a kind writing several outputs (SIMT) names them as the region does
        made = {n: alloc(spec.shapes(env)[n], spec.dtypes()[n].np) for n in (several or (spec.c,))}
        tensors = {**binding.arrays(on_device, env, reshape), **{n: t for n, t in made.items() if n != spec.c}}
        launch(kind, spec, tensors, env, made[spec.c])
        for buf in r.outputs:
            on_device[buf.name] = made[buf.name] if several else made[spec.c]
            if buf.program_output:
                shape = tuple(int(d) if isinstance(d, int) else int(d.evaluate(env)) for d in buf.memref.shape)
                outputs[buf.name] = download(on_device[buf.name]).reshape(shape)
    return outputs


def run_cuda(regions, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`--target cuda`: every region as a CUDA kernel of its kind's template, run in order on the GPU (a region
    no kind takes runs on the CPU, saying so)."""
    from .common.gpu import cuda_available
    regions = list(regions)
    _bound_or_cpu(regions)  # a binding error other than E1504 before anything else: it does not depend on the machine
    if not cuda_available():
        fail("UnknownTarget", "--target cuda", "no CUDA GPU is visible (cuda-python, an NVIDIA driver and a device "
             "are needed)", "Run on a machine with an NVIDIA GPU (sm80 or newer), or use --target playback.")
    from .common.device_tensors import DeviceArray

    def launch(kind, spec, tensors, env, out):
        kind.launch(spec, tensors, env, out)

    return run_regions(regions, inputs, upload=DeviceArray.from_numpy, alloc=DeviceArray,
                       reshape=_DeviceView, launch=launch, download=lambda t: t.numpy())
