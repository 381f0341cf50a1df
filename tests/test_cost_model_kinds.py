"""The price is the price of the kernel the backend emits (docs/DESIGN.md §Cost model): every kernel of every
example and of the bench transformer, under either cost, is priced as the kind ``backend.kinds.bind`` gives
its RB-SSA region: contractions on tensor cores exactly when a tensor-core kind binds it, on the FP32 pipes
when the SIMT kind computes it. And each kind, tensor-core or SIMT, occurs with a contraction somewhere (a conv +
bias + max-pool model for conv_pool: examples/conv_relu_maxpool.json binds SIMT since the max of a ReLU is
rewritten to a ReLU of the max, which the conv_pool binder does not take)."""
import glob
import os

import pytest

from polysat.backend.kinds import bind
from polysat.pipeline import Compilation

EXAMPLES = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "examples", "*.json")))
_CACHE: dict = {}


def _models():
    import importlib.util
    import pathlib
    from polysat.bench.models import transformer
    spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
    oracle = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(oracle)
    pool = oracle.conv_model([2, 8, 33, 31], [16, 8, 3, 3], {"stride": 2, "pad": 1}, bias=True,
                             pool={"kernel": [2, 2], "stride": [2, 2]})  # a conv_pool kernel under --cost model
    out = [(os.path.basename(p), p) for p in EXAMPLES]
    return out + [("transformer_1", transformer(1)), ("conv_bias_maxpool", pool)]


def _contraction(region) -> bool:
    return any(s.combine == "sum" and len(s.reads) == 2 and all(a.tensor != s.write.tensor for a in s.reads)
               for s in region.statements)


def _priced(name, model, cost):
    """[(priced kernel, the kind bind gives its region)] of one model under one cost (compiled once)."""
    if (name, cost) not in _CACHE:
        c = Compilation(model, cost=cost)
        emitted = {r.name: bind(r)[0].name for r in c.regions}
        _CACHE[name, cost] = [(p, emitted.get(p.kernel.name)) for p in c.priced]
    return _CACHE[name, cost]


@pytest.mark.parametrize("cost", ["model", "size"])
@pytest.mark.parametrize("name, model", _models(), ids=[n for n, _ in _models()])
def test_every_kernel_is_priced_as_the_kind_it_binds_to(name, model, cost):
    for p, kind in _priced(name, model, cost):
        if p.region is None:
            continue
        units = {s.unit for s in p.region.statements}
        mma = dict(p.cost.terms)["mma"]
        if kind == "simt":
            assert "tensor" not in units and mma == 0.0, (name, p.kernel.name, units)
        elif _contraction(p.region):
            assert "tensor" in units and mma > 0.0, (name, p.kernel.name, kind, units)


def test_each_kind_prices_a_contraction():
    """The models above put a contraction in every kind (so the test above checks each)."""
    seen = {kind for name, model in _models() for cost in ("model", "size")
            for p, kind in _priced(name, model, cost) if p.region is not None and _contraction(p.region)}
    assert {"gemm", "conv", "conv_pool", "attention", "softmax_scores", "simt"} <= seen, sorted(seen)


@pytest.mark.parametrize("name, model", _models(), ids=[n for n, _ in _models()])
def test_every_group_the_merge_search_prices_is_priced_as_the_kind_it_binds_to(name, model, monkeypatch):
    """Inside the search too: each group the merge search prices is priced with tensor-core statements exactly
    when a tensor-core kind binds the group's kernel, built as the pipeline builds it (synthesis, narrowing,
    layout pass) in the partition where the group is one kernel and every other kernel is the base's."""
    from polysat.pricing import kernels as pricing
    from polysat.search import merge as merge_search
    from polysat.egraph.partition import Kernel, Partition
    from polysat.egraph.region_synth import synthesize
    from polysat.ir.region_layout import store_for_readers
    from polysat.ir.region_narrow import narrow_boundaries
    seen, checked, chosen = [], [], []
    real_price, real_space, real_cheaper = pricing.price, merge_search.merge_space, pricing._cheaper
    monkeypatch.setattr(pricing, "price", lambda r, arch: seen.append(r) or real_price(r, arch))
    # an fp32 contraction is priced both as 3xTF32 and on the FP32 pipes: the form kept is the one _cheaper returns
    monkeypatch.setattr(pricing, "_cheaper", lambda r, arch: chosen.append(real_cheaper(r, arch)) or chosen[-1])

    def space(state, view, st, roots, base, params, arch, illegal):
        sp = real_space(state, view, st, roots, base, params, arch, illegal)
        prog, part, ks = base.extraction.program, base.extraction.partition, sp.kernels

        def price(root, members):
            seen.clear()
            chosen.clear()
            us = real_group_price(root, members)
            ns = frozenset().union(*(ks[m].nodes for m in members))
            g = Kernel("g", ns, ks[root].outputs, tuple(dict.fromkeys(s for i in ns for s in prog[i].src if s not in ns)))
            whole = Partition(tuple(g if k.name == root else k for k in part.kernels if k.name == root or k.name not in members))
            rb = {r.name: r for r in store_for_readers(narrow_boundaries(synthesize(prog, whole)))}["g"]
            last = chosen[-1] if chosen else seen[-1] if seen else None
            if last is not None and _contraction(last):
                kind = bind(rb)[0].name
                tensor = any(s.unit == "tensor" for s in last.statements)
                if last.mma_path == "fp32":  # priced cheaper on the FP32 pipes than the 3xTF32 GEMM that binds it
                    assert kind == "gemm" and not tensor, (name, root, sorted(members), kind)  # (pipeline: fp32_pipes)
                else:
                    assert tensor == (kind != "simt"), (name, root, sorted(members), kind)
                checked.append(kind)
            return us
        real_group_price = sp.price
        sp.price = price
        return sp
    monkeypatch.setattr(merge_search, "merge_space", space)
    Compilation(model, cost="model").search
    if name in ("gemm_bias_relu.json", "transformer_1", "mlp.json"):
        assert checked, name  # groups with a contraction were priced
