"""Values of e-classes and e-nodes, for comparing every rewrite a rule makes.

Each e-class gets the value of one acyclic term: classes are valued bottom-up, a class taking the
value of the first of its e-nodes (loaded terms first) whose children all have values, so cycles a
rewrite closes never block the valuation and a child is valued through whatever term of its class
is finite. An e-node is evaluated on its children's values by the reference evaluator
(``ir/evaluate.py``: one Tiny IR node on stand-in inputs, built by the same converter extraction
uses); reads of memory are gathered here, with a mask where a read outside a ``Select`` guard is
undefined. Alongside each value go a magnitude bound (the value evaluated with absolute values and
no cancellation, times the length of every sum: the running error bound) and the coarsest rounding
unit in the term, which set the tolerance (``checker/numerics.py``).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..egraph import encode as E
from ..egraph.graph import ENode, EGraphView
from ..egraph.totiny import TermBuilder
from ..ir.diagnostics import PolysatError
from ..ir.dtypes import DType
from ..ir.evaluate import evaluate
from ..ir.expr import Expr
from ..ir.tiny import Arg, Ops, Program, UOp
from .numerics import eps

_parse_shape = functools.lru_cache(maxsize=8192)(E.parse_shape)  # attributes are immutable strings
_parse_map = functools.lru_cache(maxsize=8192)(E.parse_map)

_MOVES = ("Reshape", "Permute", "Transpose", "Expand", "Pad", "Shrink", "Flip", "View", "BroadcastInDim")


@dataclass
class Val:
    v: np.ndarray
    mag: np.ndarray  # float64 magnitude bound of the computation
    unit: float  # coarsest machine epsilon of a rounding in the term (0: exact)
    mask: "np.ndarray | None" = None  # defined elements of a partial read (None: all)


class Unevaluable(Exception):
    """An e-node the checker cannot evaluate (ill-typed, a read out of bounds, an unknown constructor)."""


def _dt(a: np.ndarray) -> DType:
    return {"float16": DType.fp16, "bfloat16": DType.bf16, "float32": DType.fp32, "bool": DType.bool,
            "int32": DType.i32}[a.dtype.name]


def _converter() -> TermBuilder:
    """A TermBuilder used only for its one-node ``convert`` (no e-graph, no program)."""
    b = TermBuilder.__new__(TermBuilder)
    b.names, b.taken, b.count, b.nodes, b.used, b.cur, b.made, b.chosen = {}, set(), 0, [], set(), [], {}, {}
    return b


def tiny_eval(node: ENode, kids: list) -> np.ndarray:
    """node evaluated by the reference evaluator on its children's arrays (kids, in order)."""
    b = _converter()
    stand, feed = [], {}
    for k, (ch, arr) in enumerate(zip(node.children, kids, strict=True)):
        sid = f"s{k}"
        u = UOp(sid, Ops.INPUT, (), Arg({"tensor_id": sid, "dtype": _dt(arr), "shape": tuple(arr.shape)}), _dt(arr),
                tuple(arr.shape))
        stand.append(u)
        feed[sid] = arr
        b.made[ch] = u
    try:
        out = b.convert(node.eclass, node)
        if not b.nodes:
            return feed[out.id]
        prog = Program(tuple(stand) + tuple(b.nodes), (("v", out.id),))
        return evaluate(prog, feed)["v"]
    except PolysatError as e:
        raise Unevaluable(e.diagnostics[0].why) from None
    except (KeyError, ValueError, IndexError, TypeError, AssertionError) as e:
        raise Unevaluable(f"{type(e).__name__}: {e}") from None


def _gather(mem: np.ndarray, shape: str, imap: str) -> tuple:
    """(values, in-bounds mask or None) of mem read at imap(i) for i over shape."""
    s = tuple(int(d) for d in _parse_shape(shape))
    m = _parse_map(imap)
    if len(m) != mem.ndim:
        raise Unevaluable(f"a read map of rank {len(m)} on memory of rank {mem.ndim}")
    grid = np.indices(s, dtype=np.int64, sparse=True) if s else []
    env = {f"i{k}": g for k, g in enumerate(grid)}
    idx, ok = [], np.ones(s, dtype=bool)
    for k, e in enumerate(m):
        if e.variables() - set(env):
            raise Unevaluable(f"read map entry {e} names an axis the read does not have")
        v = np.broadcast_to(np.asarray(Expr.evaluate(e, env), dtype=np.int64), s)
        ok &= (v >= 0) & (v < mem.shape[k])
        idx.append(np.clip(v, 0, mem.shape[k] - 1))
    out = mem[tuple(idx)] if idx else np.broadcast_to(mem, s)
    return np.ascontiguousarray(out).reshape(s), (None if ok.all() else ok)


def _guard_ok(guard: str, shape: str, imap: str, mem_shape: tuple) -> np.ndarray:
    s = tuple(int(d) for d in _parse_shape(shape))
    m = _parse_map(imap)
    env = {f"i{k}": g for k, g in enumerate(np.indices(s, dtype=np.int64, sparse=True))} if s else {}
    ok = np.ones(s, dtype=bool)
    for j in E.parse_guard(guard):
        v = np.asarray(Expr.evaluate(m[j], env), dtype=np.int64)
        ok &= (v >= 0) & (v < mem_shape[j])
    return ok


