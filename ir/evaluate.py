"""The reference evaluator: executes Tiny IR literally with numpy. It is the meaning of a program.

Inputs are rounded to their declared dtype (bf16 through ml-dtypes); every elementwise op computes in
float32 and rounds its result to the node's dtype; REDUCE accumulates in its own dtype, a sum of fp32 products
into fp32 as one BLAS contraction in BLAS's order (``contract_sum`` below). Symbols are bound from the input shapes
(a conflict is E1304).

Its rounding points are the meaning of a program: a value is rounded exactly where a node's dtype says
so and nowhere else. For Attention (the lowering in ``frontend/lower_linear.py``) that is: S = Q K^T
summed in fp32 from exact products, scaled and soft-maxed in fp32, P rounded once to V's dtype, P V
summed in fp32, the result rounded to the output dtype. A kernel that rounds elsewhere (the streamed
softmax rounds P at a running max) is correct when it is as close to a float64 evaluation of the same
formula as this evaluator is: within eps(dtype) * sum_j P|V| plus an ulp of the output
(``tests/test_user_defects.py``), not within a fixed rtol of this evaluator.
"""
from __future__ import annotations

import math
from typing import Callable, Mapping

import ml_dtypes
import numpy as np

from . import trampoline
from .diagnostics import fail
from ..knobs import eval_contract_elements, eval_max_elements
from .dtypes import DType, round_kept, round_to
from .expr import Expr
from .shapes import bind, fmt_shape
from .tiny import GroupOp, Ops, Program, UOp

Impl = Callable[[UOp, list, dict], np.ndarray]
_IMPL: dict[Ops, Impl] = {}


def impl(*ops: Ops):
    def deco(fn: Impl) -> Impl:
        for op in ops:
            _IMPL[op] = fn
        return fn
    return deco


def bind_symbols(program: Program, inputs: Mapping[str, np.ndarray], env: Mapping[str, int] | None = None) -> dict:
    """Bind every symbol of the program's INPUT shapes from the arrays given (E1304 on conflict)."""
    out = dict(env or {})
    for n in program.inputs:
        tid = n.arg["tensor_id"]
        if tid not in inputs:
            fail("MissingInput", tid, f"no array given for input {tid!r}")
        arr = np.asarray(inputs[tid])
        if arr.ndim != n.ndim:
            fail("AxisSizeMismatch", tid, f"input {tid!r} has rank {arr.ndim}, the model declares {fmt_shape(n.shape)}")
        for k, (d, got) in enumerate(zip(n.shape, arr.shape, strict=True)):
            if isinstance(d, int):
                if d != got:
                    fail("AxisSizeMismatch", tid, f"input {tid!r} axis {k} has size {got}, the model declares {d}")
                continue
            free = [v for v in d.variables() if v not in out]
            if len(d.terms) == 1 and d.terms[0][0] == (str(d),) and d.terms[0][1] == 1 and free:
                out[str(d)] = got
                continue
            if free:
                continue  # a compound dim: checked once its symbols are bound elsewhere
            if d.evaluate(out) != got:
                sym = ", ".join(sorted(d.variables()))
                fail("AxisAlignmentMismatch", tid, f"symbol {sym} is bound to {_desc(d, out)} but input {tid!r} "
                     f"axis {k} has size {got}")
    for n in program.inputs:  # compound dims whose symbols were bound by a later input
        arr = np.asarray(inputs[n.arg["tensor_id"]])
        for k, (d, got) in enumerate(zip(n.shape, arr.shape, strict=True)):
            if not isinstance(d, int):
                if d.variables() - set(out):
                    fail("UnboundSymbol", n.arg["tensor_id"], f"size {d} of axis {k} uses unbound symbols")
                if d.evaluate(out) != got:
                    fail("AxisAlignmentMismatch", n.arg["tensor_id"],
                         f"axis {k} should have size {d} = {d.evaluate(out)} but has {got}")
    return out


def _desc(d: Expr, env: Mapping[str, int]) -> str:
    return f"{d} = {d.evaluate(env)}"


