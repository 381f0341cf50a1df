"""ONNX op handlers, part 8: scatters. ScatterND with constant indices (what torch.onnx writes for an in-place slice
assignment, ``y[:, 0] = x[:, 1]``: RWKV): the indices address rows of data (its first k axes, k the indices' last
extent); the result is, row by row, the update written there (the last one where indices repeat, as
``reduction='none'`` leaves it to the implementation) or data's own row: a Where of a constant mask between data and a
Gather of the updates at constant rows, every row a static choice. ScatterElements with indices of any origin, and
GatherND (its rows at their flat indices): below.
"""
from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING

import numpy as np
from onnx import TensorProto

from ..ir.diagnostics import fail
from ..ir.dtypes import DType
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


@handler("ScatterElements", "Scatter")
def scatter_elements(imp: Importer, node: OnnxNode) -> list:
    """ScatterElements (and opset 9's Scatter; torch's ``scatter``, ``scatter_add``, ``scatter_reduce``: MoE routers'
    one-hot masks) with indices computed at run time, written without a run-time address: along the axis, output
    element j takes update k where index k is j (``eq``, of data's extent by the indices' along the axis), the last
    such k where indices repeat (``reduction='none'`` leaves it to the implementation; torch writes the last), or
    their sum, max or min; data where none is. Indices shorter than data along the other axes are padded with -1,
    which no position equals."""
    at = node.name
    red = node.attr("reduction", "none")
    red = red.decode() if isinstance(red, bytes) else red
    if red not in ("none", "add", "max", "min"):
        node.unsupported(f"reduction {red!r} (polysat takes none, add, max and min)", "reduction")
    data, upd = imp.value(node.inputs[0], at), imp.value(node.inputs[2], at)
    idx = imp.value(node.inputs[1], at)
    ds, ins = list(imp.shape(data)), list(imp.shape(idx))
    rank = len(ds)
    axis = int(node.attr("axis", 0))
    axis = axis + rank if axis < 0 else axis
    if not all(isinstance(d, int) for d in ds + ins) or len(ins) != rank or list(imp.shape(upd)) != ins or \
            not 0 <= axis < rank or any(i > d for k, (i, d) in enumerate(zip(ins, ds)) if k != axis):
        node.unsupported("ScatterElements needs static shapes, indices of data's rank no longer than data off the "
                         "axis, and updates of the indices' shape")
    dt = imp.dtype(data)
    if dt == DType.bool:  # as 0 and 1
        data, upd = (imp.call("Cast", f"{at}/int", [v], {"to": TensorProto.INT32})[0] for v in (data, upd))
    n, k = ds[axis], ins[axis]
    idx = imp.call("Cast", f"{at}/index", [idx], {"to": TensorProto.INT64})[0]
    idx = imp.call("Where", f"{at}/index", [imp.call("Less", f"{at}/index", [idx, np.asarray(0, np.int64)])[0],
                                            imp.call("Add", f"{at}/index", [idx, np.asarray(n, np.int64)])[0], idx])[0]
    short = [0 if a == axis else d - i for a, (i, d) in enumerate(zip(ins, ds))]
    if any(short):  # to data's extent off the axis: no position is -1
        pads = _i64([0] * rank + short)
        idx = imp.call("Pad", f"{at}/index", [idx, pads, np.asarray(-1, np.int64)])[0]
        upd = imp.call("Pad", f"{at}/updates", [upd, pads])[0]
    lane = _i64([axis])
    idx, upd = (imp.call("Unsqueeze", f"{at}/lane", [v, lane])[0] for v in (idx, upd))  # [.., 1, k, ..]
    pos = np.arange(n, dtype=np.int64).reshape([1] * axis + [n, 1] + [1] * (rank - axis - 1))
    eq = imp.call("Equal", f"{at}/eq", [idx, pos])[0]  # [.., n, k, ..]: index k is position j
    over = _i64([axis + 1])
    if red == "none":
        ks = np.arange(k, dtype=np.int64).reshape([1] * (axis + 1) + [k] + [1] * (rank - axis - 1))
        last = imp.call("ReduceMax", f"{at}/last", [imp.call("Where", f"{at}/last", [eq, ks, np.asarray(-1, np.int64)])[0],
                                                    over], {"keepdims": 1})[0]
        eq = imp.call("Equal", f"{at}/last", [last, ks])[0]
        hit = imp.call("Squeeze", f"{at}/hit", [imp.call("Less", f"{at}/hit", [np.asarray(-1, np.int64), last])[0],
                                               over])[0]
        zero = imp.call("Sub", f"{at}/zero", [upd, upd])[0]
        got = imp.call("ReduceSum", f"{at}/pick", [imp.call("Where", f"{at}/pick", [eq, upd, zero])[0], over],
                       {"keepdims": 0})[0]
        y = imp.call("Where", at, [hit, got, data])[0]
    elif red == "add":
        zero = imp.call("Sub", f"{at}/zero", [upd, upd])[0]
        got = imp.call("ReduceSum", f"{at}/sum", [imp.call("Where", f"{at}/sum", [eq, upd, zero])[0], over],
                       {"keepdims": 0})[0]
        y = imp.call("Add", at, [data, got])[0]
    else:
        far = np.asarray(-np.inf if red == "max" else np.inf, dt.np) if dt.is_float else \
            np.asarray(np.iinfo(np.int32).min if red == "max" else np.iinfo(np.int32).max, np.int32)
        op = "ReduceMax" if red == "max" else "ReduceMin"
        got = imp.call(op, f"{at}/{red}", [imp.call("Where", f"{at}/{red}", [eq, upd, far])[0], over],
                       {"keepdims": 0})[0]
        y = imp.call("Max" if red == "max" else "Min", at, [data, got])[0]
    return [imp.call("Cast", f"{at}/bool", [y], {"to": TensorProto.BOOL})[0] if dt == DType.bool else y]


