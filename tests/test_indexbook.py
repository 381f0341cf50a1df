"""IndexBook: per-value axes, domains, AxisMaps and reduce axes (docs/DESIGN.md §IndexBook), its
invariants and diagnostics."""
from __future__ import annotations

import json

import islpy as isl
import numpy as np
import pytest
from hypothesis import given, strategies as st

from polysat.analyses.indexbook import (MAX_PIECES, Access, build_indexbook, check_dump, indexbook_json,
                                        validate)
from polysat.ir.movement import reshape_exprs
from polysat.analyses.polyview import build_polyview
from polysat.ir.builder import Builder
from polysat.ir.diagnostics import PolysatError
from polysat.ir.dtypes import DType
from polysat.ir.expr import Expr, FloorDiv
from polysat.ir.tiny import Ops

from polysat.tests.work_count import calls_made


def codes(exc: PolysatError) -> list:
    return [d.code for d in exc.diagnostics]


def gemm_tinygrad(M="M", K="K", N="N"):
    """X·W in tinygrad's dot order: T = MUL over [M, N, K], C0 = SUM over K."""
    b = Builder()
    A = b.input("A", DType.fp16, (M, K), at="A")
    B = b.input("B", DType.fp16, (K, N), at="B")
    x = b.reshape(A, (M, 1, K), at="dot")
    w = b.permute(b.reshape(B, (1, K, N), at="dot"), (0, 2, 1), at="dot")
    t = b.alu(Ops.MUL, x, w, at="dot")
    c0 = b.reduce(t, "SUM", (2,), DType.fp32, at="dot")
    return b.program([("C0", c0)]), t, c0


# ---- the --dump=indexbook documents --------------------------------------------------------------------------

def test_gemm_dump_matches_seed_section_4_5():
    prog, t, c0 = gemm_tinygrad()
    ib = indexbook_json(prog)["index_book"]
    T, C0 = ib[t.id], ib[c0.id]
    assert [(a["name"], a["size"], a["kind"]) for a in T["axes"]] == [("i0", "M", "iter"), ("i1", "N", "iter"),
                                                                      ("i2", "K", "iter")]
    assert T["domain"]["constraints"] == [["0<=i0", "i0<M"], ["0<=i1", "i1<N"], ["0<=i2", "i2<K"]]
    assert T["inputs"] == [{"value_id": "n0", "map": ["i0", "i2"]}, {"value_id": "n1", "map": ["i2", "i1"]}]
    assert [(a["name"], a["size"]) for a in C0["axes"]] == [("i0", "M"), ("i1", "N")]
    assert C0["domain"]["constraints"][:2] == [["0<=i0", "i0<M"], ["0<=i1", "i1<N"]]
    assert C0["inputs"] == [{"value_id": t.id, "map": ["i0", "i1", "r0"]}]
    assert C0["reduce_axes"] == [T["axes"][2]["id"]]  # the id of K before deletion
    assert {a["id"] for a in C0["axes"]}.isdisjoint(a["id"] for a in T["axes"])


def test_conv_dump_matches_seed_section_4_5():
    """Xv = VIEW(PAD(X)) of a 3x3 stride-2 pad-1 conv: piecewise in/out-of-bounds domain."""
    b = Builder()
    x = b.input("X", DType.fp16, ("N", "C", "H", "W"), at="X")
    xp = b.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), 0.0, at="pad")
    ho, wo = Expr.of("(H - 1)//2 + 1"), Expr.of("(W - 1)//2 + 1")
    xv = b.view(xp, ("N", "C", ho, wo, 3, 3), ("i0", "i1", "2*i2 + i4", "2*i3 + i5"), at="view")
    prog = b.program([("Xv", b.add(Ops.RELU, [xv], at="use"))])
    entry = indexbook_json(prog)["index_book"][xv.id]
    assert [a["size"] for a in entry["axes"]] == ["N", "C", "(H + 1)//2", "(W + 1)//2", 3, 3]
    assert entry["inputs"] == [{"value_id": xp.id, "map": ["i0", "i1", "2*i2 + i4", "2*i3 + i5"]}]
    kinds = [p["kind"] for p in entry["domain"]["pieces"]]
    assert kinds == ["in", "pad"]
    book = build_indexbook(prog)
    (inside,) = [p for p in book[xv.id].pieces if p.kind == "in"]
    names = ["i0", "i1", "i2", "i3", "i4", "i5"]
    box = "0 <= i0 < N and 0 <= i1 < C and 0 <= i2 <= floor((H - 1)/2) and 0 <= i3 <= floor((W - 1)/2) " \
          "and 0 <= i4 < 3 and 0 <= i5 < 3"
    got = isl.Set(f"[N, C, H, W] -> {{ [{', '.join(names)}] : {box} and "
                  + " and ".join(f"{g.to_isl()} >= 0" for g in inside.guard) + " }")
    want = isl.Set(f"[N, C, H, W] -> {{ [{', '.join(names)}] : {box} and 0 <= 2*i2 + i4 - 1 < H "
                   "and 0 <= 2*i3 + i5 - 1 < W }")
    assert got.is_equal(want)


