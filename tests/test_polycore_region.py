"""The polyhedral region data model: binding to concrete shapes, derived reduce dims, the schedule,
and coded diagnostics for malformed regions (never a traceback)."""
import islpy as isl
import pytest

from polysat.tests.poly_examples import T, conv_relu_maxpool, gemm, merge, split_per_statement, stmt
from polysat.analyses.poly_region import Access, PolyRegion, Statement, TensorInfo
from polysat.ir.diagnostics import PolysatError
from polysat.ir.dtypes import DType


def _code(excinfo) -> str:
    return excinfo.value.diagnostics[0].kind


def test_bind_fixes_symbols_to_the_concrete_shape():
    b = gemm(M=8, N=4, K=2).bind()
    s = b.statements[0]
    assert s.domain.is_equal(isl.Set("{ gemm[m, n, k] : 0 <= m < 8 and 0 <= n < 4 and 0 <= k < 2 }"))
    assert s.domain.dim(isl.dim_type.param) == 0
    assert b.shapes == {"A": (8, 2), "B": (2, 4), "C": (8, 4)}


def test_reduce_dims_are_the_dims_the_write_ignores():
    b = conv_relu_maxpool(N=1, C=3, K=4, H=8, W=8).bind()
    assert b.stmt("conv").reduce_dims == ("c", "r", "s")
    assert b.stmt("relu").reduce_dims == ()
    assert b.stmt("pool").reduce_dims == ("i", "j")
    assert b.stmt("pool").parallel_dims == ("n", "k", "ph", "pw")


def test_schedule_is_sequence_then_loop_order():
    b = gemm(M=2, N=2, K=2).bind()
    want = isl.UnionMap("{ gemm[m, n, k] -> [0, m, n, k] : 0 <= m < 2 and 0 <= n < 2 and 0 <= k < 2 }")
    assert b.schedule.is_equal(want)


def test_driver_is_the_last_statement_writing_an_output():
    assert conv_relu_maxpool(H=8, W=8, C=2, K=2).bind().driver.name == "pool"


def test_padded_read_stays_inside_the_tensor():
    b = conv_relu_maxpool(N=1, C=1, K=1, H=4, W=4).bind()
    _, read = b.stmt("conv").reads[0]
    assert read.range().is_subset(b.tensor_sets["I"])
    # the corner instance reads only the 4 in-bounds taps of its 3x3 window
    corner = isl.Set("{ conv[0, 0, 0, 0, 0, r, s] }")
    assert corner.apply(read).is_equal(isl.Set("{ I[0, 0, h, w] : 0 <= h <= 1 and 0 <= w <= 1 }"))


def _region(domain="{ S[i] : 0 <= i < N }", read="{ S[i] -> x[i] }", write="{ S[i] -> y[i] }", params={"N": 4},
            combine=None, shape_y=("N",)):
    return PolyRegion("r", [TensorInfo("x", ("N",), DType.fp16, "input"), TensorInfo("y", shape_y, DType.fp32, "output")],
                      [Statement("S", "[N] -> " + domain, (Access("x", "[N] -> " + read),),
                                 Access("y", "[N] -> " + write), combine=combine)], params)


@pytest.mark.parametrize("region, kind", [
    (lambda: _region(params={}), "UnboundSymbol"),
    (lambda: _region(domain="{ S[i] : 0 <= i < N*N }"), "NonAffineIndex"),
    (lambda: _region(read="{ S[i] -> x[i + 1] }"), "OutOfBoundsView"),
    (lambda: _region(write="{ S[i] -> y[0] }", shape_y=(1,)), "AccDtypeMissing"),
    (lambda: _region(read="{ S[i] -> z[i] }"), "UnknownTensor"),
    (lambda: _region(write="{ S[i] -> y[j] : 0 <= j < N }"), "MalformedStructure"),
    (lambda: _region(domain="{ Q[i] : 0 <= i < N }"), "MalformedStructure"),
])
def test_malformed_regions_give_coded_diagnostics(region, kind):
    with pytest.raises(PolysatError) as e:
        region().bind()
    assert _code(e) == kind


def test_two_writers_of_one_tensor_is_rejected():
    s1 = stmt("A", {"i": 4}, ["x[i]"], "y[i]")
    s2 = stmt("B", {"i": 4}, ["x[i]"], "y[i]")
    r = PolyRegion("r", [T("x", (4,)), T("y", (4,), role="output")], [s1, s2])
    with pytest.raises(PolysatError) as e:
        r.bind()
    assert _code(e) == "DuplicateDefinition"


def test_bad_role_and_unit_are_rejected():
    with pytest.raises(PolysatError):
        TensorInfo("x", (4,), DType.fp16, "scratch")
    with pytest.raises(PolysatError):
        stmt("S", {"i": 4}, ["x[i]"], "y[i]", unit="tpu")


def test_split_and_merge_round_trip_roles():
    r = conv_relu_maxpool(N=1, C=2, K=2, H=8, W=8)
    parts = split_per_statement(r)
    assert [p.name for p in parts] == ["conv_relu_maxpool.conv", "conv_relu_maxpool.relu", "conv_relu_maxpool.pool"]
    assert {t.name: t.role for t in parts[1].tensors} == {"O": "input", "R": "output"}
    fused = merge(parts)
    assert {t.name: t.role for t in fused.tensors} == {t.name: t.role for t in r.tensors}
    for p in parts:
        p.bind()  # every part is a well-formed region on its own


def test_region_json_lists_statements_and_tensors():
    j = gemm(M=4, N=4, K=4).to_json()
    assert j["params"] == {"K": 4, "M": 4, "N": 4}
    assert j["statements"][0]["reads"][0] == {"tensor": "A", "map": "[K, M, N] -> { gemm[m, n, k] -> A[m, k] }"}
