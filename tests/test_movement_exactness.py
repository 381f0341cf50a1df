"""Composed movement access relations are exact (docs/DESIGN.md §IndexBook, §Poly-View).

A chain of RESHAPE / PERMUTE / EXPAND / PAD / SHRINK (with step) / FLIP is evaluated by the reference
evaluator on an *index tensor* (element = 1 + its flat index, padding = 0). For every output point,
the read relation of ``poly_view.json`` must reach exactly the input element the index tensor names,
and nothing where it holds padding. The same check replays tinygrad's own movement cases
(``tests/data/tinygrad-movement-cases.json``: ``expected`` = flat input index, -1 for padding).
"""
from __future__ import annotations

import json
import math
import pathlib

import islpy as isl
import numpy as np
import pytest
from hypothesis import example, given, strategies as st

from polysat.analyses.isl_util import map_pairs
from polysat.analyses.polyview import poly_view_json
from polysat.ir.builder import Builder
from polysat.ir.dtypes import DType
from polysat.ir.evaluate import evaluate
from polysat.ir.expr import Expr

CASES = json.loads((pathlib.Path(__file__).parent / "data" / "tinygrad-movement-cases.json").read_text())


def chain_program(shape, ops):
    """ops as in the tinygrad cases: [name, arg] with pad/shrink as [[lo, hi], ..], flip as bools."""
    b = Builder()
    x = b.input("x", DType.i32, tuple(shape), at="x")
    for op, a in ops:
        if op == "reshape":
            x = b.reshape(x, tuple(a), at=op)
        elif op == "permute":
            x = b.permute(x, tuple(a), at=op)
        elif op == "expand":
            x = b.expand(x, tuple(a), at=op)
        elif op == "pad":
            x = b.pad(x, [tuple(p) for p in a], 0, at=op)
        elif op == "shrink":
            steps = [p[2] if len(p) > 2 else 1 for p in a]
            x = b.shrink(x, [p[0] for p in a], [p[1] for p in a], steps, at=op)
        elif op == "flip":
            x = b.flip(x, [k for k, f in enumerate(a) if f], at=op)
        else:
            raise ValueError(op)
    return b.program([("y", x)])


def composed_pairs(program) -> set:
    """(output point, input point) pairs of the read of x by the block that writes y."""
    pv = poly_view_json(program)["poly_view"]
    (block,) = [b for b in pv["blocks"] if any(a["kind"] == "write" and a["tensor"] == "y" for a in b["accesses"])]
    reads = [a for a in block["accesses"] if a["kind"] == "read"]
    assert all(a["tensor"] == "x" for a in reads)
    out: set = set()
    for a in reads:
        m = isl.Map(a["map"])
        assert m.dim(isl.dim_type.param) == 0, "concrete shapes give no isl parameters"
        out |= map_pairs(m)
    return out


def expected_pairs(out_shape, in_shape, flat_sources) -> set:
    out = set()
    for f, src in enumerate(flat_sources):
        if src >= 0:
            o = tuple(int(v) for v in np.unravel_index(f, out_shape)) if out_shape else ()
            i = tuple(int(v) for v in np.unravel_index(src, in_shape)) if in_shape else ()
            out.add((o, i))
    return out


def index_tensor_pairs(program, in_shape) -> set:
    idx = (np.arange(math.prod(in_shape), dtype=np.int32) + 1).reshape(in_shape)
    y = evaluate(program, {"x": idx})["y"]
    return expected_pairs(y.shape, in_shape, (y.reshape(-1) - 1).tolist())


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_tinygrad_movement_case_is_reproduced_by_composed_access(case):
    program = chain_program(case["shape"], case["ops"])
    assert list(program[program.outputs[0][1]].shape) == case["out_shape"]
    want = expected_pairs(tuple(case["out_shape"]), tuple(case["shape"]), case["expected"])
    assert composed_pairs(program) == want


def test_oracle_file_has_all_269_cases():
    assert len(CASES) == 269


# ---- generated chains -------------------------------------------------------------------------------

def _factorizations(n: int) -> list:
    ps, k = [], 2
    while k * k <= n:
        while n % k == 0:
            ps.append(k)
            n //= k
        k += 1
    if n > 1:
        ps.append(n)
    return ps


