"""Human-readable Tiny IR: one line per node, ``id = OP(src) {arg} : dtype[shape]``."""
from __future__ import annotations

from .shapes import fmt_shape
from .tiny import Program, UOp
from .tiny_json import jsonable


def format_node(n: UOp) -> str:
    arg = ", ".join(f"{k}={jsonable(v)}" for k, v in n.arg.items() if k not in ("dtype", "shape") or n.op.value != "INPUT")
    arg = f" {{{arg}}}" if arg else ""
    return f"{n.id} = {n.op.value}({', '.join(n.src)}){arg} : {n.dtype.value}{fmt_shape(n.shape)}"


def format_program(p: Program) -> str:
    lines = [format_node(n) for n in p.nodes]
    lines.append("outputs: " + ", ".join(f"{name} <- {nid}" for name, nid in p.outputs))
    return "\n".join(lines)
