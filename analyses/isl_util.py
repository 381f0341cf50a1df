"""Small helpers between polysat's integer expressions and islpy (docs/DESIGN.md §Poly-View).

Index maps and constraints live as :class:`~polysat.ir.expr.Expr` (affine + floordiv); this module
renders them as isl text (``floor(e/q)`` becomes an isl ``div``), parses with a cache (parsing costs
~80 µs, so equal texts are parsed once), names tuples safely, and enumerates small sets. Before
that, :func:`simplify` folds what interval bounds prove (size-1 axes, constant floordivs), so that
composed movement chains stay small (docs/DESIGN.md §IndexBook invariant 7).
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Iterable, Mapping, Sequence

import islpy as isl

from ..ir.diagnostics import fail
from ..ir.expr import Expr, FloorDiv

Box = Mapping[str, tuple]  # var -> (lo, hi) with None for an unknown bound

_IDENT = re.compile(r"[^A-Za-z0-9_]")


_KEYWORDS = {"and", "or", "not", "exists", "floor", "ceil", "mod", "min", "max", "infty", "NaN", "true", "false",
             "implies", "domain", "range", "rat", "int", "div"}


def isl_name(name: str) -> str:
    """A tensor or statement name as an isl identifier (letters, digits, underscores; no keyword)."""
    out = _IDENT.sub("_", name)
    out = out if out and not out[0].isdigit() else "t_" + out
    return out + "_" if out in _KEYWORDS else out


def params_prefix(params: Sequence[str]) -> str:
    return f"[{', '.join(params)}] -> " if params else ""


def ge0(e: Expr) -> str:
    """The constraint ``e >= 0`` as isl text."""
    return f"{e.to_isl()} >= 0"


def box_constraints(names: Sequence[str], sizes: Sequence) -> list[str]:
    return [f"0 <= {n} < {Expr.of(s).to_isl()}" for n, s in zip(names, sizes, strict=True)]


def set_text(params: Sequence[str], tuple_name: str, names: Sequence[str], constraints: Iterable[str]) -> str:
    cs = " and ".join(constraints)
    body = f"{tuple_name}[{', '.join(names)}]" + (f" : {cs}" if cs else "")
    return params_prefix(params) + "{ " + body + " }"


def map_text(params: Sequence[str], src: str, names: Sequence[str], dst: str, exprs: Sequence[Expr],
             constraints: Iterable[str]) -> str:
    cs = " and ".join(constraints)
    body = f"{src}[{', '.join(names)}] -> {dst}[{', '.join(e.to_isl() for e in exprs)}]" + (f" : {cs}" if cs else "")
    return params_prefix(params) + "{ " + body + " }"


def _parse(cls, what: str, text: str):
    try:
        return cls(text)
    except isl.Error as e:
        fail("InternalError", "Poly-View", f"isl cannot parse the {what} {text[:300]!r}: {e}")


@lru_cache(maxsize=8192)
def parse_set(text: str) -> isl.Set:
    return _parse_named(isl.Set, "set", text)


@lru_cache(maxsize=8192)
def parse_map(text: str) -> isl.Map:
    return _parse_named(isl.Map, "map", text)


_TUPLE = re.compile(r"(?<![A-Za-z0-9_])([A-Za-z_][A-Za-z0-9_]*)(?=\s*\[)")
_PLACE = ("polysat_p0", "polysat_p1")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _parse_named(cls, what: str, text: str):
    """``_parse(cls, what, text)`` through ``parse_renamed`` with the text's own tuple names."""
    names = list(dict.fromkeys(_TUPLE.findall(text)))
    obj = parse_renamed(cls, text, names) if len(names) == (1 if cls is isl.Set else 2) else None
    return obj if obj is not None else _parse(cls, what, text)


def parse_renamed(cls, text: str, names: Sequence[str]):
    """``cls(text)`` (an isl Set or Map) whose tuples are named ``names`` (a set's one, a map's domain and
    range), parsed once per text with those names replaced by placeholders, then named: access maps and
    statements of different nodes and candidate regions differ mostly by their names. None when the text
    is not of that form or does not parse: the caller parses it itself, for its own diagnostic."""
    names = list(names)
    if len(set(names)) != len(names) or any(p in text for p in _PLACE):
        return None
    renamed = rename_tuples(text, dict(zip(names, _PLACE)))
    if renamed is None:
        return None
    try:
        obj = _parse_generic(cls, renamed)
    except isl.Error:
        return None
    if cls is isl.Set:
        return obj.set_tuple_name(names[0]) if obj.get_tuple_name() == _PLACE[0] else None
    if len(names) != 2 or (obj.get_tuple_name(isl.dim_type.in_), obj.get_tuple_name(isl.dim_type.out)) != _PLACE:
        return None
    return obj.set_tuple_name(isl.dim_type.in_, names[0]).set_tuple_name(isl.dim_type.out, names[1])