def test_build_is_deterministic():
    prog, _, _ = gemm_tinygrad()
    assert json.dumps(indexbook_json(prog)) == json.dumps(indexbook_json(prog))


# ---- update rules (docs/DESIGN.md §IndexBook) -----------------------------------------------------------------

def test_unary_inherits_axis_ids_and_binary_gets_new_ones():
    b = Builder()
    x = b.input("x", DType.fp32, (4, 1), at="x")
    r = b.add(Ops.RELU, [x], at="r")
    e = b.expand(r, (4, 5), at="e")
    s = b.alu(Ops.ADD, e, e, at="s")
    book = build_indexbook(b.program([("s", s)]))
    assert [a.id for a in book[r.id].axes] == [a.id for a in book[x.id].axes]
    assert [a.kind for a in book[x.id].axes] == ["iter", "broadcast"]
    assert book[e.id].inputs[0].map == (Expr.var("i0"), Expr.const(0))  # broadcast is a constant 0
    assert set(a.id for a in book[s.id].axes).isdisjoint(a.id for a in book[e.id].axes)
    assert book[s.id].inputs[0] == Access(r.id, (Expr.var("i0"), Expr.const(0)))  # through EXPAND to RELU


def test_reduce_removes_axes_and_renames_the_rest():
    b = Builder()
    x = b.input("x", DType.fp32, (2, 3, 4, 5), at="x")
    r = b.reduce(x, "MAX", (0, 2), DType.fp32, at="r")
    book = build_indexbook(b.program([("r", r)]))
    info = book[r.id]
    assert [(a.name, a.size) for a in info.axes] == [("i0", 3), ("i1", 5)]
    assert [(a.name, a.size, a.kind) for a in info.space[2:]] == [("r0", 2, "reduce"), ("r1", 4, "reduce")]
    xs = book[x.id].axes
    assert info.reduce_axes == (xs[0].id, xs[2].id)
    assert info.inputs[0].map == tuple(Expr.var(v) for v in ("r0", "i0", "r1", "i1"))


def test_reshape_uses_div_and_mod_only_where_needed():
    i0, i1 = Expr.var("i0"), Expr.var("i1")
    assert reshape_exprs((6,), (2, 3)) == (3 * i0 + i1,)
    assert reshape_exprs((2, 3), (6,)) == (i0.floordiv(3), i0.mod(3))
    assert reshape_exprs(("M", "K"), ("M", 1, "K")) == (i0, Expr.var("i2"))  # symbols carried along
    assert reshape_exprs(("M", 4), (Expr.var("M") * 4,)) == (i0.floordiv(4), i0.mod(4))


@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.data())
def test_reshape_map_agrees_with_numpy(shape, data):
    n = int(np.prod(shape))
    ps = [p for p in range(2, n + 1) if n % p == 0]
    new, rest = [], n
    while rest > 1:
        d = data.draw(st.sampled_from([p for p in ps if rest % p == 0]))
        new.append(d)
        rest //= d
    new = data.draw(st.permutations(new + [1] * data.draw(st.integers(0, 2)))) or [1]
    exprs = reshape_exprs(tuple(shape), tuple(new))
    src = np.arange(n).reshape(shape)
    grid = np.indices(new).reshape(len(new), -1)
    env = {f"i{k}": grid[k] for k in range(len(new))}
    idx = tuple(np.broadcast_to(e.evaluate(env), grid.shape[1:]) for e in exprs)
    assert (src[idx] == src.reshape(new).reshape(-1)).all()


