"""The numpy meaning of a GemmSpec: what every generated kernel is compared against.

Inputs are rounded to their storage dtypes, products accumulate in fp32, the epilogue runs on fp32
values in order (``cast`` rounds and continues in fp32), and the result is rounded to the output dtype.
Tensors stored in another order than the packed one (``GemmSpec.a_dims`` ..) are read and written in theirs;
an operand reading only some batch dims is broadcast along the others.
"""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from ...ir.diagnostics import fail
from ...ir.dtypes import round_to
from ..common.epilogue_fn import evaluate
from . import prologue
from .spec import GemmSpec, packed_dims


def _packed(spec: GemmSpec, role: str, x: np.ndarray) -> np.ndarray:
    """role's tensor, stored in spec.dims(role) order, as the packed order's view."""
    dims = spec.dims(role)
    for d in packed_dims(spec, role):  # a batch dim the operand does not read: size 1 (numpy broadcasts it)
        if d not in dims:
            x, dims = x[np.newaxis], (d,) + dims
    return np.transpose(x, [dims.index(d) for d in packed_dims(spec, role)])


def _f32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(np.float32)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def activation(kind: str, v: np.ndarray) -> np.ndarray:
    v64 = v.astype(np.float64)
    if kind == "relu":
        r = np.maximum(v64, 0.0)
    elif kind == "sigmoid":
        r = 1.0 / (1.0 + np.exp(-v64))
    elif kind == "silu":
        r = v64 / (1.0 + np.exp(-v64))
    elif kind == "gelu_erf":
        r = 0.5 * v64 * (1.0 + _erf(v64 / math.sqrt(2.0)))
    elif kind == "gelu_tanh":
        r = 0.5 * v64 * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v64 + 0.044715 * v64 ** 3)))
    else:
        raise KeyError(kind)
    return r.astype(np.float32)


def check_inputs(spec: GemmSpec, inputs: Mapping[str, object], env: Mapping[str, int] | None = None) -> dict:
    """The expected shape of every input, failing with E1111/E1002 on a missing or misshapen one."""
    shapes = spec.shapes(env)
    for name in spec.inputs:
        if name not in inputs:
            fail("MissingInput", f"gemm {spec.name!r}", f"input {name!r} is missing")
        got = tuple(getattr(inputs[name], "shape", ()))
        if got != shapes[name]:
            fail("AxisSizeMismatch", f"gemm {spec.name!r}", f"input {name!r} has shape {got}, expected {shapes[name]}")
    return shapes


def reference(spec: GemmSpec, inputs: Mapping[str, np.ndarray], env: Mapping[str, int] | None = None) -> np.ndarray:
    check_inputs(spec, inputs, env)
    dts = spec.dtypes()
    if spec.a_prologue is not None:  # A computed from its sources (backend/gemm/prologue.py)
        sz = spec.sizes(env)
        a = prologue.evaluate(spec.a_prologue, inputs, sz["m"], sz["k"], spec.in_dtype)
    else:
        a = _packed(spec, "a", _f32(round_to(inputs[spec.a], dts[spec.a])))
    if spec.b_pieces:  # B is the concatenation of its pieces along N
        b = np.concatenate([_f32(round_to(inputs[p], dts[p])) for p, _ in spec.b_pieces],
                           axis=-1 if spec.b_layout == "row" else -2)
    else:
        b = _packed(spec, "b", _f32(round_to(inputs[spec.b], dts[spec.b])))
    if spec.a_layout == "col":
        a = np.swapaxes(a, -1, -2)
    if spec.b_layout == "col":
        b = np.swapaxes(b, -1, -2)
    s = spec.sizes(env)
    bshape = _packed(spec, "c", np.empty(spec.shapes(env)[spec.c], np.int8)).shape[:-2]
    a = np.broadcast_to(a, bshape + a.shape[-2:])
    b = np.broadcast_to(b, bshape + b.shape[-2:])
    v = np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)
    assert v.shape == bshape + (s["m"], s["n"])
    if spec.pair:  # column j of each piece combined (backend/gemm/paired.py)
        w = s["n"] // 2
        v = evaluate(spec.pair, _f32(v[..., :w]), (_f32(v[..., w:]),))
    for op in spec.epilogue:
        if op.kind == "bias":
            t = _f32(round_to(inputs[op.tensor], op.dtype))
            v = v + (t[None, :] if op.axis == "n" else t[:, None])
        elif op.kind == "residual":
            v = v + _packed(spec, "c", _f32(round_to(inputs[op.tensor], op.dtype)))
        elif op.kind == "scale":
            v = v * np.float32(op.value)
        elif op.kind == "cast":
            v = _f32(round_to(v, op.dtype))
        elif op.kind == "fn":
            v = evaluate(op.steps, _f32(v))
        else:
            v = activation(op.kind, v)
        v = v.astype(np.float32)
    packed = packed_dims(spec, "c")
    return np.ascontiguousarray(np.transpose(round_to(v, spec.out_dtype), [packed.index(d) for d in spec.dims("c")]))


def random_inputs(spec: GemmSpec, env: Mapping[str, int] | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs of the right shapes and dtypes: uniform in [-1, 1), the operands scaled by K^-1/4
    so that every sum of K products stays O(1)."""
    rng = np.random.default_rng(seed)
    shapes, dts = spec.shapes(env), spec.dtypes()
    operand_scale = np.float32(spec.sizes(env)["k"] ** -0.25)
    out = {}
    for name in spec.inputs:
        x = rng.uniform(-1.0, 1.0, size=shapes[name]).astype(np.float32)
        if name in spec.a_names or name in spec.b_names:
            x = x * operand_scale
        out[name] = round_to(x, dts[name])
    return out
