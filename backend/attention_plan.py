"""Schedule Plan of one flash-attention kernel (seed 000 §8.1, §15.3; issue 7).

A plan names the skeleton (``sm80``: cp.async ring + ldmatrix + mma.sync, one warp per 16 query rows;
``sm90``: TMA + mbarrier ring + wgmma, a producer warpgroup and ``warps[0]`` consumer warpgroups of 64
rows), the CTA tile ``(BLOCK_M, BLOCK_N, D)`` (query rows, keys per K/V tile, head dim), the ring
depth, and the softmax algorithm (``algo_choice.attention``):

  ``online_softmax``           one pass, running max and sum, O rescaled when the max grows (default);
  ``streaming_softmax_2pass``  pass 1 streams K for the row max and sum, pass 2 recomputes S and
                               accumulates the normalised P V (1.5x the QK^T FLOPs, no rescaling).

``to_json`` writes the §8.1 fields; sizes of the smem pieces and the register estimate the STOP
conditions of :mod:`.attention_search` use live here so the search and the code generator agree.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from .attention_spec import AttentionSpec

ALGOS = ("online_softmax", "streaming_softmax_2pass")
SM80_BIND = {"m.o": "block.x (per batch entry, longest causal tile first)", "batch": "block.x / tiles_m",
             "m.i.o": "warp (16 rows)", "n.i": "mma.m16n8k16 n-tiles"}  # the sm80 skeleton's loop binding


@dataclass(frozen=True)
class AttentionPlan:
    arch: str                        # target GPU: sm80 | sm90
    skeleton: str                    # sm80 | sm90
    tile: tuple[int, int, int]       # BLOCK_M, BLOCK_N, D
    dv: int                          # head dim of V and O
    stages: int                      # K/V smem ring depth
    warps: tuple[int, int]           # sm80: (BLOCK_M / 16 warps, 1); sm90: (consumer warpgroups, 1)
    algo: str = "online_softmax"
    causal: bool = False
    predicate_tail: tuple[str, ...] = ()
    est: tuple[tuple[str, float], ...] = field(default=(), compare=False)  # cost-model numbers
    store_p: ClassVar[bool] = False  # scores_plan.ScoresPlan: pass 2 stores P instead of O += P V

    @property
    def block_m(self) -> int:
        return self.tile[0]

    @property
    def block_n(self) -> int:
        return self.tile[1]

    @property
    def d(self) -> int:
        return self.tile[2]

    @property
    def two_pass(self) -> bool:
        return self.algo == "streaming_softmax_2pass"

    @property
    def threads(self) -> int:
        if self.skeleton == "sm90":
            return 128 * (self.warps[0] + 1)
        return 32 * self.warps[0]

    @property
    def q_bytes(self) -> int:
        return self.block_m * self.d * 2

    @property
    def stage_bytes(self) -> int:
        return self.block_n * (self.d + self.dv) * 2

    @property
    def smem_bytes(self) -> int:
        ring = self.q_bytes + self.stages * self.stage_bytes
        if self.skeleton == "sm90":
            return ring + (1 + 4 * self.stages) * 8 + 1024  # + mbarriers (full q, full/empty k/v) + alignment slack
        return ring

    @property
    def barrier_model(self) -> str:
        return "mbarrier" if self.skeleton == "sm90" else "cp_async_group"

    @property
    def regs_estimate(self) -> int:
        """Registers per (consumer) thread: S and O accumulators, P fragments, (sm80) Q fragments, addressing.
        Calibrated on ptxas -v of the generated kernels (tests/test_attention_kernel.py checks the bound)."""
        bn, d, dv = self.block_n, self.d, self.dv
        if self.skeleton == "sm90":
            return bn // 2 + dv // 2 + bn // 4 + 40
        return (9 * bn + (9 * (d + dv)) // 2) // 10 + 60

    def key(self) -> str:
        """Every specialisation parameter, for cache and kernel names."""
        bm, bn, d = self.tile
        return (f"{self.skeleton}_{bm}x{bn}x{d}v{self.dv}_s{self.stages}_w{self.warps[0]}"
                f"_{'2p' if self.two_pass else 'on'}{'_c' if self.causal else ''}")

    def to_json(self, spec: AttentionSpec | None = None) -> dict[str, Any]:
        bm, bn, d = self.tile
        q, k, v = (spec.q, spec.k, spec.v) if spec else ("Q", "K", "V")
        sm90 = self.skeleton == "sm90"
        if sm90:
            bind = {"m.o": "block.x (per batch entry, longest causal tile first)", "batch": "block.x / tiles_m",
                    "m.i.o": "warpgroup (consumer, 64 rows)", "m.i.i": "warp (16 rows)", "n.i": "wgmma.n",
                    "producer": "warpgroup 0 (one thread issues TMA)"}
        else:
            bind = dict(SM80_BIND)
        swz = "128B" if sm90 else "xor16B"
        return {
            "tile": [bm, bn, d],
            "dv": self.dv,
            "stages": self.stages,
            "bind": bind,
            "warp_tile": f"16x{bn}",
            "warps": self.warps[0] * (4 if sm90 else 1),
            "warpgroups": {"producer": 1, "consumer": self.warps[0]} if sm90 else None,
            "threads": self.threads,
            "cache": [
                {"tensor": q, "where": "smem", "at": "m.o", "pingpong": False, "swizzle": swz,
                 "then": "wgmma A descriptor" if sm90 else "registers (mma A fragments)"},
                {"tensor": k, "where": "smem", "at": "n.o", "pingpong": True, "depth": self.stages, "swizzle": swz},
                {"tensor": v, "where": "smem", "at": "n.o", "pingpong": True, "depth": self.stages, "swizzle": swz,
                 "major": "N (wgmma imm-trans-b)" if sm90 else "N (ldmatrix.trans)"},
            ],
            "vectorize": {"loads": {"width": 8, "via": "TMA box {64, rows}" if sm90 else "cp.async 16B"},
                          "store": {"axis": "dv.i", "width": 2}},
            "predicate_tail": list(self.predicate_tail),
            "causal": {"mask": "j <= i + (N - M)", "skip_blocks_above_diagonal": True,
                       "mask_only_diagonal_blocks": True} if self.causal else None,
            "arch": self.arch,
            "skeleton": self.skeleton,
            "layout_hints": {"Q_swizzle": True, "K_swizzle": True, "V_swizzle": True, "O_stride": "row"},
            "algo_choice": {"attention": self.algo,
                            "mma": "tma_wgmma_ss_rs_ws" if sm90 else "mma_sync_cp_async"},
            **self.json_tail({"from": "row_softmax", "to": "pv_matmul", "buffer": "reg", "what": "P as A fragments"}),
        }

    def json_tail(self, p_edge: dict[str, Any]) -> dict[str, Any]:
        """The last §8.1 fields (local edges around p_edge, where P goes; async, barriers, smem, registers,
        estimate), shared with scores_plan.ScoresPlan."""
        return {
            "local_edges": [{"from": "qk_matmul", "to": "row_softmax", "buffer": "reg"}, p_edge,
                            {"from": "load", "to": "mma", "buffer": "smem_ring", "depth": self.stages}],
            "async": {"enable": True, "prefetch_depth": self.stages - 1, "epilogue_overlap": False},
            "barrier_model": self.barrier_model,
            "smem_bytes": self.smem_bytes,
            "regs_estimate": self.regs_estimate,
            "estimate": dict(self.est),
        }
