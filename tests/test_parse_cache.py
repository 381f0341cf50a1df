"""The isl parse and binding caches of Poly Core (analyses/isl_util.py, analyses/poly_region.py): a text is parsed
once per shape of text with its tuple names as placeholders, then named; the result is the object
isl parses from the text itself, and texts that differ only by their tuple names share one parse."""
import islpy as isl
import pytest

from polysat.analyses import isl_util, poly_region
from polysat.analyses.poly_region import Access, PolyRegion, Statement, TensorInfo
from polysat.ir.diagnostics import PolysatError
from polysat.ir.dtypes import DType

TEXTS = [
    (isl.Map, "[S] -> { S_n1[i0, i1] -> T_n2[i0, i1 - 16] : 0 <= i0 < S and 16 <= i1 < 48 }"),
    (isl.Map, "{ A[i] -> A[i + 1] : 0 <= i < 4 }"),  # one name on both sides: parsed as it is
    (isl.Map, "{ [i] -> [j] : j = 2i and 0 <= i < 3 }"),  # unnamed tuples
    (isl.Map, "{ [A[i] -> B[j]] -> C[k] : k = i + j and 0 <= i < 2 and 0 <= j < 2 }"),  # nested: parsed as it is
    (isl.Map, "{ S3[i] -> T2[floor(i/2)] : 0 <= i < 8 }"),
    (isl.Set, "[N] -> { T_n3[o0, o1] : 0 <= o0 < N and 0 <= o1 < 7 }"),
    (isl.Set, "{ [i] : 0 <= i < 3 }"),
    (isl.Set, "{ S0[] }"),
]


@pytest.mark.parametrize("cls,text", TEXTS)
def test_cached_parse_is_the_parse(cls, text):
    got = (isl_util.parse_map if cls is isl.Map else isl_util.parse_set)(text)
    want = cls(text)
    assert str(got) == str(want) and got.is_equal(want) and got.get_space() == want.get_space()


def _region(stmt: str, tin: str, tout: str) -> PolyRegion:
    return PolyRegion("r", [TensorInfo(tin, (8, 4), DType("fp32"), "input"),
                            TensorInfo(tout, (8,), DType("fp32"), "output")],
                      [Statement(stmt, f"{{ {stmt}[i, k] : 0 <= i < 8 and 0 <= k < 4 }}",
                                 (Access(tin, f"{{ {stmt}[i, k] -> {tin}[i, k] }}"),),
                                 Access(tout, f"{{ {stmt}[i, k] -> {tout}[i] }}"), 1, "fp32", "sum")])


def test_renamed_statements_share_one_parse():
    isl_util._parse_generic.cache_clear()
    poly_region._bind_generic.cache_clear()
    a, b = _region("S3", "T0", "T1").bind(), _region("S7", "T4", "T1").bind()
    assert isl_util._parse_generic.cache_info().misses == 3  # the domain, the read, the write: once
    assert poly_region._bind_generic.cache_info().misses == 1  # the statement: bound once, then named
    sa, sb = a.statements[0], b.statements[0]
    assert sb.domain.get_tuple_name() == "S7" and sb.write.get_tuple_name(isl.dim_type.in_) == "S7"
    assert sb.reads[0][1].get_tuple_name(isl.dim_type.out) == "T4"
    assert str(sb.reads[0][1]) == str(sa.reads[0][1]).replace("S3", "S7").replace("T0", "T4")
    assert sa.reduce_dims == sb.reduce_dims == ("k",)


def test_a_bad_statement_is_reported_under_its_own_names():
    ok = _region("S9", "T4", "T1")
    st = ok.statements[0]
    bad = PolyRegion("r", ok.tensors, [Statement("S9", st.domain, (Access("T4", "{ S9[i, k] -> T4[i, k + 1] }"),),
                                                 st.write, 1, "fp32", "sum")])
    with pytest.raises(PolysatError) as e:
        bad.bind()
    assert "E" in str(e.value) and "OutOfBoundsView" in str(e.value) and "statement S9" in str(e.value)
