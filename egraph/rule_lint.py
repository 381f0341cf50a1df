"""Load-time checks of rule files: what egglog accepts but can never match or means nothing.

egglog compares attributes as plain strings, so an op string the term language does not have
(``"RELUU"``), an attribute spelled otherwise than the loader writes it (``"[2,3]"`` for
``"[2, 3]"``, ``"1"`` for the float ``"1.0"``) or a dtype that does not exist makes a rule that
silently never fires. A rule name used twice makes reports ambiguous, and a ruleset named like a
constructor or relation shadows it in schedules. A rule whose query is independent parts that share no
variable (``(h x) (h y)``) matches the product of their sizes in one iteration: egglog finds every match of a
rule before a limit can be checked (docs/DESIGN.md §E-graph), so such a rule is refused before it runs. Each is
a coded diagnostic with file:line: E1405 UnknownOpString, E1406 AttributeSpelling, E1407 DuplicateRuleName,
E1408 RulesetShadowsName, E1409 CrossProductRule.
"""
from __future__ import annotations

import math
import re

from ..ir.diagnostics import PolysatError, diag
from ..ir.tiny import GroupOp, REDUCE_OPS
from . import encode as E
from .schema import CHILDREN
from .rule_pattern import Atom, Pattern, actions, head, parse_sexp, read_query

UNARY_OPS = frozenset(o.value for o in GroupOp.Unary) - {"CAST"}
BINARY_OPS = frozenset(o.value for o in GroupOp.Binary)
DTYPES = frozenset({"fp16", "bf16", "fp32", "i32", "bool"})
RELATIONS = frozenset({"has-shape", "has-dtype", "shape-conflict", "dtype-conflict", "sees", "softmax-exp",
                       "softmax-sum", "computed", "reduce-free", "program-out", "N"})


def _canon(kind: str, text: str) -> str:
    """The loader's spelling of an attribute of this kind (raises on a malformed one)."""
    if kind == "shape":
        return E.shape(E.parse_shape(text))
    if kind == "ints":
        return E.tup(E.parse_ints(text))
    if kind == "map":
        return E.tup(E.parse_map(text))
    if kind == "pads":
        return E.pads(E.parse_pads(text))
    if kind == "shrink":
        return E.shrink(*E.parse_shrink(text))
    if kind == "guard":
        return E.guard(E.parse_guard(text))
    if kind == "value":
        if text in ("true", "false"):
            return text
        if text.lstrip("-").isdigit():  # an i32 constant, as the loader spells one
            return repr(int(text))
        v = float(text)
        return E.value(v) if not math.isnan(v) or text == "nan" else text
    return text


_OPS = {"unary": UNARY_OPS, "binary": BINARY_OPS, "reduce": frozenset(REDUCE_OPS), "dtype": DTYPES,
        "init": frozenset({"0", "-inf", "inf"}), "p": frozenset({"fp16", "bf16", "fp32"}), "passes": frozenset({"1", "2"})}
# constructor -> {argument position: kind of the string there}
SLOTS = {
    "Unary": {0: "unary"}, "Binary": {0: "binary"}, "Cast": {0: "dtype"},
    "Reduce": {0: "reduce", 1: "ints", 2: "init", 3: "dtype"}, "Const": {0: "value", 1: "dtype", 2: "shape"},
    "Reshape": {1: "shape"}, "Expand": {1: "shape"}, "Permute": {1: "ints"}, "Transpose": {1: "ints"},
    "Pad": {1: "pads", 2: "value"}, "Shrink": {1: "shrink"}, "Flip": {1: "ints"}, "View": {1: "shape", 2: "map"},
    "BroadcastInDim": {1: "shape", 2: "ints"}, "Select": {0: "guard"}, "Read": {1: "shape", 2: "map"},
    "SoftmaxSum": {0: "p", 1: "passes"},
}


def _check_literal(kind: str, a: Atom, where: str, path: str, rule: str) -> "list":
    text = a.value
    at = f"{path}:{a.line} (rule {rule!r})"
    if kind in _OPS:
        if text not in _OPS[kind]:
            code = "UnknownOpString" if kind in ("unary", "binary", "reduce") else "AttributeSpelling"
            return [diag(code, at, f"{where}: {text!r} is not a {kind} of the term language "
                         f"(one of {', '.join(sorted(_OPS[kind]))})", file=path, line=a.line, rule=rule)]
        return []
    try:
        canon = _canon(kind, text)
    except Exception:  # noqa: BLE001 — any parse failure is the diagnostic
        canon = None
    if canon != text:
        how = f"the loader spells it {canon!r}" if canon is not None else "it does not parse"
        return [diag("AttributeSpelling", at, f"{where}: {kind} attribute {text!r} can never match: {how}",
                     file=path, line=a.line, rule=rule)]
    return []


