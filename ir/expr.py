"""Integer expressions over named variables: sizes of symbolic dims and index maps.

One canonical form serves both uses: a sum of monomials with integer coefficients, where an atom
is a variable name or ``FloorDiv(expr, q)`` with ``q > 0``. Index maps (AxisExprs, docs/DESIGN.md §IndexBook)
are the *affine* subset (every monomial of degree <= 1); sizes may be products of symbols (a reshape
that merges ``B`` and ``H`` gives ``B*H``). Canonical means: equal expressions built in any order
compare and hash equal, and ``parse(str(e)) == e``.
"""
from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Mapping, Union

Atom = Union[str, "FloorDiv"]
# Past these a floordiv atom is E1505 ResourceLimit: composing a long chain of reshapes nests floordivs
# that nothing here simplifies, and their text doubles with each (docs/DESIGN.md §Diagnostics).
MAX_NESTING = 64  # floordivs inside floordivs (also bounds the walks that recurse into a numerator)
MAX_TEXT = 1 << 20  # characters of one atom's text
Monomial = tuple  # sorted tuple of atoms; () is the constant monomial


def _atom_key(a: Atom) -> tuple:
    return (0, a) if isinstance(a, str) else (1, a.text)


@dataclass(frozen=True)
class FloorDiv:
    num: "Expr"
    q: int

    @cached_property
    def text(self) -> str:
        """str(self), made once (atoms are ordered by it whenever an expression is built)."""
        return f"({self.num})//{self.q}"

    def __str__(self) -> str:
        return self.text

    @cached_property
    def nesting(self) -> int:
        """1 + the deepest floordiv inside the numerator (made once, when the atom is built)."""
        return 1 + max((a.nesting for m, _ in self.num.terms for a in m if isinstance(a, FloorDiv)), default=0)

    def __hash__(self) -> int:
        return self.num.__hash__() * 31 + self.q

    def __getstate__(self) -> dict:  # the fields only: a cached value is remade where it is read
        return {"num": self.num, "q": self.q}


