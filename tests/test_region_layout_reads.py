"""ir/region_layout.py scores every permutation of an intermediate's dims by how many of its reads have a packed
view. Each reader region is walked once for its reads (DenseNet-121's concatenated features, read by every
later layer of a block, made the walk per permutation, reader and output take 420 of 560 s), and the layout
chosen is the one the per-permutation count picks."""
from __future__ import annotations

import collections

from polysat.bench.models import transformer
from polysat.egraph.region_synth import synthesize
from polysat.ir import region_layout
from polysat.ir.region_narrow import narrow_boundaries
from polysat.pipeline import Compilation


def test_each_reader_is_walked_once_for_its_reads(monkeypatch):
    c = Compilation(transformer(blocks=1, d_model=128, heads=2, d_ff=256), cost="model")
    x = c.extraction
    regions = narrow_boundaries(synthesize(x.program, x.partition))
    walked = collections.Counter()
    walk = region_layout.walk

    def counting(node):
        walked[id(node)] += 1
        return walk(node)
    monkeypatch.setattr(region_layout, "walk", counting)
    out = region_layout.store_for_readers(regions)
    assert walked and max(walked.values()) <= 2  # once, and once more for a reader rewritten with a new order
    # the attention output is stored in the order the projection reads it: some yield's axes were permuted
    assert any(a.yields != b.yields for a, b in zip(regions, out, strict=True))
