"""Integer expressions: canonical form, parse/print round trip, floordiv/mod meaning."""
import numpy as np
from hypothesis import given, strategies as st

from polysat.ir.expr import Expr, parse

VARS = ("i0", "i1", "H")


@st.composite
def affine(draw, depth=2):
    e = Expr.const(draw(st.integers(-9, 9)))
    for v in VARS:
        e = e + Expr.var(v) * draw(st.integers(-4, 4))
    if depth and draw(st.booleans()):
        e = e + draw(affine(depth=depth - 1)).floordiv(draw(st.integers(1, 6))) * draw(st.integers(-3, 3))
    return e


@given(affine(), st.tuples(*[st.integers(-20, 20)] * 3))
def test_print_parse_round_trip_and_value(e, vals):
    env = dict(zip(VARS, vals))
    assert parse(str(e)) == e
    assert parse(str(e)).evaluate(env) == e.evaluate(env)


@given(affine(depth=0), st.integers(1, 7), st.tuples(*[st.integers(-30, 30)] * 3))
def test_floordiv_and_mod_match_python(e, q, vals):
    env = dict(zip(VARS, vals))
    v = e.evaluate(env)
    assert e.floordiv(q).evaluate(env) == v // q
    assert e.mod(q).evaluate(env) == v % q
    assert e.mod(q).is_affine and e.floordiv(q).is_affine


def test_canonical_equality_is_order_independent():
    a = Expr.var("M") * Expr.var("K") + 3
    b = 3 + Expr.var("K") * Expr.var("M")
    assert a == b and hash(a) == hash(b)
    assert not a.is_affine and (Expr.var("i0") * 2 + 1).is_affine


def test_floordiv_simplifies_exact_parts():
    h = Expr.var("H")
    assert (h * 4 + 8).floordiv(4) == h + 2
    assert str((h + 2 - 3).floordiv(2) + 1) == "(H + 1)//2"
    assert parse("floor((H - 1)/2) + 1") == parse("(H - 1)//2 + 1")


def test_evaluate_on_numpy_index_arrays():
    e = parse("2*i0 + i1//3")
    i0, i1 = np.indices((2, 7))
    assert (e.evaluate({"i0": i0, "i1": i1}) == 2 * i0 + i1 // 3).all()


def test_to_isl_syntax():
    import islpy as isl
    e = parse("(H - 1)//2 + 1")
    s = isl.Set(f"[H] -> {{ [x] : x = {e.to_isl()} and 0 <= H <= 20 }}")
    for h in range(0, 21):
        pt = s.fix_val(isl.dim_type.param, 0, isl.Val(h))
        assert pt.is_singleton() and pt.sample_point().get_coordinate_val(isl.dim_type.set, 0).to_python() == (h - 1) // 2 + 1


def test_a_pickled_expression_carries_no_cached_hash_or_text():
    """str and hash are made once per expression; a pickle (a spawned worker's result) carries only the terms,
    since a str hash differs from process to process."""
    import pickle
    e = parse("(2*i0 + 3)//4 + B*H - 1")
    text, h = str(e), hash(e)
    data = pickle.dumps(e)
    assert b"_hash" not in data and b"text" not in data
    back = pickle.loads(data)
    assert back == e and hash(back) == h and str(back) == text
