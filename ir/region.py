"""Region Buffer SSA: one region = one kernel, as frozen, hashable values (docs/DESIGN.md §RB-SSA).

A region has named axes (``iters``: the output space; ``reduce_axes``: the axes its Reduces bind),
inputs and outputs as :class:`MemRef` s with a layout, ``lets`` in SSA order and ``yields``
that write a let to an output with a cast. Expressions are :class:`RNode` s over the vocabulary
Read / Unary / Binary / Select / Reduce / BroadcastInDim / Transpose (plus Const, Ref to a let, and
Pred, the affine guard a Select tests), and the streaming reduction OnlineSoftmaxSum (docs/DESIGN.md §Streaming).

Meaning (what :mod:`.playback` executes): every expression is a tensor over its *present axes*
(``RNode.axes``, typing rule 3), named by the region's axes. ``Read(t, map)`` is ``t[map]`` over the axes the
map mentions (in order of appearance); a Reduce removes the axes it binds; BroadcastInDim adds axes,
Transpose reorders them. Outside Reduce bodies the operands of Binary/Select carry exactly the axes of
their result (BroadcastInDim/Transpose are explicit, typing rules 1-2); inside a Reduce body operands are combined
over the union of their axes, so reads index directly with no broadcast tensor (C-CON1).
Scalar constants and Pred guards (functions of their own axes) combine with anything.
``Gather(t, axis, map; index)`` is a read whose address on ``axis`` is the value of the index
expression (an i32, negative counting from the end, out of range reading 0) and on the other dims the
affine ``map``: a non-affine access, so a gathering region is its own kernel. The JSON form round-trips (ir/region_load.py): ``region_from_json(
region_json(r)) == r``.

``online_softmax_sum<j; p; block; passes>(scores, values)`` binds the key axis j like a Reduce (its two
operands are bodies over the union of their axes, C-CON1). Per row x of the scores and column d of
the values, with m = max_j s[x, j], e_j = exp2((s[x, j] - m)·log2 e) and l = sum_j e_j, all fp32 and P
rounded to the 16-bit float p as the second MMA takes it, it means

    passes 1:  out[x, d] = sum_j f32(round_p(e_j))·v[x, d, j] / l
    passes 2:  out[x, d] = sum_j f32(round_p(e_j / l))·v[x, d, j]

and runs while walking j ``block`` keys at a time, never holding a whole row: passes 1 is ONE walk
(FlashAttention's recurrence: a running max, a running sum and the partial weighted sums, both
rescaled by exp(m_old - m_new) when the max moves, P rounded at the running max, the division by l
once on the fp32 accumulator); passes 2 walks twice (max and sum first, then P·V with P rounded where
the two-kernel softmax rounds it: what a bf16 P needs to stay within 1e-3). A row whose scores are
all -inf is NaN (0/0), as the two-kernel softmax gives.
"""
from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any, Iterable

from . import trampoline
from .dtypes import DType
from .expr import Expr
from .shapes import Dim, dim_json


class R(enum.Enum):
    READ = "read"
    CONST = "const"
    REF = "ref"
    PRED = "pred"
    UNARY = "unary"
    BINARY = "binary"
    SELECT = "select"
    REDUCE = "reduce"
    BROADCAST = "BroadcastInDim"
    TRANSPOSE = "Transpose"
    ONLINE = "online_softmax_sum"
    GATHER = "gather"

    def __repr__(self) -> str:
        return f"R.{self.name}"


UNARY_FNS = ("neg", "relu", "exp2", "log2", "sqrt", "rsqrt", "reciprocal", "cast")
BINARY_FNS = ("add", "sub", "mul", "div", "max", "min", "pow", "cmplt", "cmpeq", "cmpne")
COMPARE_FNS = ("cmplt", "cmpeq", "cmpne")
REDUCE_OPS = ("sum", "max", "min")
MATERIALIZE = ("gmem", "deferred")


