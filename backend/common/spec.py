"""What every kernel kind's spec shares: sizes (ints or symbol names bound at launch), the supported
element types, the elementwise epilogue applied to an fp32 accumulator, and the checks of sizes and dtypes.

Sizes are ints or symbol names (runtime parameters, bound by ``env`` at launch).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Union

from ...ir.diagnostics import fail
from ...ir.dtypes import DType, parse_dtype
from . import epilogue_fn

Size = Union[int, str]

ACTIVATIONS = ("relu", "gelu_tanh", "gelu_erf", "silu", "sigmoid")
EPILOGUE_KINDS = ("bias", "residual", "scale", "cast", "fn") + ACTIVATIONS
IN_DTYPES = (DType.fp16, DType.bf16)
OUT_DTYPES = (DType.fp16, DType.bf16, DType.fp32)
_SYMBOL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class EpilogueOp:
    """One op applied to the fp32 accumulator value v at (batch b, row m, column n).

    bias: v + t[n] (axis "n") or v + t[m] (axis "m"); residual: v + t[b, m, n] (same shape as C);
    scale: v * value; cast: v rounded to dtype (and kept as fp32); activations: v -> f(v); fn: v -> the
    program ``steps`` (backend/common/epilogue_fn.py: any read-free fp32 function, v read any number of times).
    ``dtype`` is the tensor's element type for bias/residual, the target type for cast.
    """
    kind: str
    tensor: str | None = None
    axis: str = "n"
    dtype: DType | None = None
    value: float = 1.0
    steps: tuple = ()

    def to_json(self) -> dict:
        d: dict[str, Any] = {"op": self.kind}
        if self.tensor is not None:
            d["tensor"] = self.tensor
        if self.kind == "bias":
            d["axis"] = self.axis
        if self.dtype is not None:
            d["dtype"] = self.dtype.value
        if self.kind == "scale":
            d["value"] = self.value
        if self.kind == "fn":
            d["steps"] = epilogue_fn.to_json(self.steps)
        return d


def epilogue_tensors(epilogue: Iterable[EpilogueOp]) -> tuple[str, ...]:
    """The tensors an epilogue reads, in kernel-parameter order."""
    return tuple(op.tensor for op in epilogue if op.tensor is not None)


def epilogue_dtypes(epilogue: Iterable[EpilogueOp]) -> dict[str, DType]:
    """The element type of each tensor an epilogue reads."""
    return {op.tensor: op.dtype for op in epilogue if op.tensor is not None}


def symbols_of(sizes: Iterable[Size]) -> tuple[str, ...]:
    """The symbol names among sizes, in first-use order."""
    return tuple(dict.fromkeys(d for d in sizes if isinstance(d, str)))


def resolve_size(d: Size, env: Mapping[str, int], what: str, at: str) -> int:
    """A size under env; E UnboundSymbol / UnaddressableShape when a symbol has no positive int value."""
    if isinstance(d, int):
        return d
    if d not in env:
        fail("UnboundSymbol", at, f"{what} is the symbol {d!r}, which has no value")
    v = env[d]
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        fail("UnaddressableShape", at, f"symbol {d!r} = {v!r}; sizes are positive ints")
    return v


def parse_spec_dtype(x: Any, at: str) -> DType:
    dt = parse_dtype(x)
    if dt is None:
        fail("UnknownDtype", at, f"unknown dtype {x!r}")
    return dt


def check_size(d: Any, what: str, at: str) -> None:
    if isinstance(d, bool) or not isinstance(d, (int, str)):
        fail("InvalidAttribute", at, f"{what} must be a positive int or a symbol name, got {d!r}")
    if isinstance(d, int) and d < 1:
        fail("UnaddressableShape", at, f"{what} = {d}; sizes must be positive")
    if isinstance(d, str) and not _SYMBOL.match(d):
        fail("InvalidAttribute", at, f"{what} = {d!r} is not a symbol name (letters, digits, _)")


def check_sizes(named: Iterable[tuple[Any, str]], batch: Any, at: str) -> None:
    """Each (size, what) and each batch dim (batch: a tuple) is a positive int or a symbol name."""
    for d, what in named:
        check_size(d, what, at)
    if not isinstance(batch, tuple):
        fail("InvalidAttribute", at, "batch is a tuple of sizes")
    for i, d in enumerate(batch):
        check_size(d, f"batch dim {i}", at)
