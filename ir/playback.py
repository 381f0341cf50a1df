"""CPU playback: numpy executes RB-SSA regions in order (docs/DESIGN.md §Verification).

Regions run one after another; the tensors each yields (``gmem`` or ``deferred``) are handed to the
regions after it. A value is a numpy array over its present axes (see :mod:`.region`); elementwise
ops compute in float32 and round to their dtype, Reduce rounds its body to the accumulation dtype
and accumulates in it, yields cast — the same numerics as the reference evaluator
(:mod:`.evaluate`), so playback of a program's regions must equal its evaluation (rtol = atol = 1e-3).
A Read whose index leaves its tensor is an error unless an enclosing ``Select`` guard masks exactly
those points (E1204 UnguardedAccess).

``online_softmax_sum`` runs as the streaming algorithm, not as a re-materialized softmax: its scores
and values are evaluated one key block at a time (the key axis narrowed to the block, reads at its
offset), and the block updates a running max, a running sum and the fp32 partial sums, rescaled by
exp2((m_old - m_new)·log2 e) when the max moves; P is rounded at the running max, and the division by
the running sum happens once at the end (passes 2: a first walk for the max and the sum, a second
for P·V with P = round_p(e / l)). While every score of a row seen so far is -inf its max is
taken as 0 (so exp gives 0, not NaN); a row that never sees a finite score ends 0/0 = NaN, as the
two-pass softmax of the reference evaluator gives.
"""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from ..knobs import eval_max_elements
from .diagnostics import fail
from .dtypes import DType, round_kept, round_to
from .evaluate import _BINARY, _UNARY, _compute, contract_sum, contracts, strided, wrap_index
from .region import R, Region, RNode, walk
from .shapes import Dim

F32 = np.float32
LOG2E = F32(1.4426950408889634)
from .tiny import Ops

_UNARY_OPS = {"neg": Ops.NEG, "relu": Ops.RELU, "exp2": Ops.EXP2, "log2": Ops.LOG2, "sqrt": Ops.SQRT,
              "rsqrt": Ops.RSQRT, "reciprocal": Ops.RECIPROCAL}
_BINARY_OPS = {"add": Ops.ADD, "sub": Ops.SUB, "mul": Ops.MUL, "div": Ops.FDIV, "max": Ops.MAX, "min": Ops.MIN,
               "pow": Ops.POW, "cmplt": Ops.CMPLT, "cmpeq": Ops.CMPEQ, "cmpne": Ops.CMPNE}
_REDUCE = {"sum": np.sum, "max": np.max, "min": np.min}
_COMBINE = {"sum": np.add, "max": np.maximum, "min": np.minimum}


class Value:
    """An array whose dims are the named axes ``axes`` (``arr.shape`` = their sizes, or 1 to broadcast)."""
    __slots__ = ("arr", "axes")

    def __init__(self, arr: np.ndarray, axes: tuple):
        self.arr, self.axes = arr, axes

    def to(self, target: tuple) -> np.ndarray:
        """The array laid out over target (absent axes become size 1, for numpy broadcasting)."""
        if self.axes == target:
            return self.arr
        perm = sorted(range(len(self.axes)), key=lambda k: target.index(self.axes[k]))
        arr = np.transpose(self.arr, perm) if perm != list(range(len(perm))) else self.arr
        shape, it = [], iter(arr.shape)
        present = set(self.axes)
        for a in target:
            shape.append(next(it) if a in present else 1)
        return arr.reshape(shape)


def bind_region_symbols(regions: list, inputs: Mapping[str, np.ndarray]) -> dict:
    """Symbol values from the shapes of the program inputs the regions read (E1304 on a conflict)."""
    env: dict = {}
    pending = []
    for r in regions:
        for b in r.inputs:
            if b.name not in inputs:
                continue
            arr = np.asarray(inputs[b.name])
            if arr.ndim != len(b.memref.shape):
                fail("AxisSizeMismatch", b.name, f"input {b.name!r} has rank {arr.ndim}, region {r.name} reads "
                     f"rank {len(b.memref.shape)}")
            for d, got in zip(b.memref.shape, arr.shape, strict=True):
                if isinstance(d, int):
                    if d != got:
                        fail("AxisSizeMismatch", b.name, f"input {b.name!r} has size {got} where {d} is declared")
                elif len(d.terms) == 1 and d.terms[0] == ((str(d),), 1) and str(d) not in env:
                    env[str(d)] = got
                else:
                    pending.append((b.name, d, got))
    for name, d, got in pending:
        if d.variables() - set(env):
            fail("UnboundSymbol", name, f"size {d} uses unbound symbols")
        if d.evaluate(env) != got:
            fail("AxisAlignmentMismatch", name, f"{name!r} should have size {d} = {d.evaluate(env)}, has {got}")
    return env


