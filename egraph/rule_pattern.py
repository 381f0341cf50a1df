"""A rule's left-hand side read as data: the query the soundness checker instantiates.

Rule files are egglog text; this module reads one ``rule``/``rewrite``/``birewrite`` form into a
:class:`Query`: the term patterns it matches (constructor applications over pattern variables and
string literals), the variables bound to patterns (``(= e (Reduce ...))``), and the side conditions
(``has-shape``/``has-dtype`` facts, ``!=`` tests, ``(= v (py-to-string (py-call $helper ...)))``
helper calls, and relations such as ``computed`` that only the e-graph can decide).
``rules --check`` builds random well-typed terms from it (``checker/instance.py``); the load-time
checks (``egraph/rule_lint.py``) read the literals of each constructor slot from it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from .schema import CHILDREN

Sexp = "str | list"  # an atom (symbol, "string", number) or a list of Sexp


def tokens(text: str, line0: int = 1) -> list:
    """(token, line) pairs of egglog text: '(' ')' symbols and "strings" (quotes kept); comments dropped."""
    out, i, n, line = [], 0, len(text), line0
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif c == ";":
            while i < n and text[i] != "\n":
                i += 1
        elif c in "()":
            out.append((c, line))
            i += 1
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append((text[i:j + 1], line))
            i = j + 1
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] not in '()";':
                j += 1
            out.append((text[i:j], line))
            i = j
    return out


@dataclass(frozen=True)
class Atom:
    """A symbol or string literal with the line it is on."""
    text: str
    line: int

    @property
    def is_string(self) -> bool:
        return self.text.startswith('"')

    @property
    def value(self) -> str:
        return self.text[1:-1] if self.is_string else self.text


@lru_cache(maxsize=4096)
def parse_sexp(text: str, line0: int = 1):
    """The first s-expression of text, as nested lists of Atom (kept per text: the load-time checks read each rule
    form three times; callers only read it)."""
    toks = tokens(text, line0)
    stack: list = [[]]
    for t, ln in toks:
        if t == "(":
            stack.append([])
        elif t == ")":
            done = stack.pop()
            stack[-1].append(done)
            if len(stack) == 1:
                break
        else:
            stack[-1].append(Atom(t, ln))
    return stack[0][0] if stack[0] else []


def head(x) -> str:
    return x[0].text if isinstance(x, list) and x and isinstance(x[0], Atom) else ""


@dataclass
class Pattern:
    """A constructor application: op, and for each argument an Atom (literal or variable) or a Pattern
    (or a variable Atom in a Term position)."""
    op: str
    args: list
    line: int

    def term_args(self) -> list:
        kids = CHILDREN.get(self.op, ())
        return [a for k, a in enumerate(self.args) if k in kids]


@dataclass
class Query:
    rule_name: str
    roots: list = field(default_factory=list)  # Patterns matched at the top
    binds: dict = field(default_factory=dict)  # variable -> Pattern (from (= v P))
    facts: list = field(default_factory=list)  # (relation, [Atom|Pattern]) : has-shape, has-dtype, computed, ...
    tests: list = field(default_factory=list)  # ("!=" | "=", Atom, Atom)
    calls: list = field(default_factory=list)  # (Atom target, helper name, [Atom args])
    patterns: list = field(default_factory=list)  # every Pattern, outermost first

    def variables(self) -> set:
        out: set = set()
        for p in self.patterns:
            out.update(a.text for a in p.args if isinstance(a, Atom) and not a.is_string)
        return out


def _pattern(x, q: Query):
    if isinstance(x, Atom):
        return x
    op = head(x)
    if op in ("py-to-string", "py-call"):
        return x
    p = Pattern(op, [_pattern(a, q) for a in x[1:]], x[0].line)
    q.patterns.append(p)
    return p


def _helper_call(x) -> "tuple | None":
    """(helper name, [Atom]) of (py-to-string (py-call $h (py-from-string a) ...)), else None."""
    if head(x) != "py-to-string" or len(x) != 2 or head(x[1]) != "py-call":
        return None
    call = x[1]
    args = []
    for a in call[2:]:
        if head(a) == "py-from-string" and isinstance(a[1], Atom):
            args.append(a[1])
        else:
            return None
    return call[1].text.lstrip("$"), args


def _atom(q: Query, x) -> None:
    h = head(x)
    if h in ("=", "!=") and len(x) == 3:
        a, b = x[1], x[2]
        call = _helper_call(b) or _helper_call(a)
        if call is not None:
            target = a if isinstance(a, Atom) else b
            q.calls.append((target, call[0], call[1]))
            return
        if h == "=" and isinstance(a, Atom) and isinstance(b, list) and head(b) in CHILDREN:
            q.binds[a.text] = _pattern(b, q)
            return
        if h == "=" and isinstance(b, Atom) and isinstance(a, list) and head(a) in CHILDREN:
            q.binds[b.text] = _pattern(a, q)
            return
        if isinstance(a, Atom) and isinstance(b, Atom):
            q.tests.append((h, a, b))
            return
    if h in CHILDREN:
        q.roots.append(_pattern(x, q))
        return
    if h:
        q.facts.append((h, [_pattern(a, q) for a in x[1:]]))


def _option(form: list, key: str):
    for k, a in enumerate(form):
        if isinstance(a, Atom) and a.text == key and k + 1 < len(form):
            return form[k + 1]
    return None


def read_query(text: str, line0: int, name: str, side: int = 0) -> Query:
    """The query of one rule form (text starting at line line0). side=1 reads a birewrite's right side."""
    form = parse_sexp(text, line0)
    q = Query(name)
    h = head(form)
    if h == "rule":
        for a in form[1] if isinstance(form[1], list) else []:
            _atom(q, a)
    elif h in ("rewrite", "birewrite"):
        q.roots.append(_pattern(form[1 + side], q))
        for a in _option(form, ":when") or []:
            _atom(q, a)
    roots = {id(p) for p in q.binds.values()}
    used = set()
    for p in q.patterns:
        if p.op not in CHILDREN:
            continue  # a function's argument (a lattice fact such as fuse-veto) is a root to build
        for a in p.args:
            if isinstance(a, Atom) and a.text in q.binds:
                used.add(a.text)
    q.roots.extend(p for v, p in q.binds.items() if v not in used and id(p) in roots)
    return q


def actions(text: str, line0: int) -> list:
    """Every constructor application a rule form builds or matches (for the load-time vocabulary checks),
    with the variables bound by ``let``: [Pattern]."""
    form = parse_sexp(text, line0)
    q = Query("")

    def walk(x) -> None:
        if isinstance(x, list):
            if head(x) in CHILDREN:
                _pattern(x, q)
                return
            for a in x:
                walk(a)
    walk(form)
    return q.patterns
