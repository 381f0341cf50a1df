"""Frontend IR -> Tiny IR: the driver and the table of op lowerings (docs/DESIGN.md §Pipeline step 1).

Each high-level op is lowered to the naive Tiny IR form by a function registered with
``@lowering(OP, inputs=(min, max))`` (files ``lower_*.py`` beside this one). The driver binds the
signature inputs, runs the lowerings in graph order, and reconciles each produced tensor with the
``tensors`` table: a declared dtype inserts a CAST, a declared shape is checked (a symbol that is new
there is bound to the inferred size; a symbol bound to two sizes is E1304).
"""
from __future__ import annotations

import importlib
import pathlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable

from ..ir.builder import Builder
from ..ir.diagnostics import fail
from ..ir.dtypes import DType
from ..ir.expr import Expr
from ..ir.infer import as_dtype, check_bound_symbols
from ..ir.shapes import fmt_shape, subs
from ..ir.tiny import Program, UOp
from .graph import FrontendGraph, Node

_MISSING = object()


@dataclass(frozen=True)
class Attr:
    """One attribute of a Frontend IR op, as documented (docs/frontend_ir.md is generated from these):
    ``kind`` says what values it takes, ``default`` is used when it is absent (``REQUIRED``: it must be
    given; a string in ``default_text`` describes a default computed from the inputs), ``fns`` limits an
    Elementwise attribute to the functions that read it."""

    kind: str
    default: Any = _MISSING
    doc: str = ""
    default_text: str = ""
    fns: tuple = ()

    @property
    def required(self) -> bool:
        return self.default is _MISSING and not self.default_text


REQUIRED = _MISSING


@dataclass
class Ctx:
    """What a lowering sees: the builder and the node being lowered (for attributes and `at`)."""

    b: Builder
    node: Node
    read: set = field(default_factory=set)  # the attributes the lowering asked for

    @property
    def at(self) -> str:
        return self.node.name

    def attr(self, key: str, default: Any = _MISSING) -> Any:
        """The node's attribute, else the caller's default, else the op table's (an attribute read here
        must be declared there when the op declares its attributes)."""
        table = LOWERINGS[self.node.op][2]
        spec = None if table is None else table.get(key)
        assert table is None or spec is not None, f"{self.node.op} reads undeclared attribute {key!r}"
        self.read.add(key)
        if key in self.node.attrs:
            return self.node.attrs[key]
        if default is _MISSING and spec is not None:
            default = spec.default
        if default is _MISSING:
            fail("InvalidAttribute", self.at, f"{self.node.op} needs attribute {key!r}")
        return default

    def int_attr(self, key: str, default: Any = _MISSING) -> int:
        v = self.attr(key, default)
        if not isinstance(v, int) or isinstance(v, bool):
            fail("InvalidAttribute", self.at, f"attribute {key!r} must be an integer, got {v!r}")
        return v

    def ints_attr(self, key: str, n: int, default: Any = _MISSING) -> tuple:
        """An int or a list of ints, expanded to n entries (stride 2 -> (2, 2))."""
        v = self.attr(key, default)
        if isinstance(v, int) and not isinstance(v, bool):
            v = (v,) * n
        if not isinstance(v, (list, tuple)) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            fail("InvalidAttribute", self.at, f"attribute {key!r} must be an int or a list of ints, got {v!r}")
        if len(v) != n:
            fail("InvalidAttribute", self.at, f"attribute {key!r} needs {n} entries, got {list(v)}")
        return tuple(v)

    def bool_attr(self, key: str, default: Any = _MISSING) -> bool:
        v = self.attr(key, default)
        if not isinstance(v, bool):
            fail("InvalidAttribute", self.at, f"attribute {key!r} must be true or false, got {v!r}")
        return v

    def dtype_attr(self, key: str, default: Any = _MISSING) -> DType:
        v = self.attr(key, default)
        if v is None and key == "acc_dtype":
            fail("AccDtypeMissing", self.at, f"{self.node.op} has acc_dtype null",
                 "Omit acc_dtype for the fp32 default, or name a dtype (fp32 recommended).")
        return as_dtype(self.at, v)

    def axis(self, a: Any, rank: int, what: str = "axis") -> int:
        if not isinstance(a, int) or isinstance(a, bool) or not -rank <= a < rank:
            fail("AxisOutOfRange", self.at, f"{what} {a!r} out of range for rank {rank}")
        return a % rank


Lowering = Callable[[Ctx, list], list]
LOWERINGS: dict[str, tuple] = {}


def lowering(op: str, inputs: tuple = (1, 1), attrs: "dict[str, Attr] | None" = None):
    """Register fn as the lowering of op, taking inputs=(min, max) tensors and the attributes attrs
    (checked before lowering and documented). An op registered without ``attrs`` is checked after its
    lowering instead: an attribute the lowering never read is an error."""
    def deco(fn: Lowering) -> Lowering:
        LOWERINGS[op] = (fn, inputs, None if attrs is None else dict(attrs))
        return fn
    return deco


