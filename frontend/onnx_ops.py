"""ONNX op handlers, part 1: the table, and the elementwise ops (unary, binary, comparisons, logic,
Where, Cast, Clip, activations), each written with Frontend IR ``Elementwise`` / ``Constant`` nodes.

The table itself is frontend/onnx_table.py (re-exported here with every handler module loaded). A handler
takes ``(Importer, OnnxNode)`` and returns the Frontend tensor of each ONNX output. It reads
every attribute it honours through ``node.attr`` (an unread attribute is E1102) and refuses an
attribute value it cannot honour with ``node.unsupported``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..ir.dtypes import DType
from .onnx_dtypes import dtype_of_onnx
from .onnx_table import HANDLERS, NO_FOLD, Emit, handler

if TYPE_CHECKING:  # annotations only (frontend/onnx.py loads the handlers)
    from .onnx import Importer, OnnxNode

__all__ = ["HANDLERS", "NO_FOLD", "Emit", "handler"]

def _same_float(e: Emit, x: str, y: str) -> str:
    """y computed in fp32 from x's value, returned in x's float dtype (fp32 for integer inputs)."""
    dt = e.dtype(x)
    return e.cast(y, dt if dt.is_float else DType.fp32)


_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div"}
_COMPARE = {"Greater": "gt", "Less": "lt", "Equal": "eq", "GreaterOrEqual": "ge", "LessOrEqual": "le"}


@handler(*_BINARY)
def binary(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    a, b = e.input(0), e.input(1)
    if e.dtype(a) != e.dtype(b):
        node.unsupported(f"operands of types {e.dtype(a).value} and {e.dtype(b).value} differ")
    return [e.ew(_BINARY[node.op], a, b)]


@handler("Mod")
def mod(imp: Importer, node: OnnxNode) -> list:
    """fmod 0: the sign of the divisor (Python's %; ONNX takes it on integers, polysat on floats too, as
    torch.remainder); fmod 1: the sign of the dividend (C's fmod)."""
    e = Emit(imp, node)
    a, b = e.input(0), e.input(1)
    if e.dtype(a) != e.dtype(b):
        node.unsupported(f"operands of types {e.dtype(a).value} and {e.dtype(b).value} differ")
    return [e.ew("fmod" if node.attr("fmod", 0) else "mod", a, b)]


@handler("Pow")
def pow_(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    a, b = e.input(0), e.input(1)
    exp = imp.const(node.inputs[1])
    if exp is not None and exp.size == 1 and float(exp.reshape(-1)[0]) == 2.0:
        return [e.ew("mul", a, a)]
    return [e.cast(e.ew("pow", a, b), e.dtype(a))]


@handler(*_COMPARE)
def compare(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    return [e.ew(_COMPARE[node.op], e.input(0), e.input(1))]


@handler("And", "Or", "Xor")
def logic(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    return [e.ew({"And": "min", "Or": "max", "Xor": "ne"}[node.op], e.input(0), e.input(1))]


@handler("Not")
def not_(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = e.input(0)
    return [e.ew("eq", x, e.const_of(False, DType.bool))]


@handler("Max", "Min", "Sum", "Mean")
def variadic(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    xs = [e.input(k) for k in range(len(node.inputs)) if node.has(k)]
    fn = {"Max": "max", "Min": "min", "Sum": "add", "Mean": "add"}[node.op]
    y = xs[0]
    for x in xs[1:]:
        y = e.ew(fn, y, x)
    if node.op == "Mean" and len(xs) > 1:
        y = e.ew("div", y, e.scalar(len(xs), y))
    elif len(xs) == 1:
        y = e.op("Reshape", [y], {"shape": [str(d) for d in e.shape(y)]})
    return [y]


@handler("Where")
def where(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    return [e.ew("where", e.input(0), e.input(1), e.input(2))]


@handler("Cast", "CastLike")
def cast(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = e.input(0)
    if node.op == "CastLike":
        to = imp.dtype(e.input(1))
    elif node.attr("to") == 7 and (e.dtype(x) in (DType.i32, DType.bool) or e.dtype(x).is_float):
        to = DType.i32  # int64 computed as i32, as every int64 input is (of a float: where its value fits, |x| < 2^31)
    else:
        to = dtype_of_onnx(node.attr("to"), node.name, "Cast's target type")
    sat = node.attr("saturate", 1)
    if sat != 1:
        node.unsupported("saturate applies to float8 targets only", "saturate")
    if node.attr("round_mode", "up") != "up":
        node.unsupported("round_mode applies to float8 targets only", "round_mode")
    return [e.ew("cast", x, to=to.value) if e.dtype(x) != to else e.op("Reshape", [x], {"shape": [str(d) for d in e.shape(x)]})]


@handler("Identity", "Dropout")
def identity(imp: Importer, node: OnnxNode) -> list:
    if node.op == "Dropout":
        node.attr("seed")
        if node.has(2):
            tm = imp.const(node.inputs[2])
            if tm is None or bool(np.asarray(tm).reshape(-1)[0]):
                node.unsupported("training_mode must be a constant false (inference)")
    x = imp.value(node.inputs[0], node.name)
    if node.op == "Dropout" and len(node.outputs) > 1 and node.outputs[1]:  # inference: every element is kept
        shape = imp.shape(x)
        if not all(isinstance(d, int) for d in shape):
            node.unsupported("the mask output of a symbolic shape")
        return [x, imp.materialize(np.ones(shape, dtype=bool), f"{node.name}/mask", node.name)]
    return [x]


_SIMPLE = {"Relu": "relu", "Neg": "neg", "Sqrt": "sqrt", "Reciprocal": "recip", "Exp": "exp", "Log": "log",
           "Sigmoid": "sigmoid", "Tanh": "tanh", "Erf": "erf", "Sin": "sin", "Cos": "cos", "Floor": "floor",
           "Ceil": "ceil", "Round": "round"}


@handler(*_SIMPLE)
def simple_unary(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = e.input(0)
    if not e.dtype(x).is_float and node.op not in ("Relu", "Neg"):
        node.unsupported(f"polysat computes {node.op} on floats only, the input is {e.dtype(x).value}")
    return [e.ew(_SIMPLE[node.op], x)]


@handler("Abs")
def abs_(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = e.input(0)
    return [e.ew("max", x, e.ew("neg", x))]


@handler("Sign")
def sign(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = e.input(0)
    z = e.scalar(0, x)
    pos = e.ew("where", e.ew("gt", x, z), e.scalar(1, x), z)
    return [e.ew("where", e.ew("lt", x, z), e.scalar(-1, x), pos)]


@handler("Gelu")
def gelu(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    return [e.ew("gelu", e.input(0), approximate=node.attr("approximate", "none"))]


def _float_input(e: Emit) -> str:
    x = e.input(0)
    if not e.dtype(x).is_float:
        e.node.unsupported(f"{e.node.op} takes a float input, got {e.dtype(x).value}")
    return x


def _neg_branch(e: Emit, x: str, neg: str) -> str:
    """where(x < 0, neg, x)."""
    return e.ew("where", e.ew("lt", x, e.scalar(0, x)), neg, x)


def _expm1_scaled(e: Emit, x: str, alpha: float) -> str:
    """alpha * (exp(x) - 1)."""
    return e.ew("mul", e.ew("sub", e.ew("exp", x), e.scalar(1, x)), e.scalar(alpha, x))


@handler("LeakyRelu")
def leaky_relu(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = _float_input(e)
    return [_neg_branch(e, x, e.ew("mul", x, e.scalar(node.attr("alpha", 0.01), x)))]


@handler("PRelu")
def prelu(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = _float_input(e)
    return [_neg_branch(e, x, e.ew("mul", x, e.input(1)))]


@handler("Elu", "Selu")
def elu(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = _float_input(e)
    alpha = node.attr("alpha", 1.0 if node.op == "Elu" else 1.67326319217681884765625)
    y = e.ew("where", e.ew("gt", x, e.scalar(0, x)), x, _expm1_scaled(e, x, alpha))
    if node.op == "Selu":
        y = e.ew("mul", y, e.scalar(node.attr("gamma", 1.05070102214813232421875), x))
    return [y]


@handler("Celu")
def celu(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = _float_input(e)
    alpha = node.attr("alpha", 1.0)
    neg = _expm1_scaled(e, e.ew("div", x, e.scalar(alpha, x)), alpha)
    return [e.ew("add", e.ew("max", x, e.scalar(0, x)), e.ew("min", neg, e.scalar(0, x)))]


def _hard_sigmoid(e: Emit, x: str, alpha: float, beta: float) -> str:
    y = e.ew("add", e.ew("mul", x, e.scalar(alpha, x)), e.scalar(beta, x))
    return e.ew("max", e.ew("min", y, e.scalar(1, x)), e.scalar(0, x))


@handler("HardSigmoid")
def hard_sigmoid(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = _float_input(e)
    return [_hard_sigmoid(e, x, node.attr("alpha", 0.2), node.attr("beta", 0.5))]


@handler("HardSwish")
def hard_swish(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = _float_input(e)
    return [e.ew("mul", x, _hard_sigmoid(e, x, 1.0 / 6.0, 0.5))]


def _softplus(e: Emit, x: str) -> str:
    """log(1 + exp(x)) written stably: max(x, 0) + log(1 + exp(-|x|))."""
    ax = e.ew("max", x, e.ew("neg", x))
    t = e.ew("log", e.ew("add", e.ew("exp", e.ew("neg", ax)), e.scalar(1, x)))
    return e.ew("add", e.ew("max", x, e.scalar(0, x)), t)


@handler("Softplus")
def softplus(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    return [_softplus(e, _float_input(e))]


@handler("Mish")
def mish(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = _float_input(e)
    return [e.ew("mul", x, e.ew("tanh", _softplus(e, x)))]


@handler("Softsign")
def softsign(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = _float_input(e)
    return [e.ew("div", x, e.ew("add", e.ew("max", x, e.ew("neg", x)), e.scalar(1, x)))]


@handler("ThresholdedRelu")
def thresholded_relu(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    x = _float_input(e)
    return [e.ew("where", e.ew("gt", x, e.scalar(node.attr("alpha", 1.0), x)), x, e.scalar(0, x))]


@handler("Clip")
def clip(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    y = e.input(0)
    if node.has(1):
        y = e.ew("max", y, e.input(1))
    if node.has(2):
        y = e.ew("min", y, e.input(2))
    if y == e.input(0):
        y = e.op("Reshape", [y], {"shape": [str(d) for d in e.shape(y)]})
    return [y]


from . import (onnx_ops_attention, onnx_ops_convt, onnx_ops_nn, onnx_ops_norm, onnx_ops_scatter,  # noqa: E402,F401
               onnx_ops_select, onnx_ops_shape)  # (fill the table)
