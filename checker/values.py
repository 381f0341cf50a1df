"""Values of e-classes and e-nodes, for comparing every rewrite a rule makes.

Each e-class gets the value of one acyclic term: classes are valued bottom-up, a class taking the
value of the first of its e-nodes (loaded terms first) whose children all have values, so cycles a
rewrite closes never block the valuation and a child is valued through whatever term of its class
is finite. An e-node is evaluated on its children's values by the reference evaluator
(``ir/evaluate.py``: one Tiny IR node on stand-in inputs, built by the same converter extraction
uses); reads of memory are gathered here, with a mask where a read outside a ``Select`` guard is
undefined. Alongside each value goes its forward error bound per rounding kind and the elements it
leaves undetermined (``checker/bounds.py``), which set the tolerance (``checker/tolerance.py``);
a movement moves the bounds with the same index map.
"""
from __future__ import annotations

import functools
import numpy as np

from ..egraph import encode as E
from ..egraph.graph import ENode, EGraphView
from ..egraph.totiny import TermBuilder
from ..ir.diagnostics import PolysatError
from ..ir.dtypes import DType
from ..ir.evaluate import evaluate
from ..ir.expr import Expr
from ..ir.tiny import Arg, Ops, Program, UOp
from . import bounds as B
from .bounds import Val

_parse_shape = functools.lru_cache(maxsize=8192)(E.parse_shape)  # attributes are immutable strings
_parse_map = functools.lru_cache(maxsize=8192)(E.parse_map)

_MOVES = ("Reshape", "Permute", "Transpose", "Expand", "Pad", "Shrink", "Flip", "View", "BroadcastInDim")


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
    except (KeyError, ValueError, IndexError, TypeError, AssertionError, OverflowError) as e:
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
        """The value of e-node n from its children's class values, with its error bound (``bounds.py``)."""
        kids = [self.vals[ch] for ch in n.children]
        op, a = n.op, n.args
        if op == "Tensor":
            if a[0] not in self.inputs:
                raise Unevaluable(f"no input array for tensor {a[0]!r}")
            return B.exact(self.inputs[a[0]])
        if op == "Mat":
            return kids[0]
        if op == "Read":
            v, mask = _gather(kids[0].v, a[0], a[1])
            return _moved(kids[0], v, lambda arr: _gather(arr, a[0], a[1])[0], mask)
        if op == "Select":
            return self._select(n, kids)
        if any(k.mask is not None for k in kids):
            raise Unevaluable(f"{op} of a partial read (a read outside its memory, not under a Select guard)")
        v = tiny_eval(n, [k.v for k in kids])
        if op == "Const":
            return B.exact(v)
        if op in _MOVES:
            src = kids[0].v
            idx = tiny_eval(_index_node(n), [np.arange(1, src.size + 1, dtype=np.float32).reshape(src.shape)])
            flat = idx.astype(np.int64).reshape(-1)

            def follow(arr):
                got = np.broadcast_to(arr, src.shape).reshape(-1)[np.maximum(flat - 1, 0)]
                return np.where(flat > 0, got, np.zeros((), got.dtype)).reshape(v.shape)
            return _moved(kids[0], v, follow, None)
        if op == "Unary":
            return B.unary(a[0], kids[0], v)
        if op == "Binary":
            return B.binary(a[0], kids[0], kids[1], v)
        if op == "Where":
            return B.where(kids[0], kids[1], kids[2], v)
        if op == "Cast":
            return B.cast(kids[0], v)
        if op == "Reduce":
            return B.reduce(a[0], tuple(E.parse_ints(a[1])), kids[0], v, a[3])
        if op == "SoftmaxSum":
            return B.softmax_sum(a[0], kids[0], kids[1], v)
        raise Unevaluable(f"no error bound for {op}")

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
        cond = B.exact(ok)
        return B.where(cond, B.Val(got.v, got.err, got.und, ovf=got.ovf), other, v)


def _index_node(n: ENode) -> ENode:
    """The movement e-node n with a pad value of 0 (it moves an index array: 0 marks a padded element)."""
    if n.op == "Pad":
        return ENode(n.op, (n.args[0], "0.0"), n.children, n.eclass, n.order)
    return n


def _moved(x: "B.Val", v: np.ndarray, follow, mask) -> "B.Val":
    """x moved to v: its bounds and undetermined elements follow the same index map."""
    err = {k: follow(np.broadcast_to(e, x.v.shape).astype(np.float64)) for k, e in x.err.items()}
    und = follow(x.und) if x.und is not None else None
    ovf = follow(x.ovf) if x.ovf is not None else None
    return B.Val(v, err, und if und is not None and und.any() else None, mask,
                 ovf if ovf is not None and ovf.any() else None)
