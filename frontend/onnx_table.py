"""The ONNX op table (docs/DESIGN.md §Frontend IR): op type -> handler, filled by ``@handler`` where each
handler is defined (``onnx_ops*.py``), and ``Emit``, the shorthands a handler writes Frontend IR nodes with.

A handler takes ``(Importer, OnnxNode)`` (frontend/onnx.py) and returns the Frontend tensor of each ONNX
output.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

from ..ir.dtypes import DType

if TYPE_CHECKING:  # annotations only: the importer (frontend/onnx.py) loads the handlers, not the reverse
    from .onnx import Importer, OnnxNode

Handler = Callable[["Importer", "OnnxNode"], list]
HANDLERS: dict[str, Handler] = {}
NO_FOLD: set = set()  # ops never evaluated at import even on constants (none so far)


def axis_in(node: OnnxNode, a: int, rank: int) -> int:
    """ONNX axis a (negative: from the end) of a rank-``rank`` tensor in [0, rank), or the node's E1102."""
    if not -rank <= a < rank:
        node.unsupported(f"axis {a} is out of range for rank {rank}")
    return a % rank


def i64(v) -> np.ndarray:
    """A list of ints as the int64 constant an ONNX shape, axes or pads input takes."""
    return np.asarray(list(v), dtype=np.int64)


def handler(*ops: str):
    def deco(fn: Handler) -> Handler:
        for op in ops:
            HANDLERS[op] = fn
        return fn
    return deco


class Emit:
    """Shorthands over an importer for one ONNX node: every emitted node is named after it."""

    def __init__(self, imp: Importer, node: OnnxNode):
        self.imp, self.node = imp, node
        self.k = 0

    def name(self) -> str:
        self.k += 1
        return self.node.name if self.k == 1 else f"{self.node.name}/{self.k}"

    def input(self, k: int) -> str:
        return self.imp.value(self.node.inputs[k], self.node.name)

    def op(self, op: str, inputs: list, attrs: dict | None = None, out: str | None = None) -> str:
        return self.imp.emit(op, inputs, attrs, name=self.name(), out=out)

    def ew(self, fn: str, *xs: str, **attrs) -> str:
        return self.op("Elementwise", list(xs), {"fn": fn, **attrs})

    def scalar(self, v, like: str) -> str:
        dt = self.imp.dtype(like)
        return self.op("Constant", [], {"value": _jsonable(v, dt), "dtype": dt.value, "shape": []})

    def const_of(self, v, dt: DType) -> str:
        return self.op("Constant", [], {"value": _jsonable(v, dt), "dtype": dt.value, "shape": []})

    def cast(self, x: str, dt: DType) -> str:
        return x if self.imp.dtype(x) == dt else self.ew("cast", x, to=dt.value)

    def shape(self, x: str) -> tuple:
        return self.imp.shape(x)

    def dtype(self, x: str) -> DType:
        return self.imp.dtype(x)

    def const(self, k: int, what: str) -> np.ndarray:
        """Input k, which must fold to a constant at import (a shape, axes, pads, indices)."""
        name = self.node.inputs[k]
        v = self.imp.const(name)
        if v is None:
            self.node.unsupported(f"input {k} ({what}) must be a constant at import; it is computed at run time")
        return v


def _jsonable(v, dt: DType):
    v = float(v) if dt.is_float else (bool(v) if dt == DType.bool else int(v))
    if dt.is_float and not np.isfinite(v):
        return "nan" if np.isnan(v) else ("inf" if v > 0 else "-inf")
    return v
