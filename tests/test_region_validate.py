"""The RB-SSA validators report each diagnostic of docs/DESIGN.md §RB-SSA, and only when it applies.

Synthesized regions of every example validate clean; each check is then shown to fire on a region
broken in exactly one way (edited through its --dump=region JSON, which also exercises loading).
"""
from __future__ import annotations

import copy
import json
import pathlib

import numpy as np
import pytest

from polysat.frontend import load_model
from polysat.ir.diagnostics import PolysatError
from polysat.ir.dtypes import DType
from polysat.ir.expr import Expr
from polysat.ir import region as rg
from polysat.ir.playback import playback
from polysat.ir.region import Buffer, Let, MemRef, Region, Yield, regions_json
from polysat.ir.region_load import regions_from_json
from polysat.egraph.region_synth import default_partition, synthesize
from polysat.analyses.region_validate import validate_regions

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def regions_of(name: str):
    p = load_model(json.loads((EXAMPLES / f"{name}.json").read_text()))
    return p, synthesize(p, default_partition(p))


def edit(regions, fn):
    """Regions after fn mutates their JSON in place."""
    doc = copy.deepcopy(regions_json(regions))
    fn(doc)
    return regions_from_json(doc)


def find(tree, pred):
    """Every (container, key) whose value satisfies pred, in a JSON tree."""
    out = []
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else []
    for k, v in items:
        if pred(v):
            out.append((tree, k))
        out.extend(find(v, pred))
    return out


def kinds(diags) -> list:
    return sorted({d.kind for d in diags})


@pytest.mark.parametrize("name", sorted(p.stem for p in EXAMPLES.glob("*.json")))
def test_synthesized_example_regions_validate_clean(name):
    _, regions = regions_of(name)
    assert validate_regions(regions) == []


def test_missing_broadcast_in_dim_is_broadcast_mismatch():
    _, regions = regions_of("gemm_bias_relu")

    def drop(doc):
        ((box, key),) = find(doc, lambda v: isinstance(v, dict) and "BroadcastInDim" in v)
        box[key] = box[key]["BroadcastInDim"]["operand"]
    assert kinds(validate_regions(edit(regions, drop))) == ["BroadcastMismatch"]


def test_reordered_broadcast_dimensions_are_broadcast_mismatch():
    _, regions = regions_of("gemm_bias_relu")

    def wrong(doc):
        ((box, key),) = find(doc, lambda v: isinstance(v, dict) and "BroadcastInDim" in v)
        box[key]["BroadcastInDim"]["broadcast_dimensions"] = [0]
    assert kinds(validate_regions(edit(regions, wrong))) == ["BroadcastMismatch"]


def test_missing_transpose_and_wrong_yield_axes_are_axis_alignment_mismatch():
    x = rg.read("X", [Expr.var("i"), Expr.var("j")], DType.fp32, ["i", "j"])
    y = rg.read("Y", [Expr.var("j"), Expr.var("i")], DType.fp32, ["i", "j"])
    region = Region("r", (("i", 3), ("j", 3)), (), (Buffer("X", MemRef((3, 3), DType.fp32)),
                                                    Buffer("Y", MemRef((3, 3), DType.fp32))),
                    (Buffer("Z", MemRef((3, 3), DType.fp32), "gmem", True),),
                    (Let("z", rg.binary("add", x, y, DType.fp32)),), (Yield("z", "Z", DType.fp32, ("i", "j")),))
    assert kinds(validate_regions([region])) == ["AxisAlignmentMismatch"]
    fixed = rg.binary("add", x, rg.transpose(y, (1, 0)), DType.fp32)
    good = Region(region.name, region.iters, (), region.inputs, region.outputs, (Let("z", fixed),), region.yields)
    assert validate_regions([good]) == []
    swapped = Region(region.name, region.iters, (), region.inputs, region.outputs, good.lets,
                     (Yield("z", "Z", DType.fp32, ("j", "i")),))
    assert kinds(validate_regions([swapped])) == ["AxisAlignmentMismatch"]