def evaluate(program: Program, inputs: Mapping[str, np.ndarray], env: Mapping[str, int] | None = None,
             keep_all: bool = False, nudge: "np.random.Generator | None" = None) -> dict:
    """Outputs by name (or every node's value by id when keep_all). With ``nudge``, every float value a node
    computes with a rounding (not inputs, constants, movements, selections) is moved by one rounding of its dtype, up
    or down at random: one sample of how far another evaluation order may land (Monte Carlo arithmetic), for judging
    an ill-conditioned output."""
    env = bind_symbols(program, inputs, env)
    vals: dict = {}
    consumers = program.consumers()
    remaining = {k: len(v) for k, v in consumers.items()}
    outs = {nid for _, nid in program.outputs}
    limit = eval_max_elements()
    products = contractions(program, consumers, outs, env)
    fused = set() if keep_all else {s for r in products.values() for s in r[2]}
    lazy = set() if keep_all else deferred(program, consumers, outs, env, limit, fused)
    lazy |= fused

    def release(s: str) -> None:
        stack = [s]  # a deferred node's use ends its operands' uses too (a chain of them: no frame per node)
        while stack:
            s = stack.pop()
            remaining[s] -= 1
            if remaining[s] == 0 and s not in outs:
                if s in lazy:
                    stack.extend(program[s].src)
                else:
                    del vals[s]

    for n in program.nodes:
        if n.id in lazy:
            continue  # evaluated slice by slice by the REDUCE it feeds
        elems = math.prod(bind(n.shape, env))
        if elems > limit:
            _over_limit(n, env, limit)
        if n.op == Ops.INPUT:  # never written to: an input already of its dtype is not copied
            v = round_kept(np.asarray(inputs[n.arg["tensor_id"]]), n.dtype)
        else:
            with np.errstate(all="ignore"):
                v = _contracted(n, products.get(n.id), vals, env, limit)
                if v is None and n.op == Ops.REDUCE and n.src[0] in lazy:  # (or a contraction too wide to broadcast)
                    v = _reduce_in_slices(program, n, vals, lazy, env, limit)
                elif v is None:
                    v = _IMPL[n.op](n, [vals[s] for s in n.src], env)
        expect = bind(n.shape, env)
        assert v.shape == expect and v.dtype == n.dtype.np, (n, v.shape, expect, v.dtype)
        vals[n.id] = v if nudge is None or n.op in _EXACT else _nudged(v, n.dtype, nudge)
        if not keep_all:
            for s in n.src:
                release(s)
    if keep_all:
        return vals
    return {name: vals[nid] for name, nid in program.outputs}


# ops that round nothing: their values are their operands' (inputs and constants are exact)
_EXACT = GroupOp.Leaf | GroupOp.Movement | GroupOp.Ternary | GroupOp.Indirect | {Ops.NEG, Ops.RELU, Ops.MAX, Ops.MIN}


def _nudged(v: np.ndarray, dtype: DType, rng: np.random.Generator) -> np.ndarray:
    """v moved by one rounding of dtype (relative eps, random sign); non-floats as they are."""
    if not dtype.is_float:
        return v
    step = float(np.finfo(ml_dtypes.bfloat16 if dtype == DType.bf16 else dtype.np).eps)
    with np.errstate(all="ignore"):
        return round_to(v.astype(np.float64) * (1 + step * rng.choice([-1.0, 1.0], size=v.shape)), dtype)


def _over_limit(n: UOp, env: Mapping, limit: int):
    fail("UnaddressableShape", n.tag or n.id, f"{n.op.value} would materialise {math.prod(bind(n.shape, env))} "
         f"elements (shape {list(bind(n.shape, env))}), over the evaluator's limit {limit}",
         "Run smaller shapes on the CPU evaluators, or raise POLYSAT_EVAL_MAX_ELEMENTS.")


# ---- leaves and movement ------------------------------------------------------------------------

@impl(Ops.CONST)
def _const(n, xs, env):
    return np.full(bind(n.shape, env), n.arg["value"], dtype=n.dtype.np)


@impl(Ops.RESHAPE)
def _reshape(n, xs, env):
    return xs[0].reshape(bind(n.shape, env))


@impl(Ops.PERMUTE)
def _permute(n, xs, env):
    return np.transpose(xs[0], n.arg["perm"])


@impl(Ops.EXPAND)
def _expand(n, xs, env):
    return np.ascontiguousarray(np.broadcast_to(xs[0], bind(n.shape, env)))


def _bind_dim(d, env) -> int:
    return d if isinstance(d, int) else int(d.evaluate(env))


@impl(Ops.PAD)
def _pad(n, xs, env):
    pads = [(_bind_dim(lo, env), _bind_dim(hi, env)) for lo, hi in n.arg["pad"]]
    return np.pad(xs[0], pads, mode="constant", constant_values=np.asarray(n.arg["value"]).astype(n.dtype.np))


