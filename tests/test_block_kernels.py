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


def test_a_block_whose_head_dim_the_flash_templates_lack_compiles_to_cuda_under_both_costs():
    """Head dim 32 (d 64, 2 heads): the attention and scores kinds refuse it at bind with their reason (the
    flash templates are instantiated for 64 and 128), so the SIMT kind takes it; it once bound and then
    failed the whole compile with E1504 in the plan search."""
    from polysat.backend.kinds import kinds
    from polysat.backend.stages import kernel_sources
    from polysat.ir.region_squeeze import squeeze_units
    for cost in ("size", "model"):
        c = Compilation(transformer(1, d_model=64, heads=2, d_ff=128), cost=cost)
        for arch in ("sm80", "sm90"):
            assert len(kernel_sources(c.regions, arch)) == len(c.regions)
        flash = [k for k in kinds() if k.name in ("attention", "softmax_scores")]
        forms = [f for r in c.regions for f in (r, squeeze_units(r)) if f is not None]
        why = [getattr(k.bind(f), "reason", "") for f in forms for k in flash]
        assert any("instantiated for 64, 128" in w for w in why), why
