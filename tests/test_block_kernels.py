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