def op_table() -> dict:
    """{op: (lowering, (min inputs, max inputs), {attribute: Attr} or None)}, every ``lower_*.py``
    module beside this one loaded."""
    if not _LOADED:
        for m in pkgutil.iter_modules([str(pathlib.Path(__file__).resolve().parent)]):
            if m.name.startswith("lower_"):
                importlib.import_module(f"{__package__}.{m.name}")
        _LOADED.append(True)
    return LOWERINGS


_LOADED: list = []


def unknown_attrs(op: str, attrs: dict) -> list:
    """The attribute names op does not take (for an Elementwise, those its fn does not read)."""
    table = op_table()
    if op not in table:
        return []
    known = table[op][2]
    if known is None:  # checked after lowering (see lowering())
        return []
    fn = attrs.get("fn")
    return [k for k in attrs if k not in known or (known[k].fns and fn not in known[k].fns)]


def lower(g: FrontendGraph) -> Program:
    op_table()
    b = Builder()
    b.reserve({t.name for t in g.tensors} | {e.tensor for e in g.inputs})
    env: dict[str, UOp] = {}
    symtab: dict[str, Any] = {}  # symbol -> Dim it was bound to by a declared output shape
    for e in g.inputs:
        spec = g.spec(e.tensor)
        if spec is None or spec.dtype is None or spec.shape is None:
            fail("UnknownTensor", e.tensor, f"signature input {e.tensor!r} needs a dtype and shape in \"tensors\"")
        env[e.tensor] = b.input(e.tensor, spec.dtype, spec.shape, at=e.tensor, nid=e.tensor)
    for n in g.nodes:
        if n.op not in LOWERINGS:
            fail("UnknownOp", n.name, f"unknown op {n.op!r}",
                 "Use one of: " + ", ".join(sorted(LOWERINGS)) + ".")
        fn, (lo, hi), _ = LOWERINGS[n.op]
        if not lo <= len(n.inputs) <= hi:
            fail("WrongArity", n.name, f"{n.op} takes {lo if lo == hi else f'{lo} to {hi}'} inputs, got {len(n.inputs)}")
        if len(n.outputs) != 1:
            fail("WrongArity", n.name, f"{n.op} produces exactly one output, got {len(n.outputs)}")
        ins = [env[t] for t in n.inputs]
        ctx = Ctx(b, n)
        (out,) = fn(ctx, ins)
        unread = [k for k in n.attrs if k not in ctx.read and k != "fn"]
        if unread and LOWERINGS[n.op][2] is None:
            fail("InvalidAttribute", n.name, f"{n.op} has no attribute {', '.join(map(repr, unread))}",
                 "Remove the attribute or correct its spelling (docs/frontend_ir.md).")
        env[n.outputs[0]] = reconcile(b, n.outputs[0], out, g, symtab, at=n.name)
    prog = b.program([(e.tensor, env[e.tensor]) for e in g.outputs])
    check_bound_symbols(prog)
    return prog


def reconcile(b: Builder, name: str, x: UOp, g: FrontendGraph, symtab: dict, *, at: str) -> UOp:
    """Apply the tensors table's declaration of an op's output (dtype -> CAST, shape -> check)."""
    spec = g.spec(name)
    if spec is None:
        return x
    if spec.shape is not None:
        decl = subs(spec.shape, symtab)
        if len(decl) != x.ndim:
            fail("AxisSizeMismatch", name, f"declared shape {fmt_shape(spec.shape)} but {at} produces {fmt_shape(x.shape)}")
        for k, (d, got) in enumerate(zip(decl, x.shape, strict=True)):
            if d == got:
                continue
            if isinstance(d, Expr) and len(d.terms) == 1 and d.terms[0] == ((str(d),), 1) \
                    and str(d) not in _input_symbols(g):
                symtab[str(d)] = got  # a size named by the output, e.g. "Ho": bind it
                continue
            symbolic = isinstance(spec.shape[k], Expr) or isinstance(got, Expr)
            kind = "AxisAlignmentMismatch" if symbolic else "AxisSizeMismatch"
            fail(kind, name, f"axis {k} is declared {spec.shape[k]} (= {d}) but {at} produces {got} "
                 f"(shape {fmt_shape(x.shape)})")
    if spec.dtype is not None and spec.dtype != x.dtype:
        x = b.cast(x, spec.dtype, at=at)
    return x


def _input_symbols(g: FrontendGraph) -> set:
    from ..ir.shapes import symbols
    out: set = set()
    for e in g.inputs:
        s = g.spec(e.tensor)
        if s is not None and s.shape is not None:
            out |= symbols(s.shape)
    return out
