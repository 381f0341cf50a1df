"""Compute-at slices, footprints and halos against isl sets written by hand (isl equality) and
against brute-force enumeration of the loops (the pre-image of a consumer tile, docs/DESIGN.md §Poly Core)."""
import islpy as isl
from hypothesis import given, strategies as st

from polysat.analyses.footprint import _placed, card, footprint, make_tile, reach, reached, sectors
from polysat.analyses.halo import apart, halo
from polysat.analyses.isl_util import points
from polysat.tests.poly_examples import (conv, conv_relu_maxpool, gemm, layernorm, maxpool, merge, mlp_residual,
                                         softmax)
from polysat.analyses.polycore import analyze


def _eq(got: isl.Set, want: str):
    w = isl.Set(want)
    assert got.is_equal(w), f"\n got: {got}\nwant: {w}"


def test_gemm_tile_footprints_are_row_and_column_slabs():
    b = gemm(M=256, N=256, K=64).bind()
    t = make_tile(b, {"m": 64, "n": 32})
    (m0, n0) = dict(t.origin)["m"], dict(t.origin)["n"]
    _eq(footprint(b, t.slices, "A"), f"{{ A[m, k] : {m0} <= m < {m0 + 64} and 0 <= k < 64 }}")
    _eq(footprint(b, t.slices, "B"), f"{{ B[k, n] : 0 <= k < 64 and {n0} <= n < {n0 + 32} }}")
    assert t.count == 4 * 8
    h = halo(b, t, ["A", "B", "C"])
    assert h.bytes == 0 and set(h.per_axis.values()) == {0}


def test_conv_pad1_stride1_halo_is_two_per_spatial_axis():
    b = conv(N=1, C=4, K=8, H=32, W=32, stride=1, pad=1).bind()
    t = make_tile(b, {"n": 1, "k": 8, "h": 8, "w": 8})
    o = dict(t.origin)
    h0, w0 = o["h"], o["w"]
    _eq(footprint(b, t.slices, "I"),
        f"{{ I[0, c, h, w] : 0 <= c < 4 and {h0 - 1} <= h <= {h0 + 8} and {w0 - 1} <= w <= {w0 + 8} }}")
    hl = halo(b, t, ["I"])
    assert hl.per_axis["h"] == 2 and hl.per_axis["w"] == 2
    # two overlap strips of 2 rows x 10 columns x 4 channels of fp16
    assert hl.per_tensor["I"] == {"h": 2 * 10 * 4, "w": 2 * 10 * 4}
    assert hl.bytes == 2 * (2 * 10 * 4) * 2


def test_conv_pad1_stride2_halo_is_one():
    b = conv(N=1, C=2, K=8, H=64, W=64, stride=2, pad=1).bind()
    t = make_tile(b, {"n": 1, "k": 8, "h": 8, "w": 8})
    h0 = dict(t.origin)["h"]
    fp = footprint(b, t.slices, "I")
    lo, hi = fp.dim_min_val(2).to_python(), fp.dim_max_val(2).to_python()
    assert (lo, hi) == (2 * h0 - 1, 2 * (h0 + 7) + 1)
    assert halo(b, t, ["I"]).per_axis["h"] == 1


def test_conv_relu_pool_compute_at_slices():
    """A 4x4 pool tile drives an 8x8 conv tile that reads a 10x10 input patch (halo 2)."""
    b = conv_relu_maxpool(N=1, C=3, K=4, H=64, W=64).bind()
    t = make_tile(b, {"n": 1, "k": 4, "ph": 4, "pw": 4})
    o = dict(t.origin)
    p0, q0 = o["ph"], o["pw"]
    _eq(t.slices["relu"], f"{{ relu[0, k, h, w] : 0 <= k < 4 and {2 * p0} <= h < {2 * p0 + 8} and "
                          f"{2 * q0} <= w < {2 * q0 + 8} }}")
    _eq(t.slices["conv"], f"{{ conv[0, k, h, w, c, r, s] : 0 <= k < 4 and {2 * p0} <= h < {2 * p0 + 8} and "
                          f"{2 * q0} <= w < {2 * q0 + 8} and 0 <= c < 3 and 0 <= r < 3 and 0 <= s < 3 }}")
    _eq(footprint(b, t.slices, "I"), f"{{ I[0, c, h, w] : 0 <= c < 3 and {2 * p0 - 1} <= h <= {2 * p0 + 8} and "
                                     f"{2 * q0 - 1} <= w <= {2 * q0 + 8} }}")
    rep = analyze(conv_relu_maxpool(N=1, C=3, K=4, H=64, W=64), "sm80", {"n": 1, "k": 4, "ph": 4, "pw": 4})
    assert rep.compute_at_ok
    assert rep.halo_per_axis["ph"] == 2 and rep.halo_per_axis["pw"] == 2
    assert rep.halo_bytes > 0
    assert rep.recompute == {"conv": 1.0, "relu": 1.0, "pool": 1.0}  # 2x2/2 windows do not overlap


