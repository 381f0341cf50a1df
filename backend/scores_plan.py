"""Schedule Plan of one softmax_scores kernel (seed 000 §8.1, §15.3: "attention = streaming_softmax_2pass").

The kernel is the sm80 flash-attention skeleton in its STORE_P mode (polysat_attention.cuh): CTA = BLOCK_M
query rows, one warp per 16 rows, Q kept as mma.sync A fragments, K tiles of BLOCK_N keys streamed through
a cp.async ring twice (pass 1: row max and sum; pass 2: S recomputed, P = exp2(c t - c m) / l rounded to P's
type and stored from the accumulator fragments). No V: ``dv`` is 0 and the ring holds K only. So a
ScoresPlan is an AttentionPlan (same tile, smem and occupancy arithmetic, same STOP conditions) with its
own register estimate, key and §8.1 JSON.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from .attention_plan import SM80_BIND, AttentionPlan

ALGO = "streaming_softmax_2pass"


@dataclass(frozen=True)
class ScoresPlan(AttentionPlan):
    """Made with dv = 0 (no V)."""
    algo: str = ALGO
    store_p: ClassVar[bool] = True

    @property
    def regs_estimate(self) -> int:
        """Registers per thread: S accumulators, Q fragments, row statistics, addressing (ptxas -v of the
        generated kernels, checked in tests/test_scores_kernel.py)."""
        return self.block_n + (3 * self.d) // 4 + 25

    def key(self) -> str:
        return super().key() + "_p"

    def to_json(self, spec: Any = None) -> dict[str, Any]:
        bm, bn, d = self.tile
        q, k, p = (spec.q, spec.k, spec.p) if spec else ("Q", "K", "P")
        return {
            "tile": [bm, bn, d],
            "stages": self.stages,
            "bind": dict(SM80_BIND),
            "warp_tile": f"16x{bn}",
            "warps": self.warps[0],
            "threads": self.threads,
            "cache": [
                {"tensor": q, "where": "smem", "at": "m.o", "pingpong": False, "swizzle": "xor16B",
                 "then": "registers (mma A fragments)"},
                {"tensor": k, "where": "smem", "at": "n.o", "pingpong": True, "depth": self.stages, "swizzle": "xor16B",
                 "passes": 2},
            ],
            "vectorize": {"loads": {"width": 8, "via": "cp.async 16B"},
                          "store": {"tensor": p, "axis": "n.i", "width": 2, "when": "N even (else scalar)"}},
            "predicate_tail": list(self.predicate_tail),
            "causal": {"mask": "j <= i + (N - M)", "skip_blocks_above_diagonal": True,
                       "mask_only_diagonal_blocks": True, "blocks_above_diagonal": "stored as 0, no MMA"}
            if self.causal else None,
            "arch": self.arch,
            "skeleton": self.skeleton,
            "layout_hints": {"Q_swizzle": True, "K_swizzle": True, "P_stride": "row"},
            "algo_choice": {"attention": self.algo, "mma": "mma_sync_cp_async", "p": "stored (materialize)"},
            **self.json_tail({"from": "row_softmax", "to": "store_p", "buffer": "reg",
                              "what": "P from the S accumulators"}),
        }
