"""Shared-memory layouts of the sm90 skeleton: TMA boxes and wgmma descriptors, decided here once.

The template receives these numbers (the .cuh never hard-codes them) and the runtime encodes its
tensor maps from the same boxes, so the test suite can check them against the hardware's rules
without a GPU (tests/test_backend_layouts.py models PTX ISA 9.7.15.5.1.2: TMA's 128-byte swizzle
writes and wgmma's canonical K-/MN-major layouts reads).

Every tile row is 64 elements of 2 bytes = one 128-byte swizzle row; BK = 64.
  K-major operand ([MN rows][64 K]): one box {64 (K), rows (MN)}; row r at r*128 bytes.
     descriptor: LBO unused (16), SBO = 1024 (next 8 MN rows); +16 K = +32 bytes.
  MN-major operand ([64 K rows][MN]): rows/64 boxes {64 (MN), 64 (K)}, 8192 bytes apart.
     descriptor: LBO = 8192 (next 64 MN), SBO = 1024 (next 8 K rows); +16 K = +2048 bytes.
"""
from __future__ import annotations

from dataclasses import dataclass

BK = 64
ROW_BYTES = 128          # 64 elements x 2 bytes: the 128-byte swizzle span
ATOM_BYTES = 1024        # 8 rows x 128 bytes: the swizzle pattern repeats here (tile bases align to it)


@dataclass(frozen=True)
class Sm90Operand:
    kmajor: bool
    rows: int            # extent of the operand's M (or N) side in the CTA tile
    box: tuple[int, int]  # TMA box, innermost first
    boxes: int           # boxes per stage
    box_stride: int      # bytes between boxes in smem
    lbo: int             # descriptor leading-dimension byte offset
    sbo: int             # descriptor stride-dimension byte offset
    kstep: int           # bytes to advance the descriptor start by 16 K
    mn64_stride: int     # bytes from MN rows [0, 64) to [64, 128) (a consumer warpgroup's slice of A)

    @property
    def bytes(self) -> int:
        return self.rows * BK * 2


def sm90_operand(kmajor: bool, rows: int) -> Sm90Operand:
    if rows % 64:
        raise ValueError(f"sm90 operand rows must be a multiple of 64, got {rows}")
    if kmajor:
        return Sm90Operand(True, rows, (BK, rows), 1, rows * ROW_BYTES, 16, ATOM_BYTES, 16 * 2, 64 * ROW_BYTES)
    box_bytes = BK * ROW_BYTES
    return Sm90Operand(False, rows, (64, BK), rows // 64, box_bytes, box_bytes, ATOM_BYTES, 16 * ROW_BYTES, box_bytes)


def swizzle128(addr: int) -> int:
    """The 128-byte swizzle (cute Swizzle<3,4,3>): 16-byte chunk bits [4,7) ^= row bits [7,10)."""
    return addr ^ (((addr >> 7) & 7) << 4)
