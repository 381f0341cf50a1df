"""Index maps proved, not sampled: a rule whose law is an equality of index maps is proved with isl for
all sizes (docs/rules.md, "How a rule is judged").

A rule is an *index-map rule* when every constructor it names is memory, a read, a constant or a
movement op (``INDEX_OPS``): its law says which element of which value each output element is, or
which constant. Such a rule is run on instances whose sizes are symbols (``n0``, ``n1``, ...; the
instance builder's symbolic mode), and every term of the e-graph is read as a *placement*: per source
(a program input, or a value the rule does not look into, identified by its e-class) the isl map from
the term's output index to the source's index, and per constant the set of output indices that hold
it, with the sizes as isl parameters (each >= 1). Reads compose their map; a movement op composes its
view map (``egraph/ixfns.py view``, the maps the rule helpers use: the law is checked against the
movement op's meaning in ``ir/movement.py``, not against the helper's answer); a Pad adds its value
where no element of its operand lands; a Select keeps its read where its guard holds and its constant
elsewhere; a read outside its operand is undefined there (no element). Every e-node the rule adds must
place exactly what its class placed before, for every value of the parameters, wherever the term before
is defined (an element it leaves undefined, a read of an empty axis at some size, any term refines); if
not, isl gives a point where they differ: the sizes and the output index, which the counterexample names.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import islpy as isl

from ..analyses.isl_util import isl_name
from ..egraph import encode as E
from ..egraph.graph import EGraphView, ENode
from ..egraph.ixfns import view
from ..egraph.schema import CHILDREN
from ..ir.expr import Expr

INDEX_OPS = {"Tensor", "Mat", "Read", "Const", "Reshape", "Permute", "Expand", "Pad", "Shrink", "Flip", "View",
             "Transpose", "BroadcastInDim", "Select"}
_KIND = {"Reshape": "reshape", "Permute": "permute", "Transpose": "transpose", "Expand": "expand", "Shrink": "shrink",
         "Flip": "flip", "View": "view", "BroadcastInDim": "broadcast"}


class Unplaced(Exception):
    """A term whose placement isl cannot state (a non-affine map, an attribute that does not parse)."""


def index_rule(text: str) -> bool:
    """Whether every constructor the rule names is memory, a read, a constant or a movement op."""
    used = {m.group(1) for m in re.finditer(r"\(([A-Z][A-Za-z]*)\b", text)} & set(CHILDREN)
    return bool(used) and used <= INDEX_OPS and bool(used - {"Tensor", "Mat", "Const"})


@dataclass
class Placement:
    """Per source key an isl map O[i] -> S[j]; per constant value the set of O[i] holding it."""
    maps: dict = field(default_factory=dict)
    consts: dict = field(default_factory=dict)


class Placer:
    """Placements of the e-classes of one exported e-graph with symbolic sizes."""

    def __init__(self, view_: EGraphView, params: list):
        self.v, self.params = view_, sorted(params)
        self.ctx = "[" + ", ".join(self.params) + "] -> " if self.params else ""
        self.cond = " and ".join(f"{p} >= 1" for p in self.params)
        self.places: dict = {}
        self.via: dict = {}

    # ---- isl text ----------------------------------------------------------------------------------
    def _shape(self, text: str) -> tuple:
        try:
            return tuple(Expr.of(d) for d in E.parse_shape(text))
        except (ValueError, TypeError) as e:
            raise Unplaced(f"shape {text!r}: {e}") from None

    def _vars(self, n: int) -> list:
        return [f"i{k}" for k in range(n)]

    def _box(self, shape: tuple, name: str = "O") -> str:
        vs = self._vars(len(shape))
        cs = [f"0 <= {v} < {d.to_isl()}" for v, d in zip(vs, shape)] + ([self.cond] if self.cond else [])
        return f"{name}[{', '.join(vs)}]" + (f" : {' and '.join(cs)}" if cs else "")

    def box(self, shape: tuple) -> isl.Set:
        return isl.Set(self.ctx + "{ " + self._box(shape) + " }")

    def access(self, out: tuple, imap: tuple, dst: str = "O") -> isl.Map:
        """{ O[i] -> dst[imap(i)] : i in the box of out }."""
        vs = self._vars(len(out))
        cs = [f"0 <= {v} < {d.to_isl()}" for v, d in zip(vs, out)] + ([self.cond] if self.cond else [])
        try:
            rng = ", ".join(e.to_isl() for e in imap)
            return isl.Map(self.ctx + "{ O[" + ", ".join(vs) + f"] -> {dst}[{rng}]" + (f" : {' and '.join(cs)}" if cs else "") + " }")
        except isl.Error as e:
            raise Unplaced(f"map {imap}: {e}") from None

    # ---- placements --------------------------------------------------------------------------------
    def _src(self, key: str, shape: tuple) -> Placement:
        return Placement({key: self.access(shape, tuple(Expr.of(v) for v in self._vars(len(shape))), key)})

    def _compose(self, f: isl.Map, x: Placement) -> Placement:
        """x seen through f: O[o] -> O[f(o)] (an index of x)."""
        return Placement({k: f.apply_range(m) for k, m in x.maps.items()},
                         {v: f.intersect_range(s).domain() for v, s in x.consts.items()})

    def value(self, c: int) -> Placement:
        if c not in self.places:
            raise Unplaced(f"class {c} has no placement")
        return self.places[c]

    def node(self, n: ENode) -> Placement:
        """The placement of e-node n from its children's."""
        op, a = n.op, n.args
        if op == "Const":
            return Placement(consts={a[0]: self.box(self._shape(a[2]))})
        if op == "Read":
            mem = self._memory(n.children[0])
            return self._compose(self.access(self._shape(a[0]), E.parse_map(a[1])), mem)
        if op == "Pad":
            x = self.value(n.children[0])
            s_in = self._shape(self.v.shape[n.children[0]])
            pads = E.parse_pads(a[0])
            out = tuple(Expr.of(d) + lo + hi for d, (lo, hi) in zip(s_in, pads))
            f = self.access(out, tuple(Expr.of(f"i{k}") - lo for k, (lo, _) in enumerate(pads)))
            moved = self._compose(f, x)
            inside = f.intersect_range(self.box(s_in).set_tuple_name("O")).domain()
            fill = self.box(out).subtract(inside)
            moved.consts[a[1]] = moved.consts[a[1]].union(fill) if a[1] in moved.consts else fill
            return moved
        if op == "Select":
            then, other = self.value(n.children[0]), self.value(n.children[1])
            read = self.via.get(n.children[0])
            if read is None or read.op != "Read":
                raise Unplaced("a Select's read is not a Read")
            mem_shape = self._shape(self.v.shape[read.children[0]])
            out, imap = self._shape(read.args[0]), E.parse_map(read.args[1])
            vs = self._vars(len(out))
            cs = [f"0 <= {imap[j].to_isl()} < {mem_shape[j].to_isl()}" for j in E.parse_guard(a[0])]
            guard = self.box(out).intersect(isl.Set(self.ctx + "{ O[" + ", ".join(vs) + "]" +
                                                    (" : " + " and ".join(cs) if cs else "") + " }"))
            res = Placement({k: m.intersect_domain(guard) for k, m in then.maps.items()},
                            {v: s.intersect(guard) for v, s in then.consts.items()})
            for v, s in other.consts.items():
                rest = s.subtract(guard)
                res.consts[v] = res.consts[v].union(rest) if v in res.consts else rest
            for k, m in other.maps.items():
                rest = m.subtract_domain(guard)
                res.maps[k] = res.maps[k].union(rest) if k in res.maps else rest
            return res
        if op in _KIND:
            x = self.value(n.children[0])
            got = view(_KIND[op], self.v.shape[n.children[0]], a[0], a[1] if len(a) > 1 else "")
            if got is None or got[1] is None:
                raise Unplaced(f"{op} with {a} is not affine")
            return self._compose(self.access(tuple(Expr.of(d) for d in got[0]), got[1]), x)
        if op in ("Tensor", "Mat"):
            raise Unplaced("memory is not a value")
        return self._src(f"c{n.eclass}", self._shape(self.v.shape[n.eclass]))  # a value the law does not look into

    def _memory(self, c: int) -> Placement:
        for n in sorted(self.v.classes[c], key=lambda n: n.order):
            if n.op == "Tensor":
                return self._src(isl_name("t_" + n.args[0]), self._shape(self.v.shape[c]))
            if n.op == "Mat":
                return self.value(n.children[0])
        raise Unplaced("a read of something that is not memory")

    def place_all(self, first: "dict | None" = None) -> None:
        """Place every class through its first placeable e-node (first: class -> the key (op, args,
        children) of the node to try first)."""
        pending = [c for c in self.v.classes if c not in self.places]
        while pending:
            rest = []
            for c in pending:
                ns = sorted(self.v.classes[c], key=lambda n: (first is not None and first.get(c) != (n.op, n.args, n.children),
                                                              n.order))
                for n in ns:
                    if n.op in ("Tensor", "Mat"):
                        break
                    if all(ch in self.places or self._is_memory(ch) for ch in n.children):
                        try:
                            self.places[c] = self.node(n)
                            self.via[c] = n
                            break
                        except (Unplaced, isl.Error):
                            continue
                if c not in self.places and not self._is_memory(c):
                    rest.append(c)
            if len(rest) == len(pending):
                break
            pending = rest

    def _is_memory(self, c: int) -> bool:
        return any(n.op in ("Tensor", "Mat") for n in self.v.classes.get(c, ()))