def neutral(op: str, dtype: DType | None) -> Any:
    """The init a Reduce must start from (docs/DESIGN.md §Tiny IR): sum 0, max -inf, min +inf (int extremes for i32,
    False/True for bool)."""
    if dtype == DType.bool:
        return {"sum": False, "max": False, "min": True}.get(op)
    if dtype == DType.i32:
        info = (-(2 ** 31), 2 ** 31 - 1)
        return {"sum": 0, "max": info[0], "min": info[1]}.get(op)
    return {"sum": 0.0, "max": -math.inf, "min": math.inf}.get(op)


@dataclass(frozen=True, eq=False)
class RNode:
    """One RB-SSA expression node. ``arg`` per op:

    READ (tensor, map: tuple[Expr]) | CONST value | REF let name | PRED tuple[Expr] (each ``e >= 0``) |
    UNARY/BINARY fn | SELECT None (src = pred, then, else) | REDUCE (op, bound axes, init) |
    BROADCAST (result_axes, result_shape, broadcast_dimensions) | TRANSPOSE permutation |
    ONLINE (key axes, P dtype, block, passes) (src = scores, values) |
    GATHER (tensor, axis, map of the other dims: tuple[Expr]) (src = the index).
    """
    op: R
    src: tuple
    arg: Any
    dtype: DType | None
    axes: tuple  # present axes, ordered

    def __post_init__(self):
        key = (self.op, self.src, self.arg, self.dtype, self.axes)
        object.__setattr__(self, "_key", key)
        object.__setattr__(self, "_hash", hash(key))

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined]

    def __eq__(self, other: object) -> bool:
        """Structural equality, pair by pair from an explicit stack (comparing the keys' src tuples would
        recurse once per level of a tree as deep as the chain it fused)."""
        if self is other:
            return True
        if not isinstance(other, RNode):
            return False
        stack = [(self, other)]
        while stack:
            a, b = stack.pop()
            if a is b:
                continue
            if (a._hash != b._hash or a.op != b.op or a.arg != b.arg  # type: ignore[attr-defined]
                    or a.dtype != b.dtype or a.axes != b.axes or len(a.src) != len(b.src)):
                return False
            stack.extend(zip(a.src, b.src))
        return True

    def __repr__(self) -> str:
        return f"RNode({self.op.name}, {self.arg!r}, axes={self.axes})"

    @property
    def is_scalar_const(self) -> bool:
        return self.op == R.CONST


# ---- constructors (the only way nodes are built, so axes are always consistent) -----------------------

def union_axes(*xs: RNode) -> tuple:
    out: list = []
    for x in xs:
        out.extend(a for a in x.axes if a not in out)
    return tuple(out)


def vars_in_order(exprs: Iterable[Expr], axis_names: Iterable[str]) -> tuple:
    """The axis names the expressions mention, in order of first appearance (symbols excluded)."""
    names = set(axis_names)
    out: list = []
    for e in exprs:
        for v in _expr_vars_ordered(e):
            if v in names and v not in out:
                out.append(v)
    return tuple(out)


@lru_cache(maxsize=65536)
def _expr_vars_ordered(e: Expr) -> tuple:
    out: list = []
    for m, _ in e.terms:
        for a in m:
            for v in ([a] if isinstance(a, str) else _expr_vars_ordered(a.num)):
                if v not in out:
                    out.append(v)
    # order by position in the printed form, so "2*ho + kh - 1" lists ho before kh
    text = str(e)
    return tuple(sorted(out, key=lambda v: _first_pos(text, v)))


def _first_pos(text: str, name: str) -> int:
    m = re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", text)
    return m.start() if m else len(text)


def read(tensor: str, index: Iterable[Expr], dtype: DType, axis_names: Iterable[str]) -> RNode:
    index = tuple(Expr.of(e) for e in index)
    return RNode(R.READ, (), (tensor, index), dtype, vars_in_order(index, axis_names))


def gather(tensor: str, axis: int, others: Iterable[Expr], index: RNode, dtype: DType,
           axis_names: Iterable[str]) -> RNode:
    others = tuple(Expr.of(e) for e in others)
    used = set(vars_in_order(others, axis_names)) | set(index.axes)
    return RNode(R.GATHER, (index,), (tensor, int(axis), others), dtype, tuple(a for a in axis_names if a in used))