def test_overlapping_pool_windows_recompute_the_producer():
    # a 3x3 stride-1 pool over relu(conv): neighbouring tiles recompute two rows of conv
    r = conv_relu_maxpool(N=1, C=2, K=4, H=32, W=32, win=3, pstride=1)
    rep = analyze(r, "sm80", {"n": 1, "k": 4, "ph": 8, "pw": 8})
    assert rep.halo_per_axis["ph"] == 4  # 2 (pool window) + 2 (conv window)
    # conv instances per pool instance: 10x10 per 8x8 in a tile, 32x32 per 30x30 over the image
    assert abs(rep.recompute["conv"] - (10 * 10 / (8 * 8)) / (32 * 32 / (30 * 30))) < 1e-9
    assert {e.tensor: e.kind for e in rep.edges}["R"] == "stencil"


def test_softmax_row_tile_needs_the_whole_row():
    b = softmax(R=16, C=64).bind()
    t = make_tile(b, {"r": 4, "c": 16})
    r0 = dict(t.origin)["r"]
    _eq(t.slices["rowmax"], f"{{ rowmax[r, c] : {r0} <= r < {r0 + 4} and 0 <= c < 64 }}")
    rep = analyze(softmax(R=16, C=64), "sm90", {"r": 4, "c": 16})
    assert rep.recompute["exp"] == 4.0  # every column tile recomputes the row's exp
    assert not rep.compute_at_ok


def test_card_and_sectors_are_exact():
    assert card(isl.Set("{ S[i, j] : 0 <= i < 1000 and 0 <= j < 3000 }")) == 3_000_000
    assert card(isl.Set("{ S[i, j] : 0 <= i < 10 and 0 <= j <= i }")) == 55
    assert card(isl.Set("{ S[i] : 0 <= i < 10 and i mod 3 = 0 }")) == 4
    # fp16 row of 64 elements starting at 8: 16 elements per 32-byte sector -> sectors 0..4
    assert sectors(isl.Set("{ T[r, c] : 0 <= r < 2 and 8 <= c < 72 }"), 2) == 2 * 5
    # with the tensor's shape: rows read whole are one run; an empty set touches nothing
    assert sectors(isl.Set("{ T[r, c] : 2 <= r < 4 and 0 <= c < 64 }"), 2, 32, (8, 64)) == 8
    assert sectors(isl.Set("{ T[r, c] : 2 <= r < 4 and 0 <= c < 64 and r > c + 100 }"), 2, 32, (8, 64)) == 0


def _brute_pool_conv_footprint(H, W, S, P, win, ps, tile_origin, tile_size, Ho, Wo, Po, Qo):
    """I elements one pool tile needs, by walking the loops."""
    (p0, q0), (tp, tq) = tile_origin, tile_size
    conv_pts = set()
    for ph in range(p0, min(p0 + tp, Po)):
        for pw in range(q0, min(q0 + tq, Qo)):
            for i in range(win):
                for j in range(win):
                    conv_pts.add((ps * ph + i, ps * pw + j))
    out = set()
    for h, w in conv_pts:
        assert 0 <= h < Ho and 0 <= w < Wo
        for r in range(3):
            for s in range(3):
                y, x = S * h + r - P, S * w + s - P
                if 0 <= y < H and 0 <= x < W:
                    out.add((0, 0, y, x))
    return out, len(conv_pts)


@given(H=st.integers(6, 20), W=st.integers(6, 20), S=st.sampled_from([1, 2]), P=st.sampled_from([0, 1]),
       win=st.sampled_from([2, 3]), ps=st.sampled_from([1, 2]), tp=st.integers(1, 5), tq=st.integers(1, 5))
def test_isl_footprint_equals_enumeration(H, W, S, P, win, ps, tp, tq):
    r = conv_relu_maxpool(N=1, C=1, K=1, H=H, W=W, stride=S, pad=P, win=win, pstride=ps)
    params = dict(r.params)
    if params["Po"] < 1 or params["Qo"] < 1:
        return
    b = r.bind()
    t = make_tile(b, {"n": 1, "k": 1, "ph": tp, "pw": tq})
    o = dict(t.origin)
    want, n_conv = _brute_pool_conv_footprint(H, W, S, P, win, ps, (o["ph"], o["pw"]), (tp, tq), params["Ho"],
                                              params["Wo"], params["Po"], params["Qo"])
    got = set(points(footprint(b, t.slices, "I")))
    assert got == want
    assert card(t.slices["relu"]) == n_conv
    assert card(footprint(b, t.slices, "I")) == len(want)