@impl(Ops.SHRINK)
def _shrink(n, xs, env):
    x = xs[0]
    sl = []
    for k, (lo, hi, st) in enumerate(zip(n.arg["lo"], n.arg["hi"], n.arg["step"], strict=True)):
        lo, hi = _bind_dim(lo, env), _bind_dim(hi, env)
        if not 0 <= lo < hi <= x.shape[k]:
            fail("UnaddressableShape", n.id, f"SHRINK axis {k}: [{lo}, {hi}) outside size {x.shape[k]}")
        sl.append(slice(lo, hi, st))
    return np.ascontiguousarray(x[tuple(sl)])


@impl(Ops.FLIP)
def _flip(n, xs, env):
    return np.ascontiguousarray(np.flip(xs[0], n.arg["axes"]))


@impl(Ops.VIEW)
def _view(n, xs, env):
    x = xs[0]
    shape = bind(n.shape, env)
    names = [f"i{k}" for k in range(len(shape))]
    if not n.arg["index_map"]:  # a rank-0 input viewed at any shape is a broadcast of its one element
        return np.ascontiguousarray(np.broadcast_to(x, shape)).reshape(shape)
    v = strided(x, n.arg["index_map"], names, shape, [0] * len(shape), env)
    if v is not None:  # a linear map inside x: a strided copy, no gather (reshaped: a rank-0 view stays rank 0)
        return np.ascontiguousarray(v).reshape(shape)
    grid = np.indices(shape, dtype=np.int64, sparse=True) if shape else []
    local = dict(env)
    local.update(zip(names, grid))
    idx = []
    for k, e in enumerate(n.arg["index_map"]):
        v = np.asarray(e.evaluate(local), dtype=np.int64)  # over the axes e mentions (others broadcast)
        if v.size and math.prod(shape) and (v.min() < 0 or v.max() >= x.shape[k]):
            fail("OutOfBoundsView", n.id, f"index_map[{k}] = {e} reaches [{v.min()}, {v.max()}] outside size {x.shape[k]}")
        idx.append(v)
    return np.ascontiguousarray(np.broadcast_to(x[tuple(idx)], shape)).reshape(shape)


def strided(x: np.ndarray, index: tuple, names: list, sizes: list, starts: list, env: Mapping) -> "np.ndarray | None":
    """x[index] over the axes names (sizes[k] values from starts[k]) as a read-only strided view of x (no copy), when
    each index is linear in the axes (symbols bound by env) and stays inside x; None otherwise (the caller gathers,
    and reports or guards the indices outside)."""
    if not all(sizes) or x.ndim != len(index):
        return None
    pos = {a: k for k, a in enumerate(names)}
    strides, origin = [0] * len(names), []
    for k, e in enumerate(index):
        const, lo, hi = 0, 0, 0
        for m, c in e.terms:
            if not m:
                const += c
            elif len(m) == 1 and isinstance(m[0], str) and m[0] in pos:
                j = pos[m[0]]
                const += c * starts[j]
                strides[j] += c * x.strides[k]
                lo, hi = lo + min(0, c * (sizes[j] - 1)), hi + max(0, c * (sizes[j] - 1))
            elif len(m) == 1 and isinstance(m[0], str) and m[0] in env:
                const += c * int(env[m[0]])
            else:
                return None  # a floordiv, a product of axes
        if const + lo < 0 or const + hi >= x.shape[k]:
            return None
        origin.append(const)
    base = x[tuple(slice(c, None) for c in origin)]
    return np.lib.stride_tricks.as_strided(base, shape=tuple(sizes), strides=tuple(strides), writeable=False)


# ---- elementwise ----------------------------------------------------------------------------------

_UNARY = {
    Ops.NEG: np.negative,
    Ops.RELU: lambda x: np.maximum(x, np.zeros((), x.dtype)),
    Ops.EXP2: np.exp2,
    Ops.LOG2: np.log2,
    Ops.SQRT: np.sqrt,
    Ops.RSQRT: lambda x: np.float32(1) / np.sqrt(x),
    Ops.RECIPROCAL: lambda x: np.float32(1) / x,
}
_BINARY = {
    Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.FDIV: np.divide,
    Ops.MAX: np.maximum, Ops.MIN: np.minimum, Ops.POW: np.power,
    Ops.CMPLT: np.less, Ops.CMPEQ: np.equal, Ops.CMPNE: np.not_equal,
}


