"""Extracted terms back to Tiny IR, and the kernel partition their ``Mat`` boundaries define.

Each chosen e-node becomes Tiny IR nodes built through ``make_uop`` (so every result is re-checked):
Read -> VIEW of an INPUT or of a materialized node (nothing when the map is the identity),
Select(guard, Read, Const) -> PAD + VIEW (the guard's pads make the read total; a View of a
value computed in the kernel, a fused boundary, in place of the Read likewise), Transpose ->
PERMUTE, BroadcastInDim -> RESHAPE + EXPAND, Reduce -> REDUCE, SoftmaxSum -> its meaning, tagged as one
streaming group (``stream.py``), the rest one to one. A class that
holds an original node keeps that node's id. Kernels: one per program output and one per chosen
``Mat``; a compute node that two kernels would both evaluate is materialized by the first one
(values cross kernels only through memory, see ``partition.py``). A class's conversion is kept on the view and
reused by later candidates whose terms agree there (``TermBuilder._converted``): a search's candidates differ in a
few sites, and each converts only what changed.
"""
from __future__ import annotations

from ..ir.diagnostics import fail
from ..ir.dtypes import DType
from ..ir.infer import make_uop
from ..ir.tiny import Ops, Program, UOp
from ..ir.toposort import postorder
from . import encode as E
from .graph import EGraphView
from .ixfns import guard_pads
from .partition import FREE_OPS, Kernel, Partition
from .state import MOVE_NAMES, EGraphState
from .stream import spell

_MOVE = {name: op for op, name in MOVE_NAMES.items()} | {"Transpose": Ops.PERMUTE}


_CHECKED: dict = {}  # (op, operands' dtype and shape, arg, tag) -> a node make_uop built and checked for them


def _make(nid: str, op: Ops, src: list, arg: dict, tag: "str | None", c: int) -> UOp:
    """make_uop's node under id nid: its checks and inference read only the operands' dtypes and shapes and
    the arg (repr keeps -0.0 apart from 0.0), so a search that converts the same terms for many candidates
    checks each distinct node once."""
    key = (op, tuple((s.dtype, s.shape) for s in src), repr(arg), tag)
    t = _CHECKED.get(key)
    if t is None:
        t = make_uop(nid, op, src, arg, tag, at=f"extracted e-class {c}")
        if len(_CHECKED) > 100000:
            _CHECKED.clear()
        _CHECKED[key] = t
    return UOp(nid, op, tuple(x.id for x in src), t.arg, t.dtype, t.shape, tag)


def _program_facts(st: EGraphState, view: EGraphView) -> tuple:
    """(class id -> the original node id it holds, the program's node ids, tensor id -> INPUT node, the classes'
    conversions met so far (``TermBuilder.value``)): the same for every candidate extracted from one view, so made
    once per (state, view)."""
    got = view.__dict__.get("_totiny_facts")
    if got is None or got[0] is not st:
        names: dict = {}
        for nid, i in st.index.items():
            c = view.by_index.get(i)
            if c is not None and c not in names and st.program[nid].op != Ops.INPUT:
                names[c] = nid
        got = view.__dict__["_totiny_facts"] = (st, names, frozenset(n.id for n in st.program.nodes),
                                                {n.arg["tensor_id"]: n for n in st.program.inputs}, {})
    return got[1:]