def rename_tuples(text: str, ren: Mapping[str, str]) -> "str | None":
    """text with every tuple name (an identifier before ``[``) that ren maps renamed, through one compiled
    pattern for every text; None when a name of ren is not an identifier (the caller takes its slow path)."""
    if not all(_IDENTIFIER.fullmatch(n) for n in ren):
        return None
    parts = tuple_template(text)
    return with_template(tuple(p if k % 2 == 0 else ren.get(p, p) for k, p in enumerate(parts)))


_TEMPLATES: dict = {}  # text -> its tuple_template


def tuple_template(text: str) -> tuple:
    """text split at its tuple names: (text, name, text, name, .., text), kept per text (a search renames the
    same texts many times)."""
    got = _TEMPLATES.get(text)
    if got is None:
        out, at = [], 0
        for m in _TUPLE.finditer(text):
            out += [text[at:m.start()], m.group(1)]
            at = m.end()
        got = _keep_template(text, tuple(out + [text[at:]]))
    return got


def with_template(parts: tuple) -> str:
    """The text these parts of a tuple_template spell, its template kept (a renamed text is not scanned again)."""
    text = "".join(parts)
    if text not in _TEMPLATES:
        _keep_template(text, parts)
    return text


def _keep_template(text: str, parts: tuple) -> tuple:
    if len(_TEMPLATES) > 65536:
        _TEMPLATES.clear()
    _TEMPLATES[text] = parts
    return parts


_BY_ID: dict = {}  # id(obj) -> [obj, {what: value}, its text, its tuple_template, (source's template, renaming)]


def printed(obj) -> str:
    """str(obj) outside any operation quota (settext.isl_quota): isl's printer fails once a quota is spent, and
    islpy then reads the printer it freed (a segmentation fault: Longformer's sliding-window halos)."""
    ctx = obj.get_ctx()
    limit = ctx.get_max_operations()
    if not limit:
        return str(obj)
    ctx.set_max_operations(0)
    try:
        return str(obj)
    finally:
        ctx.set_max_operations(limit)


def fresh(obj):
    """A copy of the isl object read back from its text (held once printed): it shares nothing with obj, and isl's
    reader leaves out the empty pieces an operation's result may keep (analyses/footprint.py _readable)."""
    return type(obj).read_from_str(obj.get_ctx(), held(obj)[2])


def held(obj) -> list:
    """[obj, its memo, its text, its text's tuple_template (None until asked: :func:`held_parts`), ...] of an isl Set
    or Map: its text printed once per object (the key of the caches kept by text, analyses/footprint.py), or made
    from its source's where it was held renamed (:func:`held_renamed`); holding obj keeps its id from being reused."""
    hit = _BY_ID.get(id(obj))
    if hit is None or hit[0] is not obj:
        if len(_BY_ID) > 50000:
            _BY_ID.clear()
        hit = _BY_ID[id(obj)] = [obj, {}, printed(obj), None, None]
    elif hit[2] is None:  # held renamed: its text is its source's, renamed
        parts, ren = hit[4]
        hit[3] = tuple(p if k % 2 == 0 else ren[p] for k, p in enumerate(parts))
        hit[2] = "".join(hit[3])
    return hit


def held_parts(obj) -> tuple:
    """tuple_template of obj's held text, kept with it."""
    return parts_of(held(obj))


def parts_of(hit: list) -> tuple:
    """held_parts of the object ``hit`` (what :func:`held` gave) holds."""
    if hit[3] is None:
        hit[3] = tuple_template(hit[2])
    return hit[3]


def held_renamed(src, out, ren: Mapping[str, str]):
    """out, which is src with its tuple names mapped by ``ren`` (every name src's text holds), held with src's
    text so renamed (made when first asked) and src's memo (whose values no tuple name changes): out is never
    printed. A text holding a name ren lacks leaves out unheld."""
    hit = held(src)
    parts, memo = parts_of(hit), hit[1]
    if len(parts) < 3 or any(p not in ren for p in parts[1::2]):
        return out
    if len(_BY_ID) > 50000:
        _BY_ID.clear()
    _BY_ID[id(out)] = [out, memo, None, None, (parts, ren)]
    return out


_KEPT: dict = {}  # (kind, the objects' texts without their tuple names) -> the fact


def kept(kind: str, objs: tuple, fn):
    """fn(), a fact of the isl objects ``objs`` that renaming their tuples (consistently: the names the objects
    share stay shared, as in any one bound region) does not change, kept by ``kind`` and the objects' texts
    without their tuple names: the regions of a search ask it of the same statements under other names."""
    key = (kind, *(held_parts(x)[0::2] for x in objs))
    got = _KEPT.get(key)
    if got is None:
        if len(_KEPT) > 50000:
            _KEPT.clear()
        got = _KEPT[key] = fn()
    return got


@lru_cache(maxsize=8192)
def _parse_generic(cls, text: str):
    return cls(text)


def is_isl_identifier(name: str) -> bool:
    return bool(_IDENTIFIER.fullmatch(name)) and name not in _KEYWORDS


def val_int(v: isl.Val) -> "int | None":
    """An isl value as a Python int; None for the infinite or NaN extreme of an unbounded or empty set (isl's own
    ``to_python`` raises a bare ValueError there)."""
    return v.to_python() if v.is_int() else None