def _compute(x: np.ndarray) -> np.ndarray:
    """Float arrays are computed on in float32 (16-bit types are rounded back afterwards)."""
    if x.dtype in (np.float16,) or x.dtype.name == "bfloat16":
        return x.astype(np.float32)
    return x


@impl(*_UNARY)
def _unary(n, xs, env):
    x = _compute(xs[0])
    if n.op in (Ops.RECIPROCAL, Ops.RSQRT) and x.dtype.kind != "f":
        x = x.astype(np.float32)
    return round_to(_UNARY[n.op](x), n.dtype)


@impl(*_BINARY)
def _binary(n, xs, env):
    a, b = (_compute(x) for x in xs)
    return round_kept(_BINARY[n.op](a, b), n.dtype)


@impl(Ops.WHERE)
def _where(n, xs, env):
    c, a, b = xs
    return round_to(np.where(c, a, b), n.dtype)


@impl(Ops.CAST)
def _cast(n, xs, env):
    x = _compute(xs[0])
    if n.dtype == DType.i32 and x.dtype.kind == "f":
        x = np.trunc(x)
    return round_to(x, n.dtype)


# ---- reductions -----------------------------------------------------------------------------------

_REDUCE = {"SUM": np.sum, "MAX": np.max, "MIN": np.min}


@impl(Ops.REDUCE)
def _reduce(n, xs, env):
    acc = n.arg["dtype"]
    x = round_kept(xs[0], acc) if acc.is_float else xs[0].astype(acc.np)
    x = _compute(x)
    return round_to(_REDUCE[n.arg["op"]](x, axis=n.arg["axes"]), acc)


@impl(Ops.CONTRACT)
def _contract(n, xs, env):
    names = {k: chr(ord("a") + i) for i, k in enumerate(dict.fromkeys(n.arg["lhs_idx"] + n.arg["rhs_idx"]))}
    spec = "".join(names[k] for k in n.arg["lhs_idx"]) + "," + "".join(names[k] for k in n.arg["rhs_idx"]) \
        + "->" + "".join(names[k] for k in n.arg["out_idx"])
    a, b = (_compute(x).astype(np.float32) for x in xs)
    return round_to(np.einsum(spec, a, b), n.arg["dtype"])


# ---- a sum of products: a contraction ------------------------------------------------------------------
# REDUCE(SUM) into fp32 of an fp32 MUL of fp32 operands (a convolution, a MatMul) with more products than
# POLYSAT_EVAL_CONTRACT_ELEMENTS is evaluated as one batched BLAS product of its two operands, never as the
# product tensor (every output element times every tap): each output element is the fp32 sum of the products of
# the same operands, in the library's order, a product entering it unrounded where the library fuses the
# multiply-add. The order of an fp32 sum is not part of the meaning (the rule checker bounds any order by
# (n - 1) eps32 sum |x|, checker/bounds.py); a smaller sum keeps numpy's order, which the checker's node-by-node
# values (checker/values.py) equal bit for bit.

def contracts(mul_dtype: DType, a_dtype: DType, b_dtype: DType, acc: DType, op: str, products: int) -> bool:
    """Whether REDUCE(op, acc) of MUL(a, b) is evaluated as a contraction: all fp32, a sum, and more products than
    POLYSAT_EVAL_CONTRACT_ELEMENTS."""
    return op == "SUM" and DType.fp32 == mul_dtype == a_dtype == b_dtype == acc and products > eval_contract_elements()


