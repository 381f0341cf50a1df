"""The reference evaluator's VIEW keeps the rank it states: a view to a rank-0 result (a reduction's one value
read at a map over no axes, or a rank-0 value viewed as itself) is a rank-0 array equal to numpy's element, not the
1-element vector ``np.ascontiguousarray`` makes of it (the rule checker met this evaluating a row scale hoisted out
of a one-point contraction, tests/bad_rules/row_scale_hoist_fp16.egg)."""
from __future__ import annotations

import numpy as np
import pytest

from polysat.ir.dtypes import DType
from polysat.ir.evaluate import evaluate
from polysat.ir.expr import Expr
from polysat.ir.tiny import Arg, Ops, Program, UOp


@pytest.mark.parametrize("shape,index", [((2, 3), (1, 2)), ((), ())])
def test_a_view_to_rank_zero_is_rank_zero(shape, index):
    x = np.arange(1, 1 + int(np.prod(shape)), dtype=np.float32).reshape(shape)
    src = UOp("x", Ops.INPUT, (), Arg({"tensor_id": "x", "dtype": DType.fp32, "shape": shape}), DType.fp32, shape)
    view = UOp("v", Ops.VIEW, ("x",), Arg({"index_map": tuple(Expr.const(i) for i in index), "result_shape": ()}),
               DType.fp32, ())
    got = evaluate(Program((src, view), (("y", "v"),)), {"x": x})["y"]
    assert got.shape == () and got == x[index]