# ---- invariants and diagnostics (docs/DESIGN.md §IndexBook) ----------------------------------------------

def test_align_params_rejects_symbols_outside_the_signature():
    prog, _, _ = gemm_tinygrad()
    with pytest.raises(PolysatError) as e:
        build_indexbook(prog, symbols=["M", "N"])
    assert codes(e.value) == ["E1304"] and "'K'" in e.value.diagnostics[0].why
    assert build_indexbook(prog, symbols=["N", "M", "K", "B"]).params == ("N", "M", "K", "B")


def test_unguarded_symbolic_view_is_E1204():
    b = Builder()
    x = b.input("x", DType.fp32, ("N",), at="x")
    v = b.view(x, ("N",), ("i0 + 1",), at="shift")  # reads x[N] at the last point
    book = build_indexbook(b.program([("v", v)]))
    with pytest.raises(PolysatError) as e:
        validate(book)
    assert codes(e.value) == ["E1204"]


def test_guarded_pad_read_passes_validation():
    b = Builder()
    x = b.input("x", DType.fp32, ("N",), at="x")
    p = b.pad(x, ((2, 3),), 0.0, at="p")
    y = b.add(Ops.NEG, [p], at="y")
    book = build_indexbook(b.program([("y", y)]))
    validate(book)
    (acc,) = book[y.id].inputs
    assert acc.map == (Expr.var("i0") - 2,) and len(acc.guard) == 2 and acc.fill == 0.0


def test_floordiv_not_in_lowest_terms_is_E1201():
    prog, t, _ = gemm_tinygrad(4, 8, 6)
    book = build_indexbook(prog)
    info = book[t.id]
    bad = Expr((((FloorDiv(Expr.var("i0") * 2, 4),), 1),))  # floor(2*i0/4): not gcd-normalized
    book.entries[t.id] = type(info)(info.value_id, info.op, info.axes, info.space, info.pieces,
                                    (Access(info.inputs[0].value_id, (bad, Expr.var("i2"))),) + info.inputs[1:])
    with pytest.raises(PolysatError) as e:
        validate(book)
    assert codes(e.value) == ["E1201"]


def test_dump_with_modulo_is_E1203_and_product_is_E1201():
    prog, t, _ = gemm_tinygrad()
    doc = indexbook_json(prog)
    check_dump(doc)
    doc["index_book"][t.id]["inputs"][0]["map"][1] = "i2 % 4"
    with pytest.raises(PolysatError) as e:
        check_dump(doc)
    assert codes(e.value) == ["E1203"]
    doc["index_book"][t.id]["inputs"][0]["map"][1] = "i2*i1"
    with pytest.raises(PolysatError) as e:
        check_dump(doc)
    assert codes(e.value) == ["E1201"]


def test_long_pad_chain_warns_W2101():
    b = Builder()
    x = b.input("x", DType.fp32, (3,), at="x")
    for k in range(MAX_PIECES + 1):
        x = b.pad(x, ((1, 0),), float(k), at=f"pad{k}")  # distinct values: no pad can merge with the next
    y = b.add(Ops.NEG, [x], at="y")
    book = build_indexbook(b.program([("y", y)]))
    assert [d.code for d in book.diagnostics] == ["W2101"]
    assert len(book[y.id].inputs[0].pads) == MAX_PIECES + 1


def test_pad_then_shrink_back_needs_no_guard():
    b = Builder()
    x = b.input("x", DType.fp32, (5, 4), at="x")
    p = b.pad(x, ((1, 2), (0, 3)), 0.0, at="p")
    s = b.shrink(p, (1, 0), (6, 4), at="s")
    book = build_indexbook(b.program([("s", b.add(Ops.NEG, [s], at="n"))]))
    (acc,) = book.sources(s.id)
    assert acc.value_id == x.id and acc.guard == () and acc.map == (Expr.var("i0"), Expr.var("i1"))