def contract_sum(a: np.ndarray, a_axes: tuple, b: np.ndarray, b_axes: tuple, out_axes: tuple, reduced: tuple,
                 sizes: Mapping, limit: int) -> "np.ndarray | None":
    """sum over the axes ``reduced`` of a * b, as an fp32 array over out_axes (sizes[axis] each). a and b are laid
    out over their named axes, a dim of size 1 broadcasting. An axis of the sum missing from an operand is
    broadcast into it (None when that copy is over limit: the caller sums the literal product)."""
    def present(x, axes):
        keep = [k for k, ax in enumerate(axes) if x.shape[k] == sizes[ax] and (sizes[ax] > 1 or ax in out_axes)]
        x = x.reshape([x.shape[k] for k in keep])
        return x, tuple(axes[k] for k in keep)
    red = tuple(r for r in reduced if sizes[r] > 1)

    def every_tap(x, axes):  # a tap axis the operand is constant along is broadcast into it
        missing = tuple(r for r in red if r not in axes)
        full = x.shape + tuple(sizes[r] for r in missing)
        if missing and math.prod(full) > limit:
            return None, None
        return np.broadcast_to(x.reshape(x.shape + (1,) * len(missing)), full), axes + missing
    a, a_axes = every_tap(*present(a, a_axes))
    b, b_axes = every_tap(*present(b, b_axes))
    if a is None or b is None:
        return None
    batch = tuple(x for x in out_axes if x in a_axes and x in b_axes)
    m = tuple(x for x in out_axes if x in a_axes and x not in b_axes)
    n = tuple(x for x in out_axes if x in b_axes and x not in a_axes)
    a3 = _grouped(a, a_axes, (batch, m, red), sizes)
    b3 = _grouped(b, b_axes, (batch, red, n), sizes)
    y = np.matmul(a3, b3)  # (batch, m, n): fp32 BLAS
    have = batch + m + n
    y = y.reshape([sizes[x] for x in have])
    y = np.transpose(y, [have.index(x) for x in out_axes if x in have])
    y = y.reshape([sizes[x] if x in have else 1 for x in out_axes])
    return np.broadcast_to(y, [sizes[x] for x in out_axes]).astype(np.float32, order="C")  # rank 0 stays rank 0


def contractions(program: Program, consumers: Mapping, outs: set, env: Mapping) -> dict:
    """REDUCE id -> (operand a id, operand b id, ids never evaluated, the product's shape) for each REDUCE evaluated as a contraction: its
    MUL (and the same-rank EXPANDs feeding only that MUL, whose sources are the operands then) are not held."""
    out: dict = {}
    for n in program.nodes:
        if n.op != Ops.REDUCE or program[n.src[0]].op != Ops.MUL:
            continue
        m = program[n.src[0]]
        xa, xb = (program[s] for s in m.src)
        if m.id in outs or consumers[m.id] != [n.id] \
                or not contracts(m.dtype, xa.dtype, xb.dtype, n.arg["dtype"], n.arg["op"], math.prod(bind(m.shape, env))):
            continue
        ops, skip = [], [m.id]
        for x in (xa, xb):
            if x.op == Ops.EXPAND and x.id not in outs and all(c == m.id for c in consumers[x.id]) \
                    and program[x.src[0]].ndim == x.ndim:
                ops.append(x.src[0])
                skip.append(x.id)
            else:
                ops.append(x.id)
        out[n.id] = (ops[0], ops[1], tuple(dict.fromkeys(skip)), m.shape)
    return out


def _contracted(n: UOp, product: "tuple | None", vals: dict, env: Mapping, limit: int) -> "np.ndarray | None":
    """REDUCE n as a contraction of the operands product names (None when it is not one, or cannot be)."""
    if product is None:
        return None
    a, b = vals[product[0]], vals[product[1]]
    full = bind(product[3], env)
    axes = tuple(range(len(full)))
    reduced = tuple(k % len(full) for k in n.arg["axes"])
    kept = tuple(k for k in axes if k not in reduced)
    sizes = dict(enumerate(full))
    return contract_sum(a, axes, b, axes, kept, reduced, sizes, limit)


def _grouped(x: np.ndarray, axes: tuple, groups: tuple, sizes: Mapping) -> np.ndarray:
    """x over axes, transposed to the concatenated groups and reshaped to one dim per group (float32)."""
    order = [axes.index(ax) for g in groups for ax in g]
    return np.transpose(x, order).reshape([math.prod(sizes[ax] for ax in g) for g in groups]).astype(np.float32, copy=False)


# ---- data-dependent reads --------------------------------------------------------------------------

def wrap_index(idx: np.ndarray, size: int) -> tuple:
    """(index to read, whether it is in range): a negative index counts from the end of the axis; an index
    outside [-size, size) reads nothing and gives 0 (ONNX leaves it an error; a kernel cannot raise)."""
    i = np.asarray(idx).astype(np.int64)
    i = np.where(i < 0, i + size, i)
    ok = (i >= 0) & (i < size)
    return np.where(ok, i, 0), ok