class TermBuilder:
    """Converts chosen e-nodes to Tiny IR nodes, one e-class at a time (memoized per class)."""

    def __init__(self, st: EGraphState, view: EGraphView, chosen: dict):
        self.st, self.view, self.chosen = st, view, chosen
        self.nodes: list = []
        self.made: dict = {}  # class id -> UOp
        self.class_nodes: dict = {}  # class id -> ids of the nodes its conversion created
        names, taken, self.inputs, self.memo = _program_facts(st, view)
        self.names: dict = names  # class id -> original node id (read only)
        self.taken = set(taken)
        self.count = 0
        self.cur: list = []
        self.used: set = set()  # ids given to nodes so far

    def fresh(self) -> str:
        while True:
            nid = f"e{self.count}"
            self.count += 1
            if nid not in self.taken:
                self.taken.add(nid)
                return nid

    def add(self, op: Ops, src: list, arg: dict, final: bool, c: int, tag: "str | None" = None) -> UOp:
        """A new node for class c; the class's last (final) node takes the original id if it has one."""
        nid = self.names.get(c) if final and c in self.names and self.names[c] not in self.used else None
        u = _make(nid or self.fresh(), op, src, arg, tag, c)
        self.nodes.append(u)
        self.used.add(u.id)
        self.cur.append(u.id)
        return u

    def value(self, c: int) -> UOp:
        if c in self.made:
            return self.made[c]
        stack = [(c, False)]
        while stack:  # iterative post-order: deep programs must not hit the recursion limit
            k, ready = stack.pop()
            if k in self.made:
                continue
            n = self.chosen[k]
            kids = list(n.children)
            if n.op == "Select":
                kids = list(self.chosen[n.children[0]].children) + [n.children[1]]
            if not ready:
                stack.append((k, True))
                stack.extend((ch, False) for ch in kids if ch not in self.made)
                continue
            if n.op == "Tensor":
                continue
            if n.op == "Mat":
                self.made[k] = self.made[n.children[0]]
                continue
            self.made[k] = self._converted(k, n, kids)
        return self.made[c]

    def _converted(self, c: int, n, kids: list) -> UOp:
        """``convert(c, n)``, or the nodes it made before for the same conversion: the same e-node of class c (and,
        for a Select, the same read and constant), its children converted to equal nodes (ids too), the class's
        original id as free as then and, where it gave fresh ids, the same counter. A search converts many
        candidates that differ from each other in a few sites: each converts only the classes whose terms changed
        (and those whose fresh ids shift), the rest are the earlier nodes themselves."""
        sel = tuple(self.chosen[ch].order for ch in n.children) if n.op == "Select" else ()
        key = (c, n.order, sel, self.names.get(c) in self.used)
        below = tuple(self.made.get(ch) for ch in kids)
        for was_below, count, made, nodes, moved in self.memo.get(key, ()):
            if (count is None or count == self.count) and was_below == below:
                ids = [u.id for u in nodes]
                self.nodes.extend(nodes)
                self.used.update(ids)
                self.taken.update(ids)
                self.count += moved
                self.class_nodes[c] = ids
                return made
        saved, self.cur, first = self.cur, [], self.count
        made = self.convert(c, n)
        self.class_nodes[c] = self.cur
        nodes = self.nodes[len(self.nodes) - len(self.cur):]
        self.cur = saved
        if len(self.memo) > MEMO_KEPT:
            self.memo.clear()
        self.memo.setdefault(key, []).append((below, first if self.count != first else None, made, nodes,
                                              self.count - first))
        return made

    def _src(self, c: int) -> UOp:
        n = self.chosen[c]
        return self.inputs[n.args[0]] if n.op == "Tensor" else self.made[c]

    def _view(self, base: UOp, s: tuple, m: tuple, c: int) -> UOp:
        """base read at m(i) for i over s, as a VIEW (or SHRINK/RESHAPE/EXPAND at rank 0)."""
        if not s:  # one element: SHRINK + RESHAPE (the evaluator's VIEW gives 0-d results shape (1,))
            one = self.add(Ops.SHRINK, [base], {"lo": m, "hi": tuple(e + 1 for e in m), "step": (1,) * len(m)}, False, c)
            return self.add(Ops.RESHAPE, [one], {"result_shape": ()}, True, c)
        if base.ndim == 0:  # a scalar read everywhere: RESHAPE + EXPAND (a VIEW needs an input axis)
            ones = self.add(Ops.RESHAPE, [base], {"result_shape": (1,) * len(s)}, False, c)
            return self.add(Ops.EXPAND, [ones], {"result_shape": s}, True, c) if s != ones.shape else ones
        return self.add(Ops.VIEW, [base], {"result_shape": s, "index_map": m}, True, c)

    def convert(self, c: int, n) -> UOp:
        """The Tiny IR node(s) of e-node n of class c, whose children are converted already."""
        a = n.args
        if n.op == "Read":
            base = self._src(n.children[0])
            s, m = E.parse_shape(a[0]), E.parse_map(a[1])
            if s == base.shape and a[1] == E.identity_map(len(s)):
                return base
            return self._view(base, s, m, c)
        if n.op == "Select":
            read, other = self.chosen[n.children[0]], self.chosen[n.children[1]]
            if read.op not in ("Read", "View") or other.op != "Const":
                fail("RuleFileError", f"e-class {c}", f"Select must guard a Read with a Const else-branch, got "
                     f"Select({read.op}, {other.op})", "Rules may only build guarded reads: Select(g, Read, Const).")
            # a fused boundary (rules/fusion.egg) puts View(x, s, m) beside Read(Mat(x), s, m): the same
            # guarded read, of x computed in this kernel instead of x read back from memory
            base = self._src(read.children[0]) if read.op == "Read" else self.made[read.children[0]]
            pads = guard_pads(a[0], base.ndim)
            v = E.parse_value(other.args[0], DType(other.args[1]))
            padded = self.add(Ops.PAD, [base], {"pad": pads, "value": v}, False, c)
            m = tuple(e + lo for e, (lo, _) in zip(E.parse_map(read.args[1]), pads, strict=True))
            return self._view(padded, E.parse_shape(read.args[0]), m, c)
        if n.op == "Const":
            dt = DType(a[1])
            return self.add(Ops.CONST, [], {"value": E.parse_value(a[0], dt), "dtype": dt,
                                             "shape": E.parse_shape(a[2])}, True, c)
        if n.op in _MOVE:
            x = self.made[n.children[0]]
            op = _MOVE[n.op]
            if op in (Ops.RESHAPE, Ops.EXPAND):
                arg = {"result_shape": E.parse_shape(a[0])}
            elif op == Ops.PERMUTE:
                arg = {"perm": E.parse_ints(a[0])}
            elif op == Ops.PAD:
                arg = {"pad": E.parse_pads(a[0]), "value": E.parse_value(a[1], x.dtype)}
            elif op == Ops.SHRINK:
                lo, hi, step = E.parse_shrink(a[0])
                arg = {"lo": lo, "hi": hi, "step": step}
            elif op == Ops.FLIP:
                arg = {"axes": E.parse_ints(a[0])}
            else:
                arg = {"result_shape": E.parse_shape(a[0]), "index_map": E.parse_map(a[1])}
                if arg["result_shape"] == x.shape and a[1] == E.identity_map(x.ndim):
                    return x  # an identity view (a fused kernel boundary, rules/fusion.egg) is no node
            return self.add(op, [x], arg, True, c)
        if n.op == "BroadcastInDim":
            x = self.made[n.children[0]]
            s, dims = E.parse_shape(a[0]), E.parse_ints(a[1])
            shaped = [1] * len(s)
            for k, d in enumerate(dims):
                shaped[d] = x.shape[k]
            if tuple(shaped) != x.shape:
                x = self.add(Ops.RESHAPE, [x], {"result_shape": tuple(shaped)}, tuple(shaped) == s, c)
            return x if x.shape == s else self.add(Ops.EXPAND, [x], {"result_shape": s}, True, c)
        if n.op == "Unary":
            return self.add(Ops(a[0]), [self.made[n.children[0]]], {}, True, c)
        if n.op == "Cast":
            return self.add(Ops.CAST, [self.made[n.children[0]]], {"to": a[0]}, True, c)
        if n.op == "Binary":
            return self.add(Ops(a[0]), [self.made[ch] for ch in n.children], {}, True, c)
        if n.op == "Where":
            return self.add(Ops.WHERE, [self.made[ch] for ch in n.children], {}, True, c)
        if n.op == "Reduce":
            return self.add(Ops.REDUCE, [self.made[n.children[0]]],
                            {"op": a[0], "axes": E.parse_ints(a[1]), "dtype": a[3]}, True, c)
        if n.op == "SoftmaxSum":
            s, v = (self.made[ch] for ch in n.children)
            return spell(lambda op, src, arg, tag, final: self.add(op, src, arg, final, c, tag), s, v, DType(a[0]),
                         int(a[1]), f"c{c}")
        fail("InternalError", f"e-class {c}", f"no Tiny IR for e-node {n.op}")


