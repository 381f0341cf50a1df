"""Cost models: the registry, a region-level cost over kernel boundaries, and partitions that follow it."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

from polysat.egraph import COST_MODELS, CostModel, extract_full, register_cost, saturate
from polysat.egraph.cost import make
from polysat.tests.numeric import bind_env, random_inputs, same_outputs
from polysat.frontend import load_model
from polysat.ir.playback import playback
from polysat.egraph.region_synth import synthesize

EX = pathlib.Path(__file__).resolve().parent.parent / "examples"


class SplitAtReduces(CostModel):
    """Prices re-broadcasting a reduce result inside a kernel high, so materializing it wins; records
    every region it is asked to price."""
    name = "test-split-at-reduces"

    def __init__(self):
        self.regions = []

    def enode_cost(self, node, view):
        if node.op in ("BroadcastInDim", "Expand", "Reshape") and any(
                n.op == "Reduce" for n in view.classes[node.children[0]]):
            return 100.0
        return 1.0

    def region_cost(self, region, view):
        self.regions.append(region)
        return float(len(region.chosen))


def test_size_is_the_default_registered_model():
    assert "size" in COST_MODELS


def test_a_region_cost_model_changes_the_partition_and_keeps_the_values():
    register_cost(SplitAtReduces)
    assert isinstance(make(SplitAtReduces.name), SplitAtReduces)  # --cost=NAME builds the registered class
    model = SplitAtReduces()
    p = load_model(str(EX / "softmax.json"))
    st, _ = saturate(p)
    by_size = extract_full(st, "size")
    by_model = extract_full(st, model)
    assert len(by_model.partition.kernels) > len(by_size.partition.kernels) == 1
    assert model.regions and all(r.root in r.chosen for r in model.regions)
    rng = np.random.default_rng(0)
    inputs = random_inputs(p, rng, bind_env(p, rng))
    ok, name, err = same_outputs(p, by_model.program, inputs)
    assert ok, (name, err)


@pytest.mark.parametrize("name", ["gemm_bias_relu", "conv3x3_s2_silu", "attention", "mlp", "conv_relu_maxpool"])
def test_extracted_program_and_partition_synthesize_regions_that_play_back_correctly(name):
    p = load_model(str(EX / f"{name}.json"))
    st, _ = saturate(p)
    x = extract_full(st)
    rng = np.random.default_rng(2)
    inputs = random_inputs(p, rng, bind_env(p, rng))
    from polysat.ir.evaluate import evaluate
    from polysat.tests.numeric import close
    ref = evaluate(p, inputs)
    out = playback(synthesize(x.program, x.partition), inputs)
    assert all(close(ref[k], out[k]) for k in ref)