def const(value: Any, dtype: DType) -> RNode:
    if dtype == DType.bool:
        value = bool(value)
    elif dtype.is_float:
        value = float(value)
    else:
        value = int(value)
    return RNode(R.CONST, (), value, dtype, ())


def ref(name: str, target: RNode) -> RNode:
    return RNode(R.REF, (), name, target.dtype, target.axes)


def pred(guards: Iterable[Expr], axis_names: Iterable[str]) -> RNode:
    g = tuple(sorted(set(Expr.of(e) for e in guards), key=str))
    return RNode(R.PRED, (), g, DType.bool, vars_in_order(g, axis_names))


def unary(fn: str, x: RNode, dtype: DType) -> RNode:
    return RNode(R.UNARY, (x,), fn, dtype, x.axes)


def binary(fn: str, a: RNode, b: RNode, dtype: DType) -> RNode:
    return RNode(R.BINARY, (a, b), fn, dtype, union_axes(a, b))


def select(p: RNode, then: RNode, other: RNode, dtype: DType) -> RNode:
    return RNode(R.SELECT, (p, then, other), None, dtype, union_axes(then, other, p))


def reduce(op: str, axes: Iterable[str], body: RNode, dtype: DType | None, init: Any = None,
           axis_order: Iterable[str] = ()) -> RNode:
    """The kept axes are ordered as in axis_order (the region's axis table), then as in the body."""
    axes = tuple(axes)
    init = neutral(op, dtype) if init is None else init
    rank = {a: k for k, a in enumerate(axis_order)}
    kept = sorted((a for a in body.axes if a not in axes), key=lambda a: (rank.get(a, len(rank)), body.axes.index(a)))
    return RNode(R.REDUCE, (body,), (op, axes, init), dtype, tuple(kept))


def online_softmax_sum(axes: Iterable[str], scores: RNode, values: RNode, p_dtype: DType, block: int = 64,
                       passes: int = 1, axis_order: Iterable[str] = ()) -> RNode:
    """The streaming softmax-weighted sum over the key axes (see the module docstring); kept axes are
    ordered as in axis_order, then as in scores and values."""
    axes = tuple(axes)
    rank = {a: k for k, a in enumerate(axis_order)}
    both = union_axes(scores, values)
    kept = sorted((a for a in both if a not in axes), key=lambda a: (rank.get(a, len(rank)), both.index(a)))
    return RNode(R.ONLINE, (scores, values), (axes, p_dtype, int(block), int(passes)), DType.fp32, tuple(kept))


def broadcast(x: RNode, result_axes: Iterable[str], result_shape: Iterable[Dim]) -> RNode:
    result_axes = tuple(result_axes)
    bdims = tuple(result_axes.index(a) if a in result_axes else -1 for a in x.axes)
    return RNode(R.BROADCAST, (x,), (result_axes, tuple(result_shape), bdims), x.dtype, result_axes)


def transpose(x: RNode, perm: Iterable[int]) -> RNode:
    perm = tuple(perm)
    axes = tuple(x.axes[p] for p in perm) if sorted(perm) == list(range(len(x.axes))) else x.axes
    return RNode(R.TRANSPOSE, (x,), perm, x.dtype, axes)


def walk(node: RNode) -> Iterable[RNode]:
    """Every node under node once (shared subtrees once), children first."""
    seen: set = set()
    stack = [(node, False)]
    while stack:
        n, done = stack.pop()
        if done:
            yield n
            continue
        if id(n) in seen:
            continue
        seen.add(id(n))
        stack.append((n, True))
        stack.extend((s, False) for s in reversed(n.src))


# ---- regions ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Layout:
    kind: str = "row_major"
    params: tuple = ()  # ((key, value), ...), e.g. (("swizzle", "xor32"), ("vec_bytes", 16))


@dataclass(frozen=True)
class MemRef:
    shape: tuple
    dtype: DType
    alignment: int = 128
    noalias: bool = True
    layout: Layout = field(default_factory=Layout)


