"""Argument checking and shape/dtype inference for every Tiny IR op, in one table keyed by op.

``make_uop`` is the single constructor of well-typed nodes: the frontend builder and the Tiny IR
JSON loader both go through it, so both report the same coded diagnostics (docs/DESIGN.md §Tiny IR).
"""
from __future__ import annotations

from typing import Any, Callable

from .diagnostics import fail
from .dtypes import DType, parse_dtype, promote
from .expr import Expr
from .shapes import Dim, dim, fmt_shape, numel, shape_of
from .tiny import REDUCE_OPS, Arg, GroupOp, Ops, UOp

MAX_ELEMENTS = 2 ** 62  # element indices are int64 on every target
Rule = Callable[[str, list, dict], tuple]  # (at, src nodes, raw arg) -> (Arg, dtype, shape)
_RULES: dict[Ops, Rule] = {}


def rule(*ops: Ops):
    def deco(fn: Rule) -> Rule:
        for op in ops:
            _RULES[op] = fn
        return fn
    return deco


def make_uop(node_id: str, op: Ops, src: list, arg: dict | Arg | None, tag: str | None = None,
             at: str | None = None) -> UOp:
    """Check op's arguments and operands, infer its dtype and shape, and build the node."""
    at = at or node_id
    if op not in _RULES:
        fail("UnknownOp", at, f"no shape rule for {op.name}")
    arity = _ARITY.get(op)
    if arity is not None and len(src) != arity:
        fail("WrongArity", at, f"{op.name} takes {arity} operand(s), got {len(src)}")
    for x in src:
        _numeric(at, op, x)
    canon, dtype, shape = _RULES[op](at, list(src), dict(arg or {}))
    for d in shape:
        if isinstance(d, int) and d <= 0:
            fail("UnaddressableShape", at, f"{op.name} gives shape {fmt_shape(shape)} with a non-positive size")
    total = numel(tuple(shape))
    if isinstance(total, int) and total >= MAX_ELEMENTS:
        fail("UnaddressableShape", at, f"{op.name} gives shape {fmt_shape(shape)} with {total} elements, "
             f"beyond 64-bit addressing (< 2**62)")
    return UOp(node_id, op, tuple(s.id for s in src), Arg(canon), dtype, tuple(shape), tag)


_ARITY = {op: 0 for op in GroupOp.Leaf} | {op: 1 for op in GroupOp.Movement | GroupOp.Unary | {Ops.REDUCE}} \
    | {op: 2 for op in GroupOp.Binary | {Ops.CONTRACT}} | {Ops.WHERE: 3, Ops.GATHER: 2}


# ---- argument helpers ------------------------------------------------------------------------

def _req(at: str, op: str, arg: dict, key: str) -> Any:
    if key not in arg:
        fail("InvalidAttribute", at, f"{op} needs attribute {key!r}")
    return arg[key]


def as_shape(at: str, x: Any, what: str) -> tuple:
    if not isinstance(x, (list, tuple)):
        fail("InvalidAttribute", at, f"{what} must be a list of sizes, got {x!r}")
    try:
        return shape_of(x)
    except (ValueError, TypeError) as e:
        fail("InvalidAttribute", at, f"{what}: {e}")


def as_dim(at: str, x: Any, what: str) -> Dim:
    try:
        return dim(x)
    except (ValueError, TypeError) as e:
        fail("InvalidAttribute", at, f"{what}: {e}")


def as_ints(at: str, x: Any, what: str) -> tuple:
    if not isinstance(x, (list, tuple)) or not all(isinstance(v, int) and not isinstance(v, bool) for v in x):
        fail("InvalidAttribute", at, f"{what} must be a list of integers, got {x!r}")
    return tuple(x)


def as_dtype(at: str, x: Any) -> DType:
    d = parse_dtype(x)
    if d is None:
        fail("UnknownDtype", at, f"unknown dtype {x!r}")
    return d


def norm_axes(at: str, axes: Any, rank: int, what: str = "axes") -> tuple:
    axes = as_ints(at, axes, what)
    out = []
    for a in axes:
        if not -rank <= a < rank:
            fail("AxisOutOfRange", at, f"{what} {list(axes)} out of range for rank {rank}")
        out.append(a % rank)
    if len(set(out)) != len(out):
        fail("AxisOutOfRange", at, f"{what} {list(axes)} repeat an axis")
    return tuple(sorted(out))


