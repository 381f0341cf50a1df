"""ONNX element types and the dtypes polysat computes them in (the importer's and the handlers' one table)."""
from __future__ import annotations

import numpy as np

from ..ir.diagnostics import fail
from ..ir.dtypes import DType

# ONNX TensorProto element types polysat computes in (int64 only where a constant folds or narrows).
_ONNX_DTYPES = {1: DType.fp32, 10: DType.fp16, 16: DType.bf16, 6: DType.i32, 9: DType.bool}
_ONNX_NAMES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 8: "string",
               9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16"}
NP_DTYPES = {np.dtype(np.float32): DType.fp32, np.dtype(np.float16): DType.fp16, np.dtype(np.int32): DType.i32,
              np.dtype(np.bool_): DType.bool}


def onnx_numeric(elem: int) -> bool:
    """Whether elem is an ONNX element type onnx reads as numbers (every named one but string)."""
    return elem in _ONNX_NAMES and elem != 8


def onnx_dtype_name(elem: int) -> str:
    return _ONNX_NAMES.get(elem, f"element type {elem}")


def dtype_of_onnx(elem: int, at: str, what: str) -> DType:
    if elem not in _ONNX_DTYPES:
        fail("UnsupportedDtype", at, f"{what} has ONNX type {onnx_dtype_name(elem)}, which polysat does not compute in")
    return _ONNX_DTYPES[elem]