def _size(d: Dim, env: Mapping[str, int]) -> int:
    return d if isinstance(d, int) else int(d.evaluate(env))


def _plain(n: RNode) -> bool:
    """Its operands are evaluated in its own block, under its own guard or (an index-guarded select's branches)
    one known before it runs (_RegionRun._below)."""
    return n.op in (R.UNARY, R.BINARY, R.BROADCAST, R.TRANSPOSE, R.SELECT)


class _RegionRun:
    def __init__(self, region: Region, tensors: dict, env: dict):
        self.r, self.tensors, self.env = region, tensors, env
        self.sizes = {a: _size(s, env) for a, s in region.axis_sizes.items()}
        self.offsets: dict = {}  # axis -> first index, while an online_softmax_sum runs one key block
        self.lets: dict = {}
        self.memo: dict = {}
        self.limit = eval_max_elements()

    def shape(self, axes: tuple) -> tuple:
        return tuple(self.sizes[a] for a in axes)

    def grids(self, axes: tuple) -> dict:
        n = len(axes)
        out = dict(self.env)
        for k, a in enumerate(axes):
            shp = [1] * n
            shp[k] = self.sizes[a]
            lo = self.offsets.get(a, 0)
            out[a] = np.arange(lo, lo + self.sizes[a], dtype=np.int64).reshape(shp)
        return out

    def full(self, v: Value, axes: tuple) -> np.ndarray:
        return np.broadcast_to(v.to(axes), self.shape(axes))

    # ---- evaluation -----------------------------------------------------------------------------------
    def eval(self, n: RNode, guard: Value | None = None) -> Value:
        key = (id(n), None if guard is None else id(guard))
        if key in self.memo:
            return self.memo[key][1]
        axes = n.axes + (tuple(n.arg[1]) if n.op == R.REDUCE else ())  # a reduce's body is laid out over both
        elems = math.prod(self.shape(axes))
        if elems > self.limit and n.op != R.REDUCE:  # a reduce too large is run in blocks (reduce_in_blocks)
            fail("ResourceLimit", self.r.name, f"playback of {n.op.value} would materialise {elems} elements (axes "
                 f"{list(axes)}), over POLYSAT_EVAL_MAX_ELEMENTS = {self.limit}",
                 "Run smaller shapes on the CPU evaluators, or raise POLYSAT_EVAL_MAX_ELEMENTS.")
        if _plain(n):
            self._below(n, guard)
        v = self._eval(n, guard)
        self.memo[key] = (n, v, guard)  # keep n and guard alive so their ids stay unique
        return v

    def _below(self, n: RNode, guard: Value | None) -> None:
        """Evaluate the nodes under n in its block, children first, by an explicit stack: a region's tree is as
        deep as the chain it fused (a chain of pads is a chain of index-guarded selects), and n's own evaluation
        then finds each child made (no Python frame per node; only reduces, gathers and online sums nest calls)."""
        stack = [(s, g, False) for s, g in self._operands(n, guard)]
        while stack:
            m, g, ready = stack.pop()
            if (id(m), None if g is None else id(g)) in self.memo:
                continue
            if ready or not _plain(m):
                self.eval(m, g)
                continue
            stack.append((m, g, True))
            stack.extend((s, h, False) for s, h in self._operands(m, g)
                         if (id(s), None if h is None else id(h)) not in self.memo)

    def _operands(self, n: RNode, guard: Value | None) -> list:
        """[(operand, the guard it is evaluated under)] of a plain node n under guard."""
        if n.op == R.SELECT and n.src[0].op == R.PRED:
            p, a, b = n.src
            ga, gb = self._branch_guards(n, guard)
            return [(p, guard), (a, ga), (b, gb)]
        return [(s, guard) for s in n.src]

    def _branch_guards(self, n: RNode, guard: Value | None) -> tuple:
        """(then's guard, else's guard) of the index-guarded select n under guard: guard where n's predicate holds /
        fails. Made once per block (kept in the memo, so both branches' values are found again by their guard)."""
        key = ("guards", id(n), None if guard is None else id(guard))
        if key not in self.memo:
            pv = self.eval(n.src[0], guard)  # a PRED: a leaf
            self.memo[key] = (n, (self._and(guard, pv, False), self._and(guard, pv, True)), guard)
        return self.memo[key][1]

    def _eval(self, n: RNode, guard: Value | None) -> Value:
        op = n.op
        if op == R.REF:
            v = self.lets[n.arg]
            cut = [a for a in v.axes if a in self.offsets]
            if not cut:
                return v
            idx = tuple(slice(self.offsets[a], self.offsets[a] + self.sizes[a]) if a in self.offsets else slice(None)
                        for a in v.axes)
            return Value(v.arr[idx], v.axes)
        if op == R.CONST:
            return Value(np.asarray(n.arg, dtype=n.dtype.np), ())
        if op == R.READ:
            return self.read(n, guard)
        if op == R.GATHER:
            return self.gather(n, guard)
        if op == R.PRED:
            g = self.grids(n.axes)
            mask = np.ones(self.shape(n.axes), dtype=bool)
            for e in n.arg:
                mask &= np.asarray(e.evaluate(g)) >= 0
            return Value(mask, n.axes)
        if op == R.UNARY:
            x = _compute(self.eval(n.src[0], guard).to(n.axes))
            with np.errstate(all="ignore"):
                if n.arg == "cast":
                    if n.dtype == DType.i32 and x.dtype.kind == "f":
                        x = np.trunc(x)
                    return Value(round_to(x, n.dtype), n.axes)
                fn = _UNARY_OPS[n.arg]
                if fn in (Ops.RECIPROCAL, Ops.RSQRT) and x.dtype.kind != "f":
                    x = x.astype(np.float32)
                return Value(round_to(_UNARY[fn](x), n.dtype), n.axes)
        if op == R.BINARY:
            a, b = (_compute(self.eval(s, guard).to(n.axes)) for s in n.src)
            with np.errstate(all="ignore"):
                out = _BINARY[_BINARY_OPS[n.arg]](a, b)
            return Value(np.broadcast_to(round_kept(out, n.dtype), self.shape(n.axes)), n.axes)
        if op == R.SELECT:
            return self.select(n, guard)
        if op == R.REDUCE:
            return self.reduce(n, guard)
        if op == R.ONLINE:
            return self.online(n, guard)
        if op == R.BROADCAST:
            return Value(self.full(self.eval(n.src[0], guard), n.axes), n.axes)
        if op == R.TRANSPOSE:
            x = self.eval(n.src[0], guard)
            return Value(np.transpose(self.full(x, x.axes), n.arg), n.axes)
        raise AssertionError(op)

    def read(self, n: RNode, guard: Value | None) -> Value:
        tensor, index = n.arg
        if tensor not in self.tensors:
            fail("UnknownTensor", self.r.name, f"region reads {tensor!r}, which no input or earlier region provides")
        arr = self.tensors[tensor]
        if len(index) != arr.ndim:
            fail("AxisAlignmentMismatch", self.r.name, f"read of {tensor!r} has {len(index)} indices for rank {arr.ndim}")
        shape = self.shape(n.axes)
        if not index:
            return Value(arr.reshape(()), n.axes)
        v = strided(arr, index, list(n.axes), list(shape), [self.offsets.get(a, 0) for a in n.axes], self.env)
        if v is not None:  # a linear read inside the tensor: a view of it
            return Value(v, n.axes)
        g = self.grids(n.axes)
        idx, oob = [], None
        for k, e in enumerate(index):
            v = np.asarray(e.evaluate(g), dtype=np.int64)  # over the axes e mentions (others broadcast)
            bad = (v < 0) | (v >= arr.shape[k])
            if bad.any():
                oob = bad if oob is None else oob | bad
                v = np.clip(v, 0, arr.shape[k] - 1)
            idx.append(v)
        if oob is not None:
            used = np.ones(shape, dtype=bool) if guard is None else self.used_points(guard, n.axes)
            if (np.broadcast_to(oob, shape) & used).any():
                fail("UnguardedAccess", self.r.name, f"read {tensor}[{', '.join(map(str, index))}] leaves the tensor "
                     f"(shape {arr.shape}) where no Select guards it")
        return Value(np.broadcast_to(arr[tuple(idx)], shape), n.axes)

    def gather(self, n: RNode, guard: Value | None) -> Value:
        """t[map with the index's value on axis]: negative counts from the end, out of range reads 0."""
        tensor, axis, others = n.arg
        if tensor not in self.tensors:
            fail("UnknownTensor", self.r.name, f"region gathers from {tensor!r}, which no input or earlier region provides")
        arr = self.tensors[tensor]
        if len(others) + 1 != arr.ndim:
            fail("AxisAlignmentMismatch", self.r.name, f"gather from {tensor!r} has {len(others) + 1} indices for rank "
                 f"{arr.ndim}")
        shape = self.shape(n.axes)
        g = self.grids(n.axes)
        at, ok = wrap_index(np.broadcast_to(self.eval(n.src[0], guard).to(n.axes), shape), arr.shape[axis])
        idx = [np.broadcast_to(np.asarray(e.evaluate(g), dtype=np.int64), shape) for e in others]
        for k, v in enumerate(idx):
            bad = (v < 0) | (v >= arr.shape[k + (k >= axis)])
            if bad.any():
                fail("UnguardedAccess", self.r.name, f"gather from {tensor} leaves the tensor (shape {arr.shape}) on "
                     f"dim {k + (k >= axis)}")
        idx.insert(axis, at)
        return Value(np.where(ok, arr[tuple(idx)], np.zeros((), dtype=arr.dtype)), n.axes)

    def used_points(self, guard: Value, axes: tuple) -> np.ndarray:
        """Over axes: the points where the guard holds for some value of its other axes."""
        extra = tuple(a for a in guard.axes if a not in axes)
        g = self.full(guard, axes + extra)
        return np.broadcast_to(g.any(axis=tuple(range(len(axes), len(axes) + len(extra)))), self.shape(axes))

    def select(self, n: RNode, guard: Value | None) -> Value:
        p, a, b = n.src
        pv = self.eval(p, guard)
        # an index guard: the branches are only valid where it holds / fails
        ga, gb = self._branch_guards(n, guard) if p.op == R.PRED else (guard, guard)
        av, bv = self.eval(a, ga), self.eval(b, gb)
        out = np.where(pv.to(n.axes), av.to(n.axes), bv.to(n.axes))
        return Value(np.broadcast_to(round_kept(out, n.dtype), self.shape(n.axes)), n.axes)

    def _and(self, guard: Value | None, p: Value, negate: bool) -> Value:
        m = ~p.arr if negate else p.arr
        if guard is None:
            return Value(m, p.axes)
        axes = tuple(dict.fromkeys(guard.axes + p.axes))
        return Value(guard.to(axes) & Value(m, p.axes).to(axes), axes)

    def reduce(self, n: RNode, guard: Value | None) -> Value:
        op, axes, init = n.arg
        acc = n.dtype
        if acc is None:
            fail("AccDtypeMissing", self.r.name, "a Reduce has no accumulation dtype")
        if op not in _REDUCE:
            fail("NonAssociativeTransform", self.r.name, f"reduce op {op!r} is not one of sum, max, min")
        target = n.axes + tuple(axes)
        body = n.src[0]
        if body.op == R.BINARY and body.arg == "mul" and contracts(body.dtype, *(x.dtype for x in body.src), acc,
                                                                  op.upper(), math.prod(self.shape(target))) \
                and all(math.prod(self.shape(x.axes)) <= self.limit for x in body.src):
            a, b = (self.eval(x, guard) for x in body.src)  # a contraction: the product is never held
            y = contract_sum(a.arr, a.axes, b.arr, b.axes, n.axes, tuple(axes), self.sizes, self.limit)
            if y is not None:
                return Value(round_to(np.add(np.asarray(init, dtype=F32), y), acc), n.axes)
        if math.prod(self.shape(target)) > self.limit:
            return self.reduce_in_blocks(n, guard, target)
        body = self.eval(n.src[0], guard)
        x = np.ascontiguousarray(self.full(body, target))  # reduced axes last and contiguous, as evaluate sums
        x = round_kept(x, acc) if acc.is_float else x.astype(acc.np)
        x = _compute(x)
        red = tuple(range(len(n.axes), len(target)))
        out = _COMBINE[op](np.asarray(init, dtype=x.dtype), _REDUCE[op](x, axis=red))
        return Value(round_to(out, acc), n.axes)

    def reduce_in_blocks(self, n: RNode, guard: Value | None, target: tuple) -> Value:
        """A Reduce whose body is over the element limit (a large convolution's products), one block of its first
        free kept axis at a time: the axis is narrowed to the block (reads index at its offset, as the streamed
        softmax's key blocks) and the body evaluated afresh. Every output element is the same whole sum."""
        free = [a for a in n.axes if a not in self.offsets and self.sizes[a] > 1
                and (guard is None or a not in guard.axes)]
        if not free:
            fail("ResourceLimit", self.r.name, f"playback of a reduce would materialise {math.prod(self.shape(target))} "
                 f"elements (axes {list(target)}), over POLYSAT_EVAL_MAX_ELEMENTS = {self.limit}",
                 "Run smaller shapes on the CPU evaluators, or raise POLYSAT_EVAL_MAX_ELEMENTS.")
        a = free[0]
        size, memo = self.sizes[a], self.memo
        block = max(1, self.limit // (math.prod(self.shape(target)) // size))
        parts = []
        for lo in range(0, size, block):
            self.sizes[a], self.offsets[a], self.memo = min(block, size - lo), lo, {}
            try:
                parts.append(np.asarray(self.full(self.reduce(n, guard), n.axes)))
            finally:
                self.sizes[a], self.memo = size, memo
                del self.offsets[a]
        return Value(np.concatenate(parts, axis=n.axes.index(a)), n.axes)

    def online(self, n: RNode, guard: Value | None) -> Value:
        """The streamed softmax-weighted sum, one key block at a time (see the module docstring)."""
        axes, p, block, passes = n.arg
        if len(axes) != 1 or passes not in (1, 2):
            fail("AxisAlignmentMismatch", self.r.name, f"online_softmax_sum runs along one key axis, once or twice; "
                 f"got axes {list(axes)}, passes {passes}")
        (j,) = axes
        if j in self.offsets:
            fail("AxisAlignmentMismatch", self.r.name, f"online_softmax_sum over {j} nested in another over {j}")
        s_node, v_node = n.src
        out = n.axes
        rows = tuple(a for a in out if a in s_node.axes)  # the scores' rows (their axes but the key)
        m = np.full(self.shape(rows), -np.inf, dtype=F32)
        total = np.zeros(self.shape(rows), dtype=F32)
        acc = np.zeros(self.shape(out), dtype=F32)
        for s, v in self.blocks(j, int(block), s_node, v_node if passes == 1 else None, rows, out, guard):
            m_new = np.maximum(m, s.max(axis=-1))
            m_use = np.where(m_new == -np.inf, F32(0), m_new).astype(F32)  # no finite score yet: exp gives 0
            alpha = np.exp2((m - m_use) * LOG2E).astype(F32)
            e = np.exp2((s - m_use[..., None]) * LOG2E).astype(F32)
            total = (total * alpha + e.sum(axis=-1, dtype=F32)).astype(F32)
            if passes == 1:  # P rounded at the running max; the partial sums follow the max
                acc = (acc * Value(alpha, rows).to(out) + self.weighted(e, v, p, rows, out, j)).astype(F32)
            m = m_new
        if passes == 1:
            res = (acc / Value(total, rows).to(out)).astype(F32)
        else:  # the second walk: P = round_p(e / l) at the final max and sum, as the two-kernel softmax
            m_use = np.where(m == -np.inf, F32(0), m).astype(F32)
            for s, v in self.blocks(j, int(block), s_node, v_node, rows, out, guard):
                e = np.exp2((s - m_use[..., None]) * LOG2E).astype(F32)
                acc = (acc + self.weighted((e / total[..., None]).astype(F32), v, p, rows, out, j)).astype(F32)
            res = acc
        return Value(np.broadcast_to(res, self.shape(out)), out)

    def blocks(self, j: str, block: int, s_node: RNode, v_node: "RNode | None", rows: tuple, out: tuple,
               guard: Value | None):
        """(scores over rows + (j,), values over out + (j,) or None) per key block: the key axis is
        narrowed to the block (reads index at its offset) and the operands are evaluated afresh."""
        size, memo = self.sizes[j], self.memo
        for lo in range(0, size, max(1, block)):
            self.sizes[j], self.offsets[j], self.memo = min(block, size - lo), lo, {}
            try:
                s = _compute(np.asarray(self.full(self.eval(s_node, guard), rows + (j,)))).astype(F32)
                v = None if v_node is None else _compute(np.asarray(self.full(self.eval(v_node, guard), out + (j,)))).astype(F32)
            finally:
                self.sizes[j], self.memo = size, memo
                del self.offsets[j]
            yield s, v

    @staticmethod
    def weighted(q: np.ndarray, v: np.ndarray, p, rows: tuple, out: tuple, j: str) -> np.ndarray:
        """sum over the block of f32(round_p(q)) * v, over out."""
        pr = _compute(round_to(q, p)).astype(F32)
        return (Value(pr, rows + (j,)).to(out + (j,)) * v).sum(axis=-1, dtype=F32)

    # ---- the region ---------------------------------------------------------------------------------------
    def run(self) -> dict:
        """Each let in order; its intermediates (the memo) dropped once it is made, and each let once the last let
        reading it is: a fused chain of resizes and convolutions (GLPN's decoder head, 1,800 lets) holds one let's
        intermediates and the lets still read, not every value it ever made."""
        yielded = {y.src for y in self.r.yields}
        last = {}  # let name -> the index of the last let that reads it
        for j, let in enumerate(self.r.lets):
            for n in walk(let.expr):
                if n.op == R.REF:
                    last[n.arg] = j
        dead: dict = {}
        for name, j in last.items():
            if name not in yielded:
                dead.setdefault(j, []).append(name)
        for j, let in enumerate(self.r.lets):
            self.lets[let.name] = self.eval(let.expr)
            self.memo = {}
            for name in dead.get(j, ()):
                del self.lets[name]
        out = {}
        for y in self.r.yields:
            if y.src not in self.lets:
                fail("UnknownTensor", self.r.name, f"yield from {y.src!r}, which no let defines")
            v = self.lets[y.src]
            if set(v.axes) - set(y.axes):
                fail("AxisAlignmentMismatch", self.r.name, f"yield of {y.src!r} over {v.axes} to {y.dst!r} over {y.axes}")
            out[y.dst] = np.array(round_to(self.full(v, y.axes), y.cast), order="C")  # rank 0 stays rank 0
        return out


def playback(regions: list[Region], program_inputs: Mapping[str, np.ndarray], keep_all: bool = False) -> dict:
    """Run the regions on the program's inputs; the program outputs by name (every yielded tensor when keep_all)."""
    env = bind_region_symbols(regions, program_inputs)
    tensors: dict = {}
    produced: set = set()
    for r in regions:
        for b in r.inputs:
            if b.name in produced:
                continue
            if b.name not in program_inputs:
                fail("MissingInput", b.name, f"region {r.name} reads {b.name!r}, which is neither given nor "
                     "written by an earlier region")
            if b.name not in tensors:
                tensors[b.name] = round_kept(np.asarray(program_inputs[b.name]), b.memref.dtype)  # never written
        produced |= {b.name for b in r.outputs}
    outputs: dict = {}
    for r in regions:
        with np.errstate(all="ignore"):  # overflow to inf and nan propagate as in the reference evaluator
            produced_now = _RegionRun(r, tensors, env).run()
        for k, v in produced_now.items():
            tensors[k] = v
            ob = next(b for b in r.outputs if b.name == k) if any(b.name == k for b in r.outputs) else None
            if keep_all or (ob is not None and ob.program_output):
                outputs[k] = v
    return outputs