def _check_scalar(at: str, v: Any, dt: DType) -> Any:
    if isinstance(v, bool):
        return v if dt == DType.bool else (float(v) if dt.is_float else int(v))
    if isinstance(v, (int, float)):
        if dt == DType.bool:
            return bool(v)
        return float(v) if dt.is_float else int(v)
    if isinstance(v, str) and v.strip().lower() in ("inf", "+inf", "-inf", "nan") and dt.is_float:
        return float(v)
    fail("InvalidAttribute", at, f"constant value {v!r} is not a number")


# ---- leaves -----------------------------------------------------------------------------------

@rule(Ops.INPUT)
def _input(at, src, arg):
    tid = _req(at, "INPUT", arg, "tensor_id")
    if not isinstance(tid, str) or not tid:
        fail("InvalidAttribute", at, "INPUT tensor_id must be a non-empty string")
    dt = as_dtype(at, _req(at, "INPUT", arg, "dtype"))
    shape = as_shape(at, _req(at, "INPUT", arg, "shape"), "INPUT shape")
    return {"tensor_id": tid, "dtype": dt, "shape": shape}, dt, shape


@rule(Ops.CONST)
def _const(at, src, arg):
    dt = as_dtype(at, arg.get("dtype", "fp32"))
    shape = as_shape(at, arg.get("shape", []), "CONST shape")
    v = _check_scalar(at, _req(at, "CONST", arg, "value"), dt)
    return {"value": v, "dtype": dt, "shape": shape}, dt, shape


# ---- movement ---------------------------------------------------------------------------------

@rule(Ops.RESHAPE)
def _reshape(at, src, arg):
    (x,) = src
    new = as_shape(at, _req(at, "RESHAPE", arg, "result_shape"), "result_shape")
    if numel(new) != numel(x.shape):
        fail("AxisSizeMismatch", at, f"RESHAPE {fmt_shape(x.shape)} -> {fmt_shape(new)} changes the element count "
             f"({numel(x.shape)} vs {numel(new)})")
    return {"result_shape": new}, x.dtype, new


@rule(Ops.PERMUTE)
def _permute(at, src, arg):
    (x,) = src
    perm = as_ints(at, _req(at, "PERMUTE", arg, "perm"), "perm")
    if sorted(perm) != list(range(x.ndim)):
        fail("InvalidPermutation", at, f"perm {list(perm)} is not a permutation of 0..{x.ndim - 1}")
    return {"perm": perm}, x.dtype, tuple(x.shape[p] for p in perm)


@rule(Ops.EXPAND)
def _expand(at, src, arg):
    (x,) = src
    new = as_shape(at, _req(at, "EXPAND", arg, "result_shape"), "result_shape")
    if len(new) != x.ndim:
        fail("AxisSizeMismatch", at, f"EXPAND keeps the rank: {fmt_shape(x.shape)} -> {fmt_shape(new)}",
             "Reshape to insert the size-1 axes first, then expand.")
    kept = []
    for i, (a, b) in enumerate(zip(x.shape, new, strict=True)):
        if a == b:
            kept.append(i)
        elif a != 1:
            fail("BroadcastMismatch", at, f"EXPAND {fmt_shape(x.shape)} -> {fmt_shape(new)}: axis {i} has size {a}, "
                 f"only size 1 can be broadcast to {b}")
    if "broadcast_dimensions" in arg:
        bd = as_ints(at, arg["broadcast_dimensions"], "broadcast_dimensions")
        if tuple(sorted(bd)) != tuple(kept):
            fail("InvalidAttribute", at, f"broadcast_dimensions {list(bd)} should list the kept result axes {kept}")
    return {"result_shape": new}, x.dtype, new


@rule(Ops.PAD)
def _pad(at, src, arg):
    (x,) = src
    raw = _req(at, "PAD", arg, "pad")
    if not isinstance(raw, (list, tuple)) or len(raw) != x.ndim or not all(
            isinstance(p, (list, tuple)) and len(p) == 2 for p in raw):
        fail("InvalidAttribute", at, f"PAD pad must be [[lo, hi]] x rank {x.ndim}, got {raw!r}")
    pads = tuple((as_dim(at, lo, "pad"), as_dim(at, hi, "pad")) for lo, hi in raw)
    for lo, hi in pads:
        for p in (lo, hi):
            if isinstance(p, int) and p < 0:
                fail("UnaddressableShape", at, f"negative pad {p}; use SHRINK to crop")
    value = _check_scalar(at, arg.get("value", 0), x.dtype)
    shape = tuple(dim(Expr.of(d) + lo + hi) for d, (lo, hi) in zip(x.shape, pads, strict=True))
    return {"pad": pads, "value": value}, x.dtype, shape


