"""Element types of polysat tensors and the numpy types that carry them.

FP16/BF16 are the storage types of the MVP; FP32 is the accumulation type. bf16 is carried by
``ml_dtypes.bfloat16`` so that rounding to it is exact (round-to-nearest-even), as on the GPU.
"""
from __future__ import annotations

import enum

import ml_dtypes
import numpy as np


class DType(enum.Enum):
    fp16 = "fp16"
    bf16 = "bf16"
    fp32 = "fp32"
    i32 = "i32"
    bool = "bool"

    def __repr__(self) -> str:
        return f"DType.{self.value}"

    @property
    def np(self) -> np.dtype:
        return _NP[self]

    @property
    def itemsize(self) -> int:
        return _NP[self].itemsize

    @property
    def is_float(self) -> bool:
        return self in FLOATS


_NP = {
    DType.fp16: np.dtype(np.float16),
    DType.bf16: np.dtype(ml_dtypes.bfloat16),
    DType.fp32: np.dtype(np.float32),
    DType.i32: np.dtype(np.int32),
    DType.bool: np.dtype(np.bool_),
}

FLOATS = frozenset({DType.fp16, DType.bf16, DType.fp32})

# Spellings accepted in model files; the canonical name is the enum value.
_ALIASES = {
    "fp16": DType.fp16, "float16": DType.fp16, "half": DType.fp16, "f16": DType.fp16,
    "bf16": DType.bf16, "bfloat16": DType.bf16,
    "fp32": DType.fp32, "float32": DType.fp32, "float": DType.fp32, "f32": DType.fp32,
    "i32": DType.i32, "int32": DType.i32,
    "bool": DType.bool,
}


def parse_dtype(name: object) -> DType | None:
    """The DType a model file names, or None when the name is unknown."""
    if isinstance(name, DType):
        return name
    if not isinstance(name, str):
        return None
    return _ALIASES.get(name.strip().lower())


# Rank for promotion: bool < i32 < fp16 = bf16 < fp32; fp16 with bf16 promotes to fp32 (neither
# holds the other).
_RANK = {DType.bool: 0, DType.i32: 1, DType.fp16: 2, DType.bf16: 2, DType.fp32: 3}


def promote(a: DType, b: DType) -> DType:
    """The narrowest dtype that holds both a and b."""
    if a == b:
        return a
    if {a, b} == {DType.fp16, DType.bf16}:
        return DType.fp32
    return a if _RANK[a] > _RANK[b] else b


def round_to(x: np.ndarray | float, dtype: DType) -> np.ndarray:
    """x rounded to dtype (through float32 for the 16-bit floats, as the hardware does)."""
    arr = np.asarray(x)
    if dtype == DType.bool:
        return arr.astype(np.bool_)
    if dtype == DType.i32:
        return arr.astype(np.int32)
    if dtype in (DType.fp16, DType.bf16) and arr.dtype != np.float32:
        arr = arr.astype(np.float32)
    return arr.astype(dtype.np)



def round_kept(x, dtype: DType):
    """round_to for a value no one writes to (a ufunc's own new result, a reduction's operand): x itself where
    it is row-major of dtype already, which round_to would copy whole (copies of conv products were 270 of 430 s
    of VGG-19's reference at 224 px); another layout is copied as round_to does, so sums run in the same order."""
    if isinstance(x, np.ndarray) and x.dtype == dtype.np and x.flags.c_contiguous:
        return x
    return round_to(x, dtype)
