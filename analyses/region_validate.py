"""Validators of RB-SSA regions: the diagnostics of docs/DESIGN.md §RB-SSA
(its typing rules and SRNF included).

``validate_regions`` returns every problem as a :class:`Diagnostic` value (errors and warnings) and
raises nothing. Checked, per region:

* BroadcastMismatch — outside Reduce bodies a Binary/Select operand lacks axes of its result (a
  BroadcastInDim is missing), or a BroadcastInDim drops or reorders its operand's axes;
* AxisAlignmentMismatch — an axis is declared twice or used undeclared, operands agree on axes but
  not on their order (a Transpose is missing), a result_shape or output MemRef disagrees with the
  axis sizes, a yield's value is not over the yield's axes, or a tensor has different shapes across
  regions;
* UnguardedAccess — a Read can leave its tensor at a point no enclosing Select guard excludes
  (decided with isl over the region's axis box, symbols as parameters);
* AccDtypeMissing / NonAssociativeTransform / NeutralInvalid — a Reduce without accumulation dtype,
  with an op other than sum/max/min, or whose init is not its op's neutral;
* ExcessivePiecewise (warning) — a Read's guard splits into more than ``MAX_PIECES`` pieces;
* online_softmax_sum (docs/DESIGN.md §Streaming) — one key axis, declared in reduce_axes, along which its scores and
  values both run; fp32 result (AccDtypeMissing otherwise), P a float type (DtypeMismatch), a
  positive block, 1 or 2 passes; its operands are bodies (reads guarded like a Reduce's).
"""
from __future__ import annotations

import math

import islpy as isl

from ..ir import trampoline
from ..ir.diagnostics import Diagnostic, PolysatError, diag
from ..ir.expr import Expr
from ..ir.region import REDUCE_OPS, R, Region, RNode, neutral, walk
from .indexbook import MAX_PIECES
from .isl_util import parse_set, set_text


def validate_regions(regions: list[Region]) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    produced: dict = {}  # tensor name -> (region name, MemRef)
    for r in regions:
        out.extend(_RegionCheck(r).run())
        for b in r.inputs:
            if b.name in produced:
                src, m = produced[b.name]
                if (m.shape, m.dtype) != (b.memref.shape, b.memref.dtype):
                    out.append(diag("AxisAlignmentMismatch", f"region {r.name}: input {b.name}",
                                    f"reads {b.name} as {b.memref.dtype.value}{_shape(b.memref.shape)}, but region "
                                    f"{src} writes {m.dtype.value}{_shape(m.shape)}"))
        for b in r.outputs:
            produced[b.name] = (r.name, b.memref)
    return out


def _shape(s: tuple) -> str:
    return "[" + ", ".join(str(d) for d in s) + "]"


def _affine(e: Expr) -> bool:
    return e.is_affine