@rule(Ops.SHRINK)
def _shrink(at, src, arg):
    (x,) = src
    lo = as_shape(at, _req(at, "SHRINK", arg, "lo"), "lo")
    hi = as_shape(at, _req(at, "SHRINK", arg, "hi"), "hi")
    step = as_ints(at, arg.get("step", [1] * x.ndim), "step")
    if not (len(lo) == len(hi) == len(step) == x.ndim):
        fail("InvalidAttribute", at, f"SHRINK lo/hi/step need {x.ndim} entries")
    shape = []
    for i, (l, h, s, d) in enumerate(zip(lo, hi, step, x.shape, strict=True)):
        if s < 1:
            fail("InvalidAttribute", at, f"SHRINK step {s} on axis {i}: steps are >= 1 (use FLIP for reversal)")
        if all(isinstance(v, int) for v in (l, h, d)) and not (0 <= l < h <= d):
            fail("UnaddressableShape", at, f"SHRINK axis {i}: need 0 <= lo < hi <= {d}, got [{l}, {h})")
        shape.append(dim((Expr.of(h) - l + (s - 1)).floordiv(s)))
    return {"lo": lo, "hi": hi, "step": step}, x.dtype, tuple(shape)


@rule(Ops.FLIP)
def _flip(at, src, arg):
    (x,) = src
    return {"axes": norm_axes(at, _req(at, "FLIP", arg, "axes"), x.ndim)}, x.dtype, x.shape


def axis_names(rank: int) -> list:
    return [f"i{k}" for k in range(rank)]


def expr_bounds(e: Expr, box: dict) -> tuple:
    """Interval [lo, hi] of an affine+floordiv expression over a box {var: (lo, hi)}."""
    lo = hi = 0
    for m, c in e.terms:
        if not m:
            lo += c
            hi += c
            continue
        (a,) = m
        if isinstance(a, str):
            alo, ahi = box[a]
        else:
            nlo, nhi = expr_bounds(a.num, box)
            alo, ahi = nlo // a.q, nhi // a.q
        lo += min(c * alo, c * ahi)
        hi += max(c * alo, c * ahi)
    return lo, hi


@rule(Ops.VIEW)
def _view(at, src, arg):
    (x,) = src
    new = as_shape(at, _req(at, "VIEW", arg, "result_shape"), "result_shape")
    raw = _req(at, "VIEW", arg, "index_map")
    if not isinstance(raw, (list, tuple)) or len(raw) != x.ndim:
        fail("InvalidAttribute", at, f"VIEW index_map needs one expression per input axis ({x.ndim})")
    names = set(axis_names(len(new)))
    exprs = []
    for k, r in enumerate(raw):
        try:
            e = Expr.of(r)
        except (ValueError, TypeError) as err:
            fail("NonAffineIndex", at, f"index_map[{k}]: {err}")
        if not e.is_affine or any(v.startswith("i") and v not in names and v[1:].isdigit() for v in e.variables()):
            fail("NonAffineIndex", at, f"index_map[{k}] = {e} is not affine+floordiv in the output axes i0..")
        exprs.append(e)
    if all(isinstance(d, int) for d in new + x.shape):
        box = {f"i{k}": (0, d - 1) for k, d in enumerate(new)}
        for k, (e, d) in enumerate(zip(exprs, x.shape, strict=True)):
            if e.variables() - set(box):
                continue
            lo, hi = expr_bounds(e, box)
            if lo < 0 or hi >= d:
                fail("OutOfBoundsView", at, f"index_map[{k}] = {e} ranges over [{lo}, {hi}], outside input axis of size {d}")
    return {"result_shape": new, "index_map": tuple(exprs)}, x.dtype, new


# ---- elementwise ------------------------------------------------------------------------------

@rule(Ops.CAST)
def _cast(at, src, arg):
    (x,) = src
    to = as_dtype(at, _req(at, "CAST", arg, "to"))
    return {"to": to}, to, x.shape


