"""Poly-View: isl domains and access relations equal the seed-003 forms; ContractionPattern detection
(docs/DESIGN.md §Poly-View). isl objects are compared by equality, never by text."""
from __future__ import annotations

import islpy as isl
import pytest

from polysat.analyses.indexbook import build_indexbook
from polysat.analyses.polyview import build_polyview, poly_view_json
from polysat.frontend import load_model
from polysat.ir.builder import Builder
from polysat.ir.dtypes import DType
from polysat.ir.expr import Expr
from polysat.ir.tiny import Ops


def tiny_dot(b: Builder, x, w):
    """tinygrad ``x.dot(w)`` : insert a 1, move K last, MUL with broadcast, SUM(-1)."""
    x = b.reshape(x, x.shape[:-1] + (1,) + x.shape[-1:], at="dot")
    w = b.reshape(w, w.shape[:-2] + (1,) + w.shape[-2:], at="dot")
    perm = list(range(w.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    w = b.permute(w, perm, at="dot")
    p = b.alu(Ops.MUL, x, w, at="dot")
    return b.reduce(p, "SUM", (p.ndim - 1,), DType.fp32, at="dot")


def gemm_program(a_shape, b_shape):
    b = Builder()
    A = b.input("A", DType.fp32, a_shape, at="A")
    B = b.input("B", DType.fp32, b_shape, at="B")
    return b.program([("C", tiny_dot(b, A, B))])


def renamed(m: isl.Map, stmt: str, tensor: str) -> isl.Map:
    return m.set_tuple_name(isl.dim_type.in_, stmt).set_tuple_name(isl.dim_type.out, tensor)


def contraction_block(pv):
    (blk,) = [b for b in pv.blocks if b.kind == "contraction_pattern"]
    return blk


def read_of(blk, value_id):
    (a,) = [a for a in blk.reads() if a.value_id == value_id]
    return a.map


# ---- GEMM / batched GEMM ------------------------------------------------------------------------------

@pytest.mark.parametrize("M,K,N", [(4, 8, 6), ("M", "K", "N")])
def test_gemm_access_relations_equal_seed_form(M, K, N):
    prog = gemm_program((M, K), (K, N))
    pv = build_polyview(build_indexbook(prog))
    blk = contraction_block(pv)
    P = "[M, N, K] -> " if M == "M" else ""
    box = f"0 <= m < {M} and 0 <= n < {N} and 0 <= k < {K}"
    assert blk.domain.set_tuple_name("S").is_equal(isl.Set(P + f"{{ S[m, n, k] : {box} }}"))
    a, bb = prog.inputs
    assert renamed(read_of(blk, a.id), "S", "A").is_equal(isl.Map(P + f"{{ S[m, n, k] -> A[m, k] : {box} }}"))
    assert renamed(read_of(blk, bb.id), "S", "B").is_equal(isl.Map(P + f"{{ S[m, n, k] -> B[k, n] : {box} }}"))
    (w,) = blk.writes()
    assert renamed(w.map, "S", "C").is_equal(isl.Map(P + f"{{ S[m, n, k] -> C[m, n] : {box} }}"))
    assert blk.attrs["pattern"] == "matmul"
    assert blk.attrs["reduce_idx"] == ["r0"] and blk.attrs["out_idx"] == ["i0", "i1"]
    assert blk.attrs["lhs_idx"] == ["i0", "r0"] and blk.attrs["rhs_idx"] == ["r0", "i1"]


def test_batched_gemm_access_relations_equal_seed_form():
    prog = gemm_program((3, 4, 5), (3, 5, 2))
    blk = contraction_block(build_polyview(build_indexbook(prog)))
    box = "0 <= b < 3 and 0 <= m < 4 and 0 <= n < 2 and 0 <= k < 5"
    a, bb = prog.inputs
    assert renamed(read_of(blk, a.id), "S", "A").is_equal(isl.Map(f"{{ S[b, m, n, k] -> A[b, m, k] : {box} }}"))
    assert renamed(read_of(blk, bb.id), "S", "B").is_equal(isl.Map(f"{{ S[b, m, n, k] -> B[b, k, n] : {box} }}"))
    assert blk.attrs["pattern"] == "matmul"


# ---- Conv2D / MaxPool2D through the frontend's lowering ------------------------------------------------

def conv_model(n, c, h, w, co, k, stride, pad, dil, groups):
    return {
        "signature": {"inputs": [{"tensor": "X"}, {"tensor": "W", "role": "param"}], "outputs": [{"tensor": "Y"}]},
        "tensors": {"X": {"dtype": "fp32", "shape": [n, c, h, w]},
                    "W": {"dtype": "fp32", "shape": [co, c // groups, k, k]}},
        "graph": [{"op": "Conv2D", "name": "conv", "inputs": ["X", "W"], "outputs": ["Y"],
                   "attrs": {"stride": [stride, stride], "pad": [pad] * 4, "dilation": [dil, dil],
                             "groups": groups, "acc_dtype": "fp32"}}],
    }


@pytest.mark.parametrize("stride,pad,dil,groups", [(1, 0, 1, 1), (2, 1, 1, 1), (2, 2, 2, 1), (1, 1, 1, 2), (2, 0, 1, 4)])
def test_conv_access_relations_equal_seed_form(stride, pad, dil, groups):
    n, c, h, w, co, k = 2, 4, 9, 7, 8, 3
    prog = load_model(conv_model(n, c, h, w, co, k, stride, pad, dil, groups))
    blk = contraction_block(build_polyview(build_indexbook(prog)))
    ho = (h + 2 * pad - dil * (k - 1) - 1) // stride + 1
    wo = (w + 2 * pad - dil * (k - 1) - 1) // stride + 1
    cg, cog = c // groups, co // groups
    # S[n, g, co, h, w, c, rh, rw]: out (N, G, Co/G, Ho, Wo), reduce (C/G, Kh, Kw)
    box = (f"0 <= b < {n} and 0 <= g < {groups} and 0 <= o < {cog} and 0 <= y < {ho} and 0 <= x < {wo} "
           f"and 0 <= ci < {cg} and 0 <= rh < {k} and 0 <= rw < {k}")
    hy, wx = f"{stride}y + {dil}rh - {pad}", f"{stride}x + {dil}rw - {pad}"
    want_x = isl.Map(f"{{ S[b, g, o, y, x, ci, rh, rw] -> In[b, {cg}g + ci, {hy}, {wx}] : {box} "
                     f"and 0 <= {hy} < {h} and 0 <= {wx} < {w} }}")
    want_w = isl.Map(f"{{ S[b, g, o, y, x, ci, rh, rw] -> Weight[{cog}g + o, ci, rh, rw] : {box} }}")
    x_in, w_in = prog.inputs
    assert blk.domain.set_tuple_name("S").is_equal(isl.Set(f"{{ S[b, g, o, y, x, ci, rh, rw] : {box} }}"))
    assert renamed(read_of(blk, x_in.id), "S", "In").is_equal(want_x)
    assert renamed(read_of(blk, w_in.id), "S", "Weight").is_equal(want_w)
    assert blk.attrs["pattern"] == "conv"
    assert blk.attrs["reduce_idx"] == ["r0", "r1", "r2"]


def test_conv_padding_is_not_a_read():
    prog = load_model(conv_model(1, 1, 4, 4, 1, 3, 1, 1, 1, 1))
    blk = contraction_block(build_polyview(build_indexbook(prog)))
    m = read_of(blk, prog.inputs[0].id)
    # the corner output (0, 0) reads only the 2x2 in-bounds part of its 3x3 window
    corner = isl.Set("{ [0, 0, 0, 0, 0, 0, rh, rw] : 0 <= rh < 3 and 0 <= rw < 3 }").set_tuple_name(
        m.get_tuple_name(isl.dim_type.in_))
    assert m.intersect_domain(corner).range().count_val().to_python() == 4
    assert m.range().is_subset(isl.Set("{ [0, 0, y, x] : 0 <= y < 4 and 0 <= x < 4 }").set_tuple_name(
        m.get_tuple_name(isl.dim_type.out)))


@pytest.mark.parametrize("kernel,stride", [(2, 2), (3, 2), (3, 1)])
def test_maxpool_access_relations_equal_seed_form(kernel, stride):
    n, c, h, w = 1, 3, 8, 6
    prog = load_model({
        "signature": {"inputs": [{"tensor": "X"}], "outputs": [{"tensor": "P"}]},
        "tensors": {"X": {"dtype": "fp32", "shape": [n, c, h, w]}},
        "graph": [{"op": "MaxPool2D", "name": "pool", "inputs": ["X"], "outputs": ["P"],
                   "attrs": {"kernel": [kernel, kernel], "stride": [stride, stride]}}]})
    pv = build_polyview(build_indexbook(prog))
    (blk,) = [b for b in pv.blocks if b.kind == "reduce"]
    ph, pw = (h - kernel) // stride + 1, (w - kernel) // stride + 1
    box = f"0 <= b < {n} and 0 <= ch < {c} and 0 <= y < {ph} and 0 <= x < {pw} and 0 <= rh < {kernel} and 0 <= rw < {kernel}"
    want = isl.Map(f"{{ S[b, ch, y, x, rh, rw] -> Out[b, ch, {stride}y + rh, {stride}x + rw] : {box} }}")
    assert renamed(read_of(blk, prog.inputs[0].id), "S", "Out").is_equal(want)
    (wr,) = blk.writes()
    assert renamed(wr.map, "S", "Pool").is_equal(isl.Map(f"{{ S[b, ch, y, x, rh, rw] -> Pool[b, ch, y, x] : {box} }}"))


# ---- dump shape (docs/DESIGN.md §Poly-View) and region boundaries ---------------------------------------------

def test_every_block_has_parseable_domain_and_named_accesses():
    b = Builder()
    x = b.input("x", DType.fp32, (4, 6), at="x")
    y = b.pad(b.flip(b.permute(x, (1, 0), at="t"), (0,), at="f"), ((1, 0), (0, 2)), 0.0, at="p")
    z = b.alu(Ops.ADD, y, y, at="add")
    prog = b.program([("y", y), ("z", z)])
    pv = poly_view_json(prog)["poly_view"]
    assert pv["params"] == [] and {blk["kind"] for blk in pv["blocks"]} == {"copy", "elementwise"}
    for blk in pv["blocks"]:
        dom = isl.Set(blk["domain"]["set"])
        assert dom.dim(isl.dim_type.param) == 0
        for a in blk["accesses"]:
            assert a["kind"] in ("read", "write")
            m = isl.Map(a["map"])
            assert m.get_tuple_name(isl.dim_type.out) == a["tensor"]
            assert m.dim(isl.dim_type.param) == 0
            assert m.domain().is_subset(dom)
    (copy,) = [blk for blk in pv["blocks"] if blk["kind"] == "copy"]
    assert [a["tensor"] for a in copy["accesses"]] == ["x", "y"]


def test_symbols_become_isl_parameters():
    prog = gemm_program(("M", "K"), ("K", "N"))
    pv = poly_view_json(prog)["poly_view"]
    assert pv["params"] == ["K", "M", "N"]
    (blk,) = pv["blocks"]
    assert isl.Set(blk["domain"]["set"]).dim(isl.dim_type.param) == 3


def test_product_of_symbols_is_non_scop_and_a_region_boundary():
    b = Builder()
    x = b.input("x", DType.fp32, ("B", "H", 8), at="x")
    r = b.reshape(x, (Expr.var("B") * Expr.var("H"), 8), at="merge")  # [B*H, 8]
    e = b.add(Ops.RELU, [r], at="relu")
    prog = b.program([("y", e)])
    book = build_indexbook(prog)
    assert book[r.id].non_scop and "symbol" in book[r.id].non_scop
    pv = build_polyview(book)
    assert {d["value"] for d in pv.non_scop} >= {r.id}
    # the RELU's size B*H is itself a product of symbols: outside the SCoP as well, no block
    assert all(blk.value_id != r.id for blk in pv.blocks)


def test_non_scop_reshape_stops_composition():
    b = Builder()
    x = b.input("x", DType.fp32, ("B", "H", 8), at="x")
    r = b.reshape(x, (Expr.var("B") * Expr.var("H"), 8), at="merge")
    s = b.reshape(r, ("B", "H", 8), at="split")
    e = b.add(Ops.RELU, [s], at="relu")
    book = build_indexbook(b.program([("y", e)]))
    assert book[s.id].non_scop  # splitting B*H back needs a division by the symbol H
    (acc,) = book[e.id].inputs
    assert acc.value_id == s.id and acc.map == (Expr.var("i0"), Expr.var("i1"), Expr.var("i2"))


def test_contraction_not_detected_for_sum_of_squares():
    b = Builder()
    x = b.input("x", DType.fp32, (4, 8), at="x")
    sq = b.alu(Ops.MUL, x, x, at="sq")
    s = b.reduce(sq, "SUM", (1,), DType.fp32, at="sum")
    pv = build_polyview(build_indexbook(b.program([("s", s)])))
    assert [blk.kind for blk in pv.blocks] == ["elementwise", "reduce"]
    assert pv.edges == [{"from": "S_" + sq.id, "to": "S_" + s.id, "tensor": sq.id}]


def test_contract_uop_gives_the_same_relations_as_mul_reduce():
    b = Builder()
    A = b.input("A", DType.fp32, (4, 8), at="A")
    B = b.input("B", DType.fp32, (8, 6), at="B")
    c = b.add(Ops.CONTRACT, [A, B], {"lhs_idx": ("m", "k"), "rhs_idx": ("k", "n"), "out_idx": ("m", "n"),
                                    "dtype": DType.fp32}, at="c")
    blk = contraction_block(build_polyview(build_indexbook(b.program([("C", c)]))))
    ref = contraction_block(build_polyview(build_indexbook(gemm_program((4, 8), (8, 6)))))
    a2, b2 = gemm_program((4, 8), (8, 6)).inputs
    assert renamed(read_of(blk, A.id), "S", "A").is_equal(renamed(read_of(ref, a2.id), "S", "A"))
    assert renamed(read_of(blk, B.id), "S", "B").is_equal(renamed(read_of(ref, b2.id), "S", "B"))
    assert blk.attrs["pattern"] == "matmul" and blk.attrs["reduce_idx"] == ["r0"]


def test_padded_read_reports_its_gisted_in_bounds_predicate():
    b = Builder()
    x = b.input("x", DType.fp32, (6,), at="x")
    y = b.add(Ops.NEG, [b.pad(x, ((2, 1),), 0.0, at="p")], at="y")
    (blk,) = build_polyview(build_indexbook(b.program([("y", y)]))).blocks
    (rd,) = blk.reads()
    name = blk.domain.get_tuple_name()
    assert rd.in_bounds.is_equal(isl.Set(f"{{ {name}[i0] : 2 <= i0 <= 7 }}"))
    assert rd.in_bounds.intersect(blk.domain).is_equal(rd.map.domain())


# ---- blocks of one form under other names (identical experts) ------------------------------------------

def test_blocks_of_one_form_are_renamed_and_equal_to_blocks_built_afresh():
    """Two identical branches (a padded slice of X, exp, a GEMM each with its own weight): the second branch's
    blocks are the first's renamed (one block made per form), and every block equals the one ``_make_block``
    builds on its own: the domain, each read's map, in-bounds piece, tensor and value, the write, and the texts
    its statement is printed from."""
    from polysat.analyses import polyview as pvm
    b = Builder()
    X = b.input("X", DType.fp32, (8, 6), at="X")
    outs = []
    for e in range(2):
        xe = b.pad(b.shrink(X, (4 * e, 0), (4 * e + 4, 6), at=f"s{e}"), ((0, 0), (1, 1)), at=f"p{e}")
        h = b.alu(Ops.EXP2, xe, at=f"x{e}")
        W = b.input(f"W{e}", DType.fp32, (8, 5), at=f"W{e}")
        outs.append((f"Y{e}", tiny_dot(b, h, W)))
    prog = b.program(outs)
    pvm._BLOCKS.clear()
    pvm._FORMS.clear()
    book = build_indexbook(prog)
    pv = build_polyview(book)
    assert len(pvm._FORMS) < len(pv.blocks)  # the second branch made no block of its own
    plans, _ = pvm._plans(book)
    for blk, (info, kind, reads, attrs) in zip(pv.blocks, plans, strict=True):
        fresh = pvm._make_block(book, pv.tensors, info, kind, reads, attrs, blk.writes()[0].tensor)
        assert (blk.name, blk.value_id, blk.kind, blk.space, blk.attrs) == \
            (fresh.name, fresh.value_id, fresh.kind, fresh.space, fresh.attrs)
        assert blk.domain.is_equal(fresh.domain) and blk.domain.get_tuple_name() == fresh.domain.get_tuple_name()
        assert len(blk.accesses) == len(fresh.accesses)
        assert pvm.block_texts(blk) == (str(fresh.domain), tuple(str(a.map) for a in fresh.reads()),
                                        str(fresh.writes()[0].map))  # the statement's text, renamed not printed
        for a, f in zip(blk.accesses, fresh.accesses, strict=True):
            assert (a.tensor, a.value_id, a.kind, a.access) == (f.tensor, f.value_id, f.kind, f.access)
            assert a.map.is_equal(f.map) and str(a.map) == str(f.map)
            assert (a.in_bounds is None) == (f.in_bounds is None)
            assert a.in_bounds is None or (a.in_bounds.is_equal(f.in_bounds) and str(a.in_bounds) == str(f.in_bounds))
