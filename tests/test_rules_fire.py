"""The legality rules fire (docs/DESIGN.md §Fusion): every rule of rules/fusion.egg and
rules/streaming.egg, bookkeeping included, matches at least once when the examples and the bench models
are saturated under both costs (a rule that never fires is a defect); the ONNX BERT layer is among them
for the fp32 attention rules."""
from __future__ import annotations

import pathlib

from polysat.bench.models import conv_relu_conv, mlp_stack, sibling_gemms, softmax_axis, transformer
from polysat.egraph.api import saturate_for
from polysat.frontend import load_model
from polysat.search import model as _registers_the_model_cost  # noqa: F401 — egraph/ cannot import it

EX = pathlib.Path(__file__).resolve().parent.parent / "examples"
FAMILIES = ("fusion.egg", "streaming.egg")


def _corpus() -> list:
    from polysat.examples.onnx_models import build
    from polysat.frontend.onnx import import_onnx
    return [str(p) for p in sorted(EX.glob("*.json"))] + [
        transformer(1), mlp_stack(3, 256), sibling_gemms(), conv_relu_conv(), softmax_axis([2, 6, 3], 1),
        import_onnx(build("bert_encoder"))]  # an fp32 model: its attention streams by the fp32 rules


def test_every_fusion_and_streaming_rule_fires_on_the_examples_and_bench_models():
    matches: dict = {}
    from polysat.ir.gather_split import split_gathers
    for m in _corpus():
        p = split_gathers(load_model(m)).program  # (the e-graph takes the program cut at its gathers)
        for cost in ("size", "model"):
            _, rep = saturate_for(p, cost)
            for r in rep.rules.values():
                if pathlib.Path(r.file).name in FAMILIES:
                    matches[r.name] = matches.get(r.name, 0) + r.matches
    assert len(matches) >= 30
    dead = sorted(n for n, k in matches.items() if k == 0)
    assert dead == [], f"rules that never fire: {dead}"