def _domain(p: Placement) -> "isl.Set | None":
    """The output indices p defines (an index read outside its operand defines nothing)."""
    out = None
    for d in [m.domain() for m in p.maps.values()] + list(p.consts.values()):
        out = d if out is None else out.union(d)
    return out


def differ(a: Placement, b: Placement) -> "str | None":
    """None when b places what a places, for every value of the sizes, wherever a is defined (where a reads
    outside its operand, at some sizes, any b refines it: docs/rules.md, policy 1), else a point where they
    differ, in words."""
    dom = _domain(a)
    if dom is None:
        return None
    b = Placement({k: m.intersect_domain(dom) for k, m in b.maps.items()}, {v: x.intersect(dom) for v, x in b.consts.items()})
    for key in sorted(set(a.maps) | set(b.maps)):
        ma, mb = a.maps.get(key), b.maps.get(key)
        if ma is None or mb is None:
            m = ma if mb is None else mb
            if m is not None and not m.is_empty():
                return f"only {'before' if mb is None else 'after'} reads {key}: " + _point(m.wrap())
            continue
        if not ma.is_equal(mb):
            d = ma.subtract(mb)
            side = "before"
            if d.is_empty():
                d, side = mb.subtract(ma), "after"
            return f"{side} reads {key} where the other does not: " + _point(d.wrap())
    for v in sorted(set(a.consts) | set(b.consts)):
        sa, sb = a.consts.get(v), b.consts.get(v)
        sa = sa if sa is not None else (sb.subtract(sb) if sb is not None else None)
        sb = sb if sb is not None else sa.subtract(sa)
        if not sa.is_equal(sb):
            d, side = sa.subtract(sb), "before"
            if d.is_empty():
                d, side = sb.subtract(sa), "after"
            return f"{side} holds the constant {v} where the other does not: " + _point(d)
    return None