def simplify_map(m: isl.Map) -> isl.Map:
    """coalesce + remove_redundancies: the same relation, fewer pieces and constraints."""
    return m.coalesce().remove_redundancies()


def in_bounds_gist(m: isl.Map, domain: isl.Set) -> isl.Set:
    """Where in its domain a read is defined, gisted against the domain: just the guard
    constraints the domain does not imply (the predicate of a padded read, docs/DESIGN.md §IndexBook invariant 7)."""
    return m.domain().gist(domain).coalesce()


def points(s: isl.Set) -> list[tuple]:
    """All points of a bounded, parameter-free set (for tests and small enumerations)."""
    n = s.dim(isl.dim_type.set)
    out: list = []
    s.foreach_point(lambda p: out.append(tuple(p.get_coordinate_val(isl.dim_type.set, k).to_python()
                                               for k in range(n))))
    return out


def map_pairs(m: isl.Map) -> set:
    """All (in, out) tuples of a bounded, parameter-free map."""
    n_in = m.dim(isl.dim_type.in_)
    return {(p[:n_in], p[n_in:]) for p in points(m.wrap())}


# ---- bounds-aware simplification of Exprs (before they become isl text) --------------------------

def box_of(names, sizes) -> dict:
    """{name: (0, size-1)} with None for a symbolic upper bound."""
    return {n: (0, s - 1 if isinstance(s, int) else None) for n, s in zip(names, sizes, strict=True)}


def bounds(e: Expr, box: Box) -> tuple:
    """Interval (lo, hi) of e over box; None where unknown. Unknown variables (symbols) are >= 0."""
    lo: int | None = 0
    hi: int | None = 0
    for m, c in e.terms:
        if not m:
            lo = None if lo is None else lo + c
            hi = None if hi is None else hi + c
            continue
        if len(m) != 1:
            return None, None
        a = m[0]
        if isinstance(a, str):
            alo, ahi = box.get(a, (0, None))
        else:
            nlo, nhi = bounds(a.num, box)
            alo = None if nlo is None else nlo // a.q
            ahi = None if nhi is None else nhi // a.q
        tlo, thi = (alo, ahi) if c > 0 else (ahi, alo)
        lo = None if lo is None or tlo is None else lo + c * tlo
        hi = None if hi is None or thi is None else hi + c * thi
    return lo, hi


def _add(d: dict, e: Expr, c: int) -> None:
    for m, k in e.terms:
        d[m] = d.get(m, 0) + c * k


def _fold_divs(e: Expr, box: Box) -> Expr:
    """Replace each floordiv atom whose quotient is constant over the box by that constant."""
    if all(isinstance(a, str) for m, _ in e.terms for a in m):
        return e
    d: dict = {}
    for m, c in e.terms:
        if len(m) == 1 and isinstance(m[0], FloorDiv):
            lo, hi = bounds(m[0].num, box)
            if lo is not None and hi is not None and lo // m[0].q == hi // m[0].q:
                d[()] = d.get((), 0) + c * (lo // m[0].q)
                continue
        d[m] = d.get(m, 0) + c
    return Expr.from_terms(d)


def simplify(e: Expr, box: Box) -> Expr:
    """Fold size-1 axes to 0 and floordivs that are constant over the box (exact rewrites only). Made once per
    expression and bounds of the variables it reads: region synthesis asks again for each index tuple it meets
    through a chain of views (Longformer's windows: 42,060 asks, 1,438 distinct, in one kernel)."""
    if e.is_const:
        return e
    return _simplified(e, tuple((v, box[v]) for v in sorted(e.variables()) if v in box))


@lru_cache(maxsize=65536)
def _simplified(e: Expr, bounds: tuple) -> Expr:
    return _simplify(e, dict(bounds))


def _simplify(e: Expr, box: Box) -> Expr:
    d: dict = {}
    for m, c in e.terms:
        if len(m) > 1:  # a product (sizes only): leave as is
            d[m] = d.get(m, 0) + c
        elif not m:
            d[()] = d.get((), 0) + c
        elif isinstance(m[0], str):
            lo, hi = box.get(m[0], (None, None))
            if lo is not None and lo == hi:
                d[()] = d.get((), 0) + c * lo
            else:
                d[m] = d.get(m, 0) + c
        else:
            _add(d, _fold_divs(simplify(m[0].num, box).floordiv(m[0].q), box), c)
    return Expr.from_terms(d)


def subs(e: Expr, env: Mapping[str, Expr]) -> Expr:
    """``e.subs(env)`` with one canonicalization per expression (the hot path of map composition)."""
    d: dict = {}
    for m, c in e.terms:
        if not m:
            d[()] = d.get((), 0) + c
        elif len(m) > 1:
            _add(d, Expr(((m, c),)).subs(env), 1)
        elif isinstance(m[0], str):
            if m[0] in env:
                _add(d, env[m[0]], c)
            else:
                d[m] = d.get(m, 0) + c
        else:
            _add(d, subs(m[0].num, env).floordiv(m[0].q), c)
    return Expr.from_terms(d)


def always_true(g: Expr, box: Box) -> bool:
    lo, _ = bounds(g, box)
    return lo is not None and lo >= 0