@impl(Ops.GATHER)
def _gather(n, xs, env):
    x, idx = xs
    axis = n.arg["axis"]
    i, ok = wrap_index(idx, x.shape[axis])
    if n.arg["elements"]:
        x = x[tuple(slice(None) if k == axis else slice(0, d) for k, d in enumerate(i.shape))]
        out = np.take_along_axis(x, i, axis)
    else:
        out = np.take(x, i, axis=axis)
        ok = ok.reshape((1,) * axis + ok.shape + (1,) * (x.ndim - axis - 1))
    return np.where(ok, out, np.zeros((), dtype=x.dtype)).astype(x.dtype)


# ---- a reduction of a product too large to hold ------------------------------------------------------------
# A convolution or matmul is lowered as REDUCE(SUM, MUL(EXPAND x, EXPAND w)): the product has every output
# element times every tap. Past the element limit the EXPANDs and elementwise ops under such a REDUCE are never
# held whole: the REDUCE evaluates them one box of its kept axes at a time. Each output element is still the
# same sum of the same rounded products (the reduced axes are whole in every box), so the values are those of
# the literal evaluation.

def deferred(program: Program, consumers: Mapping, outs: set, env: Mapping, limit: int, fused: set) -> set:
    """Ids of the EXPAND and elementwise nodes over the limit that feed only REDUCEs (directly or through
    other such nodes), same-shaped sources, not program outputs nor in fused (a contraction's)."""
    lazy: set = set()
    for n in reversed(program.nodes):
        if n.id in outs or n.id in fused or not consumers[n.id] or math.prod(bind(n.shape, env)) <= limit:
            continue
        if n.op == Ops.EXPAND:
            fits = program[n.src[0]].ndim == n.ndim
        else:
            fits = n.op in GroupOp.Elementwise and all(program[s].shape == n.shape for s in n.src)
        if fits and all(c in lazy or program[c].op == Ops.REDUCE for c in consumers[n.id]):
            lazy.add(n.id)
    return lazy


def _boxes(shape: tuple, kept: list, limit: int):
    """[(lo, hi) per axis] covering shape, split along the kept axes (first first) into boxes of at most limit
    elements."""
    if math.prod(shape) <= limit:
        yield [(0, d) for d in shape]
        return
    if not kept:
        yield None  # the reduced axes alone are over the limit
        return
    k, rest = kept[0], math.prod(shape) // shape[kept[0]]
    step = max(1, limit // rest)
    for lo in range(0, shape[k], step):
        hi = min(lo + step, shape[k])
        for box in _boxes(shape[:k] + (hi - lo,) + shape[k + 1:], kept[1:], limit):
            if box is not None:
                box[k] = (lo, hi)
            yield box


def _slice_of(program: Program, nid: str, box: tuple, vals: dict, lazy: set, env: Mapping) -> np.ndarray:
    """Node nid's value over box ((lo, hi) per axis), computing the deferred nodes only there (a generator walk:
    a chain of deferred nodes as long as the model costs no frames)."""
    return trampoline.run(_slice_walk(program, nid, box, vals, lazy, env))


def _slice_walk(program: Program, nid: str, box: tuple, vals: dict, lazy: set, env: Mapping):
    if nid not in lazy:
        return vals[nid][tuple(slice(lo, hi) for lo, hi in box)]
    n = program[nid]
    if n.op == Ops.EXPAND:
        src = program[n.src[0]]
        sub = tuple((0, 1) if s == 1 else b for s, b in zip(bind(src.shape, env), box, strict=True))
        x = yield _slice_walk(program, src.id, sub, vals, lazy, env)
        return np.broadcast_to(x, tuple(hi - lo for lo, hi in box))
    args = []
    for s in n.src:
        args.append((yield _slice_walk(program, s, box, vals, lazy, env)))
    return _IMPL[n.op](n, args, env)


def _reduce_in_slices(program: Program, n: UOp, vals: dict, lazy: set, env: Mapping, limit: int) -> np.ndarray:
    src = program[n.src[0]]
    shape = bind(src.shape, env)
    reduced = {a % len(shape) for a in n.arg["axes"]}
    kept = [k for k in range(len(shape)) if k not in reduced]
    out = np.empty(bind(n.shape, env), dtype=n.dtype.np)
    for box in _boxes(shape, kept, limit):
        if box is None:
            _over_limit(src, env, limit)
        x = np.ascontiguousarray(_slice_of(program, src.id, tuple(box), vals, lazy, env))  # summed as whole
        out[tuple(slice(*box[k]) for k in kept)] = _reduce(n, [x], env)
    return out