@dataclass(frozen=True)
class Buffer:
    """A region input or output. Outputs say how they are materialized and whether they are program outputs."""
    name: str
    memref: MemRef
    materialize: str | None = None  # outputs: "gmem" | "deferred"
    program_output: bool = False


@dataclass(frozen=True)
class Let:
    name: str
    expr: RNode


@dataclass(frozen=True)
class Yield:
    src: str  # let name ("from")
    dst: str  # output buffer name ("to")
    cast: DType
    axes: tuple  # the region axes indexing the output's dims, in order


@dataclass(frozen=True)
class Region:
    name: str
    iters: tuple  # ((axis name, size), ...): the output space
    reduce_axes: tuple  # ((axis name, size), ...): axes bound by Reduces
    inputs: tuple  # Buffer
    outputs: tuple  # Buffer
    lets: tuple  # Let, SSA order
    yields: tuple  # Yield
    fp32_pipes: bool = False  # its fp32 contraction runs on the FP32 pipes: the cost model priced that below 3xTF32

    @cached_property
    def axis_sizes(self) -> dict:
        """axis name -> size (made once: a region is frozen; callers only read it)."""
        return dict(self.reduce_axes) | dict(self.iters)

    @cached_property
    def let_map(self) -> dict:
        """let name -> expression (made once: the walks over a region look lets up per node)."""
        return {l.name: l.expr for l in self.lets}


# ---- JSON (--dump=region) ---------------------------------------------------------------------------------

