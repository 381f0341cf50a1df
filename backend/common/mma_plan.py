"""Schedule Plan of the MMA skeleton: how one GEMM (or the implicit GEMM of a conv) is tiled, mapped and
pipelined.

A plan names the skeleton (``skeleton``: "sm80" = cp.async + ldmatrix + mma.sync, "sm90" = TMA +
mbarrier + wgmma) and the GPU it targets (``arch``); the sm80 skeleton also runs on sm90 GPUs (the
tail branch when TMA's 16-byte stride rule does not hold). ``to_json`` writes the plan's fields.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any



@dataclass(frozen=True)
class SchedulePlan:
    arch: str                       # target GPU: sm80 | sm90
    skeleton: str                   # sm80 | sm90
    tile: tuple[int, int, int]      # BM, BN, BK
    stages: int                     # smem ring depth
    warps: tuple[int, int]          # sm80: warp grid (WM, WN); sm90: (consumer warpgroups, 1)
    vec_a: int                      # elements per global load of A (8 = 16 bytes)
    vec_b: int
    epilogue: tuple[str, ...]
    predicate_tail: tuple[str, ...]
    a_kmajor: bool
    b_kmajor: bool
    persistent: bool = False
    async_enable: bool = True
    epilogue_overlap: bool = True
    assumes: tuple[str, ...] = ()   # runtime guards a symbolic shape must pass (e.g. "K % 8 == 0")
    elem_bytes: int = 2             # operand element size: 2 (fp16 / bf16), 4 (fp32: 3xTF32 on the sm80 skeleton)
    est: tuple[tuple[str, float], ...] = field(default=(), compare=False)  # cost-model numbers

    @property
    def threads(self) -> int:
        if self.skeleton == "sm90":
            return 128 * (self.warps[0] + 1)
        return 32 * self.warps[0] * self.warps[1]

    @property
    def warp_tile(self) -> tuple[int, int]:
        bm, bn, _ = self.tile
        if self.skeleton == "sm90":
            return (64, bn)  # one wgmma m64nBN per consumer warpgroup
        return (bm // self.warps[0], bn // self.warps[1])

    @property
    def smem_bytes(self) -> int:
        bm, bn, bk = self.tile
        ring = self.stages * (bm + bn) * bk * self.elem_bytes
        if self.skeleton == "sm90":
            return ring + 2 * self.stages * 8 + 1024  # + mbarriers + alignment slack
        return ring

    @property
    def barrier_model(self) -> str:
        return "mbarrier" if self.skeleton == "sm90" else "cp_async_group"

    def key(self) -> str:
        """Every specialisation parameter, for cache and kernel names."""
        bm, bn, bk = self.tile
        return (f"{self.skeleton}_{bm}x{bn}x{bk}_s{self.stages}_w{self.warps[0]}x{self.warps[1]}"
                f"_v{self.vec_a}{self.vec_b}_{'k' if self.a_kmajor else 'm'}{'k' if self.b_kmajor else 'n'}"
                f"{'_p' if self.persistent else ''}{'_tf32x3' if self.elem_bytes == 4 else ''}")

    def to_json(self, spec: Any = None) -> dict[str, Any]:
        bm, bn, bk = self.tile
        wm, wn = self.warp_tile
        a_name = spec.a if spec else "A"
        b_name = spec.b if spec else "B"
        if self.skeleton == "sm90":
            bind = {"tile": "block.x (persistent, m fastest)" if self.persistent else "block.x",
                    "m.i.o": "warpgroup (consumer)", "n.i": "wgmma.n", "producer": "warpgroup 0"}
        else:
            bind = {"m.o": "block.y", "n.o": "block.x", "batch": "block.z", "m.i.o": "warp.y", "n.i.o": "warp.x"}
        vec_axis_a = "k.i.i" if self.a_kmajor else "m.i.i"
        vec_axis_b = "k.i.i" if self.b_kmajor else "n.i.i"
        return {
            "tile": [bm, bn, bk],
            "stages": self.stages,
            "bind": bind,
            "warp_tile": f"{wm}x{wn}",
            "threads": self.threads,
            "cache": [
                {"tensor": a_name, "where": "smem", "at": "k.i", "pingpong": True, "swizzle": "xor16B" if self.skeleton == "sm80" else "128B"},
                {"tensor": b_name, "where": "smem", "at": "k.i", "pingpong": True, "swizzle": "xor16B" if self.skeleton == "sm80" else "128B"},
            ],
            "vectorize": {"loads": [{"tensor": a_name, "axis": vec_axis_a, "width": self.vec_a},
                                    {"tensor": b_name, "axis": vec_axis_b, "width": self.vec_b}],
                          "store": {"axis": "n.i.i", "width": 2}},
            "predicate_tail": list(self.predicate_tail),
            "epilogue": list(self.epilogue),
            "arch": self.arch,
            "skeleton": self.skeleton,
            "layout_hints": {"A_swizzle": True, "B_swizzle": True, "C_stride": "row",
                             "A_major": "K" if self.a_kmajor else "M", "B_major": "K" if self.b_kmajor else "N"},
            "algo_choice": {"matmul": "tma_wgmma_ws" if self.skeleton == "sm90" else
                            "mma_sync_multistage_3xtf32" if self.elem_bytes == 4 else "mma_sync_multistage"},
            "local_edges": [{"from": "sum_k", "to": "epilogue", "buffer": "reg"},
                            {"from": "load", "to": "mma", "buffer": "smem_ring", "depth": self.stages}],
            "async": {"enable": self.async_enable, "prefetch_depth": self.stages - 1,
                      "epilogue_overlap": self.epilogue_overlap},
            "barrier_model": self.barrier_model,
            "smem_bytes": self.smem_bytes,
            "assumes": list(self.assumes),
            "estimate": dict(self.est),
        }
