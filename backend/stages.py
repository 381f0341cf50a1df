"""The backend stages of the pipeline over extracted RB-SSA regions (docs/DESIGN.md §Backend).

Each region (one kernel) is bound to the kernel kind that computes it (:mod:`.kinds`: GEMM, conv,
attention ...) and its spec, then
  ``plan_json``  -> ``--dump=plan``: one Schedule Plan per region, with its ranked / pruned candidates;
  ``gpu_json``   -> ``--dump=gpu``: the GPU IR (statements with async tokens) of each region's best plan;
  ``write_cu``   -> ``--dump=cu``: one standalone ``.cu`` file per region;
``bind`` (symbol -> int, the user's ``--bind``) fixes sizes the regions leave symbolic: plans are searched
for those sizes (unbound symbols rank at plan_search.HINT_SIZE; kernels stay generic in their symbols).
A region without a template is E1504 NoKernelTemplate for the dumps; when running, it runs on the CPU
(playback) inside the same arena with a message naming the region and the E1504 reason, and the model still runs. No visible GPU
is E1502 UnknownTarget.
"""
from __future__ import annotations

import os
from functools import lru_cache
from typing import Any, Mapping

from ..ir import deadline
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
        deadline.check(f"region {r.name}")
        kind, binding = bind(r)
        out.append((r, kind, binding))
    return out


def plan_json(regions, arch: str = "sm90", bind: Mapping[str, int] | None = None) -> dict:
    """`--dump=plan`: {"arch", "plans": [{"region", "kind", "spec", <plan>, "ranked", "pruned"...}, ...]}."""
    plans = []
    for r, kind, b in _bound(regions):
        deadline.check(f"region {r.name}")
        res = _search(kind, b.spec, arch, _env_key(bind))
        plans.append({"region": r.name, "kind": kind.name, "spec": b.spec.to_json(), **res.to_json(b.spec)})
    return {"arch": arch, "plans": plans}


def gpu_json(regions, arch: str = "sm90", bind: Mapping[str, int] | None = None) -> dict:
    """`--dump=gpu`: {"arch", "kernels": [{"region", "kind", "spec", <GPU IR of the best plan>}, ...]}."""
    kernels = []
    for r, kind, b in _bound(regions):
        deadline.check(f"region {r.name}")
        plan = _search(kind, b.spec, arch, _env_key(bind)).best
        kernels.append({"region": r.name, "kind": kind.name, "spec": b.spec.to_json(),
                        **kind.gpu_ir(b.spec, plan).to_json()})
    return {"arch": arch, "kernels": kernels}


def kernel_sources(regions, arch: str = "sm90", bind: Mapping[str, int] | None = None) -> list:
    """The CUDA text (KernelSource) of each region's best plan (what `--dump=cu` writes and the compile checks build)."""
    out = []
    for r, kind, b in _bound(regions):
        deadline.check(f"region {r.name}")
        out.append(kind.render(b.spec, _search(kind, b.spec, arch, _env_key(bind)).best))
    return out


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
