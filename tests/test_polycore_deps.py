"""Dependences of hand-built regions against isl relations written by hand (compared by isl
equality), and the parallel / reduce axes they leave."""
import islpy as isl

from polysat.analyses.dependences import dependences
from polysat.tests.poly_examples import T, attention, conv_relu_maxpool, gemm, softmax, stmt
from polysat.analyses.poly_region import PolyRegion
from polysat.analyses.polycore import analyze


def _eq(got: isl.Map, want: str):
    w = isl.Map(want)
    assert got.is_equal(w), f"\n got: {got}\nwant: {w}"


def test_gemm_memory_dependences_are_carried_by_k_only():
    b = gemm(M=4, N=3, K=5).bind()
    d = dependences(b)
    box = "0 <= m < 4 and 0 <= n < 3 and 0 <= k < k' < 5"
    for kind in ("flow", "anti", "output"):
        _eq(d.between("gemm", "gemm", kind), f"{{ gemm[m, n, k] -> gemm[m, n, k'] : {box} }}")
    s = b.stmt("gemm")
    assert d.carried(s) == ("k",)
    assert d.parallel(s) == ("m", "n")


def test_gemm_exact_flow_is_the_next_accumulation_step():
    d = dependences(gemm(M=4, N=3, K=5).bind(), exact=True)
    _eq(d.between("gemm", "gemm"), "{ gemm[m, n, k] -> gemm[m, n, k + 1] : 0 <= m < 4 and 0 <= n < 3 and 0 <= k < 4 }")


def test_conv_relu_pool_flow_dependences():
    b = conv_relu_maxpool(N=1, C=3, K=2, H=8, W=8).bind()
    exact = dependences(b, exact=True)
    # relu reads the finished conv value: the last reduction step (c = C-1, r = s = 2)
    _eq(exact.between("conv", "relu"),
        "{ conv[0, k, h, w, 2, 2, 2] -> relu[0, k, h, w] : 0 <= k < 2 and 0 <= h < 8 and 0 <= w < 8 }")
    # each pool instance reads the relu value of its window (h_c = 2 h_p + i)
    _eq(exact.between("relu", "pool"),
        "{ relu[0, k, h, w] -> pool[0, k, ph, pw, i, j] : 0 <= k < 2 and 0 <= ph < 4 and 0 <= pw < 4 and "
        "0 <= i < 2 and 0 <= j < 2 and h = 2ph + i and w = 2pw + j }")
    # memory-based: every conv step writing O precedes relu
    mem = dependences(b)
    _eq(mem.between("conv", "relu"),
        "{ conv[0, k, h, w, c, r, s] -> relu[0, k, h, w] : 0 <= k < 2 and 0 <= h < 8 and 0 <= w < 8 and "
        "0 <= c < 3 and 0 <= r < 3 and 0 <= s < 3 }")
    assert mem.between("pool", "conv").is_empty()


def test_live_ins_are_the_region_inputs():
    b = conv_relu_maxpool(N=1, C=2, K=2, H=6, W=6).bind()
    d = dependences(b)
    tensors = set()
    d.live_in.range().foreach_set(lambda s: tensors.add(s.get_tuple_name()))
    assert tensors == {"I", "Wt"}
    assert d.unwritten_reads() == {}


def test_reading_before_writing_is_found():
    # consumer scheduled before its producer: every read of y is unwritten at that point
    use = stmt("use", {"i": 4}, ["y[i]"], "z[i]")
    make = stmt("make", {"i": 4}, ["x[i]"], "y[i]")
    r = PolyRegion("backwards", [T("x", (4,)), T("y", (4,), role="internal"), T("z", (4,), role="output")], [use, make])
    bad = dependences(r.bind()).unwritten_reads()
    assert set(bad) == {"y"}
    assert bad["y"].is_equal(isl.Set("{ y[i] : 0 <= i < 4 }"))
    rep = analyze(r, "sm90")
    assert not rep.compute_at_ok
    assert any("y is read" in why for why in rep.reasons)


def test_partial_write_leaves_the_rest_unwritten():
    make = stmt("make", {"i": 2}, ["x[i]"], "y[i]")
    use = stmt("use", {"i": 4}, ["y[i]"], "z[i]")
    r = PolyRegion("partial", [T("x", (4,)), T("y", (4,), role="internal"), T("z", (4,), role="output")], [make, use])
    bad = dependences(r.bind()).unwritten_reads()
    assert bad["y"].is_equal(isl.Set("{ y[i] : 2 <= i < 4 }"))


def test_axes_of_softmax_and_attention():
    b = softmax(R=4, C=8).bind()
    d = dependences(b)
    assert d.parallel(b.stmt("rowmax")) == ("r",) and d.carried(b.stmt("rowmax")) == ("c",)
    assert d.parallel(b.stmt("exp")) == ("r", "c")
    rep = analyze(attention(S=64, D=16), "sm80")
    assert rep.parallel_axes == ("q", "e")
    assert rep.reduce_axes == ("d", "k")


def test_dependence_pairs_are_listed_with_relations():
    pairs = dependences(conv_relu_maxpool(N=1, C=1, K=1, H=4, W=4).bind(), exact=True).pairs()
    kinds = {(p["kind"], p["src"], p["dst"]) for p in pairs}
    assert ("flow", "conv", "relu") in kinds and ("flow", "relu", "pool") in kinds
    assert ("flow", "pool", "pool") in kinds  # the max accumulation
    assert all(isl.Map(p["relation"]) is not None for p in pairs)
