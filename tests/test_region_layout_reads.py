"""ir/region_layout.py scores every permutation of an intermediate's dims by how many of its reads have a packed
view. Each reader region is walked once for its reads (DenseNet-121's concatenated features, read by every
later layer of a block, made the walk per permutation, reader and output take 420 of 560 s), and the layout
chosen is the one the per-permutation count picks."""
from __future__ import annotations

import collections
import itertools

from hypothesis import given, settings, strategies as st

from polysat.bench.models import transformer
from polysat.egraph.region_synth import synthesize
from polysat.ir import region_layout
from polysat.ir.expr import Expr
from polysat.ir.region_narrow import narrow_boundaries
from polysat.ir.region_squeeze import packed_view
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


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.lists(st.sampled_from(["a", "b", "c", "r"]), max_size=2), st.integers(-2, 2),
                          st.integers(1, 3)), min_size=2, max_size=4),
       st.lists(st.integers(1, 6), min_size=4, max_size=4))
def test_a_read_with_an_offset_in_every_order_has_no_packed_view_in_any(dims, sizes):
    """``_offset_in_every_order`` skips a read (a concatenation's piece, a convolution's shifted window) only where
    ``packed_view`` refuses it under every order of the buffer's dims: the skip never changes a layout chosen."""
    axes = dict(zip("abcr", sizes))
    index = tuple(sum((Expr.var(a) * k for a in terms), Expr.const(off)) for terms, off, k in dims)
    shape = tuple(axes[t[0][0]] if t[0] else 1 for t in dims)
    if not region_layout._offset_in_every_order(index, tuple(sorted(axes.items())), shape):
        return
    for perm in itertools.permutations(range(len(index))):
        assert packed_view(tuple(index[p] for p in perm), tuple(shape[p] for p in perm), axes) is None, (index, perm)