class Valuer:
    """Values of the e-classes of one exported e-graph, on one set of input arrays."""

    def __init__(self, view: EGraphView, inputs: dict, seed: "dict | None" = None):
        self.view, self.inputs = view, inputs
        self.vals: dict = dict(seed or {})  # class -> Val
        self.via: dict = {}  # class -> the e-node its value came from
        self.errors: dict = {}  # (class, node order) -> why it cannot be evaluated

    def value_all(self, nodes_first=None) -> None:
        """Value every class through its first evaluable e-node (nodes_first: classes' preferred nodes)."""
        pending = [c for c in self.view.classes if c not in self.vals]
        while pending:
            rest = []
            for c in pending:
                ns = sorted(self.view.classes[c], key=lambda n: (nodes_first is not None and n not in nodes_first, n.order))
                for n in ns:
                    if all(ch in self.vals for ch in n.children):
                        try:
                            self.vals[c] = self.node(n)
                            self.via[c] = n
                            break
                        except Unevaluable as e:
                            self.errors[(c, n.order)] = str(e)
                if c not in self.vals:
                    rest.append(c)
            if len(rest) == len(pending):
                break
            pending = rest

    def node(self, n: ENode) -> Val:
        """The value of e-node n from its children's class values."""
        kids = [self.vals[ch] for ch in n.children]
        op, a = n.op, n.args
        if op == "Tensor":
            if a[0] not in self.inputs:
                raise Unevaluable(f"no input array for tensor {a[0]!r}")
            x = self.inputs[a[0]]
            return Val(x, np.abs(x.astype(np.float64)), 0.0)
        if op == "Mat":
            return kids[0]
        if op == "Read":
            v, mask = _gather(kids[0].v, a[0], a[1])
            mg, _ = _gather(kids[0].mag, a[0], a[1])
            return Val(v, mg, kids[0].unit, mask)
        if op == "Select":
            return self._select(n, kids)
        if any(k.mask is not None for k in kids):
            raise Unevaluable(f"{op} of a partial read (a read outside its memory, not under a Select guard)")
        v = tiny_eval(n, [k.v for k in kids])
        return Val(v, self._mag(n, kids, v), self._unit(n, kids, v))

    def _select(self, n: ENode, kids: list) -> Val:
        read = self.via.get(n.children[0])
        if read is None or read.op != "Read":
            raise Unevaluable("Select guards a class valued through a non-Read term")
        other = kids[1]
        mem = self.vals[read.children[0]].v
        ok = _guard_ok(n.args[0], read.args[0], read.args[1], mem.shape)
        got = kids[0]
        if got.mask is not None and (ok & ~got.mask).any():
            raise Unevaluable("the Select's guard admits a read outside the memory")
        if other.v.shape != got.v.shape:
            raise Unevaluable("Select branches of different shapes")
        v = np.where(ok, got.v, other.v.astype(got.v.dtype))
        return Val(v, np.where(ok, got.mag, other.mag), max(got.unit, other.unit))

    def _mag(self, n: ENode, kids: list, v: np.ndarray) -> np.ndarray:
        av = np.abs(v.astype(np.float64))
        op, a = n.op, n.args
        if op == "Const":
            return av
        if op in _MOVES:
            return tiny_eval(n, [k.mag.astype(np.float32) for k in kids]).astype(np.float64)
        if op == "Unary":
            return kids[0].mag if a[0] in ("NEG", "RELU") else av
        if op == "Cast":
            return np.maximum(kids[0].mag, av)
        if op == "Where":
            return np.maximum(kids[1].mag, kids[2].mag)
        if op == "Binary":
            x, y = kids[0].mag, kids[1].mag
            with np.errstate(all="ignore"):
                return {"ADD": lambda: x + y, "SUB": lambda: x + y, "MUL": lambda: x * y,
                        "FDIV": lambda: x / np.abs(kids[1].v.astype(np.float64)), "MAX": lambda: np.maximum(x, y),
                        "MIN": lambda: np.maximum(x, y)}.get(a[0], lambda: av)()
        if op == "Reduce":
            ax = E.parse_ints(a[1])
            body = kids[0].mag
            if a[0] == "SUM":
                count = int(np.prod([body.shape[k] for k in ax])) if ax else 1
                return body.sum(axis=ax) * count
            return body.max(axis=ax) if body.size else av
        if op == "SoftmaxSum":
            return av + kids[1].mag.max(axis=-1)
        return av

    def _unit(self, n: ENode, kids: list, v: np.ndarray) -> float:
        inner = max((k.unit for k in kids), default=0.0)
        if n.op in ("Const", *_MOVES):
            return inner
        extra = eps(n.args[0]) if n.op == "SoftmaxSum" else 0.0
        return max(inner, extra, eps(_dt(v).value))
