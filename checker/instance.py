"""Rule-directed test terms: random well-typed instances of a rule's left-hand side.

A :class:`~polysat.egraph.rule_pattern.Query` is instantiated bottom-up: every constructor of the pattern
becomes a term node whose string attributes are the pattern's literals, or values already bound
to the same pattern variable, or values derived from a ``has-shape``/``has-dtype`` fact about a
term built already, or fresh random draws valid for the operand (shapes, permutations, axes,
pads, shrink specs, index maps, op strings, dtypes). A term variable that no pattern binds becomes a
leaf: a read of a fresh input tensor (or a small computation over one, or ``Mat`` of one in a memory
position), shaped like its sibling when a constructor needs equal shapes. The side conditions are
then evaluated in Python (the same ``ixfns`` helpers the rule calls); a draw that fails them is
redrawn. Relations only the e-graph derives (``computed``, ``sees``, ...) are left to egglog, which
reports whether the rule matched.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

import numpy as np

from ..egraph import encode as E
from ..egraph.ixfns import HELPERS, pad_guard, pad_map, shape_after
from ..egraph.rule_pattern import Atom, Pattern, Query
from ..egraph.schema import CHILDREN
from ..ir.expr import Expr
from ..ir.infer import expr_bounds

_parse_shape = functools.lru_cache(maxsize=8192)(E.parse_shape)  # attributes are immutable strings
_parse_map = functools.lru_cache(maxsize=8192)(E.parse_map)

UNARY = ("NEG", "RELU", "EXP2", "RECIPROCAL", "SQRT", "LOG2")
BINARY = ("ADD", "SUB", "MUL", "FDIV", "MAX", "MIN", "CMPLT")
COMPARE = ("CMPLT", "CMPEQ", "CMPNE")
NEUTRAL = {"SUM": "0", "MAX": "-inf", "MIN": "inf"}
FLOATS = ("fp32", "fp16", "bf16")
INT_OPS = ("NEG", "RELU")  # the unary ops the reference evaluator computes on i32 exactly
INT_BINARY = ("ADD", "SUB", "MUL", "FDIV", "MAX", "MIN")
# constants and pad values over signs and magnitudes (and the specials a pad or a mask uses)
CONSTS = ("0.0", "-0.0", "1.0", "-1.0", "0.5", "-1.5", "2.0", "3.0", "-0.25", "1000.0", "-65504.0", "1e-05", "inf", "-inf")
INT_CONSTS = ("0", "1", "-1", "2", "3", "-7")


class Reject(Exception):
    """This draw does not satisfy the pattern; draw again."""


@dataclass(eq=False)
class T:
    """A term of the e-graph language with its shape (ints) and dtype."""
    op: str
    args: tuple  # strings, in constructor order (children excluded)
    kids: tuple  # T, in constructor order
    shape: tuple
    dtype: str

    def sexp(self) -> str:
        it, kids, out = iter(self.args), iter(self.kids), []
        for k in range(len(self.args) + len(self.kids)):
            out.append(next(kids).sexp() if k in CHILDREN[self.op] else '"' + next(it) + '"')
        return f"({self.op} {' '.join(out)})"

    def walk(self):
        seen: set = set()
        stack = [self]
        while stack:
            t = stack.pop()
            if id(t) not in seen:
                seen.add(id(t))
                yield t
                stack.extend(t.kids)


@dataclass
class Instance:
    roots: list  # T
    tensors: list  # T (Tensor leaves), in creation order
    syms: list = field(default_factory=list)  # the size symbols of a symbolic instance

    def size(self) -> int:
        return sum(int(np.prod(t.shape)) for t in self.tensors)


def _ints(x: tuple) -> tuple:
    """Static dims as ints, symbolic ones as their canonical text."""
    return tuple(int(d) if isinstance(d, (int, np.integer)) else str(d) for d in x)


def _same_numel(a: tuple, b: tuple) -> bool:
    if all(isinstance(d, int) for d in a + b):
        return int(np.prod(a)) == int(np.prod(b))
    return sorted(str(d) for d in a if d != 1) == sorted(str(d) for d in b if d != 1)


@dataclass
class Builder:
    q: Query
    rng: np.random.Generator
    max_dim: int = 4
    mode: str = "random"  # "random", or "equal": every axis one size (a guard comparing sizes holds)
    ints: str = ""  # "i32" or "bool": leaves without a stated dtype take it (rules over integer or bool programs)
    prefer: str = ""  # a float dtype leaves without a stated dtype take more often (16-bit programs for every rule)
    symbolic: bool = False  # sizes are symbols n0, n1, .. (index-map rules, proved with isl: checker/isl_proof.py)
    syms: list = field(default_factory=list)
    equal: int = 0  # the one axis size of mode "equal", once drawn
    binds: dict = field(default_factory=dict)  # string variable -> value
    terms: dict = field(default_factory=dict)  # term variable -> T
    tensors: list = field(default_factory=list)

    # ---- variables and slots -----------------------------------------------------------------------
    def _fact_value(self, var: str) -> "str | None":
        for rel, args in self.q.facts:
            if rel in ("has-shape", "has-dtype") and len(args) == 2 and isinstance(args[1], Atom) \
                    and args[1].text == var and isinstance(args[0], Atom) and args[0].text in self.terms:
                t = self.terms[args[0].text]
                return E.shape(t.shape) if rel == "has-shape" else t.dtype
        return None

    def _wanted(self, var: str, rel: str) -> "str | None":
        """The literal or bound value a has-shape/has-dtype fact asks of term variable var."""
        for r, args in self.q.facts:
            if r == rel and len(args) == 2 and isinstance(args[0], Atom) and args[0].text == var:
                a = args[1]
                if isinstance(a, Atom):
                    return a.value if a.is_string else self.binds.get(a.text)
        return None

    def slot(self, a, draw, valid=None) -> str:
        """A string attribute: the literal, the variable's binding, a value derived from a fact, or a draw."""
        if isinstance(a, Atom) and a.is_string:
            v = a.value
        elif isinstance(a, Atom) and a.text in self.binds:
            v = self.binds[a.text]
        else:
            v = (self._fact_value(a.text) if isinstance(a, Atom) else None) or draw()
            if isinstance(a, Atom) and not a.text.startswith("_"):
                self.binds[a.text] = v
        if valid is not None and not valid(v):
            raise Reject(f"attribute {v!r}")
        return v

    def _is_free(self, a) -> bool:
        return isinstance(a, Atom) and not a.is_string and a.text not in self.q.binds and a.text not in self.terms

    def sym(self) -> str:
        self.syms.append(f"n{len(self.syms)}")
        return self.syms[-1]

    def size(self) -> "int | str":
        """A fresh axis size > 1: an int, or a symbol in symbolic mode."""
        return self.sym() if self.symbolic else int(self.rng.integers(2, 4))

    def shape(self) -> tuple:
        rank = int(self.rng.integers(1, 4))
        if self.symbolic:
            if self.mode == "equal":
                self.equal = self.equal or self.sym()
                return (self.equal,) * rank
            return tuple(1 if self.rng.random() < 0.15 else self.sym() for _ in range(rank))
        if self.mode == "equal":
            self.equal = self.equal or int(self.rng.integers(2, max(self.max_dim, 2) + 1))
            return (self.equal,) * rank
        return tuple(1 if self.rng.random() < 0.15 or self.max_dim < 2 else int(self.rng.integers(2, self.max_dim + 1))
                     for _ in range(rank))

    def dtype(self) -> str:
        if self.ints:
            return self.ints
        if self.prefer:
            return self.prefer if self.rng.random() < 0.75 else str(self.rng.choice(FLOATS))
        return str(self.rng.choice(FLOATS, p=(0.6, 0.2, 0.2)))

    # ---- terms ---------------------------------------------------------------------------------------
    def term(self, a, shape=None, dtype=None, memory: bool = False) -> T:
        if isinstance(a, Atom):
            if a.is_string:
                raise Reject("a string literal in a term position")
            if a.text in self.terms:
                t = self.terms[a.text]
            elif a.text in self.q.binds:
                t = self.term(self.q.binds[a.text], shape, dtype, memory)
            else:
                t = self.leaf(a.text, shape, dtype, memory)
            self.terms[a.text] = t
        elif isinstance(a, Pattern):
            t = self.node(a, shape, dtype)
        else:
            raise Reject("a computed term in the pattern")
        if (shape is not None and t.shape != shape) or (dtype is not None and t.dtype != dtype):
            raise Reject("operand shapes or dtypes disagree")
        return t

    def tensor(self, shape: tuple, dtype: str) -> T:
        t = T("Tensor", (f"x{len(self.tensors)}",), (), shape, dtype)
        self.tensors.append(t)
        return t

    def read(self, mem: T, shape=None, imap=None) -> T:
        s = mem.shape if shape is None else shape
        return T("Read", (E.shape(s), imap or E.identity_map(len(s))), (mem,), s, mem.dtype)

    def leaf(self, var: str, shape=None, dtype=None, memory: bool = False) -> T:
        want_s, want_d = self._wanted(var, "has-shape"), self._wanted(var, "has-dtype")
        shape = shape or (_ints(_parse_shape(want_s)) if want_s else self.shape())
        dtype = dtype or want_d or self.dtype()
        computed = any(r in ("computed",) and args and isinstance(args[0], Atom) and args[0].text == var
                       for r, args in self.q.facts)
        if memory:
            if self.rng.random() < 0.25:
                return T("Mat", (), (self.compute(shape, dtype),), shape, dtype)
            return self.tensor(shape, dtype)
        if computed or self.rng.random() < 0.3:
            return self.compute(shape, dtype)
        return self.read(self.tensor(shape, dtype))

    def compute(self, shape: tuple, dtype: str) -> T:
        x = self.read(self.tensor(shape, dtype))
        if dtype == "bool":
            return T("Binary", ("CMPEQ",), (x, x), shape, dtype)
        if dtype not in FLOATS:
            return T("Binary", ("MAX",), (x, x), shape, dtype)
        op = str(self.rng.choice(("NEG", "RELU", "EXP2")))
        return T("Unary", (op,), (x,), shape, dtype)

    def node(self, p: Pattern, shape=None, dtype=None) -> T:
        fn = getattr(self, "_" + p.op.lower(), None)
        if fn is None:
            raise Reject(f"no instance for {p.op}")
        if len(p.args) != len(CHILDREN[p.op]) + _NSTR[p.op]:
            raise Reject(f"{p.op} with {len(p.args)} arguments")
        return fn(p, shape, dtype)

    def _ordered(self, args: list, shape=None, dtype=None, same_dtype: bool = True) -> list:
        """Operands of an elementwise op, built constrained ones first so free leaves take their shape."""
        order = sorted(range(len(args)), key=lambda k: self._is_free(args[k]))
        out: dict = {}
        for k in order:
            t = self.term(args[k], shape, dtype)
            shape = t.shape
            dtype = t.dtype if same_dtype else dtype
            out[k] = t
        return [out[k] for k in range(len(args))]

    # ---- one method per constructor ------------------------------------------------------------------
    def _unary(self, p, shape, dtype):
        x = self.term(p.args[1], shape, dtype)
        op = self.slot(p.args[0], lambda: str(self.rng.choice(UNARY)))
        if x.dtype not in FLOATS and not (x.dtype == "i32" and op in INT_OPS):
            raise Reject("unary of a non-float")
        return T("Unary", (op,), (x,), x.shape, x.dtype)

    def _binary(self, p, shape, dtype):
        op_atom = p.args[0]
        cmp = isinstance(op_atom, Atom) and op_atom.is_string and op_atom.value in COMPARE
        a, b = self._ordered(p.args[1:], shape, None if cmp else dtype)
        op = self.slot(op_atom, lambda: str(self.rng.choice(BINARY)))
        if a.dtype not in FLOATS and not (a.dtype == "i32" and (op in INT_BINARY or op in COMPARE)) \
                and not (a.dtype == "bool" and op in ("CMPEQ", "CMPNE")):
            raise Reject("binary of a non-float")
        return T("Binary", (op,), (a, b), a.shape, "bool" if op in COMPARE else a.dtype)

    def _where(self, p, shape, dtype):
        a, b = self._ordered(p.args[1:], shape, dtype)
        c = self.term(p.args[0], a.shape, "bool")
        return T("Where", (), (c, a, b), a.shape, a.dtype)

    def _cast(self, p, shape, dtype):
        # an integer or bool program casts to a float (3 in 5), to the other of i32 and bool, or to its own type
        to = self.slot(p.args[0], lambda: dtype or (str(self.rng.choice(FLOATS + ({"i32": "bool", "bool": "i32"}[self.ints],
                                                                                  self.ints)))
                                                    if self.ints else self.dtype()),
                       lambda v: v in FLOATS + ("i32", "bool"))
        x = self.term(p.args[1], shape)
        return T("Cast", (to,), (x,), x.shape, to)

    def _const(self, p, shape, dtype):
        shape = shape or _ints(_parse_shape(self.slot(p.args[2], lambda: E.shape(self.shape()))))
        s = self.slot(p.args[2], lambda: E.shape(shape), lambda v: _ints(_parse_shape(v)) == shape)
        dt = self.slot(p.args[1], lambda: dtype or self.dtype())
        v = self.slot(p.args[0], lambda: str(self.rng.choice(
            INT_CONSTS if dt == "i32" else ("true", "false") if dt == "bool" else CONSTS)))
        return T("Const", (v, dt, s), (), shape, dt)

    def _reduce(self, p, shape, dtype):
        body = self.term(p.args[4])
        if not body.shape:
            raise Reject("reduce of a scalar")
        sums = 0.7 if self.prefer else 0.5  # a sum rounds (in 16 bits most), so more often a sum
        op = self.slot(p.args[0], lambda: str(self.rng.choice(("SUM", "MAX", "MIN"), p=(sums, (1 - sums) / 2, (1 - sums) / 2))),
                       lambda v: v in NEUTRAL)
        r = len(body.shape)
        ax = self.slot(p.args[1], lambda: E.tup(sorted({int(k) for k in self.rng.integers(0, r, int(self.rng.integers(1, r + 1)))})),
                       lambda v: all(0 <= k < r for k in E.parse_ints(v)) and E.parse_ints(v))
        self.slot(p.args[2], lambda: NEUTRAL[op], lambda v: v == NEUTRAL[op])
        dt = self.slot(p.args[3], lambda: body.dtype if body.dtype == self.prefer  # a 16-bit draw accumulates in 16 bits
                       or (body.dtype in FLOATS and self.rng.random() < 0.5) else "fp32")
        out = tuple(d for k, d in enumerate(body.shape) if k not in set(E.parse_ints(ax)))
        return T("Reduce", (op, ax, NEUTRAL[op], dt), (body,), out, dt)

    def _reshape(self, p, shape, dtype):
        x = self.term(p.args[0], None, dtype)
        s = self.slot(p.args[1], lambda: E.shape(self._reshaped(x.shape)),
                      lambda v: _same_numel(_ints(_parse_shape(v)), x.shape))
        return T("Reshape", (s,), (x,), _ints(_parse_shape(s)), x.dtype)

    def _reshaped(self, s: tuple) -> tuple:
        k = int(self.rng.integers(4))
        if k == 2 and self.symbolic:
            k = 3
        if k == 0:
            at = int(self.rng.integers(len(s) + 1))
            return s[:at] + (1,) + s[at:]
        if k == 1 and 1 in s:
            at = s.index(1)
            return s[:at] + s[at + 1:]
        if k == 2:
            return (int(np.prod(s)),)
        return s

    def _perm(self, p, op):
        x = self.term(p.args[0])
        r = len(x.shape)
        pm = self.slot(p.args[1], lambda: E.tup(int(v) for v in self.rng.permutation(r)),
                       lambda v: sorted(E.parse_ints(v)) == list(range(r)))
        perm = E.parse_ints(pm)
        return T(op, (pm,), (x,), tuple(x.shape[k] for k in perm), x.dtype)

    def _permute(self, p, shape, dtype):
        return self._perm(p, "Permute")

    def _transpose(self, p, shape, dtype):
        return self._perm(p, "Transpose")

    def _expand(self, p, shape, dtype):
        x = self.term(p.args[0], None, dtype)
        s = self.slot(p.args[1], lambda: E.shape(d if d != 1 or self.rng.random() < 0.3 else self.size() for d in x.shape),
                      lambda v: len(_parse_shape(v)) == len(x.shape)
                      and all(a == b or a == 1 for a, b in zip(x.shape, _ints(_parse_shape(v)))))
        return T("Expand", (s,), (x,), _ints(_parse_shape(s)), x.dtype)

    def _pad(self, p, shape, dtype):
        x = self.term(p.args[0], None, dtype)
        pd = self.slot(p.args[1], lambda: E.pads(self._pads(len(x.shape))), lambda v: len(E.parse_pads(v)) == len(x.shape))
        v = self.slot(p.args[2], lambda: str(self.rng.choice(INT_CONSTS if x.dtype == "i32" else CONSTS)))
        if x.dtype not in FLOATS and v.lstrip("-") in ("inf", "nan"):
            raise Reject(f"pad value {v} in {x.dtype}")  # an ill-typed instance: draw another
        return T("Pad", (pd, v), (x,),
                 _ints(_parse_shape(shape_after("pad", E.shape(x.shape), pd, ""))), x.dtype)

    def _pads(self, r: int) -> list:
        pads = [(int(self.rng.integers(0, 3)), int(self.rng.integers(0, 3))) for _ in range(r)]
        if not any(lo or hi for lo, hi in pads):
            pads[int(self.rng.integers(r))] = (1, 1)
        return pads

    def _shrink(self, p, shape, dtype):
        x = self.term(p.args[0], None, dtype)
        if self.symbolic:  # from 0 or 1 to the end
            lo = [int(self.rng.integers(0, 2)) if d != 1 else 0 for d in x.shape]
            hi = list(x.shape)
        else:
            lo = [int(self.rng.integers(0, d)) for d in x.shape]
            hi = [int(self.rng.integers(a + 1, d + 1)) for a, d in zip(lo, x.shape)]
        sp = self.slot(p.args[1], lambda: E.shrink(lo, hi, [int(self.rng.integers(1, 3)) for _ in x.shape]),
                       lambda v: len(E.parse_shrink(v)[0]) == len(x.shape))
        return T("Shrink", (sp,), (x,), _ints(_parse_shape(shape_after("shrink", E.shape(x.shape), sp, ""))), x.dtype)

    def _flip(self, p, shape, dtype):
        x = self.term(p.args[0], shape, dtype)
        r = len(x.shape)
        ax = self.slot(p.args[1], lambda: E.tup(sorted({int(k) for k in self.rng.integers(0, r, int(self.rng.integers(1, r + 1)))})),
                       lambda v: all(0 <= k < r for k in E.parse_ints(v)))
        return T("Flip", (ax,), (x,), x.shape, x.dtype)

    def _view(self, p, shape, dtype):
        x = self.term(p.args[0], None, dtype)
        s, m = self._shape_and_map(p, x.shape, self._imap(x.shape))
        return T("View", (s, m), (x,), _ints(_parse_shape(s)), x.dtype)

    def _shape_and_map(self, p, src: tuple, drawn: tuple) -> tuple:
        """The (shape, map) slots 1 and 2 of a View or Read of a buffer of shape src; a shape fixed by the
        pattern gets a map drawn for it, and the read must stay inside the buffer."""
        s = self.slot(p.args[1], lambda: drawn[0])
        if s != drawn[0]:
            if s != E.shape(src):
                raise Reject("a read shape the pattern fixes to another shape than its buffer's")
            drawn = self._same_shape_map(src) if self.rng.random() < 0.6 else (s, E.identity_map(len(src)))
        m = self.slot(p.args[2], lambda: drawn[1])
        if not self.symbolic and not _in_bounds(_ints(_parse_shape(s)), _parse_map(m), src):
            raise Reject("a read outside its buffer")
        return s, m

    def _imap(self, src: tuple) -> tuple:
        """(shape, map) of a random in-bounds affine read of a buffer of shape src: per axis a plain,
        strided, reversed, windowed, constant or prefix index, and sometimes an extra broadcast axis."""
        out, m = [], []
        for d in src:
            if self.symbolic:  # plain, strided, reversed, windowed or constant: in bounds for every size
                k = int(self.rng.integers(5)) if d != 1 else 0
            else:
                k = int(self.rng.integers(6)) if d > 1 else 0
            i = f"i{len(out)}"
            if k == 0:
                out.append(d)
                m.append(i)
            elif k == 1:
                out.append(f"({d} + 1)//2" if self.symbolic else (d + 1) // 2)
                m.append(f"2*{i}")
            elif k == 2:
                out.append(d)
                m.append(f"{d} - 1 - {i}")
            elif k == 3:
                w = 2 if self.symbolic else int(self.rng.integers(2, d + 1))
                out += [f"{d} - 1" if self.symbolic else d - w + 1, w]
                m.append(f"{i} + i{len(out) - 1}")
            elif k == 4:
                m.append("0" if self.symbolic else str(int(self.rng.integers(d))))
            else:  # a prefix: the identity map on fewer points (a guard comparing a view's shape with its operand's)
                out.append(int(self.rng.integers(1, d)))
                m.append(i)
        if self.rng.random() < 0.3 or not out:
            out.insert(0, self.size())
            m = [_shift(e) for e in m]
        return E.shape(out), E.tup(_parse_map(E.tup(m)))

    def _same_shape_map(self, src: tuple) -> tuple:
        """(shape, map) of a read that keeps the buffer's shape: axes reversed, equal-size axes swapped."""
        m = [f"{d} - 1 - i{k}" if d != 1 and self.rng.random() < 0.6 else f"i{k}" for k, d in enumerate(src)]
        same = [k for k in range(len(src)) if src.count(src[k]) > 1]
        if len(same) >= 2:
            a, b = same[0], next(k for k in same[1:] if src[k] == src[same[0]])
            m[a], m[b] = m[b].replace(f"i{b}", f"i{a}"), m[a].replace(f"i{a}", f"i{b}")
        return E.shape(src), E.tup(_parse_map(E.tup(m)))

    def _broadcastindim(self, p, shape, dtype):
        x = self.term(p.args[0], None, dtype)
        r = len(x.shape) + int(self.rng.integers(0, 3))
        dims = sorted(int(v) for v in self.rng.choice(r, len(x.shape), replace=False))
        out = [(1 if self.rng.random() < 0.3 else self.sym()) if self.symbolic else int(self.rng.integers(1, 4))
               for _ in range(r)]
        for k, d in zip(dims, x.shape):
            out[k] = d if d != 1 or self.rng.random() < 0.5 else self.size()
        s = self.slot(p.args[1], lambda: E.shape(out))
        d = self.slot(p.args[2], lambda: E.tup(dims), lambda v: len(E.parse_ints(v)) == len(x.shape))
        return T("BroadcastInDim", (s, d), (x,), _ints(_parse_shape(s)), x.dtype)

    def _tensor(self, p, shape, dtype):
        return self.tensor(shape or self.shape(), dtype or self.dtype())

    def _mat(self, p, shape, dtype):
        x = self.term(p.args[0], shape, dtype)
        return T("Mat", (), (x,), x.shape, x.dtype)

    def _read(self, p, shape, dtype, forced: "tuple | None" = None):
        mem = self.term(p.args[0], None, dtype, memory=True)
        if mem.op not in ("Tensor", "Mat"):
            raise Reject("a read of a value")
        r = self.rng.random()
        if forced:
            s = self.slot(p.args[1], lambda: forced[0], lambda v: v == forced[0])
            m = self.slot(p.args[2], lambda: forced[1], lambda v: v == forced[1])
        else:
            s, m = self._shape_and_map(p, mem.shape, self._imap(mem.shape) if r < 0.55 else self._same_shape_map(mem.shape)
                                       if r < 0.9 else (E.shape(mem.shape), E.identity_map(len(mem.shape))))
        return T("Read", (s, m), (mem,), _ints(_parse_shape(s)), mem.dtype)

    def _select(self, p, shape, dtype):
        rd, other = p.args[1], p.args[2]
        rd = self.q.binds.get(rd.text, rd) if isinstance(rd, Atom) else rd
        if not (isinstance(rd, Pattern) and rd.op == "Read"):
            rd = Pattern("Read", [Atom("_mem", 0), Atom("_s", 0), Atom("_m", 0)], 0)
        mem = self.term(rd.args[0], None, dtype, memory=True)
        s0, m0, r = E.shape(mem.shape), E.identity_map(len(mem.shape)), len(mem.shape)
        pp = self._pads(r)  # and one unguarded axis read reversed, often: not plain, a pad on it cannot fold
        flip = int(self.rng.integers(r)) if r > 1 and not self.symbolic and self.rng.random() < 0.6 else None
        if flip is not None:
            pp[flip], nxt = (0, 0), (flip + 1) % r
            pp[nxt] = pp[nxt] if any(lo or hi for lo, hi in pp) else (1, 1)
        pads = E.pads(pp)
        g, m2 = pad_guard(s0, "", s0, m0, pads), pad_map(s0, "", s0, m0, pads)
        if flip is not None:
            m2 = E.tup(Expr.of(mem.shape[k] - 1) - Expr.var(f"i{k}") if k == flip else e for k, e in enumerate(E.parse_map(m2)))
        s2 = shape_after("pad", s0, pads, "")
        read = self._read(rd, None, dtype, forced=(s2, m2))
        g = self.slot(p.args[0], lambda: g)
        if self._is_free(other):
            v = str(self.rng.choice(("0.0", "-inf", "-1.0"))) if read.dtype in FLOATS else "0"
            c = T("Const", (v, read.dtype, E.shape(read.shape)), (), read.shape, read.dtype)
            self.terms[other.text] = c
        elif isinstance(other, Pattern) and other.op == "Const":
            c = self._const(other, read.shape, read.dtype)
        else:
            c = self.term(other, read.shape, read.dtype)
        if c.op != "Const":
            raise Reject("Select's else-branch must be a Const")
        return T("Select", (g,), (read, c), read.shape, read.dtype)

    def _softmaxsum(self, p, shape, dtype):
        raise Reject("SoftmaxSum instances come from the attention programs of the random pool")


_NSTR = {"Tensor": 1, "Mat": 0, "Read": 2, "Const": 3, "Reshape": 1, "Permute": 1, "Expand": 1, "Pad": 2, "Shrink": 1,
         "Flip": 1, "View": 2, "Transpose": 1, "BroadcastInDim": 2, "Select": 1, "Unary": 1, "Binary": 1, "Where": 0,
         "Cast": 1, "Reduce": 4, "SoftmaxSum": 2, "N": 1}


def _in_bounds(shape: tuple, imap: tuple, src: tuple) -> bool:
    if len(imap) != len(src):
        return False
    box = {f"i{k}": (0, d - 1) for k, d in enumerate(shape)}
    for e, d in zip(imap, src):
        if e.variables() - set(box):
            return False
        lo, hi = expr_bounds(e, box)
        if lo < 0 or hi > d - 1:
            return False
    return True


def _shift(e: str) -> str:
    """Renumber the output axes of a map entry by one (an axis was inserted in front)."""
    return re.sub(r"i(\d+)", lambda mo: f"i{int(mo.group(1)) + 1}", e)


def _resolve(b: Builder, a: Atom) -> "str | None":
    return a.value if a.is_string else b.binds.get(a.text)


def satisfied(b: Builder) -> bool:
    """The side conditions of the query on the built terms; relations only egglog knows count as true."""
    q = b.q
    for rel, (t, v) in ((r, a) for r, a in q.facts if r in ("has-shape", "has-dtype")):
        if not isinstance(t, Atom) or t.text not in b.terms or not isinstance(v, Atom):
            continue
        have = E.shape(b.terms[t.text].shape) if rel == "has-shape" else b.terms[t.text].dtype
        want = _resolve(b, v)
        if want is None:
            b.binds[v.text] = have
        elif want != have:
            return False
    pending = list(q.calls)
    for _ in range(len(pending) + 1):
        rest = []
        for target, name, args in pending:
            vals = [_resolve(b, a) for a in args]
            if any(v is None for v in vals):
                rest.append((target, name, args))
                continue
            fn = HELPERS.get(name)
            if fn is None:
                return False
            out = fn(*vals)
            want = _resolve(b, target)
            if want is None:
                b.binds[target.text] = out
            elif want != out:
                return False
        pending = rest
    for op, a, c in q.tests:
        x, y = _resolve(b, a), _resolve(b, c)
        if x is None or y is None:
            continue
        if (op == "=") != (x == y):
            return False
    return True


def instantiate(q: Query, rng: np.random.Generator, max_dim: int = 4, tries: int = 60,
                variant: int = 0, symbolic: bool = False) -> "Instance | None":
    """A random instance of the query's patterns, or None when no draw satisfied it. Draws alternate
    between shapes of one axis size (a guard comparing sizes, a square transpose, equal operand shapes)
    and free ones, equal first for odd variants; variants 2, 10, 18, ... try i32 leaves first and variants 6,
    14, ... bool leaves (a rule whose ops an integer or bool program can reach is tested on one); the
    float leaves of variants 1, 5, 9, .. prefer fp16 and of 3, 7, 11, .. bf16, or both the 16-bit type the
    pattern names or the one its guards leave (a rule over 16-bit values, or a guard excluding them, meets
    them), then any type."""
    if not q.roots:
        return None
    modes = ["equal", "random"] if variant % 2 else ["random", "equal"]
    kinds = [("bool" if variant % 8 == 6 else "i32"), ""] if variant % 4 == 2 else [""]
    lit = [a.value for p in q.patterns for a in p.args if isinstance(a, Atom) and a.is_string and a.value in FLOATS[1:]]
    out = {x.value for op, a, c in q.tests if op == "!=" for x in (a, c) if isinstance(x, Atom) and x.is_string}
    free = [t for t in ("fp16", "bf16") if t not in out] or ["fp16", "bf16"]
    # a 16-bit type the pattern names, else one its guards do not exclude
    half = (lit[0], lit[0]) if lit else (free[0], free[-1])
    prefer = ("", half[0], "", half[1])[variant % 4] if variant % 4 != 2 else half[variant % 3 == 0]
    plans = [(ints, prefer) for ints in kinds] + ([("", "")] if prefer else [])  # then without the preference
    for ints, prefer in plans:
        n = tries // len(plans)
        for k in range(n):
            b = Builder(q, rng, max_dim, mode=modes[0] if k < n // 2 else modes[1], ints=ints, prefer=prefer,
                        symbolic=symbolic)
            try:
                roots = [b.term(r) for r in q.roots]
            except (Reject, ValueError, IndexError, KeyError, ZeroDivisionError):
                continue
            if satisfied(b) and (not ints or any(t.dtype == ints for t in b.tensors)):  # an integer plan's program has one
                return Instance(roots, b.tensors, list(b.syms))
    return None