def _num_json(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return str(v) if not math.isnan(v) else "nan"
    return v


def _expr_json(e: Expr) -> Any:
    return e.constant if e.is_const else str(e)


def node_json(n: RNode) -> Any:
    return trampoline.run(_node_json(n))  # a region's tree is as deep as the chain it fused: no frame per node


def _node_json(n: RNode):
    if n.op == R.REF:
        return n.arg
    if n.op == R.READ:
        return {"read": {"tensor": n.arg[0], "map": [_expr_json(e) for e in n.arg[1]]}}
    if n.op == R.CONST:
        return {"const": _num_json(n.arg), "dtype": n.dtype.value}
    src = []
    for s in n.src:
        src.append((yield _node_json(s)))
    if n.op == R.GATHER:
        return {"gather": {"tensor": n.arg[0], "axis": n.arg[1], "map": [_expr_json(e) for e in n.arg[2]],
                           "index": src[0]}}
    if n.op == R.PRED:
        return {"and": [{"ge": [_expr_json(g), 0]} for g in n.arg]}
    if n.op in (R.UNARY, R.BINARY):
        return {n.arg: src, "dtype": n.dtype.value}
    if n.op == R.SELECT:
        return {"select": {"pred": src[0], "then": src[1], "else": src[2]}, "dtype": n.dtype.value}
    if n.op == R.REDUCE:
        op, axes, init = n.arg
        return {"reduce": {"op": op, "axes": list(axes), "init": _num_json(init),
                           "dtype": n.dtype.value if n.dtype else None, "body": src[0]}}
    if n.op == R.BROADCAST:
        axes, shape, bdims = n.arg
        return {"BroadcastInDim": {"operand": src[0], "result_shape": [dim_json(d) for d in shape],
                                   "broadcast_dimensions": list(bdims), "result_axes": list(axes)}}
    if n.op == R.TRANSPOSE:
        return {"Transpose": {"operand": src[0], "permutation": list(n.arg)}}
    if n.op == R.ONLINE:
        axes, p, block, passes = n.arg
        return {"online_softmax_sum": {"axes": list(axes), "p_dtype": p.value, "block": block, "passes": passes,
                                       "scores": src[0], "values": src[1]},
                "dtype": n.dtype.value}
    raise AssertionError(n.op)


def memref_json(m: MemRef) -> dict:
    layout: dict = {"kind": m.layout.kind}
    if m.layout.params:
        layout["params"] = dict(m.layout.params)
    return {"shape": [dim_json(d) for d in m.shape], "dtype": m.dtype.value, "alignment": m.alignment,
            "noalias": m.noalias, "layout": layout}


def _buffer_json(b: Buffer) -> dict:
    d: dict = {"name": b.name, "memref": memref_json(b.memref)}
    if b.materialize is not None:
        d["materialize"] = b.materialize
        d["program_output"] = b.program_output
    return d


def region_json(r: Region) -> dict:
    return {"region": {
        "name": r.name,
        "iters": [{"name": n, "size": dim_json(s)} for n, s in r.iters],
        "reduce_axes": [{"name": n, "size": dim_json(s)} for n, s in r.reduce_axes],
        "inputs": [_buffer_json(b) for b in r.inputs],
        "outputs": [_buffer_json(b) for b in r.outputs],
        "lets": [{"let": l.name, "expr": node_json(l.expr)} for l in r.lets],
        "yield": [{"from": y.src, "to": y.dst, "cast": y.cast.value, "axes": list(y.axes)} for y in r.yields],
        **({"fp32_pipes": True} if r.fp32_pipes else {}),
    }}


def regions_json(regions: Iterable[Region]) -> dict:
    """The ``--dump=region`` document: ``{"regions": [{"region": ...}, ...]}``."""
    return {"regions": [region_json(r) for r in regions]}


# ---- text form (for humans and test failure messages) ------------------------------------------------

def format_node(n: RNode) -> str:
    return trampoline.run(_format_node(n))


def _format_node(n: RNode):
    if n.op == R.REF:
        return n.arg
    if n.op == R.READ:
        return f"{n.arg[0]}[{', '.join(str(e) for e in n.arg[1])}]"
    if n.op == R.CONST:
        return f"{n.arg!r}:{n.dtype.value}"
    if n.op == R.PRED:
        return " and ".join(f"{g} >= 0" for g in n.arg)
    src = []
    for s in n.src:
        src.append((yield _format_node(s)))
    if n.op == R.GATHER:
        t, axis, m = n.arg
        at = [str(e) for e in m]
        at.insert(axis, f"@{src[0]}")
        return f"{t}[{', '.join(at)}]"
    if n.op in (R.UNARY, R.BINARY):
        tail = f":{n.dtype.value}" if n.arg == "cast" else ""
        return f"{n.arg}{tail}({', '.join(src)})"
    if n.op == R.SELECT:
        return f"select({', '.join(src)})"
    if n.op == R.REDUCE:
        op, axes, init = n.arg
        dt = n.dtype.value if n.dtype else "?"
        return f"reduce_{op}<{','.join(axes)}; init={init}; {dt}>({src[0]})"
    if n.op == R.BROADCAST:
        return f"BroadcastInDim({src[0]} -> [{','.join(n.arg[0])}], dims={list(n.arg[2])})"
    if n.op == R.TRANSPOSE:
        return f"Transpose({src[0]}, {list(n.arg)})"
    if n.op == R.ONLINE:
        axes, p, block, passes = n.arg
        return (f"online_softmax_sum<{','.join(axes)}; p={p.value}; block={block}; passes={passes}; {n.dtype.value}>"
                f"(scores={src[0]}, values={src[1]})")
    raise AssertionError(n.op)


def format_region(r: Region) -> str:
    def axes(t):
        return ", ".join(f"{a}<{s}>" for a, s in t)
    lines = [f"region {r.name} iters[{axes(r.iters)}] reduce[{axes(r.reduce_axes)}]"]
    for b in r.inputs:
        lines.append(f"  in  {b.name}: {b.memref.dtype.value}[{', '.join(map(str, b.memref.shape))}]")
    for b in r.outputs:
        lines.append(f"  out {b.name}: {b.memref.dtype.value}[{', '.join(map(str, b.memref.shape))}] {b.materialize}"
                     + (" (program output)" if b.program_output else ""))
    for l in r.lets:
        lines.append(f"  let {l.name}[{','.join(l.expr.axes)}] = {format_node(l.expr)}")
    for y in r.yields:
        lines.append(f"  yield {y.src} -> {y.dst}[{','.join(y.axes)}] as {y.cast.value}")
    return "\n".join(lines)