# Arithmetic without a meaning on bool (numpy refuses -x and x - y; the rest would leave {0, 1}).
_NOT_ON_BOOL = {Ops.NEG, Ops.EXP2, Ops.LOG2, Ops.SQRT, Ops.RSQRT, Ops.RECIPROCAL, Ops.SUB, Ops.FDIV, Ops.POW}


def _numeric(at: str, op: Ops, x) -> None:
    if x.dtype == DType.bool and op in _NOT_ON_BOOL:
        fail("DtypeMismatch", at, f"{op.name} of a bool tensor has no meaning",
             "CAST the bool operand to a numeric dtype first (or use CMPNE / WHERE for logic).")


@rule(Ops.NEG, Ops.RELU, Ops.EXP2, Ops.LOG2, Ops.SQRT, Ops.RSQRT, Ops.RECIPROCAL)
def _unary(at, src, arg):
    (x,) = src
    return {}, x.dtype, x.shape


def _same_shape(at: str, op: str, nodes: list) -> tuple:
    s0 = nodes[0].shape
    for n in nodes[1:]:
        if len(n.shape) != len(s0) or any(a != b for a, b in zip(n.shape, s0)):
            fail("BroadcastMismatch", at, f"{op} operands must be same-shape in Tiny IR: "
                 + " vs ".join(fmt_shape(m.shape) for m in nodes),
                 "Insert explicit EXPANDs (right-aligned broadcast) before the op.")
    return s0


@rule(*(GroupOp.Binary - GroupOp.Compare))
def _binary(at, src, arg):
    a, b = src
    shape = _same_shape(at, "binary op", src)
    if a.dtype != b.dtype:
        fail("DtypeMismatch", at, f"operands have dtypes {a.dtype.value} and {b.dtype.value}",
             f"CAST both to {promote(a.dtype, b.dtype).value} first (implicit casts are not allowed).")
    return {}, a.dtype, shape


@rule(*GroupOp.Compare)
def _compare(at, src, arg):
    canon, _, shape = _binary(at, src, arg)
    return canon, DType.bool, shape


@rule(Ops.WHERE)
def _where(at, src, arg):
    c, a, b = src
    shape = _same_shape(at, "WHERE", src)
    if c.dtype != DType.bool:
        fail("DtypeMismatch", at, f"WHERE condition has dtype {c.dtype.value}, needs bool")
    if a.dtype != b.dtype:
        fail("DtypeMismatch", at, f"WHERE branches have dtypes {a.dtype.value} and {b.dtype.value}")
    return {}, a.dtype, shape


# ---- reductions -------------------------------------------------------------------------------

@rule(Ops.REDUCE)
def _reduce(at, src, arg):
    (x,) = src
    op = str(_req(at, "REDUCE", arg, "op")).upper()
    if op not in REDUCE_OPS:
        fail("InvalidAttribute", at, f"REDUCE op {op!r} is not one of {', '.join(REDUCE_OPS)}")
    if "dtype" not in arg or arg["dtype"] is None:
        fail("AccDtypeMissing", at, "REDUCE has no accumulation dtype")
    dt = as_dtype(at, arg["dtype"])
    raw_axes = _req(at, "REDUCE", arg, "axes")
    if isinstance(raw_axes, (list, tuple)) and any(isinstance(a, str) for a in raw_axes):
        raw_axes = [_axis_by_symbol(at, x.shape, a) if isinstance(a, str) else a for a in raw_axes]
    axes = norm_axes(at, raw_axes, x.ndim)
    if not axes:
        fail("AxisOutOfRange", at, "REDUCE needs at least one axis")
    shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return {"op": op, "axes": axes, "dtype": dt}, dt, shape


def _axis_by_symbol(at: str, shape: tuple, name: str) -> int:
    """A Tiny IR JSON file may name reduce axes by their size symbol ("axes": ["K"]); find the unique such axis."""
    hits = [i for i, d in enumerate(shape) if not isinstance(d, int) and str(d) == name]
    if len(hits) != 1:
        fail("AxisOutOfRange", at, f"axis name {name!r} matches {len(hits)} axes of {fmt_shape(shape)}",
             "Name reduce axes by position (ints), or by a symbol that sizes exactly one axis.")
    return hits[0]


