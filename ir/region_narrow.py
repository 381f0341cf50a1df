"""Round a value where it is stored when every reader rounds it first (docs/DESIGN.md §RB-SSA: a yield carries the
dtype it stores).

A kernel boundary can fall between a value and the narrowing cast every consumer applies to it (GELU in
fp32, then the fp16 rounding the next GEMM reads): the producer stores fp32 and each reader rounds on load.
Storing the rounded value gives every reader the same numbers (rounding once at the store, or at each
load of the same element, is the same rounding) in half the bytes, and the consumer reads an fp16 operand,
which is what the MMA template loads. ``narrow_boundaries`` moves such casts into the producer's yield.
Program outputs keep their declared dtype.
"""
from __future__ import annotations

from dataclasses import replace

from . import trampoline
from .region import R, Let, Region, RNode


def _narrowing_cast(n: RNode, src: RNode) -> bool:
    return (n.op == R.UNARY and n.arg == "cast" and n.dtype is not None and src.dtype is not None
            and n.dtype.is_float and src.dtype.is_float and n.dtype.itemsize < src.dtype.itemsize)


def _reader_casts(regions: list[Region]) -> dict:
    """Intermediate buffer -> the one dtype every read of it is cast to first (absent: some read is not)."""
    out: dict = {}
    bad: set = set()
    for r in regions:
        for let in r.lets:
            if let.expr.op == R.READ:
                bad.add(let.expr.arg[0])  # read by name from other lets: not cast at the read
            seen: set = set()
            stack = [let.expr]
            while stack:
                n = stack.pop()
                if id(n) in seen:
                    continue
                seen.add(id(n))
                for s in n.src:
                    if s.op == R.READ:
                        t = s.arg[0]
                        if not _narrowing_cast(n, s) or out.setdefault(t, n.dtype) != n.dtype:
                            bad.add(t)
                    stack.append(s)
    return {t: dt for t, dt in out.items() if t not in bad}


def narrow_boundaries(regions: list[Region]) -> list[Region]:
    """The regions with each intermediate that all its readers narrow stored narrow (see the module
    docstring); the others unchanged."""
    produced = {b.name: b for r in regions for b in r.outputs if not b.program_output}
    narrow = {t: dt for t, dt in _reader_casts(regions).items() if t in produced}
    if not narrow:
        return regions

    def rewrite(n: RNode, memo: dict) -> RNode:
        if id(n) in memo:
            return memo[id(n)]
        if n.op == R.UNARY and n.arg == "cast" and n.src[0].op == R.READ and n.src[0].arg[0] in narrow:
            out = RNode(R.READ, (), n.src[0].arg, n.dtype, n.src[0].axes)
        else:
            src = []
            for s in n.src:  # a generator walk (ir/trampoline.py): trees as deep as a fused chain
                src.append((yield rewrite(s, memo)))
            src = tuple(src)
            out = n if all(a is b for a, b in zip(src, n.src)) else RNode(n.op, src, n.arg, n.dtype, n.axes)
        memo[id(n)] = out
        return out

    def buf(b):
        return replace(b, memref=replace(b.memref, dtype=narrow[b.name])) if b.name in narrow else b

    out = []
    for r in regions:
        memo: dict = {}
        out.append(replace(r, inputs=tuple(buf(b) for b in r.inputs), outputs=tuple(buf(b) for b in r.outputs),
                           lets=tuple(Let(let.name, trampoline.run(rewrite(let.expr, memo))) for let in r.lets),
                           yields=tuple(replace(y, cast=narrow[y.dst]) if y.dst in narrow else y for y in r.yields)))
    return out
