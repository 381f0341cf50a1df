"""ONNX op handlers, part 8: ScatterND with constant indices (what torch.onnx writes for an in-place slice assignment,
``y[:, 0] = x[:, 1]``: RWKV). The indices address rows of data (its first k axes, k the indices' last extent); the
result is, row by row, the update written there (the last one where indices repeat, as ``reduction='none'`` leaves
it to the implementation) or data's own row: a Where of a constant mask between data and a Gather of the updates at
constant rows, every row a static choice.
"""
from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING

import numpy as np

from ..ir.diagnostics import fail
from .onnx_table import Emit, handler, i64 as _i64

if TYPE_CHECKING:  # annotations only (frontend/onnx.py loads the handlers)
    from .onnx import Importer, OnnxNode


@handler("ScatterND")
def scatter_nd(imp: Importer, node: OnnxNode) -> list:
    e = Emit(imp, node)
    at = node.name
    if node.attr("reduction", "none") not in ("none", b"none"):
        node.unsupported(f"reduction {node.attr('reduction')!r} (polysat takes 'none')", "reduction")
    data, upd = e.input(0), e.input(2)
    idx = np.asarray(e.const(1, "indices")).astype(np.int64)
    shape = list(e.shape(data))
    if not all(isinstance(d, int) for d in shape) or idx.ndim < 1 or not 1 <= idx.shape[-1] <= len(shape):
        node.unsupported("ScatterND needs static shapes and indices of last extent 1 to data's rank")
    k = idx.shape[-1]
    lead, tail = shape[:k], shape[k:]
    rows = idx.reshape(-1, k)
    rows = np.where(rows < 0, rows + np.asarray(lead), rows)
    if rows.size and ((rows < 0).any() or (rows >= np.asarray(lead)).any()):
        fail("InvalidAttribute", at, f"ONNX ScatterND node {at!r}: an index lies outside data's axes {lead}")
    n, width = len(rows), prod(tail)
    if list(e.shape(upd)) != list(idx.shape[:-1]) + tail:
        fail("InvalidAttribute", at, f"ONNX ScatterND node {at!r}: updates of shape {list(e.shape(upd))}, the indices "
             f"and data ask {list(idx.shape[:-1]) + tail}")
    src = np.full(prod(lead), -1, dtype=np.int64)
    src[np.ravel_multi_index(rows.T, lead)] = np.arange(n)  # numpy keeps the last of repeats
    flat = imp.call("Reshape", f"{at}/data", [data, _i64([len(src), width])])[0]
    picked = imp.call("Gather", f"{at}/updates", [imp.call("Reshape", f"{at}/updates", [upd, _i64([n, width])])[0],
                                                  np.maximum(src, 0)], {"axis": 0})[0]
    y = imp.call("Where", at, [(src >= 0).reshape(-1, 1), picked, flat])[0]
    return imp.call("Reshape", f"{at}/out", [y, _i64(shape)])
