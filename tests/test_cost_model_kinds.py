"""The price is the price of the kernel the backend emits (docs/DESIGN.md §Cost model): a kernel's contractions
are priced on tensor cores exactly when the backend binds its RB-SSA region to a tensor-core kind, and on the
FP32 pipes when the SIMT kind computes it. One case per kind, each checked against ``backend.kinds.bind``."""
import os

import pytest

from polysat.backend.kinds import bind
from polysat.pipeline import Compilation

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")
CASES = {  # kind -> (example, --cost) whose partition has a kernel of that kind
    "gemm": ("gemm_bias_relu.json", "size"),
    "attention": ("attention.json", "model"),
    "softmax_scores": ("attention.json", "size"),
    "conv": ("conv3x3_s2_silu.json", "size"),
    "conv_pool": ("conv_relu_maxpool.json", "model"),
    "simt": ("conv3x3_s2_silu.json", "model"),  # a conv whose output keeps a unit axis: no template takes it
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_priced_compute_unit_agrees_with_the_kernel_kind(kind):
    example, cost = CASES[kind]
    c = Compilation(os.path.join(EXAMPLES, example), cost=cost)
    emitted = {r.name: bind(r)[0].name for r in c.regions}
    assert kind in emitted.values(), emitted
    contractions = 0
    for p in c.priced:
        units = {s.unit for s in p.region.statements}
        terms = dict(p.cost.terms)
        if emitted[p.kernel.name] == "simt":
            assert "tensor" not in units and terms["mma"] == 0.0, (p.kernel.name, units)
        else:
            assert "tensor" in units and terms["mma"] > 0.0, (p.kernel.name, emitted[p.kernel.name], units)
        contractions += emitted[p.kernel.name] == kind and any(
            a.tensor != s.write.tensor and s.combine == "sum" and len(s.reads) == 2 for s in p.region.statements
            for a in s.reads)
    assert contractions, f"no {kind} kernel with a contraction"
