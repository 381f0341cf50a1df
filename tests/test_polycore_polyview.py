"""Regions built from the Poly-View of real models (examples/*.json): Poly Core analyses them and
the cost model prices the whole-program kernel below one kernel per Poly-View block."""
from pathlib import Path

import islpy as isl
import pytest

from polysat.analyses.price import price, price_partition
from polysat.tests.poly_examples import split_per_statement
from polysat.analyses.poly_from_view import region_from_program, regions_from_partition
from polysat.analyses.polycore import analyze
from polysat.egraph.partition import Kernel, Partition
from polysat.frontend import load_model
from polysat.ir.diagnostics import PolysatError
from polysat.ir.tiny import GroupOp, Ops

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PARAMS = {
    "gemm_bias_relu": {"M": 512, "N": 512, "K": 512},
    "softmax": {"R": 1024, "C": 1024},
    "layernorm": {"T": 1024},
    "mlp": {"T": 256},
    "attention": {"B": 1, "H": 2, "M": 256, "N": 256},
    "conv_relu_maxpool": {},
}


def _region(name: str):
    return region_from_program(load_model(str(EXAMPLES / f"{name}.json")), PARAMS[name], name)


def test_gemm_bias_relu_blocks_become_statements():
    r = _region("gemm_bias_relu")
    b = r.bind()
    mma = [s for s in b.statements if s.stmt.unit == "tensor"]
    assert len(mma) == 1
    (g,) = mma
    assert g.reduce_dims == (g.dims[-1],) and g.stmt.combine == "sum"
    box = isl.Set(f"{{ {g.name}[i0, i1, r0] : 0 <= i0 < 512 and 0 <= i1 < 512 and 0 <= r0 < 512 }}")
    assert g.domain.is_equal(box)
    roles = {t.name: t.role for t in r.tensors}
    assert roles["A"] == roles["B"] == roles["bias"] == "input"
    assert [n for n, role in roles.items() if role == "output"] == ["C2"]


@pytest.mark.parametrize("arch", ["sm80", "sm90"])
@pytest.mark.parametrize("name", sorted(PARAMS))
def test_example_fused_kernel_beats_one_kernel_per_block(name, arch):
    r = _region(name)
    rep = analyze(r, arch)
    assert rep.compute_at_ok, rep.reasons
    fused = price(r, arch)
    split = price_partition(split_per_statement(r), arch)
    assert fused.time_est_us < split.time_est_us


def test_conv_example_has_a_halo_between_tiles():
    r = _region("conv_relu_maxpool")
    drv = r.bind().driver
    tile = {d: 1 for d in drv.parallel_dims}
    tile[drv.parallel_dims[-1]] = tile[drv.parallel_dims[-2]] = 4
    rep = analyze(r, "sm90", tile)
    assert rep.halo_bytes > 0
    assert max(rep.halo_per_axis.values()) == 2  # 3x3 pad-1 conv under a 2x2/2 pool


def test_partition_kernels_become_regions():
    prog = load_model(str(EXAMPLES / "gemm_bias_relu.json"))
    compute = [n.id for n in prog.nodes if n.op not in GroupOp.Movement | {Ops.INPUT, Ops.CONST}]
    outputs = {nid for _, nid in prog.outputs}
    one = Partition((Kernel("k0", frozenset(compute), tuple(sorted(outputs)), ()),))
    many = Partition(tuple(Kernel(f"k{i}", frozenset([nid]), (nid,), ()) for i, nid in enumerate(compute)))
    (fused,) = regions_from_partition(prog, one, PARAMS["gemm_bias_relu"])
    parts = regions_from_partition(prog, many, PARAMS["gemm_bias_relu"])
    assert len(parts) >= 4 and all(len(p.statements) == 1 for p in parts)
    assert price(fused, "sm90").time_est_us < price_partition(parts, "sm90").time_est_us


def test_unbound_symbols_are_a_diagnostic():
    r = region_from_program(load_model(str(EXAMPLES / "softmax.json")), {}, "softmax")
    with pytest.raises(PolysatError) as e:
        analyze(r, "sm90")
    assert e.value.diagnostics[0].kind == "UnboundSymbol"