def test_undeclared_axis_is_axis_alignment_mismatch():
    _, regions = regions_of("gemm_bias_relu")
    broken = edit(regions, lambda doc: doc["regions"][0]["region"].update(reduce_axes=[]))
    assert kinds(validate_regions(broken)) == ["AxisAlignmentMismatch"]


def _unguard(doc):
    ((box, key),) = find(doc, lambda v: isinstance(v, dict) and "select" in v)
    box[key] = box[key]["select"]["then"]


def test_removing_the_pad_select_is_unguarded_access_in_validation_and_playback():
    p, regions = regions_of("conv3x3_s2_silu")
    broken = edit(regions, _unguard)
    diags = validate_regions(broken)
    assert kinds(diags) == ["UnguardedAccess"] and "X[" in diags[0].why
    rng = np.random.default_rng(0)
    inputs = {n.arg["tensor_id"]: rng.standard_normal([int(d) for d in n.shape]).astype(np.float32) for n in p.inputs}
    with pytest.raises(PolysatError) as e:
        playback(broken, inputs)
    assert e.value.diagnostics[0].kind == "UnguardedAccess"


def _reduce_json(doc) -> dict:
    return find(doc, lambda v: isinstance(v, dict) and "reduce" in v)[0][0][find(doc, lambda v: isinstance(v, dict)
                                                                              and "reduce" in v)[0][1]]["reduce"]


@pytest.mark.parametrize("change,kind", [
    ({"dtype": None}, "AccDtypeMissing"),
    ({"op": "prod"}, "NonAssociativeTransform"),
    ({"init": 1.0}, "NeutralInvalid"),
])
def test_broken_reduce_attributes(change, kind):
    _, regions = regions_of("gemm_bias_relu")
    broken = edit(regions, lambda doc: _reduce_json(doc).update(change))
    assert kinds(validate_regions(broken)) == [kind]


def test_max_reduce_with_zero_init_is_neutral_invalid():
    _, regions = regions_of("softmax")

    def zero(doc):
        for box, key in find(doc, lambda v: isinstance(v, dict) and "reduce" in v):
            if box[key]["reduce"]["op"] == "max":
                box[key]["reduce"]["init"] = 0.0
    assert kinds(validate_regions(edit(regions, zero))) == ["NeutralInvalid"]


def test_many_guard_pieces_are_excessive_piecewise_warning():
    i = Expr.var("i")
    value = rg.read("X", [i], DType.fp32, ["i"])
    for k in range(10):  # exclude the points i = 2k one by one: the read's guard has 11 pieces
        p = rg.pred([i - 2 * k, 2 * k - i], ["i"])
        value = rg.select(p, rg.const(0.0, DType.fp32), value, DType.fp32)
    region = Region("pieces", (("i", 24),), (), (Buffer("X", MemRef((24,), DType.fp32)),),
                    (Buffer("Z", MemRef((24,), DType.fp32), "gmem", True),), (Let("z", value),),
                    (Yield("z", "Z", DType.fp32, ("i",)),))
    diags = validate_regions([region])
    assert kinds(diags) == ["ExcessivePiecewise"] and not diags[0].is_error
    few = Region("few", region.iters, (), region.inputs, region.outputs, (Let("z", value.src[2].src[2]),), region.yields)
    assert validate_regions([few]) == []


def test_tensor_shapes_must_agree_across_regions():
    _, regions = regions_of("softmax")
    assert len(regions) >= 2

    def reshape(doc):
        doc["regions"][1]["region"]["inputs"][0]["memref"]["shape"][-1] = 999
    diags = validate_regions(edit(regions, reshape))
    assert "AxisAlignmentMismatch" in kinds(diags)


def test_symbols_named_like_isl_keywords_are_checked_too():
    from polysat.ir.builder import Builder
    b = Builder()
    x = b.input("X", DType.fp32, ("MAX", "OR"), at="X", nid="X")
    p = b.program([("y", b.reduce(b.pad(x, ((1, 0), (0, 0)), at="p"), "SUM", (0,), DType.fp32, at="r"))])
    regions = synthesize(p, default_partition(p))
    assert validate_regions(regions) == []
    assert kinds(validate_regions(edit(regions, _unguard))) == ["UnguardedAccess"]
