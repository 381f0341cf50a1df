"""The sm90 tile layouts checked against the hardware rules, without a GPU.

Two independent models from the PTX ISA (9.7.15.5.1.2 and the tensor-map swizzle modes):
  * TMA with CU_TENSOR_MAP_SWIZZLE_128B writes box element (inner i, outer o) to byte
    swizzle128(base + o * 128 + 2 * i): rows of 128 bytes whose 16-byte chunks are XORed with row % 8;
  * wgmma reads operand element (mn, k) of an m64nNk16 step from its descriptor (start, LBO, SBO)
    through the canonical layout, then the same swizzle on the byte address:
      K-major  ((8,m),(T,2k)) : ((8T,SBO),(1,T))       offset = (mn%8)*64 + (mn//8)*SBO/2 + k
      MN-major ((T,8,m),(8,k)) : ((1,T,LBO),(8T,SBO))  offset = mn%64 + (mn//64)*LBO/2 + (k%8)*64 + (k//8)*SBO/2
The test loads a tile the way the kernel does (boxes at box_stride, coordinates as in polysat_gemm.cuh)
and reads every wgmma step the way the kernel builds its descriptors; each read must return the
element the GEMM needs.
"""
import pytest

from polysat.backend.common.layouts import ATOM_BYTES, BK, sm90_operand, swizzle128


def tma_fill(lay, value):
    """smem bytes -> element id, after the producer's TMA loads of one stage (tile base 0)."""
    smem = {}
    for j in range(lay.boxes):
        base = j * lay.box_stride
        inner, outer = lay.box
        for o in range(outer):
            for i in range(inner):
                mn, k = (o, i) if lay.kmajor else (64 * j + i, o)
                smem[swizzle128(base + o * 128 + 2 * i)] = value(mn, k)
    return smem


def wgmma_read(smem, start, lbo, sbo, kmajor, mn, k):
    assert start % 16 == 0
    if kmajor:
        off = (mn % 8) * 64 + (mn // 8) * (sbo // 2) + k
    else:
        off = mn % 64 + (mn // 64) * (lbo // 2) + (k % 8) * 64 + (k // 8) * (sbo // 2)
    return smem[swizzle128(start + 2 * off)]


@pytest.mark.parametrize("kmajor", [True, False])
@pytest.mark.parametrize("rows", [64, 128, 256])
def test_wgmma_reads_what_tma_wrote(kmajor, rows):
    lay = sm90_operand(kmajor, rows)
    assert lay.bytes % ATOM_BYTES == 0 and lay.box[0] * 2 <= 128 and max(lay.box) <= 256  # TMA box limits
    assert lay.boxes * lay.box[0] * lay.box[1] * 2 == lay.bytes  # expect_tx counts exactly the tile
    smem = tma_fill(lay, lambda mn, k: (mn, k))
    assert len(smem) == rows * BK  # no two elements land on one address
    # B operand: the whole tile (N = rows) per k16 step; A operand: 64-row slices per consumer warpgroup
    slices = [(0, rows)] + [(c * 64, 64) for c in range(rows // 64)]
    for first, extent in slices:
        start0 = (first // 64) * lay.mn64_stride
        for kk in range(BK // 16):
            start = start0 + kk * lay.kstep
            for mn in range(extent):
                for k in range(16):
                    got = wgmma_read(smem, start, lay.lbo, lay.sbo, kmajor, mn, k)
                    assert got == (first + mn, kk * 16 + k), (kmajor, rows, first, kk, mn, k, got)


def test_a_wrong_descriptor_is_caught():
    lay = sm90_operand(False, 128)
    smem = tma_fill(lay, lambda mn, k: (mn, k))
    with pytest.raises(AssertionError):  # swapping LBO and SBO (a classic mistake) reads the wrong elements
        for mn in range(128):
            for k in range(16):
                assert wgmma_read(smem, 0, lay.sbo, lay.lbo, False, mn, k) == (mn, k)