@st.composite
def chains(draw):
    rank = draw(st.integers(1, 3))
    shape = [draw(st.integers(1, 6)) for _ in range(rank)]
    cur = list(shape)
    ops = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["reshape", "permute", "expand", "pad", "shrink", "flip"]))
        r = len(cur)
        if kind == "reshape":
            primes = draw(st.permutations(_factorizations(math.prod(cur))))
            new_rank = draw(st.integers(1, 4))
            new = [1] * new_rank
            for p in primes:
                new[draw(st.integers(0, new_rank - 1))] *= p
            arg = new
        elif kind == "permute":
            arg = list(draw(st.permutations(range(r))))
            new = [cur[p] for p in arg]
        elif kind == "expand":
            new = [draw(st.integers(1, 3)) if d == 1 else d for d in cur]
            arg = new
        elif kind == "pad":
            arg = [[draw(st.integers(0, 2)), draw(st.integers(0, 2))] for _ in cur]
            new = [d + lo + hi for d, (lo, hi) in zip(cur, arg)]
        elif kind == "shrink":
            arg = []
            for d in cur:
                lo = draw(st.integers(0, (d - 1) // 2))
                hi = draw(st.integers(max(lo + 1, d - 1), d))
                arg.append([lo, hi, draw(st.integers(1, 3))])
            new = [(hi - lo + s - 1) // s for lo, hi, s in arg]
        else:
            arg = [draw(st.booleans()) for _ in cur]
            new = cur
        if math.prod(new) > 400:
            continue
        ops.append([kind, arg])
        cur = new
    return shape, ops


@given(chains())
@example(([5, 3], [["pad", [[1, 2], [0, 1]]], ["shrink", [[0, 8, 3], [1, 4, 2]]], ["flip", [True, False]]]))
@example(([4, 6], [["flip", [False, True]], ["reshape", [3, 8]], ["shrink", [[0, 3, 2], [1, 8, 3]]],
               ["permute", [1, 0]], ["reshape", [6]]]))
def test_generated_chain_reads_exactly_what_the_index_tensor_names(chain):
    shape, ops = chain
    program = chain_program(shape, ops)
    assert composed_pairs(program) == index_tensor_pairs(program, tuple(shape))


@pytest.mark.parametrize("n", [1, 4, 7])
def test_symbolic_chain_specializes_to_the_concrete_one(n):
    """Sizes as isl parameters: fixing N gives exactly the relation of the chain built with N = n."""
    def build(N):
        b = Builder()
        x = b.input("x", DType.i32, (N, 6), at="x")
        y = b.flip(x, (0,), at="f")
        y = b.pad(y, ((1, 2), (0, 3)), 0, at="p")
        y = b.shrink(y, (1, 2), (Expr.of(N) + 3, 9), (2, 3), at="s")
        y = b.permute(y, (1, 0), at="t")
        return b.program([("y", y)])

    def read(prog):
        pv = poly_view_json(prog)["poly_view"]
        (blk,) = pv["blocks"]
        (acc,) = [a for a in blk["accesses"] if a["kind"] == "read"]
        return isl.Map(acc["map"])

    sym = read(build("N"))
    assert sym.dim(isl.dim_type.param) == 1
    fixed = sym.fix_val(isl.dim_type.param, 0, isl.Val(n)).project_out(isl.dim_type.param, 0, 1)
    assert fixed.is_equal(read(build(n)))


def test_frontend_movement_ops_are_exact():
    """Frontend IR Transpose / Slice (step) / Pad / Flip / Reshape / Expand, lowered by the frontend."""
    from polysat.frontend import load_model
    graph = [
        {"op": "Transpose", "name": "t", "inputs": ["x"], "outputs": ["a"], "attrs": {"perm": [2, 0, 1]}},
        {"op": "Slice", "name": "s", "inputs": ["a"], "outputs": ["b"],
         "attrs": {"starts": [1, 0], "ends": [5, 3], "steps": [2, 2], "axes": [0, 2]}},
        {"op": "Pad", "name": "p", "inputs": ["b"], "outputs": ["c"], "attrs": {"pads": [[1, 0], [0, 2], [1, 1]]}},
        {"op": "Flip", "name": "f", "inputs": ["c"], "outputs": ["d"], "attrs": {"axes": [1, 2]}},
        {"op": "Reshape", "name": "r", "inputs": ["d"], "outputs": ["e"], "attrs": {"shape": [3, -1]}},
        {"op": "Expand", "name": "e", "inputs": ["e"], "outputs": ["y"], "attrs": {"shape": [2, 3, 16]}},
    ]
    program = load_model({"signature": {"inputs": [{"tensor": "x"}], "outputs": [{"tensor": "y"}]},
                          "tensors": {"x": {"dtype": "i32", "shape": [2, 3, 5]}}, "graph": graph})
    assert composed_pairs(program) == index_tensor_pairs(program, (2, 3, 5))
