"""The header of a ``--dump=cu`` file: how to build and launch the kernel without polysat's runtime —
the nvcc command line, the block, the dynamic shared memory and the grid (as the launcher computes it
from the runtime sizes, with the plan's tile filled in)."""
from __future__ import annotations

import inspect

from .nvcc import ARCH_FLAGS


def _grid_text(ks) -> str:
    """The launcher's grid rule (the grid method's docstring) with the plan's tile."""
    doc = inspect.getdoc(type(ks).grid) or "computed by the launcher from the runtime sizes"
    tile = getattr(ks.plan, "tile", None)
    return doc.splitlines()[0].rstrip(".") + (f"; tile (bm, bn, bk) = {tuple(tile)}" if tile else "")


def cu_header(ks) -> str:
    flags = " ".join(["-cubin", "-std=c++17", *ARCH_FLAGS[ks.arch]])
    big = ks.smem_bytes > 48 * 1024
    return (f"// ---- polysat --dump=cu: {ks.name} ----\n"
            f"// build:  nvcc {flags} {ks.name}.cu -o {ks.name}.cubin\n"
            f"// block:  ({ks.threads}, 1, 1) threads\n"
            f"// shared: {ks.smem_bytes} bytes of dynamic shared memory"
            + (" (over 48 KiB: set CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES first)" if big else "") + "\n"
            f"// grid:   {_grid_text(ks)}\n"
            f"// params: {', '.join(f'{p.role} ({p.kind})' for p in ks.params)}\n")