def test_sources_stop_at_region_inputs():
    prog, t, c0 = gemm_tinygrad(4, 8, 6)
    book = build_indexbook(prog)
    stop = prog.nodes[2].id  # the reshape of A
    accs = book.sources(t.id, stops={stop})
    assert accs[0].value_id == stop and accs[0].map == (Expr.var("i0"), Expr.const(0), Expr.var("i2"))
    assert accs[1].value_id == "n1"


def _chain_of_views(blocks: int):
    b = Builder()
    x = b.input("x", DType.fp32, ("M", 64), at="x")
    y = x
    for k in range(blocks):
        p = b.pad(y, ((0, 0), (1, 1)), 0.0, at=f"p{k}")
        s = b.shrink(p, (0, k % 3), ("M", 64 + k % 3), at=f"s{k}")
        f = b.flip(s, (1,), at=f"f{k}")
        y = b.alu(Ops.ADD, f, y, at=f"a{k}")
    return b.program([("y", y)])


def _analyse(prog):
    book = build_indexbook(prog)
    validate(book)
    build_polyview(book)


def test_analysis_work_grows_linearly_with_the_program():
    """Doubling a chain of views (pad, shrink, flip, add) to over 1,000 nodes at most doubles the analysis work,
    give or take 15%: a quadratic step would show as 4x."""
    small, large = _chain_of_views(125), _chain_of_views(250)
    assert len(large.nodes) > 1000
    _analyse(small)  # warm the caches both share
    _analyse(large)
    assert calls_made(lambda: _analyse(large)) <= 2.3 * calls_made(lambda: _analyse(small))


@pytest.mark.parametrize("sym", ["i1", "floor"])
def test_symbol_named_like_an_axis_or_isl_keyword_is_E1304(sym):
    b = Builder()
    x = b.input("x", DType.fp32, (sym, 4), at="x")
    with pytest.raises(PolysatError) as e:
        build_indexbook(b.program([("y", b.add(Ops.NEG, [x], at="y"))]))
    assert codes(e.value) == ["E1304"]


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)),
                min_size=1, max_size=3))
def test_bounds_check_on_the_guarded_box_agrees_with_isl(slices):
    """Each read's bounds verdict (the interval check on the box the guard narrows, isl past it) equals isl's on the
    in-bounds piece: slices of X padded back to full width and summed (a concatenation's padded reads), and
    reads shifted outside the source that no guard covers."""
    from polysat.analyses import indexbook as ib, read_bounds as rb
    b = Builder()
    X = b.input("X", DType.fp32, (4, 6), at="X")
    acc = None
    for k, (lo, hi, before, after) in enumerate(slices):
        lo, hi = min(lo, hi), max(lo, hi) + 1
        piece = b.pad(b.shrink(X, (lo, 0), (hi, 6), at=f"s{k}"), ((before, after), (0, 0)), at=f"p{k}")
        acc = piece if acc is None else acc
        if piece.shape == acc.shape and piece is not acc:
            acc = b.alu(Ops.ADD, acc, piece, at=f"a{k}")
    book = build_indexbook(b.program([("Y", acc)]))
    for info in book:
        for a in info.inputs if not info.non_scop else ():
            src = book.program[a.value_id]
            rng = ib.access_map(book, info, a, "S", "T").range()
            box = isl.Set("{ T[%s] : %s }" % (", ".join(f"o{k}" for k in range(src.ndim)),
                                             " and ".join(f"0 <= o{k} < {d}" for k, d in enumerate(src.shape))))
            assert (rb._unguarded(book, info, a, src) is None) == rng.is_subset(box)
    for info in book:  # an unguarded read past its source: E1204 from the same check
        for a in info.inputs if not info.non_scop else ():
            src = book.program[a.value_id]
            if not a.guard and src.ndim and isinstance(src.shape[0], int):
                far = Access(a.value_id, (a.map[0] + src.shape[0],) + a.map[1:], a.guard, a.pads)
                assert rb._unguarded(book, info, far, src) is not None
