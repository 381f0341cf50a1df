"""The memory arena: one offset per tensor from buffer lifetimes (docs/DESIGN.md §Runtime).

A :class:`Block` is a tensor of ``size`` bytes live over the kernel steps ``[start, end]`` (inclusive: written
at ``start``, last read at ``end``). Two blocks whose lifetimes intersect must not share a byte; blocks that
never live at the same time may. :func:`plan_arena` gives every block an offset aligned to :data:`ALIGN`
bytes so that the arena's peak is small: it places blocks by two greedy orders — largest first (each at the
lowest offset where it fits between the blocks already placed that live with it: "greedy by size") and
longest-lived first — and keeps the lower peak. Its peak is never above greedy-by-size first-fit, never
below the most bytes live at one step (:func:`live_lower_bound`). :func:`conflicts` is the independent check
that a plan is valid.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

ALIGN = 256  # bytes: every offset and every block size is rounded to this (cudaMalloc's own alignment)


def align(n: int, to: int = ALIGN) -> int:
    return -(-int(n) // to) * to


@dataclass(frozen=True)
class Block:
    name: str
    size: int   # bytes (before alignment)
    start: int  # first step it is live (written; -1: before the first kernel, e.g. an uploaded input)
    end: int    # last step it is live (read; the number of steps for a tensor read back after the last kernel)

    def lives_with(self, other: "Block") -> bool:
        return self.start <= other.end and other.start <= self.end


@dataclass(frozen=True)
class ArenaPlan:
    offsets: dict   # block name -> byte offset
    blocks: tuple   # Block, in the order given
    peak: int       # arena bytes (aligned)
    strategy: str   # which greedy order won

    @property
    def total(self) -> int:
        """The bytes one buffer per tensor would take (aligned): what the arena saves against."""
        return sum(align(max(b.size, 1)) for b in self.blocks)

    def to_json(self) -> dict:
        return {"align": ALIGN, "peak_bytes": self.peak, "sum_of_sizes": self.total, "strategy": self.strategy,
                "tensors": [{"name": b.name, "offset": self.offsets[b.name], "bytes": b.size,
                             "live": [b.start, b.end]} for b in self.blocks]}

    @staticmethod
    def from_json(doc: dict) -> "ArenaPlan":
        blocks = tuple(Block(t["name"], int(t["bytes"]), int(t["live"][0]), int(t["live"][1])) for t in doc["tensors"])
        return ArenaPlan({t["name"]: int(t["offset"]) for t in doc["tensors"]}, blocks, int(doc["peak_bytes"]),
                         str(doc["strategy"]))


def _place(order: Sequence[Block]) -> tuple[dict, int]:
    """Each block in turn at the lowest aligned offset where it overlaps no placed block it lives with."""
    placed: list[tuple[int, int, Block]] = []  # (offset, aligned size, block)
    offsets: dict = {}
    peak = 0
    for b in order:
        size = align(max(b.size, 1))
        busy = sorted((o, o + s) for o, s, other in placed if other.lives_with(b))
        at = 0
        for lo, hi in busy:
            if at + size <= lo:
                break
            at = max(at, hi)
        placed.append((at, size, b))
        offsets[b.name] = at
        peak = max(peak, at + size)
    return offsets, peak


def greedy_by_size(blocks: Iterable[Block]) -> tuple[dict, int]:
    """Largest first (ties: earliest start, then name), each at its lowest fitting offset."""
    return _place(sorted(blocks, key=lambda b: (-align(max(b.size, 1)), b.start, b.name)))


def plan_arena(blocks: Iterable[Block]) -> ArenaPlan:
    blocks = tuple(blocks)
    names = [b.name for b in blocks]
    if len(set(names)) != len(names):
        raise ValueError(f"arena blocks must have distinct names: {names}")
    tries = {"greedy_by_size": greedy_by_size(blocks),
             "greedy_by_lifetime": _place(sorted(blocks, key=lambda b: (-(b.end - b.start), -b.size, b.name)))}
    strategy = min(tries, key=lambda k: (tries[k][1], k != "greedy_by_size"))
    offsets, peak = tries[strategy]
    return ArenaPlan(offsets, blocks, peak, strategy)


def conflicts(plan: ArenaPlan) -> list[tuple[str, str]]:
    """Pairs of blocks that live at the same time and share a byte, or lie outside the arena or off alignment."""
    out = []
    bs = plan.blocks
    for i, a in enumerate(bs):
        oa = plan.offsets[a.name]
        if oa % ALIGN or oa + a.size > plan.peak or oa < 0:
            out.append((a.name, a.name))
        for b in bs[i + 1:]:
            ob = plan.offsets[b.name]
            if a.lives_with(b) and oa < ob + max(b.size, 1) and ob < oa + max(a.size, 1):
                out.append((a.name, b.name))
    return out


def live_lower_bound(blocks: Iterable[Block]) -> int:
    """The most aligned bytes live at one step: no plan's peak is below it."""
    blocks = list(blocks)
    steps = {b.start for b in blocks}
    return max((sum(align(max(b.size, 1)) for b in blocks if b.start <= t <= b.end) for t in steps), default=0)
