"""The numpy meaning of an AttentionSpec (and the row softmax shared with softmax_scores): scores in fp32 from
the rounded inputs, masked, softmax, P rounded to its type, P V in fp32, rounded to the output type."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ...ir.diagnostics import fail
from ...ir.dtypes import round_to
from ..common import epilogue_fn
from .prologue import evaluate as evaluate_prologue
from .spec import AttentionSpec, QKSoftmaxSpec


def check_inputs(spec: QKSoftmaxSpec, inputs: Mapping[str, object], env: Mapping[str, int] | None = None):
    """Every input of spec present with its shape under env; returns the shapes."""
    shapes = spec.shapes(env)
    at = f"{spec.KIND} {spec.name!r}"
    for name in spec.inputs:
        if name not in inputs:
            fail("MissingInput", at, f"input {name!r} is missing")
        got = tuple(getattr(inputs[name], "shape", ()))
        if got != shapes[name]:
            fail("AxisSizeMismatch", at, f"input {name!r} has shape {got}, expected {shapes[name]}")
    return shapes




def reference(spec: AttentionSpec, inputs: Mapping[str, np.ndarray],
                        env: Mapping[str, int] | None = None) -> np.ndarray:
    """The numpy meaning (what CPU playback of the region and every generated kernel are compared with)."""
    check_inputs(spec, inputs, env)
    arrays = inputs
    if spec.cols:  # each head's column windows -> [H, rows, dim]; the output back to [m, H*dv]
        inputs = {**inputs, **{x: spec.heads_of(np.asarray(inputs[x]), k, dim)
                               for k, (x, dim) in enumerate(zip(spec.inputs[:3], (spec.d, spec.d, spec.dv)))}}
        s = spec.sizes(env)
        for x, pro, rows in ((spec.q, spec.q_pro, s["m"]), (spec.k, spec.k_pro, s["n"])):
            if pro is not None:  # Q / K computed per head from its projection (.prologue)
                inputs[x] = evaluate_prologue(pro, arrays, rows, spec.batch[0], spec.d, spec.in_dtype)
    p = softmax_probs(spec, inputs)
    v = np.asarray(round_to(np.asarray(inputs[spec.v]), spec.in_dtype)).astype(np.float32)
    o = np.matmul(p, v).astype(np.float32)
    o = np.asarray(round_to(o, spec.out_dtype)).astype(spec.out_dtype.np)
    return np.ascontiguousarray(np.swapaxes(o, 0, 1)).reshape(o.shape[1], -1) if spec.cols else o


def softmax_probs(spec, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    """P = softmax_j(scale * Q K^T, masked) rounded to spec.p_dtype, as fp32 [*batch, m, n] (spec: any spec with
    q, k, scale, causal, in_dtype and p_dtype; the inputs are checked by the caller)."""
    q, k = (np.asarray(round_to(np.asarray(inputs[x]), spec.in_dtype)).astype(np.float32) for x in (spec.q, spec.k))
    s = np.matmul(q, np.swapaxes(k, -1, -2)).astype(np.float32)
    if getattr(spec, "fn", ()):  # the scores as a program of the sum (attention only)
        s = epilogue_fn.evaluate(spec.fn, s)
    s = s * np.float32(spec.scale)
    mask = getattr(spec, "mask", None)
    if mask is not None:  # a bool tensor: [m, ld] read at (i, col + j), or a key vector [n]
        m, n = s.shape[-2], s.shape[-1]
        w = np.asarray(inputs[mask.tensor]).astype(bool)
        w = w.reshape(m, mask.ld)[:, mask.col:mask.col + n] if mask.role == "mk" else w.reshape(n)[None, :]
        s = np.where(w, s, np.float32(-np.inf))
    if spec.causal:
        m, n = s.shape[-2], s.shape[-1]
        i = np.arange(m)[:, None]
        j = np.arange(n)[None, :]
        s = np.where(j <= i + (n - m), s, np.float32(-np.inf))
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        mx = s.max(axis=-1, keepdims=True)
        p = np.exp(s - mx).astype(np.float32)
        p = p / p.sum(axis=-1, keepdims=True, dtype=np.float32)
    return np.asarray(round_to(p, spec.p_dtype)).astype(np.float32)
