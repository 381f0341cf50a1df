"""RB-SSA expressions -> C statements of the SIMT kernel (the compute stage of the skeleton).

An :class:`Emitter` turns a region's expression DAG, evaluated at one point (each axis bound to a C
variable), into straight-line C: one ``const`` per node, common subexpressions once per scope, Reduces
as loops over their bound axes accumulating in fp32 (i32 / bool for those types), Selects on an index
guard as branches (so a masked read is never issued). Every float value is held as fp32 and rounded to
its dtype after each op, as the reference evaluator rounds, so kernel and playback agree.

Reads are bounds-checked unless the index is a bare axis of the tensor dim's size or a constant inside
it (then provably in range); a read the pass preloaded as a vector (``vec_reads``) is taken from the
lane's register buffer instead. A Gather reads its index first, then the tensor at that value on its
axis (``wrap_index``: negative from the end, outside the axis 0), as the reference evaluator does.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...ir.dtypes import DType
from ...ir import trampoline
from ...ir.expr import Expr, FloorDiv
from ...ir.region import R, RNode
from ...ir.trampoline import Walk

CTYPE = {DType.fp16: "float", DType.bf16: "float", DType.fp32: "float", DType.i32: "int", DType.bool: "bool"}
STORE_T = {DType.fp16: "__half", DType.bf16: "__nv_bfloat16", DType.fp32: "float", DType.i32: "int",
           DType.bool: "unsigned char"}
READ_FN = {DType.fp16: "polysat_simt::to_f", DType.bf16: "polysat_simt::to_f", DType.fp32: "polysat_simt::to_f",
           DType.i32: "polysat_simt::to_i", DType.bool: "polysat_simt::to_b"}
ROUND = {DType.fp16: "polysat_simt::rnd_fp16", DType.bf16: "polysat_simt::rnd_bf16"}
# the bool binary functions a kernel computes (or, and); bind refuses a region with another
BOOL_BINARY = {"add": "||", "max": "||", "mul": "&&", "min": "&&"}
COMPARE = {"cmplt": "<", "cmpeq": "==", "cmpne": "!="}  # of any dtype, bool included
REDUCE_OP = {"sum": "polysat_simt::SUM", "max": "polysat_simt::MAX", "min": "polysat_simt::MIN"}


def is_float(dt: DType | None) -> bool:
    return dt in (DType.fp16, DType.bf16, DType.fp32)


def literal(value: Any, dt: DType) -> str:
    """A C literal of value rounded to dt (as the reference evaluator stores a constant)."""
    if dt == DType.bool:
        return "true" if value else "false"
    if dt == DType.i32:
        return f"({int(value)})"
    v = float(np.asarray(value, dtype=dt.np).astype(np.float32))
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "(-INFINITY)"
    return f"{v:.9e}f"


def rounded(x: str, dt: DType) -> str:
    return f"{ROUND[dt]}({x})" if dt in ROUND else x


def convert(x: str, src: DType | None, dst: DType) -> str:
    """x (held as CTYPE[src]) as a value of dst (a cast: rounding, truncation toward zero, != 0)."""
    if src == dst:
        return x
    if dst == DType.bool:
        return f"(({x}) != 0)"
    if dst == DType.i32:
        return f"polysat_simt::f2i({x})" if is_float(src) else f"(int)({x})"
    if is_float(src):
        return rounded(x, dst)
    return rounded(f"(float)({x})", dst)


def neutral_literal(op: str, dt: DType) -> str:
    if dt == DType.bool:
        return "true" if op == "min" else "false"
    if dt == DType.i32:
        return {"sum": "0", "max": "(-2147483647 - 1)", "min": "2147483647"}[op]
    return {"sum": "0.0f", "max": "(-INFINITY)", "min": "INFINITY"}[op]


class Emitter:
    """C statements of expressions at a point. ``tensors``: region tensor -> C expression of its pointer;
    ``dims``: size symbol -> C expression; ``axis_sizes``: region axis -> Dim."""

    def __init__(self, region, tensors: dict, dims: dict, indent: int = 1):
        self.r, self.tensors, self.dims = region, tensors, dims
        self.lets = region.let_map
        self.buffers = {b.name: b.memref for b in region.inputs}
        self.lines: list[str] = []
        self.ind = indent
        self.memo: list[dict] = [{}]
        self.bound: dict[str, tuple[str, int]] = {}  # axis -> (C variable, binding version)
        self.version = 0
        self.count = 0
        self.vec_reads: dict[int, tuple[str, str, int]] = {}  # id(read) -> (buffer, axis, version)

    # ---- plumbing -------------------------------------------------------------------------------------
    def line(self, s: str) -> None:
        self.lines.append("  " * self.ind + s)

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def open(self, head: str) -> None:
        self.line(head + " {")
        self.ind += 1
        self.memo.append({})

    def close(self, tail: str = "}") -> None:
        self.memo.pop()
        self.ind -= 1
        self.line(tail)

    def bind(self, axis: str, cvar: str) -> int:
        self.version += 1
        self.bound[axis] = (cvar, self.version)
        return self.version

    def unbind(self, axis: str, prev: "tuple[str, int] | None") -> None:
        if prev is None:
            self.bound.pop(axis, None)
        else:
            self.bound[axis] = prev

    def key(self, n: RNode) -> tuple:
        return (id(n), tuple(self.bound[a][1] if a in self.bound else -1 for a in n.axes))

    def remember(self, n: RNode, value: str) -> None:
        self.memo[-1][self.key(n)] = value

    def follow(self, n: RNode) -> RNode:
        while n.op == R.REF:
            n = self.lets[n.arg]
        return n

    # ---- integer expressions ------------------------------------------------------------------------------
    def idx(self, e: Expr) -> str:
        """An index or size expression in C (long long): axes as bound, symbols as parameters."""
        e = Expr.of(e)
        if e.is_const:
            return f"{e.constant}LL"
        parts = []
        for mono, c in e.terms:
            atoms = [self.atom(a) for a in mono]
            parts.append("*".join([f"{c}LL"] + atoms) if c != 1 or not atoms else "*".join(atoms))
        return "(" + " + ".join(parts) + ")"

    def atom(self, a) -> str:
        if isinstance(a, FloorDiv):
            return f"polysat_simt::floordiv({self.idx(a.num)}, {a.q}LL)"
        if a in self.bound:
            return self.bound[a][0]
        if a in self.dims:
            return self.dims[a]
        raise KeyError(f"unbound variable {a!r}")

    def size(self, d) -> str:
        return self.idx(Expr.of(d))

    def offset(self, index: tuple, shape: tuple) -> str:
        """Row-major flat offset of index into a tensor of shape."""
        return self.flat([self.idx(e) for e in index], shape)

    def flat(self, cindex: list, shape: tuple) -> str:
        """Row-major flat offset of C index expressions into a tensor of shape."""
        off = None
        for i, d in zip(cindex, shape, strict=True):
            off = i if off is None else f"({off} * {self.size(d)} + {i})"
        return off or "0LL"

    def range_checks(self, index: tuple, shape: tuple) -> list[str]:
        """The C tests that each index not provably inside its dim is inside it."""
        return [f"{self.idx(e)} >= 0 && {self.idx(e)} < {self.size(d)}" for e, d in zip(index, shape, strict=True)
                if not self.in_range(e, d)]

    def in_range(self, e: Expr, d) -> bool:
        """Is index e provably inside [0, d)? (a bare axis of size d, or a constant inside an int d)"""
        e = Expr.of(e)
        if e.is_const:
            return isinstance(d, int) and 0 <= e.constant < d
        vs = e.variables()
        if len(vs) == 1:
            (v,) = vs
            if e == Expr.var(v) and v in self.r.axis_sizes and Expr.of(self.r.axis_sizes[v]) == Expr.of(d):
                return True
        return False

    # ---- values -----------------------------------------------------------------------------------------
    # The walk over a region's expression DAG is written as generators (ir/trampoline.py): ``(yield w)`` is the
    # call of the walk ``w``, so a chain of 5,000 ops costs heap, not Python frames. ``value``, ``accumulate``
    # and ``over_axes`` are the entries the renderers call.
    def value(self, n: RNode) -> str:
        return trampoline.run(self._value(n))

    def accumulate(self, n: RNode, acc: str) -> None:
        """acc = combine(acc, body rounded to the accumulation dtype), at the current point."""
        trampoline.run(self._accumulate(n, acc))

    def over_axes(self, axes, body, prefix: str = "r") -> None:
        """Nested loops over ``axes`` (each a fresh variable bound to it, over the axis's size): body() inside."""
        trampoline.run(self._over_axes(axes, body, prefix))

    def _value(self, n: RNode) -> Walk:
        n = self.follow(n)
        if n.op == R.CONST:
            return literal(n.arg, n.dtype)
        k = self.key(n)
        for scope in reversed(self.memo):
            if k in scope:
                return scope[k]
        v = yield self._emit(n)
        self.memo[-1][k] = v
        return v

    def let(self, ctype: str, expr: str, prefix: str = "v") -> str:
        name = self.fresh(prefix)
        self.line(f"const {ctype} {name} = {expr};")
        return name

    def _emit(self, n: RNode) -> Walk:
        """Every RB-SSA op but CONST (``value``) and REF (``follow``), which never reach here."""
        if n.op in (R.BROADCAST, R.TRANSPOSE):
            return (yield self._value(n.src[0]))
        if n.op == R.PRED:
            conds = [f"({self.idx(g)} >= 0)" for g in n.arg]
            return self.let("bool", " && ".join(conds) or "true", "p")
        if n.op == R.READ:
            return self.read(n)
        return (yield {R.UNARY: self.unary, R.BINARY: self.binary, R.SELECT: self.select, R.GATHER: self.gather,
                       R.REDUCE: self.reduce_inline, R.ONLINE: self.online_inline}[n.op](n))

    def read(self, n: RNode) -> str:
        tensor, index = n.arg
        if pre := self.preloaded(n):
            return pre
        shape = self.buffers[tensor].shape
        load = f"{READ_FN[n.dtype]}({self.tensors[tensor]}[{self.offset(index, shape)}])"
        return self.guarded_load(n.dtype, load, self.range_checks(index, shape))

    def preloaded(self, n: RNode) -> str:
        """The lane's element of read n from the vector the pass preloaded at this binding of its axis, or ''."""
        hit = self.vec_reads.get(id(n))
        if hit is not None and self.bound.get(hit[1], (None, -1))[1] == hit[2]:
            return f"{READ_FN[n.dtype]}({hit[0]}[v])"
        return ""

    def guarded_load(self, dt: DType, load: str, checks: list) -> str:
        """load where every check holds, else 0 (the load is then not issued)."""
        if checks:
            zero = {DType.bool: "false", DType.i32: "0"}.get(dt, "0.0f")
            load = f"({' && '.join(checks)}) ? {load} : {zero}"
        return self.let(CTYPE[dt], load, "x")

    def gather(self, n: RNode) -> Walk:
        """tensor[others with the index's value on axis]: the index read first, wrapped by ``wrap_index``
        (negative counts from the end, -1 when outside the axis: the element reads 0, as in ir/evaluate.py)."""
        if pre := self.preloaded(n):
            return pre
        i = yield self._value(self.follow(n.src[0]))
        off, checks = self.gather_at(n, i)
        return self.guarded_load(n.dtype, f"{READ_FN[n.dtype]}({self.tensors[n.arg[0]]}[{off}])", checks)

    def gather_at(self, n: RNode, i: str) -> tuple[str, list]:
        """(flat offset, the C tests that it is inside the tensor) of Gather n's element at index value i."""
        tensor, axis, others = n.arg
        shape = self.buffers[tensor].shape
        at = self.let("long long", f"polysat_simt::wrap_index((long long)({i}), {self.size(shape[axis])})", "g")
        cindex = [self.idx(e) for e in others]
        cindex.insert(axis, at)
        return self.flat(cindex, shape), [f"{at} >= 0"] + self.range_checks(others, shape[:axis] + shape[axis + 1:])

    def unary(self, n: RNode) -> Walk:
        src = self.follow(n.src[0])
        x = yield self._value(src)
        fn, dt = n.arg, n.dtype
        if fn == "cast":
            return self.let(CTYPE[dt], convert(x, src.dtype, dt))
        if not is_float(dt):
            expr = {"neg": f"-({x})", "relu": f"polysat_simt::relu({x})"}.get(fn)
            if expr is None:  # a float function of an int: computed in fp32, then converted
                return self.let(CTYPE[dt], convert(self._float_unary(fn, f"(float)({x})"), DType.fp32, dt))
            return self.let(CTYPE[dt], expr)
        if not is_float(src.dtype):
            x = f"(float)({x})"
        return self.let("float", rounded(self._float_unary(fn, x), dt))

    @staticmethod
    def _float_unary(fn: str, x: str) -> str:
        return {"neg": f"-({x})", "relu": f"polysat_simt::relu({x})", "exp2": f"exp2f({x})", "log2": f"log2f({x})",
                "sqrt": f"sqrtf({x})", "rsqrt": f"(1.0f / sqrtf({x}))", "reciprocal": f"(1.0f / ({x}))"}[fn]

    def binary(self, n: RNode) -> Walk:
        a_n, b_n = (self.follow(s) for s in n.src)
        a = yield self._value(a_n)
        b = yield self._value(b_n)
        fn, dt = n.arg, n.dtype
        floats = is_float(a_n.dtype) or is_float(b_n.dtype) or (is_float(dt) and fn in ("div", "pow"))
        if floats:
            a = a if is_float(a_n.dtype) else f"(float)({a})"
            b = b if is_float(b_n.dtype) else f"(float)({b})"
        if fn in COMPARE:
            return self.let("bool", f"(({a}) {COMPARE[fn]} ({b}))")
        if dt == DType.bool:  # bind.py refuses the other bool functions
            return self.let("bool", f"(({a}) {BOOL_BINARY[fn]} ({b}))")
        expr = {"add": f"({a}) + ({b})", "sub": f"({a}) - ({b})", "mul": f"({a}) * ({b})", "div": f"({a}) / ({b})",
                "max": f"polysat_simt::nmax({a}, {b})", "min": f"polysat_simt::nmin({a}, {b})",
                "pow": f"powf({a}, {b})"}[fn]
        if is_float(dt):
            return self.let("float", rounded(expr, dt))
        return self.let(CTYPE[dt], convert(expr, DType.fp32 if floats else DType.i32, dt))

    def select(self, n: RNode) -> Walk:
        p, a_n, b_n = (self.follow(s) for s in n.src)
        c = yield self._value(p)
        out = self.fresh("s")
        self.line(f"{CTYPE[n.dtype]} {out};")
        for head, branch in ((f"if ({c})", a_n), ("else", b_n)):
            self.open(head)
            v = yield self._value(branch)
            self.line(f"{out} = {convert(v, branch.dtype, n.dtype)};")
            self.close()
        return out

    # ---- reductions ------------------------------------------------------------------------------------
    def _accumulate(self, n: RNode, acc: str) -> Walk:
        op, _axes, _init = n.arg
        body = self.follow(n.src[0])
        x = convert((yield self._value(body)), body.dtype, n.dtype)
        self.line(f"{acc} = polysat_simt::combine<{REDUCE_OP[op]}>({acc}, ({CTYPE[n.dtype]})({x}));")

    def finish(self, n: RNode, total: str) -> str:
        """The Reduce's value from the combined partials: combined with its init, rounded to its dtype."""
        op, _axes, init = n.arg
        expr = f"polysat_simt::combine<{REDUCE_OP[op]}>(({CTYPE[n.dtype]}){literal(init, n.dtype)}, {total})"
        return rounded(expr, n.dtype) if is_float(n.dtype) else expr

    def reduce_inline(self, n: RNode) -> Walk:
        op, axes, _init = n.arg
        acc = self.fresh("acc")
        self.line(f"{CTYPE[n.dtype]} {acc} = {neutral_literal(op, n.dtype)};")
        yield self._over_axes(axes, lambda: self._accumulate(n, acc))
        return self.let(CTYPE[n.dtype], self.finish(n, acc), "red")

    def _over_axes(self, axes, body, prefix: str = "r") -> Walk:
        """over_axes as a walk: body() may return a walk, run in place."""
        saved = []
        for a in axes:
            var = self.fresh(prefix)
            self.open(f"for (long long {var} = 0; {var} < {self.size(self.r.axis_sizes[a])}; ++{var})")
            saved.append((a, self.bound.get(a)))
            self.bind(a, var)
        yield body()
        for a, prev in reversed(saved):
            self.close()
            self.unbind(a, prev)

    def key_loop(self, axis: str, body) -> Walk:
        """for each value of the key axis (a fresh variable bound to it): body() (a walk)."""
        return self._over_axes((axis,), body, "j")

    def online_inline(self, n: RNode) -> Walk:
        """online_softmax_sum at the point, in three walks over the key axis: the max, the sum of
        e = exp2((s - max) log2 e), then sum of round_p(e) v / sum (passes 1) or round_p(e / sum) v (passes 2);
        a row whose scores are all -inf uses max 0 and ends 0/0 (NaN), as the reference evaluator's softmax."""
        (axis,), p_dtype, _block, passes = n.arg
        s_n, v_n = (self.follow(x) for x in n.src)
        mx, l, acc = self.fresh("om"), self.fresh("ol"), self.fresh("oa")
        self.line(f"float {mx} = -INFINITY, {l} = 0.0f, {acc} = 0.0f;")

        def top() -> Walk:
            s = yield self._f(s_n)
            self.line(f"{mx} = polysat_simt::nmax({mx}, {s});")

        yield self.key_loop(axis, top)
        self.line(f"if ({mx} == -INFINITY) {mx} = 0.0f;")

        def e() -> Walk:
            s = yield self._f(s_n)
            return f"exp2f(({s} - {mx}) * 1.442695041e+00f)"

        def total() -> Walk:
            self.line(f"{l} += {(yield e())};")

        yield self.key_loop(axis, total)

        def weigh() -> Walk:
            x = yield e()
            w = x if passes == 1 else f"({x}) / {l}"
            v = yield self._f(v_n)
            self.line(f"{acc} += {rounded(w, p_dtype)} * {v};")

        yield self.key_loop(axis, weigh)
        return self.let("float", f"{acc} / {l}" if passes == 1 else acc, "on")

    def _f(self, n: RNode) -> Walk:
        """n's value at the point as fp32."""
        return convert((yield self._value(n)), n.dtype, DType.fp32)