@given(H=st.integers(4, 24), W=st.integers(4, 24), tp=st.integers(1, 6), tq=st.integers(1, 6))
def test_maxpool_tile_footprint_is_the_window_union(H, W, tp, tq):
    r = maxpool(N=1, C=2, H=H, W=W)
    b = r.bind()
    t = make_tile(b, {"n": 1, "c": 2, "ph": tp, "pw": tq})
    o = dict(t.origin)
    Po, Qo = dict(r.params)["Po"], dict(r.params)["Qo"]
    p1, q1 = min(o["ph"] + tp, Po), min(o["pw"] + tq, Qo)
    _eq(footprint(b, t.slices, "X"), f"{{ X[0, c, h, w] : 0 <= c < 2 and {2 * o['ph']} <= h < {2 * p1} and "
                                     f"{2 * o['pw']} <= w < {2 * q1} }}")


@given(H=st.integers(6, 20), W=st.integers(6, 20), S=st.sampled_from([1, 2]), P=st.sampled_from([0, 1]),
       win=st.sampled_from([2, 3]), ps=st.sampled_from([1, 2]), tp=st.integers(1, 5), tq=st.integers(1, 5),
       dim=st.sampled_from(["ph", "pw"]))
def test_reached_footprint_of_the_next_tile_equals_enumeration(H, W, S, P, win, ps, tp, tq, dim):
    """The halo's next tile, through the composed relation (footprint.reach), touches what walking its loops
    touches."""
    r = conv_relu_maxpool(N=1, C=1, K=1, H=H, W=W, stride=S, pad=P, win=win, pstride=ps)
    params = dict(r.params)
    if params["Po"] < 1 or params["Qo"] < 1:
        return
    b = r.bind()
    sizes = {"n": 1, "k": 1, "ph": tp, "pw": tq}
    placed = _placed(b, sizes, {dim: 1})
    nb = make_tile(b, sizes, {dim: 1})
    assert (placed is None) == (nb is None)
    if placed is None:
        return
    o = dict(nb.origin)
    want, _ = _brute_pool_conv_footprint(H, W, S, P, win, ps, (o["ph"], o["pw"]), (tp, tq), params["Ho"],
                                         params["Wo"], params["Po"], params["Qo"])
    assert reach(r, "I") is not None
    assert set(points(reached(b, placed[0], "I"))) == want


def test_reached_without_a_relation_when_an_output_is_not_reached():
    """A region with a second output the driver never reads: its slices are boxes of the tile's ranges, so
    reach() declines and reached() takes the slices; both give the next tile's footprints."""
    r = merge([softmax(R=16, C=64), maxpool(N=1, C=2, H=8, W=8)])
    b = r.bind()
    sizes = {d: 2 for d in b.driver.parallel_dims}
    placed = _placed(b, sizes, {b.driver.parallel_dims[-1]: 1})
    assert reach(r, "X") is None and placed is not None
    nb = make_tile(b, sizes, {b.driver.parallel_dims[-1]: 1})
    for t in [t.name for t in r.tensors]:
        assert reached(b, placed[0], t).is_equal(footprint(b, nb.slices, t)), t


def test_apart_dims_are_those_no_shared_element_crosses():
    """A GEMM's A rows are read by one m only (apart along m, shared along n); a 3x3 conv's input is shared
    along h and w and across output channels, never across images."""
    assert apart(gemm(M=256, N=256, K=64), "A") == {"m"}
    assert apart(gemm(M=256, N=256, K=64), "B") == {"n"}
    r = conv(N=2, C=4, K=8, H=16, W=16, stride=1, pad=1)
    assert apart(r, "I") == {"n"}


def _halo_by_definition(b, t, tensors) -> dict:
    """Per tensor and tiled dim, the overlap of this tile's footprint with the next tile's, both sliced
    statement by statement (make_tile), as the halo defines it."""
    out: dict = {}
    for d in dict(t.sizes):
        nb = make_tile(b, dict(t.sizes), {d: 1})
        if nb is None:
            continue
        for x in tensors:
            f0, f1 = footprint(b, t.slices, x), footprint(b, nb.slices, x)
            if f0.is_empty() or f0.is_equal(f1):
                continue
            out.setdefault(x, {})[d] = card(f0.intersect(f1))
    return out


