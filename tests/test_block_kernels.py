"""The bench transformer block (bench/models.py, pre-LN, d 768, 12 heads, S bound 256) extracts under
``--cost model`` into at most 7 kernels: LayerNorm | one Q/K/V GEMM (rules/siblings.egg) | flash
attention | projection + residual | LayerNorm | FFN1 + bias + GELU | FFN2 + residual.

The merged Q/K/V GEMM reads three weight pieces, each computed by the tiles over its part of N: Poly Core
must not count a piece as recomputed by the one tile that lies over it (polycore.driver_reach), or the
merged kernel is priced off its normal tiles and never chosen."""
from __future__ import annotations

from polysat.analyses.polycore import analyze
from polysat.bench.models import transformer
from polysat.pipeline import Compilation


def _block():
    return Compilation(transformer(1), cost="model", bind={"S": 256})


def test_a_transformer_block_is_at_most_seven_kernels_with_one_qkv_gemm():
    c = _block()
    kernels = c.priced
    assert len(kernels) <= 7, [p.kernel.name for p in kernels]
    merged = [p for p in kernels if p.region is not None and
              sum(t.role == "input" and len(t.shape) == 2 and t.shape[0] == 768 for t in p.region.tensors) == 3]
    assert len(merged) == 1, "no kernel reads the three Q/K/V weights: the sibling GEMMs were not merged"
    report = analyze(merged[0].region, "sm90")
    assert max(report.recompute.values()) <= 1.0 + 1e-9, report.recompute  # 0: a piece this tile does not lie over


def test_a_block_with_head_dim_32_binds_the_flash_kinds_under_both_costs():
    """Head dim 32 (d 64, 2 heads): the flash kinds take any head dim up to 256 (the sm80 skeleton on the dims
    padded to 16), so the attention region is one flash kernel (--cost model) or the softmax_scores kernel
    of the two-region form (--cost size), and every region compiles to CUDA for both targets."""
    from polysat.backend.kinds import bind
    from polysat.backend.stages import kernel_sources
    for cost, flash in (("size", "softmax_scores"), ("model", "attention")):
        c = Compilation(transformer(1, d_model=64, heads=2, d_ff=128), cost=cost)
        for arch in ("sm80", "sm90"):
            assert len(kernel_sources(c.regions, arch)) == len(c.regions)
        bound = [bind(r) for r in c.regions]
        assert flash in [k.name for k, _ in bound], (cost, [k.name for k, _ in bound])
        assert all(b.spec.d == 32 for k, b in bound if k.name == flash)