def to_tiny(st: EGraphState, view: EGraphView, chosen: dict, roots: list, materialize=frozenset()) -> tuple:
    """(Program, Partition) of the chosen e-nodes; roots[k] is the class of program output k;
    the value classes in ``materialize`` (those the term uses) are kernel boundaries too. A cheap
    value several kernels use (no reduction in its cone: views, broadcasts, casts, elementwise
    chains) is recomputed by each of them, not written to memory: its nodes are built once per kernel."""
    b = TermBuilder(st, view, chosen)
    for r in roots:
        b.value(r)
    kept = view.__dict__.setdefault("_first_made", {})  # for ``converted`` (the merge search's space)
    kept[id(chosen)] = (chosen, st, tuple(roots), b.made)
    while len(kept) > MADE_KEPT:
        del kept[next(iter(kept))]
    prog = _program(st, b, roots)
    kroots, members, again = _kernels(b, prog, roots, materialize)
    if not again:
        return prog, _partition(b, prog, kroots, members, {r: _ids(b, members[r]) for r in kroots})
    b = TermBuilder(st, view, chosen)  # again, one kernel at a time, the shared cheap classes anew in each
    shared = {c for r in kroots for c in members[r] if c not in kroots and sum(c in m for m in members.values()) > 1}
    ids = {}
    for r in (c for c in _postorder(b, roots) if c in kroots):
        for c in shared:
            b.made.pop(c, None)
        b.value(r)
        ids[r] = _ids(b, members[r])
    for r in roots:  # an output that is a program input (or a view of one) is no kernel's root
        b.value(r)
    prog = _program(st, b, roots)
    return prog, _partition(b, prog, kroots, members, ids)


MEMO_KEPT = 200000  # class conversions a view keeps (``TermBuilder._converted``); past it they are dropped
MADE_KEPT = 4  # extractions whose first conversion a view keeps (``converted``)