@given(ex=st.sampled_from(["conv_relu_maxpool", "mlp_residual", "softmax", "layernorm"]),
       a=st.sampled_from([1, 2, 4, 8]), c=st.sampled_from([1, 2, 4, 8]))
def test_halo_equals_its_definition(ex, a, c):
    r = {"conv_relu_maxpool": lambda: conv_relu_maxpool(N=2, C=2, K=4, H=16, W=16),
         "mlp_residual": lambda: mlp_residual(M=32, D=16, H=32), "softmax": lambda: softmax(R=16, C=32),
         "layernorm": lambda: layernorm(R=16, C=32)}[ex]()
    b = r.bind()
    par = b.driver.parallel_dims
    sizes = {d: (a if k == len(par) - 1 else c if k == len(par) - 2 else 1) for k, d in enumerate(par)}
    t = make_tile(b, sizes)
    tensors = [x.name for x in r.tensors]
    assert halo(b, t, tensors).per_tensor == _halo_by_definition(b, t, tensors)


def test_a_halo_isl_cannot_finish_within_its_quota_is_its_boxes_overlap(monkeypatch):
    """Past HALO_OPERATIONS (MaxViT's windowed attention at 224 px took isl minutes) an overlap is the overlap of the two
    footprints' bounding boxes: never less than the exact one, and listed as boxed; ``apart`` knows no dim then."""
    import polysat.analyses.halo as H
    r = conv_relu_maxpool(N=2, C=2, K=4, H=16, W=16)
    b = r.bind()
    par = b.driver.parallel_dims
    t = make_tile(b, {d: (4 if k >= len(par) - 2 else 1) for k, d in enumerate(par)})
    tensors = [x.name for x in r.tensors]
    exact = halo(b, t, tensors)
    assert exact.boxed == ()
    H.apart.cache_clear()
    monkeypatch.setattr(H, "HALO_OPERATIONS", 1)
    try:
        assert H.apart(r, "I") == frozenset()
        got = halo(b, t, tensors)
    finally:
        H.apart.cache_clear()
    assert got.boxed and got.bytes >= exact.bytes > 0
    for x, dims in exact.per_tensor.items():
        for d, n in dims.items():
            assert got.per_tensor[x][d] >= n, (x, d)


def test_a_set_is_printed_whatever_the_quota_left():
    """A set's text (its memo's key, isl_util.held) is printed outside the quota it was made under: isl's printer
    counts operations too, fails once the quota is spent, and islpy may then read the printer it freed (Longformer's
    halos: a segmentation fault)."""
    import islpy as isl
    import pytest
    from polysat.analyses.isl_util import printed
    from polysat.analyses.settext import isl_quota
    s = isl.Set("{ [i, j] : 0 <= i < 100 and 0 <= j < 100 and exists (e: i = 3e + j) }")
    t = isl.Set("{ [i, j] : 0 <= i < 50 and 0 <= j < 70 and exists (e: j = 5e + i) }")
    want = str(s)
    with isl_quota(s.get_ctx(), 5):
        with pytest.raises(isl.Error):
            s.intersect(t).coalesce()
        with pytest.raises(isl.Error):
            str(s)
        assert printed(s) == want
        with pytest.raises(isl.Error):  # the quota still holds after
            s.intersect(t).coalesce()


def test_fans_are_the_same_under_other_names_and_counted_right():
    """Each exp cell reads one row max, each row max is read by the row's C cells; each rowsum cell reads C
    exps. A region renamed (other statement and tensor names, as another candidate names it) has the same fans."""
    from polysat.analyses.buffers import _reads_of
    from polysat.analyses.poly_region import renamed
    r = softmax(R=16, C=32)
    fans = {(t, c.name): (i, o) for t, rs in _reads_of(r).items() for c, i, o in rs}
    assert fans[("mx", "exp")] == (1, 32) and fans[("e", "rowsum")] == (32, 1) and fans[("e", "div")] == (1, 1)
    ren = {"mx": "q7", "e": "q8", "sm": "q9", "exp": "S9", "rowsum": "S4", "div": "S2", "rowmax": "S1"}
    other = renamed(r, ren, "other")
    got = {(t, c.name): (i, o) for t, rs in _reads_of(other).items() for c, i, o in rs}
    assert got == {(ren[t], ren[c]): v for (t, c), v in fans.items()}


