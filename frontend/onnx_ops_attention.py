"""ONNX Attention (opset 23 onward). The plain form — 4-D Q, K, V with one head count, no mask, cache or
softcap — becomes one Frontend IR ``Attention`` node (the flash-attention kernel's pattern). Every other
form is written out: heads split from 3-D inputs, the cache concatenated (present_key/value), grouped
K/V heads repeated, softcap, a bias from the mask (bool or additive, padded to the key length) and the
causal frontier (top-left, shifted by the cache length), a softmax that gives 0 on fully masked rows, and
the optional QK output in each of its modes.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import math

import numpy as np

from ..ir.dtypes import DType
from .onnx_table import Emit, handler

if TYPE_CHECKING:  # annotations only (frontend/onnx.py loads the handlers)
    from .onnx import Importer, OnnxNode


def _s(shape) -> list:
    return [d if isinstance(d, int) else str(d) for d in shape]


def _split_heads(e: Emit, x: str, heads: int | None, what: str) -> str:
    """(B, S, H*D) -> (B, H, S, D); a 4-D input passes."""
    xs = e.shape(x)
    if len(xs) == 4:
        return x
    if len(xs) != 3 or not heads:
        e.node.unsupported(f"{what} of rank {len(xs)} needs rank 4, or rank 3 with q_num_heads / kv_num_heads")
    if not isinstance(xs[2], int) or xs[2] % heads:
        e.node.unsupported(f"{what} width {xs[2]} does not split into {heads} heads")
    y = e.op("Reshape", [x], {"shape": _s([xs[0], xs[1], heads, xs[2] // heads])})
    return e.op("Transpose", [y], {"perm": [0, 2, 1, 3]})


def _repeat_heads(e: Emit, x: str, rep: int) -> str:
    """(B, Hkv, L, D) -> (B, Hkv*rep, L, D), each head repeated rep times in place (numpy repeat)."""
    if rep == 1:
        return x
    b, h, n, d = e.shape(x)
    y = e.op("Reshape", [x], {"shape": _s([b, h, 1, n, d])})
    y = e.op("Expand", [y], {"shape": _s([b, h, rep, n, d])})
    return e.op("Reshape", [y], {"shape": _s([b, h * rep, n, d])})


def _bias(e: Emit, imp: Importer, node: OnnxNode, m: int, n: int, past: int, dt: DType) -> str | None:
    """The additive (.., M, L) score bias of the mask and the causal frontier, or None."""
    bias = None
    if node.has(3):
        mask = e.input(3)
        if e.dtype(mask) == DType.bool:
            mask = e.ew("where", mask, e.const_of(0.0, dt), e.const_of(float("-inf"), dt))
        else:
            mask = e.cast(mask, dt)
        short = n - e.shape(mask)[-1]
        if short > 0:
            rank = len(e.shape(mask))
            mask = e.op("Pad", [mask], {"pads": [[0, 0]] * (rank - 1) + [[0, short]], "value": "-inf"})
        bias = mask
    diff = np.arange(m)[:, None] + past - np.arange(n)[None, :]  # query position - key position
    allowed = np.ones((m, n), dtype=bool)
    if node.attr("is_causal", 0):
        allowed &= diff >= 0
    left, right = node.attr("left_window_size", -1), node.attr("right_window_size", -1)
    if left >= 0:
        allowed &= diff <= left
    if right >= 0:
        allowed &= -diff <= right
    if not allowed.all():
        frontier = imp.materialize(np.where(allowed, 0.0, -np.inf).astype(dt.np), f"{node.name}/causal", node.name)
        bias = frontier if bias is None else e.ew("add", bias, frontier)
    return bias


def _plain(imp: Importer, node: OnnxNode, e: Emit) -> list | None:
    """The one-node form, when it applies."""
    q, k, v = e.input(0), e.input(1), e.input(2)
    shapes = [e.shape(t) for t in (q, k, v)]
    if any(node.has(i) for i in range(3, 7)) or any(node.outputs[1:]) or any(len(s) != 4 for s in shapes):
        return None
    if node.attrs.get("left_window_size", -1) != -1 or node.attrs.get("right_window_size", -1) != -1:
        return None
    if not shapes[0][1] == shapes[1][1] == shapes[2][1] or node.attrs.get("softcap", 0.0):
        return None
    causal = bool(node.attrs.get("is_causal", 0))
    if causal and shapes[0][2] != shapes[1][2]:
        return None  # ONNX aligns the frontier top-left, the Attention node bottom-right: equal only when M = N
    d = shapes[0][3]
    scale = node.attr("scale")
    if scale is None and not isinstance(d, int):
        return None
    node.attr("is_causal")
    y = e.op("Attention", [q, k, v], {"scale": float(scale if scale is not None else 1.0 / math.sqrt(d)),
                                     "causal": causal})
    return [e.cast(y, e.dtype(q))]


@handler("Attention")
def attention(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    if node.has(6):
        node.unsupported("nonpad_kv_seqlen (an external cache) is not supported")
    prec = node.attr("softmax_precision")
    if prec not in (None, 1):
        node.unsupported(f"softmax_precision {prec} (polysat's softmax computes in float32)", "softmax_precision")
    mode = node.attr("qk_matmul_output_mode", 0)
    for key in ("q_num_heads", "kv_num_heads"):
        node.attr(key)
    plain = _plain(imp, node, e)
    if plain is not None:
        return plain
    q0 = e.input(0)
    dt = e.dtype(q0)
    q = _split_heads(e, q0, node.attr("q_num_heads"), "Q")
    k = _split_heads(e, e.input(1), node.attr("kv_num_heads"), "K")
    v = _split_heads(e, e.input(2), node.attr("kv_num_heads"), "V")
    if node.has(4) != node.has(5):
        node.unsupported("past_key and past_value come together")
    past = 0
    if node.has(4):
        past = e.shape(e.input(4))[2]
        k = e.op("Concat", [e.input(4), k], {"axis": 2})
        v = e.op("Concat", [e.input(5), v], {"axis": 2})
    present_k, present_v = k, v
    hq, hk = e.shape(q)[1], e.shape(k)[1]
    if hq % hk:
        node.unsupported(f"{hq} query heads over {hk} key/value heads")
    k, v = _repeat_heads(e, k, hq // hk), _repeat_heads(e, v, hq // hk)
    m, n = e.shape(q)[2], e.shape(k)[2]
    if not (isinstance(m, int) and isinstance(n, int) and isinstance(past, int)):
        node.unsupported("the written-out form needs static sequence lengths")
    scale = node.attr("scale")
    scale = 1.0 / math.sqrt(e.shape(q)[3]) if scale is None else scale
    s = e.ew("mul", e.op("GEMM", [q, k], {"trans_b": True}), e.const_of(scale, DType.fp32))
    cap = node.attr("softcap", 0.0)
    if cap and cap > 0:
        s = e.ew("mul", e.ew("tanh", e.ew("div", s, e.const_of(cap, DType.fp32))), e.const_of(cap, DType.fp32))
    qk = s
    bias = _bias(e, imp, node, m, n, past, DType.fp32)
    if bias is not None:
        s = e.ew("add", s, bias)
    p = e.op("Softmax", [s], {"axis": -1})
    if bias is not None:  # a row the bias masks entirely attends to nothing: 0, not 0/0
        full = e.op("Reduce", [bias], {"op": "max", "axes": [-1], "keepdim": True})
        p = e.ew("where", e.ew("eq", full, e.const_of(float("-inf"), DType.fp32)), e.const_of(0.0, DType.fp32), p)
    y = e.cast(e.op("GEMM", [e.cast(p, dt), v], {"acc_dtype": "fp32"}), dt)
    if len(e.shape(q0)) == 3:
        b, h, mm, dv = e.shape(y)
        y = e.op("Reshape", [e.op("Transpose", [y], {"perm": [0, 2, 1, 3]})], {"shape": _s([b, mm, h * dv])})
    outs = [y, present_k, present_v]
    if len(node.outputs) > 3 and node.outputs[3]:
        if mode not in (0, 1, 2, 3):
            node.unsupported(f"qk_matmul_output_mode {mode}", "qk_matmul_output_mode")
        out = {0: qk, 1: qk, 2: s, 3: p}[mode]
        outs.append(e.cast(out, dt))
    return outs