class _RegionCheck:
    def __init__(self, r: Region):
        self.r = r
        self.out: list[Diagnostic] = []
        self.sizes = r.axis_sizes
        self.names = [a for a, _ in r.iters + r.reduce_axes]
        self.inputs = {b.name: b.memref for b in r.inputs}
        self._isl_ok = True

    def err(self, kind: str, where: str, why: str, suggestion: str | None = None):
        self.out.append(diag(kind, f"region {self.r.name}: {where}", why, suggestion))

    # ---- isl domain of the region's axes ----------------------------------------------------------------
    def params(self) -> list:
        syms: set = set()
        exprs = [Expr.of(s) for s in self.sizes.values()]
        exprs += [Expr.of(d) for b in self.r.inputs + self.r.outputs for d in b.memref.shape]
        for l in self.r.lets:
            for n in walk(l.expr):
                if n.op == R.READ:
                    exprs += list(n.arg[1])
                elif n.op == R.PRED:
                    exprs += list(n.arg)
        for e in exprs:
            syms |= e.variables()
        return sorted(syms - set(self.names))

    def box(self) -> isl.Set:
        self.param_names = self.params()
        self.rename = {a: Expr.var(f"a_{a}") for a in self.names} | {q: Expr.var(f"p_{q}") for q in self.param_names}
        cs = [f"0 <= {self.isl(Expr.var(a))} < {self.isl(Expr.of(self.sizes[a]))}" for a in self.names]
        cs += [f"{self.isl(Expr.var(q))} >= 1" for q in self.param_names]
        return parse_set(set_text(self._params, "", self._dims, cs))

    def isl(self, e: Expr) -> str:
        """e in isl syntax, every name prefixed (so no axis or symbol can be an isl keyword)."""
        return e.subs(self.rename).to_isl()

    @property
    def _params(self) -> list:
        return [f"p_{q}" for q in self.param_names]

    @property
    def _dims(self) -> list:
        return [f"a_{a}" for a in self.names]

    def isl_set(self, constraints: list) -> isl.Set:
        return parse_set(set_text(self._params, "", self._dims, constraints)).intersect(self.domain)

    # ---- the walk ---------------------------------------------------------------------------------------
    def run(self) -> list[Diagnostic]:
        seen: dict = {}
        for a, s in self.r.iters + self.r.reduce_axes:
            if a in seen:
                self.err("AxisAlignmentMismatch", f"axis {a}", f"axis {a} is declared twice (sizes {seen[a]} and {s})")
            seen[a] = s
            if isinstance(s, int) and s <= 0:
                self.err("AxisAlignmentMismatch", f"axis {a}", f"axis {a} has the non-positive size {s}")
        used = {a for l in self.r.lets for n in walk(l.expr)
                for a in n.axes + (n.arg[1] if n.op == R.REDUCE else ()) + (n.arg[0] if n.op == R.ONLINE else ())}
        self._isl_ok = used <= set(self.sizes)  # undeclared axes are reported below; no isl over them
        try:
            self.domain = self.box()
        except (isl.Error, PolysatError):
            self._isl_ok = False
            self.domain = None
        self.lets: dict = {}
        for let in self.r.lets:
            self.visit(let.expr, f"let {let.name}", in_body=False, guard=self.domain, seen=set())
            self.lets[let.name] = let.expr
        outs = {b.name: b for b in self.r.outputs}
        for y in self.r.yields:
            where = f"yield {y.src} -> {y.dst}"
            if y.src not in self.lets:
                self.err("UnknownTensor", where, f"yields {y.src!r}, which no let defines")
                continue
            v = self.lets[y.src]
            if v.axes != y.axes:
                self.err("AxisAlignmentMismatch", where, f"the value is over {list(v.axes)}, the yield writes "
                         f"{list(y.axes)}", "Insert Transpose/BroadcastInDim so the value has the output's axes.")
            if y.dst not in outs:
                self.err("UnknownTensor", where, f"writes {y.dst!r}, which is not a region output")
                continue
            m = outs[y.dst].memref
            want = tuple(self.sizes.get(a) for a in y.axes)
            if want != tuple(m.shape):
                self.err("AxisAlignmentMismatch", where, f"output {y.dst} is {_shape(m.shape)} but its axes "
                         f"{list(y.axes)} have sizes {_shape(want)}")
            if y.cast != m.dtype:
                self.err("DtypeMismatch", where, f"casts to {y.cast.value} but {y.dst} holds {m.dtype.value}")
        return self.out

    def visit(self, n: RNode, where: str, in_body: bool, guard, seen: set):
        trampoline.run(self._visit(n, where, in_body, guard, seen))  # a region's tree is as deep as its chain

    def _visit(self, n: RNode, where: str, in_body: bool, guard, seen: set):
        key = (id(n), in_body, id(guard))
        if key in seen:
            return
        seen.add(key)
        for a in n.axes:
            if a not in self.sizes:
                self.err("AxisAlignmentMismatch", where, f"axis {a} is used but not declared in iters or reduce_axes")
        if n.op == R.REF:
            if n.arg not in self.lets:
                self.err("UnknownTensor", where, f"reference to {n.arg!r} before its let")
            return
        if n.op == R.READ:
            self.check_read(n, where, guard)
            return
        if n.op == R.REDUCE:
            self.check_reduce(n, where)
            yield self._visit(n.src[0], where, True, guard, seen)
            return
        if n.op == R.ONLINE:
            self.check_online(n, where)
            for s in n.src:
                yield self._visit(s, where, True, guard, seen)
            return
        if n.op == R.SELECT and n.src[0].op == R.PRED and guard is not None and self._isl_ok:
            p = self.pred_set(n.src[0])
            yield self._visit(n.src[0], where, in_body, guard, seen)
            if p is None:
                yield self._visit(n.src[1], where, in_body, guard, seen)
            else:
                yield self._visit(n.src[1], where, in_body, guard.intersect(p), seen)
                yield self._visit(n.src[2], where, in_body, guard.subtract(p), seen)
        else:
            for s in n.src:
                yield self._visit(s, where, in_body, guard, seen)
        if n.op in (R.BINARY, R.SELECT) and not in_body:
            self.check_aligned(n, where)
        elif n.op == R.BROADCAST:
            self.check_broadcast(n, where)
        elif n.op == R.TRANSPOSE:
            if sorted(n.arg) != list(range(len(n.src[0].axes))):
                self.err("InvalidPermutation", where, f"Transpose permutation {list(n.arg)} does not permute "
                         f"{list(n.src[0].axes)}")

    # ---- individual rules -------------------------------------------------------------------------------
    def check_aligned(self, n: RNode, where: str):
        for s in n.src:
            if s.op in (R.CONST, R.PRED) or s.axes == n.axes:
                continue
            if set(s.axes) == set(n.axes):
                self.err("AxisAlignmentMismatch", where, f"{n.arg or 'select'} operand axes {list(s.axes)} are the "
                         f"result's {list(n.axes)} in another order", "Insert a Transpose (docs/DESIGN.md §RB-SSA typing rule 2).")
            else:
                self.err("BroadcastMismatch", where, f"{n.arg or 'select'} operand over {list(s.axes)} meets a result "
                         f"over {list(n.axes)} outside a Reduce body",
                         "Insert BroadcastInDim before the op (docs/DESIGN.md §RB-SSA typing rule 1).")

    def check_broadcast(self, n: RNode, where: str):
        axes, shape, bdims = n.arg
        x = n.src[0]
        sub = tuple(a for a in axes if a in x.axes)
        if sub != x.axes or any(a not in axes for a in x.axes):
            self.err("BroadcastMismatch", where, f"BroadcastInDim of {list(x.axes)} to {list(axes)} drops or reorders "
                     "operand axes", "Transpose the operand first; BroadcastInDim only adds axes.")
        elif tuple(bdims) != tuple(axes.index(a) for a in x.axes):
            self.err("BroadcastMismatch", where, f"broadcast_dimensions {list(bdims)} do not place {list(x.axes)} in "
                     f"{list(axes)}")
        want = tuple(self.sizes.get(a) for a in axes)
        if tuple(shape) != want:
            self.err("AxisAlignmentMismatch", where, f"BroadcastInDim result_shape {_shape(shape)} disagrees with the "
                     f"sizes {_shape(want)} of axes {list(axes)}")

    def check_reduce(self, n: RNode, where: str):
        op, axes, init = n.arg
        if n.dtype is None:
            self.err("AccDtypeMissing", where, f"reduce_{op} over {list(axes)} has no accumulation dtype",
                     "Give the Reduce \"dtype\": \"fp32\" (no FP16 accumulation).")
        if op not in REDUCE_OPS:
            self.err("NonAssociativeTransform", where, f"reduce op {op!r} is not associative (sum, max, min)")
        elif not _same_number(init, neutral(op, n.dtype)):
            self.err("NeutralInvalid", where, f"reduce_{op} starts from {init!r}, not its neutral {neutral(op, n.dtype)!r}")
        for a in axes:
            if a not in self.sizes:
                self.err("AxisAlignmentMismatch", where, f"reduce axis {a} is not declared in reduce_axes")
        if len(set(axes)) != len(axes):
            self.err("AxisAlignmentMismatch", where, f"reduce axes {list(axes)} repeat an axis")

    def check_online(self, n: RNode, where: str):
        axes, p, block, passes = n.arg
        declared = {a for a, _ in self.r.reduce_axes}
        if len(axes) != 1:
            self.err("AxisAlignmentMismatch", where, f"online_softmax_sum runs along one key axis, got {list(axes)}")
        for a in axes:
            if a not in declared:
                self.err("AxisAlignmentMismatch", where, f"key axis {a} of online_softmax_sum is not declared in "
                         "reduce_axes")
            for what, s in zip(("scores", "values"), n.src, strict=True):
                if a not in s.axes:
                    self.err("AxisAlignmentMismatch", where, f"the {what} of online_softmax_sum do not run along its "
                             f"key axis {a} (they are over {list(s.axes)})")
        if n.dtype is None or n.dtype.value != "fp32":
            self.err("AccDtypeMissing", where, "online_softmax_sum accumulates in fp32",
                     "Give it \"dtype\": \"fp32\".")
        if p is None or not p.is_float:
            self.err("DtypeMismatch", where, f"P of online_softmax_sum must be a float type, got {p}")
        if not isinstance(block, int) or block < 1:
            self.err("InvalidAttribute", where, f"online_softmax_sum advances a positive number of keys, got {block!r}")
        if passes not in (1, 2):
            self.err("InvalidAttribute", where, f"online_softmax_sum walks the keys once or twice, got passes={passes!r}")

    def pred_set(self, p: RNode):
        if not all(_affine(g) for g in p.arg):
            return None
        try:
            return self.isl_set([f"{self.isl(g)} >= 0" for g in p.arg])
        except (isl.Error, PolysatError):
            return None

    def check_read(self, n: RNode, where: str, guard):
        tensor, index = n.arg
        if tensor not in self.inputs:
            self.err("UnknownTensor", where, f"reads {tensor!r}, which is not a region input")
            return
        shape = self.inputs[tensor].shape
        if len(index) != len(shape):
            self.err("AxisAlignmentMismatch", where, f"read {tensor} with {len(index)} indices, its rank is {len(shape)}")
            return
        if guard is None or not self._isl_ok or not all(_affine(e) for e in index):
            return
        outside = " or ".join(f"({self.isl(e)} < 0 or {self.isl(e)} >= {self.isl(Expr.of(d))})"
                              for e, d in zip(index, shape, strict=True))
        try:
            bad = guard.intersect(self.isl_set([f"({outside})"]))
        except (isl.Error, PolysatError):
            return
        text = f"{tensor}[{', '.join(map(str, index))}]"
        if not bad.is_empty():
            sample = bad.sample_point() if bad.is_bounded() else None
            self.err("UnguardedAccess", where, f"read {text} leaves {tensor}{_shape(shape)} at points no Select "
                     f"guards" + (f", e.g. {sample}" if sample is not None else ""))
        pieces = guard.coalesce().n_basic_set()
        if pieces > MAX_PIECES:
            self.err("ExcessivePiecewise", where, f"the guard of read {text} has {pieces} pieces (> {MAX_PIECES})")


def _same_number(a, b) -> bool:
    try:
        return float(a) == float(b) or (math.isnan(float(a)) and math.isnan(float(b)))
    except (TypeError, ValueError):
        return False
