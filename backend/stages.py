"""The backend stages of the pipeline over extracted RB-SSA regions (docs/DESIGN.md §Backend).

Each region (one kernel) is bound to the kernel kind that computes it (:mod:`.kinds`: GEMM, conv,
attention ...) and its spec, then
  ``plan_json``  -> ``--dump=plan``: one Schedule Plan per region, with its ranked / pruned candidates;
  ``gpu_json``   -> ``--dump=gpu``: the GPU IR (statements with async tokens) of each region's best plan;
  ``write_cu``   -> ``--dump=cu``: one standalone ``.cu`` file per region;
Identical kernels are made once: each region is bound in its canonical names (:func:`.kinds.bind_shared`:
tensors T0, T1 ..., lets L0 ..., the region R0), so regions that differ only in names share one spec, one plan
and one CUDA text; the dumps tell each spec in its region's names, and ``--dump=cu`` writes each distinct
kernel once with the launches that use it (which region, binding which of the user's tensors).
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
from .common.cu_header import cu_header
from .kinds import KernelKind, Shared, bind_shared


def _env_key(bind: Mapping[str, int] | None) -> tuple:
    return tuple(sorted((bind or {}).items()))


@lru_cache(maxsize=256)
def _search(kind: KernelKind, spec: Any, arch: str, env_key: tuple) -> Any:
    return kind.search(spec, arch, dict(env_key) or None)


@lru_cache(maxsize=256)
def _kernel(kind: KernelKind, spec: Any, arch: str, env_key: tuple) -> Any:
    return kind.render(spec, _search(kind, spec, arch, env_key).best)


def _bound(regions) -> list[tuple[Region, KernelKind, Shared]]:
    """Every region's kernel kind and binding of its canonical form (E1504 for a region no template computes)."""
    out = []
    for r in regions:
        deadline.check(f"region {r.name}")
        kind, binding = bind_shared(r)
        out.append((r, kind, binding))
    return out


def plan_json(regions, arch: str = "sm90", bind: Mapping[str, int] | None = None) -> dict:
    """`--dump=plan`: {"arch", "plans": [{"region", "kind", "spec", <plan>, "ranked", "pruned"...}, ...]}."""
    plans = []
    for r, kind, b in _bound(regions):
        deadline.check(f"region {r.name}")
        res = _search(kind, b.spec, arch, _env_key(bind))
        plans.append({"region": r.name, "kind": kind.name,
                      **b.names.told_json({"spec": b.spec.to_json(), **res.to_json(b.spec)})})
    return {"arch": arch, "plans": plans}


def gpu_json(regions, arch: str = "sm90", bind: Mapping[str, int] | None = None) -> dict:
    """`--dump=gpu`: {"arch", "kernels": [{"region", "kind", "spec", <GPU IR of the best plan>}, ...]}."""
    kernels = []
    for r, kind, b in _bound(regions):
        deadline.check(f"region {r.name}")
        plan = _search(kind, b.spec, arch, _env_key(bind)).best
        kernels.append({"region": r.name, "kind": kind.name,
                        **b.names.told_json({"spec": b.spec.to_json(), **kind.gpu_ir(b.spec, plan).to_json()})})
    return {"arch": arch, "kernels": kernels}


def kernel_sources(regions, arch: str = "sm90", bind: Mapping[str, int] | None = None) -> list:
    """The CUDA text (KernelSource) of each region's best plan (what `--dump=cu` writes and the compile checks
    build); regions with one canonical form get the same KernelSource."""
    return [ks for _, ks, _ in launches(regions, arch, bind)]


def launches(regions, arch: str = "sm90", bind: Mapping[str, int] | None = None) -> list[tuple[Region, Any, Shared]]:
    """(region, its KernelSource, its binding) per region: the kernel each region launches and on which tensors."""
    out = []
    for r, kind, b in _bound(regions):
        deadline.check(f"region {r.name}")
        out.append((r, _kernel(kind, b.spec, arch, _env_key(bind)), b))
    return out


def write_kernel(ks: Any, out_dir: str, header: str = "") -> str:
    """One kernel's standalone .cu file under out_dir (named after the kernel), after ``header``; returns its path."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{ks.name}.cu")
    with open(path, "w", encoding="utf-8") as f:
        f.write(header + ks.source)
    return path


def write_cu(regions, arch: str = "sm90", out_dir: str = ".", bind: Mapping[str, int] | None = None) -> list[str]:
    """One standalone .cu per distinct kernel under out_dir; returns the paths."""
    return cu_json(regions, arch, out_dir, bind, headers=False)["files"]


def cu_json(regions, arch: str = "sm90", out_dir: str = ".", bind: Mapping[str, int] | None = None,
            headers: bool = True) -> dict:
    """`--dump=cu`: each distinct kernel's standalone .cu under out_dir, once (with ``headers``, headed by how
    to build and launch it and the launches that use it, in the user's names: comments outside the kernel's
    text); {"files": the paths, "launches": [{"region", "kernel", "file", "tensors": {kernel parameter
    tensor: the region's tensor}}, ...] in region order}."""
    os.makedirs(out_dir, exist_ok=True)
    made = launches(regions, arch, bind)
    by_kernel: dict = {}
    for r, ks, b in made:
        by_kernel.setdefault(ks.name, (ks, []))[1].append((r, b))
    files = {}
    for name, (ks, uses) in by_kernel.items():
        deadline.check(f"kernel {name}")
        files[name] = write_kernel(ks, out_dir, _uses_header(ks, uses) if headers else "")
    return {"files": list(files.values()),
            "launches": [{"region": r.name, "kernel": ks.name, "file": files[ks.name], "tensors": dict(b.names.tensors)}
                         for r, ks, b in made]}


def _uses_header(ks: Any, uses: list) -> str:
    lines = [f"// launched by {len(uses)} region(s):"]
    lines += [f"//   {r.name}: " + ", ".join(f"{c} = {u}" for c, u in b.names.tensors) for r, b in uses]
    return cu_header(ks) + "\n".join(lines) + "\n"