def test_an_image_met_under_other_tuple_names_is_renamed_not_recomputed():
    """image() keeps an image by its texts without their tuple names: the same set and map named S1/T1 give
    the image of S2/T2 renamed to T1, equal to isl's own apply; a count is kept the same way."""
    from polysat.analyses.footprint import image
    text = "{ %s[i, r] : 0 <= i < 40 and 0 <= r < 3 and i %% 7 >= 2 }"
    rel = "{ %s[i, r] -> %s[i + r, 1] : 0 <= i < 40 and 0 <= r < 3 }"
    a = image(isl.Set(text % "S2"), isl.Map(rel % ("S2", "T2")))
    s, m = isl.Set(text % "S1"), isl.Map(rel % ("S1", "T1"))
    b = image(s, m)
    assert b.get_tuple_name() == "T1" and a.get_tuple_name() == "T2"
    assert b.is_equal(s.apply(m)) and card(b) == card(s.apply(m)) == len(set(points(s.apply(m))))


def test_a_tile_of_a_region_under_other_names_is_the_same_tile_renamed():
    """The clamped driver domains and the images are kept without tuple names: a renamed region's tile slices
    are the original's, each under its own statement's name."""
    from polysat.analyses.poly_region import renamed
    r = conv_relu_maxpool(N=1, C=2, K=4, H=16, W=16)
    ren = {"conv": "S7", "relu": "S3", "pool": "S5", "R": "T9"}
    sizes = {"n": 1, "k": 4, "ph": 2, "pw": 4}
    t0 = make_tile(r.bind(), sizes)
    t1 = make_tile(renamed(r, ren, "other").bind(), sizes)
    for name, sl in t0.slices.items():
        got = t1.slices[ren.get(name, name)]
        assert got.get_tuple_name() == ren.get(name, name)
        assert got.set_tuple_name(name).is_equal(sl), name


HARD = ('{ [i0] : exists (e0, e1, e2, e3, e4, e5, e6, e7: -7 + i0 - 392e0 <= 8e1 <= i0 - 392e0 and 0 <= e3 <='
        ' 48 and -6 + e3 <= 7e4 <= e3 and -55 + e1 - 6e2 - e3 + e4 + 7e5 <= 7e7 <= e1 - 6e2 - e3 + e4 + 7e5 '
        'and 49e7 >= -e1 + 14e2 + e3 + 7e4 - 7e5 and 49e7 >= -e1 + 6e2 + e3 + 7e4 - 7e5 and 56 - e1 + 6e2 + '
        'e3 - e4 - 7e5 + 56e6 <= 49e7 <= 111 - e1 + 6e2 + e3 - e4 - 7e5 + 56e6 and 49e7 <= 63 - e1 + 6e2 + e3'
        ' + 7e4 - 7e5 and 49e7 <= 7 - e1 + 14e2 + e3 + 7e4 - 7e5 and 343e7 >= -455 + 56e0 - 7e1 + 98e2 - 57e3'
        ' + 49e4 - 49e5 - 448e6 and -7 - 7e1 + 42e2 - e3 + 49e4 + 7e5 <= 343e7 <= 48 - 7e1 + 42e2 - e3 + 49e4'
        ' + 7e5 and 343e7 <= -400 + 56e0 - 7e1 + 98e2 - 57e3 + 49e4 - 49e5 - 448e6) }')


def test_a_count_isl_cannot_finish_is_bounded_by_its_box():
    """MaxViT's grid partitions read a footprint whose sectors form a 1-D set under 8 existentials: isl's count of it
    ran for over 20 minutes. Past COUNT_OPERATIONS the count is the set's bounding box (an upper bound, so the
    access is priced no cheaper than it is); an ordinary set keeps its exact count."""
    import islpy as isl

    from polysat.analyses.settext import bounded_count as _count
    hard = isl.Set(HARD)
    assert _count(hard) == 25088  # sectors 0..25087
    easy = isl.Set("{ [i, j] : 0 <= i < 10 and 0 <= j <= i and exists a: i = 2a }")
    assert _count(easy) == sum(i + 1 for i in range(0, 10, 2))
    assert hard.get_ctx().get_max_operations() == 0  # the quota is lifted after the count


def test_a_set_read_back_from_its_text_is_a_copy_with_the_same_points():
    """isl_util.fresh reads an object back from its text: the same points, nothing shared. footprint._readable
    reads back only a union holding an empty piece (isl's coalesce of one crashed on Longformer's sliding-window
    slices); any other set is kept as it is."""
    from polysat.analyses.footprint import _readable
    from polysat.analyses.isl_util import fresh
    s = isl.Set("{ S[i, j] : 0 <= i < 10 and 0 <= j < 4 and (i - j) mod 3 = 0; S[i, j] : 20 <= i < 24 and j = 0 }")
    c = fresh(s)
    assert c is not s and c.is_equal(s) and sorted(points(c)) == sorted(points(s))
    assert _readable(s) is s