@dataclass(frozen=True)
class Expr:
    terms: tuple  # ((monomial, coeff), ...) sorted, no zero coefficients

    def __hash__(self) -> int:  # made once: expressions nest (a floordiv's numerator) and key many dicts
        h = self.__dict__.get("_hash")
        if h is None:
            h = self.__dict__["_hash"] = hash(self.terms)
        return h

    def __getstate__(self) -> dict:  # the fields only: a str hash differs from process to process
        return {"terms": self.terms}

    # ---- construction -------------------------------------------------------------------
    @staticmethod
    def const(c: int) -> "Expr":
        return Expr(((((), int(c)),) if c else ()))

    @staticmethod
    def var(name: str) -> "Expr":
        return Expr((((name,), 1),))

    @staticmethod
    def of(x: "int | str | Expr") -> "Expr":
        if isinstance(x, Expr):
            return x
        if isinstance(x, bool):
            raise TypeError("bool is not an integer expression")
        if isinstance(x, int):
            return Expr.const(x)
        if isinstance(x, str):
            return parse(x)
        raise TypeError(f"not an integer expression: {x!r}")

    @staticmethod
    def from_terms(d: dict) -> "Expr":
        """The canonical expression of {monomial: coefficient} (monomial = tuple of atoms)."""
        return Expr._make(d)

    @staticmethod
    def _make(d: dict) -> "Expr":
        items = [(m, c) for m, c in d.items() if c != 0]
        items.sort(key=lambda mc: (not mc[0], len(mc[0]), [_atom_key(a) for a in mc[0]]))
        return Expr(tuple(items))

    # ---- arithmetic ---------------------------------------------------------------------
    def __add__(self, other: "int | Expr") -> "Expr":
        other = Expr.of(other)
        d = dict(self.terms)
        for m, c in other.terms:
            d[m] = d.get(m, 0) + c
        return Expr._make(d)

    __radd__ = __add__

    def __neg__(self) -> "Expr":
        return Expr(tuple((m, -c) for m, c in self.terms))

    def __sub__(self, other: "int | Expr") -> "Expr":
        return self + (-Expr.of(other))

    def __rsub__(self, other: "int | Expr") -> "Expr":
        return Expr.of(other) - self

    def __mul__(self, other: "int | Expr") -> "Expr":
        other = Expr.of(other)
        d: dict = {}
        for m1, c1 in self.terms:
            for m2, c2 in other.terms:
                m = tuple(sorted(m1 + m2, key=_atom_key))
                d[m] = d.get(m, 0) + c1 * c2
        return Expr._make(d)

    __rmul__ = __mul__

    def floordiv(self, q: int) -> "Expr":
        """floor(self / q) for a positive integer q, simplified where exact."""
        if not isinstance(q, int) or q <= 0:
            raise ValueError(f"floordiv by a non-positive or non-integer {q!r}")
        if q == 1:
            return self
        if self.is_const:
            return Expr.const(self.constant // q)
        # split off the part divisible by q: floor((q*A + B)/q) = A + floor(B/q)
        exact = {m: c // q for m, c in self.terms if m and c % q == 0}
        rest = {m: c for m, c in self.terms if m and c % q != 0}
        const = self.constant
        if not rest:
            return Expr._make(exact) + Expr.const(const // q)
        g = math.gcd(q, *rest.values())
        if g > 1:  # floor((g*B' + c)/(g*q')) = floor((B' + floor(c/g))/q')
            rest = {m: c // g for m, c in rest.items()}
            q //= g
            const = const // g
        # keep the constant inside only modulo q
        outer, const = divmod(const, q)
        inner = Expr._make({**rest, (): const})
        if q == 1:
            return Expr._make(exact) + inner + outer
        atom = FloorDiv(inner, q)
        if atom.nesting > MAX_NESTING or len(atom.text) > MAX_TEXT:
            from .diagnostics import fail
            fail("ResourceLimit", "index expression", f"a floordiv nested {atom.nesting} deep, {len(atom.text)} "
                 f"characters long (at most {MAX_NESTING} and {MAX_TEXT}): index maps composed along a long chain of "
                 "reshapes or strided views that do not simplify", "Merge consecutive reshapes and transposes "
                 "in the model (a chain of them is one view).")
        return Expr._make(exact) + Expr((((atom,), 1),)) + outer

    def mod(self, q: int) -> "Expr":
        """self mod q as E - q*floor(E/q): affine + floordiv only (docs/DESIGN.md §IndexBook invariant 1)."""
        return self - self.floordiv(q) * q

    # ---- inspection ---------------------------------------------------------------------
    @property
    def is_const(self) -> bool:
        return all(not m for m, _ in self.terms)

    @property
    def constant(self) -> int:
        for m, c in self.terms:
            if not m:
                return c
        return 0

    @property
    def degree(self) -> int:
        return max((len(m) for m, _ in self.terms), default=0)

    @property
    def is_affine(self) -> bool:
        """Affine in its variables, with floordivs of affine expressions by constants."""
        for m, _ in self.terms:
            if len(m) > 1:
                return False
            for a in m:
                if isinstance(a, FloorDiv) and not a.num.is_affine:
                    return False
        return True

    def variables(self) -> frozenset:
        """The variables it reads (made once, as the hash: an expression is immutable and read many times)."""
        got = self.__dict__.get("_vars")
        if got is None:
            out = set()
            for m, _ in self.terms:
                for a in m:
                    out |= {a} if isinstance(a, str) else a.num.variables()
            got = self.__dict__["_vars"] = frozenset(out)
        return got

    def coeff(self, name: str) -> int:
        """Coefficient of the plain variable name (not counting occurrences inside floordivs)."""
        return dict(self.terms).get((name,), 0)

    # ---- evaluation and substitution ----------------------------------------------------
    def evaluate(self, env: Mapping[str, int]):
        """Value under env; works elementwise when env holds numpy integer arrays."""
        total = 0
        for m, c in self.terms:
            v = c
            for a in m:
                v = v * (env[a] if isinstance(a, str) else a.num.evaluate(env) // a.q)
            total = total + v
        return total

    def subs(self, env: Mapping[str, "int | Expr"]) -> "Expr":
        out = Expr.const(0)
        for m, c in self.terms:
            v = Expr.const(c)
            for a in m:
                if isinstance(a, str):
                    v = v * (Expr.of(env[a]) if a in env else Expr.var(a))
                else:
                    v = v * a.num.subs(env).floordiv(a.q)
            out = out + v
        return out

    # ---- printing -----------------------------------------------------------------------
    def _fmt(self, atom_fmt) -> str:
        if not self.terms:
            return "0"
        parts = []
        for k, (m, c) in enumerate(self.terms):
            # a floordiv atom is parenthesised wherever Python's precedence would regroup it:
            # next to another factor (3*(x)//2 is (3*x)//2) or after a leading minus
            wrap = len(m) > 1 or abs(c) != 1 or (k == 0 and c < 0)
            body = "*".join(f"({atom_fmt(a)})" if wrap and isinstance(a, FloorDiv) else atom_fmt(a) for a in m)
            if not m:
                s = str(abs(c))
            elif abs(c) == 1:
                s = body
            else:
                s = f"{abs(c)}*{body}"
            parts.append(("-" if c < 0 else "+", s))
        first_sign, first = parts[0]
        out = ("-" if first_sign == "-" else "") + first
        for sign, s in parts[1:]:
            out += f" {sign} {s}"
        return out

    @cached_property
    def text(self) -> str:
        """str(self), made once."""
        return self._fmt(lambda a: a if isinstance(a, str) else a.text)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Expr({str(self)!r})"

    def to_isl(self) -> str:
        """isl syntax (floordiv as floor(e/q))."""
        def atom(a):
            return a if isinstance(a, str) else f"floor(({a.num.to_isl()})/{a.q})"
        return self._fmt(atom)


def parse(text: str) -> Expr:
    """Parse ``2*i0 + (H - 1)//2 - 3`` (also ``floor(e/q)`` and ``e % q``) into an Expr."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise ValueError(f"cannot parse integer expression {text!r}: {e.msg}") from None
    return _from_ast(tree.body, text)


def _from_ast(n: ast.AST, text: str) -> Expr:
    if isinstance(n, ast.Constant) and isinstance(n.value, int) and not isinstance(n.value, bool):
        return Expr.const(n.value)
    if isinstance(n, ast.Name):
        return Expr.var(n.id)
    if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
        v = _from_ast(n.operand, text)
        return -v if isinstance(n.op, ast.USub) else v
    if isinstance(n, ast.BinOp):
        a, b = _from_ast(n.left, text), _from_ast(n.right, text)
        if isinstance(n.op, ast.Add):
            return a + b
        if isinstance(n.op, ast.Sub):
            return a - b
        if isinstance(n.op, ast.Mult):
            return a * b
        if isinstance(n.op, (ast.FloorDiv, ast.Mod)):
            if not b.is_const or b.constant <= 0:
                raise ValueError(f"in {text!r}: divisor must be a positive integer constant")
            return a.floordiv(b.constant) if isinstance(n.op, ast.FloorDiv) else a.mod(b.constant)
    if (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "floor"
            and len(n.args) == 1 and isinstance(n.args[0], ast.BinOp) and isinstance(n.args[0].op, ast.Div)):
        a, b = _from_ast(n.args[0].left, text), _from_ast(n.args[0].right, text)
        if not b.is_const or b.constant <= 0:
            raise ValueError(f"in {text!r}: divisor must be a positive integer constant")
        return a.floordiv(b.constant)
    raise ValueError(f"cannot parse integer expression {text!r}: unsupported {ast.dump(n)[:40]}")