def _point(s: isl.Set) -> str:
    p = s.sample_point()
    text = str(p)
    return text if len(text) < 300 else text[:300] + "..."


def prove_step(v0: EGraphView, v1: EGraphView, params: list) -> tuple:
    """Compare, with isl, what one rule application changed between v0 and v1 (symbolic sizes):
    (proved rewrites, finding or "", gap or ""): a finding is a point where a new e-node places other
    elements than its class, or a new e-node with an empty attribute (a helper that did not apply); a gap
    is a rewrite isl could not place (the rule stays "tested")."""
    from .diff import class_map
    f = class_map(v0, v1)
    if any(c not in f for c in v0.classes):
        return 0, "", "a class of the e-graph before the rule is not found after it"
    p0 = Placer(v0, params)
    p0.place_all()
    p1 = Placer(v1, params)
    first = {f[c]: (n.op, n.args, tuple(f[ch] for ch in n.children)) for c, n in p0.via.items()}
    p1.place_all(first)
    old = {(n.op, n.args, tuple(f[ch] for ch in n.children)) for ns in v0.classes.values() for n in ns}
    proved = 0
    for cs in _merged(v0, f):
        a, b = (p0.places.get(c) for c in cs[:2])
        if a is None or b is None:
            return proved, "", "a merged class has no placement"
        try:
            why = differ(a, b)
        except isl.Error as e:
            return proved, "", f"two merged classes isl cannot compare: {e}"
        if why:
            return proved, f"two classes the rule merged place different elements: {why}", ""
        proved += 1
    for ns in v1.classes.values():
        for n in ns:
            if (n.op, n.args, n.children) in old or n.op in ("Tensor", "Mat"):
                continue
            if any(a == "" for a in n.args):
                return proved, f"the rule made {n.op} with an empty attribute {n.args} (a helper that did not apply)", ""
            if p1.via.get(n.eclass) is n:
                continue  # the class's placement is this node's
            if n.eclass not in p1.places:
                return proved, "", f"the class of a new {n.op} has no placement"
            try:
                got = p1.node(n)
            except (Unplaced, isl.Error) as e:
                return proved, "", f"a new {n.op} could not be placed: {e}"
            try:
                why = differ(p1.places[n.eclass], got)
            except isl.Error as e:  # spaces of another rank: a shape change, the numeric check's to report
                return proved, "", f"a new {n.op} places a value isl cannot compare with its class's: {e}"
            if why:
                return proved, f"the new {n.op}{n.args} places other elements than its class: {why}", ""
            proved += 1
    return proved, "", ""


def _merged(v0: EGraphView, f: dict) -> list:
    groups: dict = {}
    for c in v0.classes:
        groups.setdefault(f[c], []).append(c)
    return [cs for cs in groups.values() if len(cs) > 1]