def lint_rule(path: str, rule) -> list:
    """Diagnostics of one rule's op strings and attribute literals (its patterns and its actions)."""
    out: list = []
    kinds: dict = {}  # variable -> kind of the slot it fills
    for p in actions(rule.text, rule.line):
        for k, kind in SLOTS.get(p.op, {}).items():
            if k >= len(p.args) or isinstance(p.args[k], (Pattern, list)):
                continue
            a = p.args[k]
            if a.is_string:
                out += _check_literal(kind, a, f"{p.op} argument {k + 1}", path, rule.name)
            else:
                kinds.setdefault(a.text, kind)
    q = read_query(rule.text, rule.line, rule.name)
    for _op, a, b in q.tests:
        for var, lit in ((a, b), (b, a)):
            if not var.is_string and lit.is_string and lit.value and var.text in kinds:  # "": a helper's no
                out += _check_literal(kinds[var.text], lit, f"a comparison of {var.text}", path, rule.name)
    for rel, args in q.facts:
        if rel == "has-dtype" and len(args) == 2 and isinstance(args[1], Atom) and args[1].is_string:
            out += _check_literal("dtype", args[1], "has-dtype", path, rule.name)
        if rel == "has-shape" and len(args) == 2 and isinstance(args[1], Atom) and args[1].is_string:
            out += _check_literal("shape", args[1], "has-shape", path, rule.name)
    return out


_LITERAL = re.compile(r"^(-?[0-9][0-9.]*(e-?[0-9]+)?|true|false|[$:].*)$")  # numbers, booleans, globals, keywords


def _variables(x, out: set) -> set:
    """The variables of one query fact (every symbol but the heads of its applications and literals)."""
    if isinstance(x, Atom):
        if not x.is_string and x.text != "_" and not _LITERAL.match(x.text):  # each _ is a variable of its own
            out.add(x.text)
        return out
    for k, a in enumerate(x):
        if k or not isinstance(a, Atom):
            _variables(a, out)
    return out


def query_parts(form: list) -> list:
    """The independent parts of a ``rule`` form's query: its facts grouped by shared variables (a fact with no
    variable matches at most once and joins no part), as sets of variables."""
    parts: list = []
    for fact in form[1] if head(form) == "rule" and len(form) > 1 and isinstance(form[1], list) else []:
        part = _variables(fact, set())
        if not part:
            continue
        for other in [p for p in parts if p & part]:
            parts.remove(other)
            part |= other
        parts.append(part)
    return parts


def lint_cross_product(path: str, rule) -> list:
    parts = query_parts(parse_sexp(rule.text, rule.line))
    if len(parts) < 2:
        return []
    names = " and ".join("{" + ", ".join(sorted(p)) + "}" for p in parts)
    return [diag("CrossProductRule", f"{path}:{rule.line} (rule {rule.name!r})",
                 f"the query is {len(parts)} parts that share no variable ({names}): it matches the product of their "
                 "sizes in one iteration", file=path, line=rule.line, rule=rule.name)]


def lint_file(rf) -> list:
    """Diagnostics of one parsed rule file (vocabulary, spelling, ruleset names)."""
    out: list = []
    for r in rf.rules:
        out += lint_rule(rf.path, r) + lint_cross_product(rf.path, r)
    for name in rf.rulesets:
        if name in CHILDREN or name in RELATIONS:
            line = next((k + 1 for k, ln in enumerate(rf.text.splitlines()) if f"(ruleset {name}" in ln), 1)
            what = "constructor" if name in CHILDREN else "relation"
            out.append(diag("RulesetShadowsName", f"{rf.path}:{line}", f"ruleset {name!r} has the name of the term "
                            f"language's {what} {name}", file=rf.path, line=line))
    return out


def lint_files(files: list) -> list:
    """Diagnostics across files: a rule name used twice (each file's own checks ran at parse time)."""
    seen: dict = {}
    out: list = []
    for rf in files:
        for r in rf.rules:
            if r.name in seen:
                f0, l0 = seen[r.name]
                out.append(diag("DuplicateRuleName", f"{rf.path}:{r.line} (rule {r.name!r})",
                                f"the rule name {r.name!r} is already used at {f0}:{l0}", file=rf.path, line=r.line,
                                rule=r.name))
            else:
                seen[r.name] = (rf.path, r.line)
    return out


def raise_if_any(diags: list) -> None:
    if diags:
        raise PolysatError(diags)