@rule(Ops.CONTRACT)
def _contract(at, src, arg):
    """CONTRACT(lhs, rhs): einsum-style MUL->REDUCE(SUM) with index names (docs/DESIGN.md §Tiny IR)."""
    a, b = src
    lhs = tuple(_req(at, "CONTRACT", arg, "lhs_idx"))
    rhs = tuple(_req(at, "CONTRACT", arg, "rhs_idx"))
    out = tuple(_req(at, "CONTRACT", arg, "out_idx"))
    if "dtype" not in arg:
        fail("AccDtypeMissing", at, "CONTRACT has no accumulation dtype")
    dt = as_dtype(at, arg["dtype"])
    if len(lhs) != a.ndim or len(rhs) != b.ndim:
        fail("InvalidAttribute", at, "CONTRACT lhs_idx/rhs_idx must name every operand axis")
    if a.dtype != b.dtype:
        fail("DtypeMismatch", at, f"CONTRACT operands have dtypes {a.dtype.value} and {b.dtype.value}")
    sizes: dict = {}
    for names, shp in ((lhs, a.shape), (rhs, b.shape)):
        for n, d in zip(names, shp, strict=True):
            if n in sizes and sizes[n] != d:
                fail("AxisSizeMismatch", at, f"CONTRACT index {n!r} has sizes {sizes[n]} and {d}")
            sizes[n] = d
    if any(n not in sizes for n in out) or len(set(out)) != len(out):
        fail("InvalidAttribute", at, "CONTRACT out_idx names each output axis once, from the operands' indices")
    reduce_idx = tuple(n for n in dict.fromkeys(lhs + rhs) if n not in out)
    canon = {"lhs_idx": lhs, "rhs_idx": rhs, "out_idx": out, "reduce_idx": reduce_idx, "dtype": dt,
             "pattern": str(arg.get("pattern", "matmul"))}
    return canon, dt, tuple(sizes[n] for n in out)


# ---- data-dependent reads -------------------------------------------------------------------------

@rule(Ops.GATHER)
def _gather(at, src, arg):
    """GATHER(x, idx): take mode (numpy take / ONNX Gather) replaces x's axis by idx's shape; elements
    mode (take_along_axis / ONNX GatherElements) gives idx's shape, idx having x's rank and no larger
    size off the axis. Indices are i32; a negative index counts from the end of the axis."""
    x, idx = src
    if idx.dtype != DType.i32:
        fail("DtypeMismatch", at, f"GATHER indices have dtype {idx.dtype.value}, need i32")
    axis = arg.get("axis", 0)
    if isinstance(axis, bool) or not isinstance(axis, int) or not -x.ndim <= axis < x.ndim:
        fail("AxisOutOfRange", at, f"GATHER axis {axis!r} out of range for rank {x.ndim}")
    axis %= x.ndim
    elements = arg.get("elements", False)
    if not isinstance(elements, bool):
        fail("InvalidAttribute", at, f"GATHER elements must be true or false, got {elements!r}")
    if not elements:
        return {"axis": axis, "elements": False}, x.dtype, x.shape[:axis] + idx.shape + x.shape[axis + 1:]
    if idx.ndim != x.ndim:
        fail("AxisSizeMismatch", at, f"GATHER elements: indices of rank {idx.ndim} for data of rank {x.ndim}")
    for k, (d, e) in enumerate(zip(idx.shape, x.shape)):
        if k != axis and d != e and not (isinstance(d, int) and isinstance(e, int) and d < e):
            fail("AxisSizeMismatch", at, f"GATHER elements: indices {fmt_shape(idx.shape)} exceed data "
                 f"{fmt_shape(x.shape)} on axis {k}")
    return {"axis": axis, "elements": True}, x.dtype, idx.shape


def _arg_vars(v: Any) -> set:
    if isinstance(v, Expr):
        return set(v.variables())
    if isinstance(v, (tuple, list)):
        return set().union(*(_arg_vars(x) for x in v)) if v else set()
    return set()


def check_bound_symbols(program) -> None:
    """Every symbol a size or attribute uses is bound by an input's shape (E1305), so running never
    meets a size it cannot compute. A VIEW's index_map may also use its own output axes i0, i1, ..."""
    from .shapes import symbols
    bound = set(program.symbols())
    for n in program.nodes:
        used = set(symbols(n.shape)) | _arg_vars(tuple(n.arg.values()))
        if n.op == Ops.VIEW:
            used -= set(axis_names(len(n.shape)))
        free = sorted(used - bound)
        if free:
            fail("UnboundSymbol", n.tag or n.id, f"{n.op.value} uses symbol(s) {', '.join(free)} that no input "
                 "shape binds", "Name sizes with symbols that appear in the signature inputs' shapes.")