def converted(st: EGraphState, view: EGraphView, chosen: dict, roots: list) -> dict:
    """class -> its Tiny IR node, the chosen e-nodes converted from ``roots`` in one pass (a ``TermBuilder``): the
    first pass of ``to_tiny`` on the same extraction, kept on the view, or made here."""
    got = view.__dict__.get("_first_made", {}).get(id(chosen))
    if got is not None and got[0] is chosen and got[1] is st and got[2] == tuple(roots):
        return got[3]
    b = TermBuilder(st, view, chosen)
    for r in roots:
        b.value(r)
    return b.made


def _program(st: EGraphState, b: TermBuilder, roots: list) -> Program:
    outs = tuple((name, b.made[r].id) for (name, _), r in zip(st.program.outputs, roots, strict=True))
    return Program(tuple(st.program.inputs) + tuple(b.nodes), outs)


def _ids(b: TermBuilder, classes: set) -> set:
    return {i for c in classes for i in b.class_nodes.get(c, ())}


_REDUCING = ("Reduce", "SoftmaxSum")


def _kernels(b: TermBuilder, prog: Program, roots: list, materialize=frozenset()) -> tuple:
    """(kernel root classes, {root: the classes its kernel evaluates}, the cheap compute classes
    several kernels evaluate): kernels from Mat boundaries, outputs and ``materialize``; a compute
    class two kernels would both evaluate becomes a boundary too when its cone in the kernel holds
    a reduction, else each kernel recomputes it."""
    node_of = b.made
    reach = _reachable(b, roots)
    mats = {ch for c, n in b.chosen.items() if n.op == "Mat" and c in reach for ch in n.children}
    mats |= {c for c in materialize if c in reach and c in node_of}
    kroots = {r for r in set(mats) | set(roots) if prog[node_of[r].id].op != Ops.INPUT}

    def own(c: int) -> list:  # compute nodes created by class c's conversion
        return [i for i in b.class_nodes.get(c, ()) if prog[i].op not in FREE_OPS and prog[i].op != Ops.INPUT]

    while True:
        members: dict = {r: _walk(b, r, kroots) for r in kroots}
        owner: dict = {}
        shared, again = set(), set()
        for r, cs in members.items():
            for c in cs:
                if own(c) and owner.setdefault(c, r) != r:
                    (again if _cheap(b, c, kroots) else shared).add(c)
        if not shared:
            return kroots, members, again
        kroots |= shared


def _cheap(b: TermBuilder, c: int, kroots: set) -> bool:
    """No reduction in c's cone inside its kernel (down to memory and other kernels' roots)."""
    return not any(b.chosen[k].op in _REDUCING for k in _walk(b, c, kroots - {c}))


def _postorder(b: TermBuilder, roots: list) -> list:
    """The classes the roots use, each after the classes it uses (first child first)."""
    return postorder(roots, lambda c: reversed(b.chosen[c].children))


def _partition(b: TermBuilder, prog: Program, kroots: set, members: dict, ids_of: dict) -> Partition:
    """One kernel per root class (in program order), evaluating the nodes ``ids_of`` gives it."""
    node_of = b.made
    pos = {n.id: k for k, n in enumerate(prog.nodes)}
    order = sorted(kroots, key=lambda r: pos[node_of[r].id])
    kernels, done = [], {n.id for n in prog.inputs}
    for r in order:
        ids = {i for i in ids_of[r] if i in pos and prog[i].op != Ops.INPUT}
        out = node_of[r].id
        if out not in ids:
            continue  # the root is another kernel's value read back unchanged
        reads = sorted({s for i in ids for s in prog[i].src if s not in ids and s in done}, key=pos.get)
        kernels.append(Kernel(f"k{len(kernels)}", frozenset(ids), (out,), tuple(reads)))
        done.add(out)
    part = Partition(tuple(kernels))
    part.check(prog)
    return part


def _reachable(b: TermBuilder, roots: list) -> set:
    seen: set = set()
    stack = list(roots)
    while stack:
        c = stack.pop()
        if c not in seen:
            seen.add(c)
            stack.extend(b.chosen[c].children)
    return seen


def _walk(b: TermBuilder, r: int, kroots: set) -> set:
    """The value classes kernel r evaluates: from r down to memory reads and other kernels' roots."""
    seen: set = set()
    stack = [r]
    while stack:
        c = stack.pop()
        if c in seen:
            continue
        n = b.chosen[c]
        if n.op in ("Tensor", "Mat"):
            continue
        if c != r and c in kroots:
            continue
        seen.add(c)
        kids = n.children
        if n.op == "Select":
            kids = tuple(b.chosen[n.children[0]].children) + (n.children[1],)
        stack.extend(kids)
    return seen
