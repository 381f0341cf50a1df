"""Region synthesis: Tiny IR + a kernel partition -> RB-SSA regions (docs/DESIGN.md §RB-SSA).

Each kernel's outputs are demanded at named output axes (``iters``); synthesis walks the Tiny IR
backwards from them, carrying the index tuple (Exprs over region axes) at which each node is needed:

* movement nodes compose into the index (ir/movement.py, docs/DESIGN.md §IndexBook): RESHAPE
  linearize/delinearize, PERMUTE, EXPAND (constant 0), SHRINK ``lo + step*i``, FLIP ``d-1-i``, VIEW
  substitution; PAD adds its in-bounds guard, becoming ``Select(pred, then, pad value)`` where it
  sits, i.e. inside the Reduce body (§RB-SSA synthesis step 5);
* program inputs and values materialized by other kernels become ``Read(tensor, map)``;
* REDUCE/CONTRACT bind their reduced axes and become ``let acc = Reduce(op, axes, init, dtype, body)``
  (SRNF); reads in bodies index directly (C-CON1). An axis of the same size that the demanded index (and
  its PAD guards) does not mention is reused when that makes the body a value demanded elsewhere (a row
  reduction shares its producer's let); else the axis is canonical for the dim reduced (consumers agree);
* outside Reduce bodies every compute node is a let (epilogue after the Reduce, step 7), EXPAND
  becomes BroadcastInDim, reordered axes a Transpose, and Binary operands are aligned explicitly;
  a value needed twice at the same index is one let (no recompute of Reduce fan-out, step 6); a
  node inside a body that does not depend on the body's axes is a let before the Reduce; a Reduce
  demanded inside another's body is its own let (R4). The SRNF rewrites (R0 merge, R1 hoist, R3
  epilogue) are rules (rules/srnf.egg) applied in the e-graph: synthesis reads the extracted term's
  Reduces as they are and merges or hoists nothing itself;
* yields fold a final float CAST into their ``cast`` and write program outputs to gmem, values
  consumed only by the next region ``deferred`` (step 8);
* a streamed softmax-weighted sum (``egraph/stream.py``: the tagged Tiny IR spelling of the e-graph's
  SoftmaxSum) whose nodes all sit in the kernel becomes ``online_softmax_sum<j>(scores, values)``
  (docs/DESIGN.md §Streaming): j binds the key axis like a Reduce, and nothing that runs along j inside its operands
  becomes a let (the scores, their QK^T contraction, are computed per key block, never over all of j).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache

from ..analyses.isl_util import simplify
from ..ir import region as rg
from ..ir import deadline, trampoline
from ..ir.diagnostics import fail
from ..ir.expr import Expr
from ..ir.region import R, Buffer, Let, MemRef, Region, RNode, Yield
from ..ir.shapes import Dim
from ..ir.stream_tags import parse_tag
from ..ir.tiny import GroupOp, Ops, Program, UOp
from .partition import FREE_OPS, Kernel, Partition, free_cone
from .stream import BLOCK, Group, groups
from .view_index import affine, local_map_of, through

_UNARY_FN = {Ops.NEG: "neg", Ops.RELU: "relu", Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SQRT: "sqrt",
             Ops.RSQRT: "rsqrt", Ops.RECIPROCAL: "reciprocal", Ops.CAST: "cast"}
_BINARY_FN = {Ops.ADD: "add", Ops.SUB: "sub", Ops.MUL: "mul", Ops.FDIV: "div", Ops.MAX: "max", Ops.MIN: "min",
              Ops.POW: "pow", Ops.CMPLT: "cmplt", Ops.CMPEQ: "cmpeq", Ops.CMPNE: "cmpne"}


# ---- tensor names and the default partition ----------------------------------------------------------

def tensor_names(program: Program, materialized) -> dict:
    """Memory name of every INPUT and materialized node: program output names, else the node id."""
    names: dict = {n.id: n.arg["tensor_id"] for n in program.inputs}
    taken = set(names.values())
    for name, nid in program.outputs:
        if program[nid].op != Ops.INPUT and nid not in names:
            names[nid] = name
            taken.add(name)
    for nid in materialized:
        if nid not in names:
            name = nid
            while name in taken:
                name = "t_" + name
            names[nid] = name
            taken.add(name)
    return names


def _compute_srcs(program: Program, node: UOp) -> list:
    """The non-free nodes node reads, looking through movement chains and constants."""
    out, stack = [], list(node.src)
    while stack:
        s = program[stack.pop()]
        if s.op in GroupOp.Movement:
            stack.extend(s.src)
        elif s.op != Ops.CONST:
            out.append(s.id)
    return out


def default_partition(program: Program) -> Partition:
    """One kernel per reduction with its elementwise/movement producers and its elementwise epilogue.

    A compute node is materialized when it is a program output, when it holds a reduction and feeds
    another reduction's body, or when kernels of several consumers need it; pure elementwise or
    movement outputs get kernels of their own.
    """
    reduces = GroupOp.Reduce
    outs = {nid for _, nid in program.outputs}
    # compute nodes, and views/constants that are program outputs (they are kernel roots too)
    compute = [n for n in program.nodes if n.op != Ops.INPUT and (n.op not in FREE_OPS or n.id in outs)]
    srcs = {n.id: _compute_srcs(program, n) for n in compute}
    users: dict = {n.id: [] for n in program.nodes}
    for n in compute:
        for s in srcs[n.id]:
            users[s].append(n.id)
    mat: set = {nid for nid in outs if program[nid].op != Ops.INPUT}
    has_red: dict = {}
    for n in compute:  # forward: does the kernel cone up to n hold a reduction?
        has_red[n.id] = n.op in reduces or any(has_red.get(s, False) and s not in mat for s in srcs[n.id])
        if has_red[n.id] and any(program[u].op in reduces for u in users[n.id]):
            mat.add(n.id)
    owner: dict = {}
    for n in reversed(compute):  # backward: each compute node joins its consumers' kernel, or is a root
        if n.id in mat:
            owner[n.id] = n.id
            continue
        kernels = {owner[u] for u in users[n.id]}
        if len(kernels) == 1:
            owner[n.id] = kernels.pop()
        else:
            mat.add(n.id)
            owner[n.id] = n.id
    return partition_from_materialized(program, mat)


def partition_from_materialized(program: Program, materialized) -> Partition:
    """The partition with one kernel per materialized node: the node and its cone up to program inputs and
    other materialized nodes (every program output that is not an INPUT must be materialized)."""
    mat = set(materialized)
    kernels = []
    for n in program.nodes:
        if n.id not in mat or n.op == Ops.INPUT:
            continue
        nodes, inputs, stack = set(), [], [n.id]
        while stack:
            x = program[stack.pop()]
            if x.id in nodes:
                continue
            if x.op == Ops.INPUT or (x.id in mat and x.id != n.id):
                if x.id not in inputs:
                    inputs.append(x.id)
                continue
            nodes.add(x.id)
            stack.extend(x.src)
        kernels.append(Kernel(f"k{len(kernels)}_{n.id}", frozenset(nodes), (n.id,), tuple(sorted(inputs))))
    return Partition(tuple(kernels))


_ISL_WORDS = frozenset({"and", "or", "not", "xor", "implies", "mod", "floor", "ceil", "min", "max", "exists",
                        "true", "false", "infty", "nan"})  # axis names are isl identifiers too


def _plain(index: tuple) -> bool:
    """Distinct plain axis variables (so a let over them is the value itself, not a shifted view)."""
    names = [e.terms[0][0][0] if len(e.terms) == 1 and e.terms[0][1] == 1 and len(e.terms[0][0]) == 1
             and isinstance(e.terms[0][0][0], str) else None for e in index]
    return None not in names and len(set(names)) == len(names)


# ---- synthesis of one kernel ---------------------------------------------------------------------------

@dataclass(frozen=True)
class _Ctx:
    local: frozenset = frozenset()  # axes bound by the enclosing Reduces (inside a body)
    guard: tuple = ()  # in-bounds guards (Expr >= 0) of the PADs the demand passed through
    stream: frozenset = frozenset()  # key axes of the enclosing online_softmax_sums (no let runs along them)

    @property
    def in_body(self) -> bool:
        return bool(self.local)


@dataclass
class _KernelSynth:
    program: Program
    kernel: Kernel
    names: dict  # node id -> tensor name, for INPUTs and every materialized node
    symbols: frozenset
    axes: dict = field(default_factory=dict)  # axis name -> size, in creation order
    iter_names: list = field(default_factory=list)
    reduce_vars: dict = field(default_factory=dict)  # (node id, index) -> bound axis names, kept for the last pass
    counts: dict = field(default_factory=dict)  # (node id, index) -> demands seen in the previous pass
    canon: dict = field(default_factory=dict)  # canonical reduce axis names, kept across passes

    @cached_property
    def streams(self) -> dict:
        """out node id -> Group, for the streamed groups this kernel computes whole (and writes none of
        the group's inner values: another kernel reading one would need it materialized)."""
        k = self.kernel
        return {g.out: g for g in groups(self.program).values()
                if g.nodes <= k.nodes and not (set(k.outputs) & (g.nodes - {g.out}))}

    def reset(self):
        self.limit = _limit(self.kernel)
        self.budget = self.limit
        self.axes = {a: self.axes[a] for a in self.iter_names}
        self.seen: dict = {}  # (node id, index) -> demands in this pass
        self.lets: list = []
        self.let_names: set = set()
        self.let_next: dict = {}  # hint -> the suffix its next let tries first (all below it are taken)
        self.memo: dict = {}
        self.inputs: dict = {}  # tensor name -> MemRef, first-read order

    # ---- axes ------------------------------------------------------------------------------------------
    def new_axis(self, size: Dim, prefer: str) -> str:
        cands = []
        if not isinstance(size, int) and len(size.variables()) == 1 and str(size) in size.variables():
            cands.append(str(size).lower())
        cands.append(prefer)
        k = 0
        while True:
            for c in cands:
                if c not in self.axes and c not in self.symbols and c not in self.canon.values() and c.isidentifier() \
                        and c not in _ISL_WORDS:
                    self.axes[c] = size
                    return c
            cands = [f"{prefer}_{k}"]
            k += 1

    def box(self) -> dict:
        return {a: (0, s - 1 if isinstance(s, int) else None) for a, s in self.axes.items()}

    def bounds(self, index: tuple) -> tuple:  # the bounds of the axes an index tuple reads (view_index.through's key)
        box = self.box()
        return tuple((v, box[v]) for v in sorted(set().union(*(e.variables() for e in index))) if v in box)

    # ---- lets ------------------------------------------------------------------------------------------
    def let(self, hint: str, expr: RNode) -> RNode:
        if expr.op == R.REF:
            return expr
        k = self.let_next.get(hint, 0)
        name = hint if k == 0 else f"{hint}_{k}"
        while name in self.let_names:  # a value demanded at many index tuples: one scan, not one per let
            k += 1
            name = f"{hint}_{k}"
        self.let_next[hint] = k + 1
        self.let_names.add(name)
        self.lets.append(Let(name, expr))
        return rg.ref(name, expr)

    def order(self, index: tuple, axes) -> tuple:
        """axes ordered by first mention in index (the consumer's dim order), others after."""
        mentioned = rg.vars_in_order(index, self.axes)
        return tuple(a for a in mentioned if a in axes) + tuple(a for a in axes if a not in mentioned)

    def coerce(self, x: RNode, target: tuple) -> RNode:
        """x with exactly the axes target: Transpose to target's relative order, then BroadcastInDim."""
        if x.axes == target or x.is_scalar_const:
            return x
        missing = [a for a in x.axes if a not in target]
        if missing:
            fail("InternalError", self.kernel.name, f"value over {x.axes} cannot be aligned to {target}")
        sub = tuple(a for a in target if a in x.axes)
        if sub != x.axes:
            x = rg.transpose(x, [x.axes.index(a) for a in sub])
        if sub != target:
            x = rg.broadcast(x, target, [self.axes[a] for a in target])
        return x

    # ---- demand ----------------------------------------------------------------------------------------
    def read(self, nid: str, index: tuple) -> RNode:
        n = self.program[nid]
        t = self.names[nid]
        self.inputs.setdefault(t, MemRef(tuple(n.shape), n.dtype))
        return rg.read(t, index, n.dtype, self.axes)

    def demand_all(self, srcs, index: tuple, ctx: _Ctx) -> trampoline.Walk:
        """Each of srcs demanded at index, in order (a walk step: ``yield from``)."""
        out = []
        for s in srcs:
            out.append((yield self.demand(s, index, ctx)))
        return out

    def demand(self, nid: str, index: tuple, ctx: _Ctx) -> trampoline.Walk:
        """The value of nid at index (a walk run by ir/trampoline.py: a chain of thousands of ops needs no frames)."""
        n = self.program[nid]
        if n.op == Ops.INPUT or (nid in self.names and nid not in self.kernel.nodes):
            return self.read(nid, index)
        if n.op == Ops.CONST:
            return rg.const(n.arg["value"], n.dtype)
        if n.op in GroupOp.Movement:
            return (yield self.movement(n, index, ctx))
        key = (nid, index)
        self.seen[key] = self.seen.get(key, 0) + 1
        gkey = key + (ctx.guard,)
        if gkey in self.memo:
            return self.memo[gkey]
        mentioned = set(rg.vars_in_order(index + ctx.guard, self.axes))
        hoist = not (ctx.local & mentioned)
        streamed = bool(ctx.stream & mentioned)  # runs along a streamed key axis: computed per key block
        # a Reduce inside a body is its own let over plain axes (SRNF), not recomputed per body point
        own = n.op in GroupOp.Reduce and _plain(index) and not streamed
        as_let = not ctx.in_body or hoist or own or (self.final and self.counts.get(key, 0) >= 2 and not streamed)
        self.budget -= 1
        if self.budget < 0:
            fail("ResourceLimit", self.kernel.name, f"kernel {self.kernel.name} recomputes values at more than "
                 f"{self.limit} index tuples", "Materialize the values that consumers read at shifted indices "
                 "(choose a finer partition).")
        mkey = gkey + (as_let,) if self.final else gkey
        if mkey in self.memo:
            return self.memo[mkey]
        value = yield self.compute(n, index, _Ctx(guard=ctx.guard) if as_let else ctx)
        if as_let:
            value = self.let(nid, self.guarded(value, index, ctx.guard))
        self.memo[gkey if as_let else mkey] = value
        return value

    def guarded(self, value: RNode, index: tuple, guard: tuple) -> RNode:
        """A let demanded under PAD guards holds Select(guard, value, 0): its reads stay guarded
        (docs/DESIGN.md §RB-SSA synthesis step 5)."""
        if not guard:
            return value
        p = rg.pred(guard, self.axes)
        value = self.coerce(value, self.order(index, rg.union_axes(value, p)))
        return rg.select(p, value, rg.const(0, value.dtype), value.dtype)

    def movement(self, n: UOp, index: tuple, ctx: _Ctx) -> trampoline.Walk:
        src = self.program[n.src[0]]
        lm = local_map_of(n, src)
        inner, guards = through(n, src, index, self.bounds(index))
        x = yield self.demand(src.id, inner, replace(ctx, guard=ctx.guard + tuple(guards)) if guards else ctx)
        if n.op == Ops.EXPAND and not ctx.in_body:
            grown = [index[k] for k, (a, b) in enumerate(zip(src.shape, n.shape, strict=True)) if a != b]
            extra = set(rg.vars_in_order(grown, self.axes)) - set(x.axes)
            if extra:
                x = self.coerce(x, self.order(index, set(x.axes) | extra))
        if guards:
            p = rg.pred(guards, self.axes)
            x = rg.select(p, x, rg.const(lm.pad_value, n.dtype), n.dtype)
            if not ctx.in_body:
                x = self.align_operands(x, index)
        return x

    def align_operands(self, x: RNode, index: tuple) -> RNode:
        """Outside Reduce bodies, Binary/Select operands carry exactly the result's axes
        (docs/DESIGN.md §RB-SSA typing rule 1)."""
        target = self.order(index, x.axes)
        src = tuple(s if s.op == R.PRED else self.coerce(s, target) for s in x.src)
        if x.op == R.BINARY:
            return rg.binary(x.arg, src[0], src[1], x.dtype)
        return rg.select(src[0], src[1], src[2], x.dtype)

    def compute(self, n: UOp, index: tuple, ctx: _Ctx) -> trampoline.Walk:
        g = self.streams.get(n.id)
        if g is not None:
            return (yield self.online(g, index, ctx))
        if n.op in GroupOp.Unary:
            x = yield self.demand(n.src[0], index, ctx)
            return rg.unary(_UNARY_FN[n.op], x, n.dtype)
        if n.op in GroupOp.Binary:
            a, b = yield from self.demand_all(n.src, index, ctx)
            node = rg.binary(_BINARY_FN[n.op], a, b, n.dtype)
            return node if ctx.in_body else self.align_operands(node, index)
        if n.op == Ops.WHERE:
            c, a, b = yield from self.demand_all(n.src, index, ctx)
            node = rg.select(c, a, b, n.dtype)
            return node if ctx.in_body else self.align_operands(node, index)
        if n.op == Ops.REDUCE:
            return (yield self.reduce(n, index, ctx))
        if n.op == Ops.CONTRACT:
            return (yield self.contract(n, index, ctx))
        fail("InternalError", n.id, f"region synthesis has no rule for {n.op.name}")

    def bind(self, n: UOp, index: tuple, sizes: list, probe, land, guard: tuple = ()) -> list:
        """Axis names for the reduced dims. First an axis of equal size the index does not mention, if that
        makes the body a value demanded elsewhere (a row reduce over ``n`` shares its producer); else the
        canonical axis of the dim the reduction runs over (the same for every consumer, so values they
        demand coincide); else a fresh axis. Never an axis the demand's PAD guards name (the body is computed under
        them: a pool's window axis a guard simplified out of the index, over a convolution recomputed in it)."""
        key = (n.id, index, guard)
        if key in self.reduce_vars:
            for v, s in zip(self.reduce_vars[key], sizes, strict=True):
                self.axes.setdefault(v, s)
            return self.reduce_vars[key]
        used = set(rg.vars_in_order(index + guard, self.axes))
        cands = [[a for a, sz in self.axes.items() if sz == s and a not in used] for s in sizes]
        out = None
        for combo in itertools.islice(itertools.product(*cands), 16):
            if len(set(combo)) == len(combo) and probe(combo) in self.counts:
                out = list(combo)
                break
        if out is None:
            out = []
            for s, ck in zip(sizes, land(), strict=True):
                if ck not in self.canon:
                    self.canon[ck] = self.new_axis(s, f"r{len(self.canon)}")
                name = self.canon[ck]
                if name in used or name in out or self.axes.get(name, s) != s:
                    name = self.new_axis(s, f"r{len(self.canon)}")
                self.axes.setdefault(name, s)
                out.append(name)
        self.reduce_vars[key] = out
        return out

    def landing(self, n: UOp, src_id: str, full, nred: int) -> list:
        """Canonical key per reduced dim: (target node, position) where the dim lands as a plain index of the
        value the body reaches through movement; (reduce node, dim) when it does not land plainly."""
        k = len(self.reduce_vars)
        marks = [f"__mark{k}_{j}" for j in range(nred)]
        t = self.view_target(src_id, full(marks))
        keys = []
        for j, m in enumerate(marks):
            pos = [p for p, e in enumerate(t[1]) if e == Expr.var(m)] if t else []
            keys.append((t[0], pos[0]) if len(pos) == 1 else (n.id, j))
        return keys

    def view_target(self, nid: str, index: tuple):
        """The compute node (and its index) that demanding nid at index reaches through movement alone."""
        n = self.program[nid]
        while n.op in GroupOp.Movement and not (n.id in self.names and n.id not in self.kernel.nodes):
            src = self.program[n.src[0]]
            if not affine(n, src):
                return None
            index = through(n, src, index, self.bounds(index))[0]
            n = src
        return (n.id, index)

    def reduce(self, n: UOp, index: tuple, ctx: _Ctx) -> trampoline.Walk:
        src = self.program[n.src[0]]
        raxes = n.arg["axes"]
        def full(names) -> tuple:
            it, rn = iter(index), iter(names)
            box = self.box()
            return tuple(simplify(Expr.var(next(rn)) if k in raxes else next(it), box) for k in range(src.ndim))
        names = self.bind(n, index, [src.shape[a] for a in raxes], lambda c: self.view_target(src.id, full(c)),
                          lambda: self.landing(n, src.id, full, len(raxes)), ctx.guard)
        body_ctx = _Ctx(ctx.local | frozenset(names), ctx.guard, ctx.stream)
        body = yield self.demand(src.id, full(names), body_ctx)
        return rg.reduce(n.arg["op"].lower(), names, body, n.arg["dtype"], axis_order=self.axes)

    def online(self, g: Group, index: tuple, ctx: _Ctx) -> trampoline.Walk:
        """online_softmax_sum<j>(scores[x, j], values[x, d, j]) for the streamed group g demanded at
        index = (x.., d): j is bound like a Reduce's axis (key: the group's weighted-sum node)."""
        acc, s = self.program[g.acc], self.program[g.s]
        names = self.bind(acc, index, [s.shape[-1]], lambda c: None, lambda: [(acc.id, 0)], ctx.guard)
        j = Expr.var(names[0])
        body = _Ctx(ctx.local | frozenset(names), ctx.guard, ctx.stream | frozenset(names))
        scores = yield self.demand(g.s, tuple(index[:-1]) + (j,), body)
        values = yield self.demand(g.v, tuple(index) + (j,), body)
        return rg.online_softmax_sum(names, scores, values, g.p, BLOCK, g.passes, axis_order=self.axes)

    def contract(self, n: UOp, index: tuple, ctx: _Ctx) -> trampoline.Walk:
        lhs, rhs = (self.program[s] for s in n.src)
        sizes = dict(zip(n.arg["lhs_idx"], lhs.shape)) | dict(zip(n.arg["rhs_idx"], rhs.shape))
        red = list(n.arg["reduce_idx"])
        names = self.bind(n, index, [sizes[r] for r in red], lambda c: None, lambda: [(n.id, j) for j in range(len(red))],
                          ctx.guard)
        env = dict(zip(n.arg["out_idx"], index)) | {r: Expr.var(v) for r, v in zip(red, names)}
        body_ctx = _Ctx(ctx.local | frozenset(names), ctx.guard, ctx.stream)
        acc = n.arg["dtype"]
        a = yield self.demand(lhs.id, tuple(env[i] for i in n.arg["lhs_idx"]), body_ctx)
        b = yield self.demand(rhs.id, tuple(env[i] for i in n.arg["rhs_idx"]), body_ctx)
        if a.dtype != acc:
            a = rg.unary("cast", a, acc)
        if b.dtype != acc:
            b = rg.unary("cast", b, acc)
        return rg.reduce("sum", names, rg.binary("mul", a, b, acc), acc, axis_order=self.axes)

    # ---- the region --------------------------------------------------------------------------------------
    def output_axes(self, node: UOp) -> tuple:
        out = []
        for k, d in enumerate(node.shape):
            # reuse an iter of the same size at the same position (multi-output kernels share the space)
            same = [a for a in self.iter_names if self.axes[a] == d and a not in out]
            if k < len(self.iter_names) and self.iter_names[k] in same:
                out.append(self.iter_names[k])
                continue
            a = self.new_axis(d, f"i{len(self.iter_names)}")
            self.iter_names.append(a)
            out.append(a)
        return tuple(out)

    def run(self) -> tuple:
        self.reset()
        yields, outs = [], []
        for nid in self.kernel.outputs:
            node = self.program[nid]
            ax = self.out_axes[nid]
            index = tuple(Expr.var(a) for a in ax)
            src, cast = nid, node.dtype
            if node.op == Ops.CAST and node.dtype.is_float and self.program[node.src[0]].dtype.is_float:
                src = node.src[0]  # a final float cast is the yield's cast (docs/DESIGN.md §RB-SSA)
            value = trampoline.run(self.demand(src, index, _Ctx()))
            if value.is_scalar_const and ax:  # a kernel writing a constant tensor (an RNN's zero state) broadcasts it
                value = rg.broadcast(value, ax, [self.axes[a] for a in ax])
            value = self.coerce(value, ax)
            value = self.let(f"v_{src}", value)
            yields.append((value.arg, nid, cast, ax))
            outs.append(nid)
        return yields, outs

    def synthesize(self) -> tuple:
        """Three passes: canonical reduce axes (nothing to share with yet); reuse of axes that hit values the
        first pass demanded; the build, with a let for every value the second pass demanded twice."""
        self.out_axes = {}
        for nid in self.kernel.outputs:
            self.out_axes[nid] = self.output_axes(self.program[nid])
        self.final = False
        self.run()
        self.counts, self.reduce_vars = self.seen, {}
        self.run()
        self.counts, self.final = self.seen, True
        return self.run()


def synthesize(program: Program, partition: Partition, only: "frozenset | None" = None) -> list[Region]:
    """RB-SSA regions, one per kernel of the partition, in its (dependency) order; ``only``: the names of the
    kernels wanted (the others are not synthesized; pricing/kernels.py as_emitted asks for a kernel's neighbours)."""
    partition.check(program)
    return _synthesize(program, partition, only)


def _synthesize(program: Program, partition: Partition, only: "frozenset | None" = None) -> list[Region]:
    program = _interned(program)
    mat = partition.materialized
    names = tensor_names(program, mat)
    out_names: dict = {}
    for name, nid in program.outputs:
        out_names.setdefault(nid, []).append(name)
    readers: dict = {}
    for k, kern in enumerate(partition.kernels):
        for i in kern.inputs:
            readers.setdefault(i, set()).add(k)
    symbols = program.symbols()
    regions = []
    for k, kern in enumerate(partition.kernels):
        if only is not None and kern.name not in only:
            continue
        deadline.check(f"kernel {kern.name}")
        yields, iters, raxes, inputs, lets = _kernel_parts(program, kern, names, symbols)
        outputs, ys = [], []
        for let_name, nid, cast, ax in yields:
            node = program[nid]
            is_out = nid in out_names
            deferred = not is_out and readers.get(nid, set()) == {k + 1}
            for t in out_names.get(nid, [names[nid]]):
                outputs.append(Buffer(t, MemRef(tuple(node.shape), node.dtype), "deferred" if deferred else "gmem", is_out))
                ys.append(Yield(let_name, t, cast, ax))
        regions.append(Region(kern.name, iters, raxes, inputs, tuple(outputs), lets, tuple(ys)))
    regions.extend(_copy_regions(program, out_names))
    return regions


def _limit(kernel: Kernel) -> int:
    """The demands one pass of a kernel's synthesis may make (past them, a diagnostic): 64 index tuples per node of the
    kernel, not of its program (a window kernel of Longformer's large program walked 28,000 in minutes, unrefused)."""
    return 64 * len(kernel.nodes) + 1000


@lru_cache(maxsize=64)
def _interned(program: Program) -> Program:
    """The first program met equal to ``program`` (of the latest 64; hashed once per synthesis, not per kernel: the
    search re-extracts equal programs), so its kernels hit the kernel cache below keyed by the program's id."""
    return program


_PARTS: dict = {}  # (kernel less its name, its nodes' objects, the tensor names it uses, symbols) -> parts, the latest _PARTS_MAX
_PARTS_MAX = 16384  # above the kernels of a wide program's partition (an MoE layer of 64 experts: ~2,000)


def _kernel_parts(program: Program, kern: Kernel, names: dict, symbols) -> tuple:
    """(yields, iteration axes, reduction axes, input buffers, lets) of one kernel. It depends only on the objects of
    its nodes, inputs and free cone (``free_cone``: views, constants outside its list), the names of the tensors it
    uses and the program's symbols, so the merge search's groups and the search's candidates (egraph/totiny.py keeps
    the nodes of unchanged classes) synthesize each kernel once; its name only names it in a diagnostic. A streamed
    sum's kernel (stream tags: its groups are the program's) is kept per program."""
    used = tuple((i, names[i]) for i in sorted(kern.nodes | set(kern.inputs) | set(kern.outputs)) if i in names)
    tagged = any(parse_tag(program[i].tag) is not None for i in kern.nodes)
    key = (program if tagged else None, kern.nodes, kern.outputs, kern.inputs, used,
           tuple(program[i] for i in sorted(kern.nodes | set(kern.inputs) | free_cone(program, kern))), symbols)
    hit = _PARTS.get(key)
    if hit is not None:
        return hit
    s = _KernelSynth(program, kern, names, symbols)
    yields, _ = s.synthesize()
    parts = (yields, tuple((a, s.axes[a]) for a in s.iter_names),
             tuple((a, sz) for a, sz in s.axes.items() if a not in s.iter_names),
             tuple(Buffer(t, m) for t, m in s.inputs.items()), tuple(s.lets))
    if len(_PARTS) >= _PARTS_MAX:
        _PARTS.pop(next(iter(_PARTS)))
    _PARTS[key] = parts
    return parts


def _copy_regions(program: Program, out_names: dict) -> list:
    """Program outputs that are program inputs are copied by a region of their own."""
    out = []
    for nid, names in out_names.items():
        node = program[nid]
        if node.op != Ops.INPUT:
            continue
        tid = node.arg["tensor_id"]
        ax = tuple(f"i{k}" for k in range(node.ndim))
        v = rg.read(tid, [Expr.var(a) for a in ax], node.dtype, ax)
        bufs = tuple(Buffer(n, MemRef(tuple(node.shape), node.dtype), "gmem", True) for n in names if n != tid)
        if not bufs:
            continue
        out.append(Region(f"copy_{tid}", tuple(zip(ax, node.shape)), (), (Buffer(tid, MemRef(tuple(node.shape), node.dtype)),),
                          bufs, (Let("v", v),), tuple(Yield("v", b.name, node.dtype, ax) for b in bufs)))
    return out
