"""The table of ATen mappings (``ATEN``: ATen op -> a function of a :class:`Call` and the op's arguments) that
frontend/torch_export.py imports a torch.export program with, and what a mapping sees (:class:`Call`); the
mappings are registered with :func:`aten` by torch_export.py and torch_aten_nn.py."""
from __future__ import annotations

import operator
from typing import Any, Callable

import numpy as np

from ..ir.diagnostics import fail
from .onnx import Importer


ATEN: dict[str, Callable] = {}


def aten(*names: str):
    def deco(fn):
        for n in names:
            ATEN[n] = fn
        return fn
    return deco


class Call:
    """What an ATen mapping sees: the importer, the FX node's name, and ONNX-node emission."""

    def __init__(self, imp: Importer, node, op: str):
        self.imp, self.node, self.name, self.op = imp, node, node.name, op

    def onnx(self, op: str, inputs: list, n_out: int = 1, **attrs) -> Any:
        outs = self.imp.call(op, self.name, inputs, attrs, n_out)
        return outs[0] if n_out == 1 else outs

    def like(self, v: Any, t: str) -> Any:
        """A Python scalar as a rank-0 constant of tensor t's dtype (a tensor name passes through)."""
        if isinstance(v, str) or v is None:
            return v
        return np.asarray(v, dtype=self.np_dtype(t))

    def np_dtype(self, t: str) -> np.dtype:
        """The numpy dtype of tensor t (a constant's own, or the computed tensor's)."""
        return self.imp.consts[t].dtype if t in self.imp.consts else self.imp.uop(self.imp.value(t, self.name)).dtype.np

    def shape(self, t: str) -> tuple:
        if t in self.imp.consts:
            return tuple(self.imp.consts[t].shape)
        return self.imp.uop(self.imp.value(t, self.name)).shape

    def used_outputs(self) -> set:
        """Which items of this node's tuple result the graph reads."""
        return {u.args[1] for u in self.node.users if u.target is operator.getitem}

    def unsupported(self, why: str):
        fail("UnsupportedOp", self.name, f"ATen op {self.op} (FX node {self.name!r}{written_at(self.node)}): {why}")


def written_at(node) -> str:
    """Where the user wrote an FX node: its module (path and class) and the last line of its stack trace."""
    out = ""
    stack = node.meta.get("nn_module_stack") or {}
    if stack:
        path, cls = list(stack.values())[-1]
        out += f", in module {path or '(the model)'} ({str(cls).rsplit('.', 1)[-1]})"
    trace = [line.strip() for line in str(node.meta.get("stack_trace") or "").splitlines() if line.strip()]
    files = [line for line in trace if line.startswith("File ")]
    if files:
        out += f", at {files[-1][5:]}"
    return out