@handler("GatherND")
def gather_nd(imp: Importer, node: OnnxNode) -> list:
    """GatherND (torch.onnx's ``x[mask]``: XMOD's adapters) at batch_dims 0: each index tuple (the indices' last
    axis, k long) picks a row of data's first k axes, read as one Gather of data with those axes merged, at the
    tuple's row-major flat index (negative indices count from the end)."""
    at = node.name
    if int(node.attr("batch_dims", 0)) != 0:
        node.unsupported("batch_dims other than 0", "batch_dims")
    data, idx = imp.value(node.inputs[0], at), node.inputs[1]
    ds = list(imp.shape(data))
    ins = list(np.shape(imp.const(idx))) if imp.is_const(idx) else list(imp.shape(imp.value(idx, at)))
    if not all(isinstance(d, int) for d in ds + ins) or not ins or not 1 <= ins[-1] <= len(ds):
        node.unsupported("GatherND needs static shapes and indices of last extent 1 to data's rank")
    k = ins[-1]
    lead = np.asarray(ds[:k], np.int64)
    strides = np.asarray([prod(ds[j + 1:k]) for j in range(k)], np.int64)
    if imp.is_const(idx):
        tuples = np.asarray(imp.const(idx)).astype(np.int64)
        flat = (np.where(tuples < 0, tuples + lead, tuples) * strides).sum(-1)
    else:
        t = imp.call("Cast", f"{at}/index", [idx], {"to": TensorProto.INT64})[0]
        t = imp.call("Where", f"{at}/index", [imp.call("Less", f"{at}/index", [t, np.asarray(0, np.int64)])[0],
                                              imp.call("Add", f"{at}/index", [t, lead])[0], t])[0]
        flat = imp.call("ReduceSum", f"{at}/index", [imp.call("Mul", f"{at}/index", [t, strides])[0], _i64([-1])],
                        {"keepdims": 0})[0]
    rows = imp.call("Reshape", f"{at}/rows", [data, _i64([prod(ds[:k])] + ds[k:])])[0]
    return imp.call("Gather", at, [rows, flat], {"axis": 0})
