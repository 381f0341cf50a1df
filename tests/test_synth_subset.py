"""pricing.as_emitted synthesizes only the kernels a priced kernel's storage depends on (region_synth.synthesize
``only=``), and the kernel cache answers a kernel renamed in another partition, of an equal program rebuilt: each
must give the regions a full synthesis of the partition gives (docs/DESIGN.md §Cost model)."""
from __future__ import annotations

import json
import pathlib
from dataclasses import replace
from types import SimpleNamespace

import pytest

from polysat.egraph.partition import Partition
from polysat.egraph.region_synth import default_partition, synthesize
from polysat.frontend import load_model
from polysat.pricing.kernels import _near, _neighbours

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"
NAMES = ["attention_row_softmax", "layernorm", "mlp", "conv_relu_maxpool", "gemm_bias_relu"]


def _load(name: str):
    return load_model(json.loads((EXAMPLES / f"{name}.json").read_text()))


@pytest.mark.parametrize("name", NAMES)
def test_the_neighbours_synthesized_alone_are_the_full_synthesis_near_each_kernel(name):
    p = _load(name)
    part = default_partition(p)
    full = synthesize(p, part)
    assert len(part.kernels) >= 2 or name in {"gemm_bias_relu"}
    for k in part.kernels:
        priced = [SimpleNamespace(name=k.name)]
        only = _neighbours(part, priced)
        alone = synthesize(p, part, only=only)
        assert {r.name for r in alone} <= only | {r.name for r in full if r.name.startswith("copy_")}
        assert _near(alone, priced) == _near(full, priced)


@pytest.mark.parametrize("name", NAMES)
def test_a_renamed_kernel_of_an_equal_program_rebuilt_synthesizes_as_before(name):
    p = _load(name)
    part = default_partition(p)
    full = synthesize(p, part)
    again = _load(name)  # equal, not the same object
    assert again == p and again is not p
    renamed = Partition(tuple(replace(k, name=f"other{j}") for j, k in enumerate(part.kernels)))
    got = synthesize(again, renamed)
    assert [r.name for r in got[:len(part.kernels)]] == [f"other{j}" for j in range(len(part.kernels))]
    assert [replace(r, name="k") for r in got] == [replace(r, name="k") for r in full]


@pytest.mark.parametrize("name", ["attention_row_softmax", "mlp", "layernorm", "conv_relu_maxpool"])
def test_as_emitted_gives_each_contraction_the_unit_of_the_whole_partition_synthesized(name):
    """as_emitted synthesizes, narrows and lays out only the contractions' kernels and their buffers' writers
    and readers; each contraction's unit must be the one the whole partition, synthesized, narrowed and laid out,
    gives its kernel, whether the regions are priced all together or one by one (as the merge search does)."""
    from polysat.analyses.poly_from_view import regions_from_partition
    from polysat.backend.kinds import tensor_core_kind
    from polysat.egraph.region_synth import partition_from_materialized
    from polysat.ir.region_layout import store_for_readers
    from polysat.ir.region_narrow import narrow_boundaries
    from polysat.pricing.kernels import on_fp32_pipes, as_emitted
    p = _load(name)
    kinds = set()
    for part in (default_partition(p), partition_from_materialized(p, frozenset(n.id for n in p.nodes if n.op.name != "INPUT"))):
        whole = {r.name: r for r in store_for_readers(narrow_boundaries(synthesize(p, part)))}
        regions = regions_from_partition(p, part)
        mma = [r for r in regions if any(st.unit == "tensor" for st in r.statements)]
        assert mma or name == "layernorm"
        for got in (as_emitted(p, part, regions), [x for r in regions for x in as_emitted(p, part, [r])]):
            for r, g in zip(regions, got, strict=True):
                if r in mma:
                    simt = tensor_core_kind(replace(whole[r.name], name="kernel")) is None
                    assert g == (on_fp32_pipes(r) if simt else r)
                    kinds.add(simt)
                else:
                    assert g == r
    assert kinds or name == "layernorm"
