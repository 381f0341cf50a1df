"""The Frontend IR graph as frozen dataclasses (docs/DESIGN.md §Frontend IR): the signature, the tensor
table and the nodes in topological order. frontend/model.py parses a document into it; the lowering
(frontend/lower.py) reads it.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.dtypes import DType
from ..ir.shapes import Shape
from ..ir.tiny import Arg
from ..ir.tiny_json import jsonable


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: DType | None
    shape: Shape | None


@dataclass(frozen=True)
class SignatureEntry:
    tensor: str
    role: str = "data"
    mutability: str = "immutable"
    storage: str | None = None


@dataclass(frozen=True)
class Node:
    op: str
    name: str
    inputs: tuple
    outputs: tuple
    attrs: Arg


@dataclass(frozen=True)
class FrontendGraph:
    inputs: tuple  # SignatureEntry
    outputs: tuple  # SignatureEntry
    tensors: tuple  # TensorSpec
    nodes: tuple  # Node, topological order

    def spec(self, name: str) -> TensorSpec | None:
        for t in self.tensors:
            if t.name == name:
                return t
        return None

    def to_json(self) -> dict:
        return {
            "signature": {"inputs": [_sig_json(e) for e in self.inputs], "outputs": [_sig_json(e) for e in self.outputs]},
            "tensors": {t.name: {k: v for k, v in (("dtype", t.dtype.value if t.dtype else None),
                                                   ("shape", jsonable(t.shape) if t.shape is not None else None)) if v is not None}
                        for t in self.tensors},
            "graph": [{"op": n.op, "name": n.name, "inputs": list(n.inputs), "outputs": list(n.outputs),
                       "attrs": jsonable(dict(n.attrs))} for n in self.nodes],
        }


def _sig_json(e: SignatureEntry) -> dict:
    d = {"tensor": e.tensor, "role": e.role, "mutability": e.mutability}
    if e.storage:
        d["storage"] = e.storage
    return d
