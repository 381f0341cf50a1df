"""Symbol binding (docs/DESIGN.md §Cost model): every symbol of a model bound to a size, from ``--bind``
or else POLYSAT_PRICE_SYMBOL_SIZE, and checked addressable. The prices, the Poly Core report, the plan
search and the compiled model's measurement log bind with it.
"""
from __future__ import annotations

import math

from ..ir.diagnostics import fail
from ..ir.expr import Expr
from ..ir.infer import MAX_ELEMENTS
from ..ir.shapes import bind as bind_shape, fmt_shape
from ..ir.tiny import Program
from ..knobs import price_symbol_size


def program_symbols(program: Program) -> list:
    out: dict = {}
    for n in program.nodes:
        for d in n.shape:
            if isinstance(d, Expr):
                for v in sorted(d.variables(), key=str):
                    out[str(v)] = None
    return list(out)


def bind_params(program: Program, bind: "dict | None" = None) -> dict:
    """Every symbol of program bound: from bind, else price_symbol_size()."""
    bind = dict(bind or {})
    syms = program_symbols(program)
    for k in bind:
        if k not in syms:
            fail("InvalidAttribute", "--bind", f"symbol {k!r} is not used by the model (symbols: {', '.join(syms) or 'none'})",
                 "Bind only the model's symbols.")
    params = {s: int(bind.get(s, price_symbol_size())) for s in syms}
    check_addressable(program, params)
    return params


def check_addressable(program: Program, params: dict) -> None:
    """Every tensor's size under the binding stays below 2**62 elements (int64 indices; isl takes
    64-bit values), else E1007 at the user's name for it."""
    for n in program.nodes:
        shape = bind_shape(n.shape, params)
        if math.prod(shape) >= MAX_ELEMENTS:
            fail("UnaddressableShape", n.tag or n.id, f"shape {fmt_shape(n.shape)} is {list(shape)} with "
                 f"{', '.join(f'{k}={v}' for k, v in sorted(params.items()))}: beyond 64-bit addressing (< 2**62)",
                 "Use smaller symbolic coefficients, or bind smaller sizes with --bind.")

