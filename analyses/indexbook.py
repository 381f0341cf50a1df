"""IndexBook: per value its axes, domain, AxisMaps and reduce axes, built from Tiny IR (docs/DESIGN.md §IndexBook).

One entry per Tiny IR node id, built deterministically in program order (docs/DESIGN.md §IndexBook update rules):

* axes ``i0, i1, ..`` with stable ids (a unary op inherits its input's ids), size Int or symbol and kind
  ``iter`` | ``broadcast`` (size 1); a REDUCE deletes its axes, names them ``r0, r1, ..`` in its
  iteration space and records their ids before deletion in ``reduce_axes``;
* a movement node's ``inputs`` is its one source with its local AxisMap; a compute node's ``inputs``
  are composed through movement-only chains down to non-movement values (invariant 7), each with
  the guard of its in-bounds piece and the padding tests met on the way;
* the domain is the box ``0 <= ik < size_k`` split into pieces where padding is read (a padded conv input);
* a node whose sizes or maps are not affine (products of symbols, division by a symbol) is
  ``non_scop``: composition stops there and it becomes a region boundary (invariant 5).

AxisExprs are affine + floordiv only: ``%`` is written ``E - q*floor(E/q)`` whose div isl defines by
the guard ``q*f <= E < q*f + q`` (invariant 1). :func:`validate` checks the invariants,
:func:`align_params` aligns the symbols to the signature (E1304).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Iterable, Sequence

from ..ir.diagnostics import Diagnostic, PolysatError, diag, fail
from ..ir.expr import Expr, FloorDiv
from ..ir.movement import LocalMap, NonAffine, local_map, reshape_exprs, var  # noqa: F401  (re-exported)
from ..ir.shapes import Dim, dim_json
from ..ir.tiny import GroupOp, Ops, Program, UOp
from . import isl_util as iu
from .isl_util import Box, always_true, box_of, simplify, subs
from ..knobs import max_pieces
from .read_bounds import access_map, unguarded  # noqa: F401  (access_map re-exported)

ITER, REDUCE, BROADCAST = "iter", "reduce", "broadcast"
MAX_PIECES = max_pieces()  # more padding tests than this on one access is W2101 ExcessivePiecewise (knob)


# ---- the book ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Axis:
    id: int
    name: str
    size: Dim
    kind: str


@dataclass(frozen=True)
class PadTest:
    """One padding test met on a read: outside ``guard`` (each ``e >= 0``) the read gives ``value``."""
    guard: tuple
    value: Any


@dataclass(frozen=True)
class Access:
    """A read of ``value_id``: its index per source axis over the reader's iteration space,
    defined on the in-bounds piece ``guard`` (each ``e >= 0``). ``pads`` are the padding tests met
    on the way, reader side first: the first one that fails gives its value instead of a read."""
    value_id: str
    map: tuple
    guard: tuple = ()
    pads: tuple = ()

    @property
    def fill(self) -> Any:
        """The padding value when every padding test on the way uses the same one (else None)."""
        vals = {repr(p.value) for p in self.pads}
        return self.pads[0].value if len(vals) == 1 else None


@dataclass(frozen=True)
class Piece:
    kind: str  # "in" (reads its source) | "pad" (the complement: the padding value)
    guard: tuple = ()
    value: Any = None


@dataclass(frozen=True)
class ValueInfo:
    value_id: str
    op: Ops
    axes: tuple  # Axis, the value's own axes i0..
    space: tuple  # Axis, its iteration space: axes + reduce axes r0.. (REDUCE only)
    pieces: tuple  # Piece; one "in" piece without guard when the domain is a plain box
    inputs: tuple  # Access over the iteration space
    reduce_axes: tuple = ()  # axis ids of the source before deletion
    non_scop: str | None = None  # why the value is outside the SCoP (a region boundary)

    @property
    def space_names(self) -> tuple:
        return tuple(a.name for a in self.space)

    @cached_property
    def box(self) -> dict:
        """{axis name: (lo, hi)} of the iteration space (built once per value: compose keys every read by it;
        read only)."""
        return box_of(self.space_names, [a.size for a in self.space])


@dataclass
class IndexBook:
    program: Program
    entries: dict  # node id -> ValueInfo, in program order
    params: tuple  # symbols, aligned to the signature
    diagnostics: list = field(default_factory=list)  # warnings (W2101)
    _memo: dict = field(default_factory=dict, repr=False)
    cones: dict = field(default_factory=dict, repr=False)  # node id -> cone number (books built with reuse)

    def __getitem__(self, vid: str) -> ValueInfo:
        return self.entries[vid]

    def __iter__(self):
        return iter(self.entries.values())

    # ---- composition through movement chains (for Poly-View and RB-SSA Read maps) ----------------
    def to_base(self, vid: str, stops: frozenset = frozenset()) -> Access:
        """The read of value vid over its own axes, composed through movement down to a source:
        a non-movement value, a non_scop node or one of ``stops`` (region inputs). The chain is followed by a
        loop, then composed from the source up (a chain of views as long as the model costs no frames)."""
        chain, v = [], vid  # the movement values above the source, outermost first
        while True:
            acc = self._memo.get((v, stops))
            if acc is not None:
                break
            info, node = self.entries[v], self.program[v]
            if node.op not in GroupOp.Movement or v in stops or info.non_scop:
                acc = self._memo[v, stops] = Access(v, tuple(Expr.var(a.name) for a in info.axes))
                break
            chain.append(v)
            (inp,) = info.inputs
            v = inp.value_id
        for v in reversed(chain):
            info = self.entries[v]
            (inp,) = info.inputs
            acc = self._memo[v, stops] = self.compose(info.box, inp.map, inp.guard, inp.pads, acc)
        return acc

    def compose(self, box: Box, exprs: tuple, guard: tuple, pads: tuple, inner: Access) -> Access:
        """Read inner (over the source's axes i0..) through the map exprs (over box's vars). A pure function of
        its arguments, kept across books by all of them but the value read (a search builds the books of many
        programs that share most reads); padding values are keyed by repr, so -0.0 and 0.0 stay apart."""
        key = (tuple(box.items()), exprs, guard, repr(pads), inner.map, inner.guard, repr(inner.pads))
        hit = _COMPOSED.get(key)
        if hit is None:
            if len(_COMPOSED) > 200000:
                _COMPOSED.clear()
            hit = _COMPOSED[key] = _compose(box, exprs, guard, pads, inner)
        # the read's index does not depend on which value it reads (the identical experts of a mixture compose alike)
        return hit if hit.value_id == inner.value_id else Access(inner.value_id, hit.map, hit.guard, hit.pads)

    def sources(self, vid: str, stops: Iterable[str] = ()) -> tuple:
        """The reads computing value vid performs, over its iteration space, each composed through
        movement-only chains to a non-movement value, a non_scop node or a value in ``stops``.

        A movement value gives the one read of its chain's source; a compute value one read per
        operand. Each :class:`Access` holds the source id, the index map (an Expr per source axis,
        over ``i0..`` and ``r0..``), the guard of its in-bounds piece and the padding tests."""
        stops = frozenset(stops)
        info = self.entries[vid]
        node = self.program[vid]
        if node.op in GroupOp.Leaf or info.non_scop and node.op in GroupOp.Movement:
            return ()
        if node.op in GroupOp.Movement:
            (inp,) = info.inputs
            return (self.compose(info.box, inp.map, inp.guard, inp.pads, self.to_base(inp.value_id, stops)),)
        out = []
        for s, m in zip(node.src, _operand_maps(node, info), strict=True):
            out.append(self.compose(info.box, m, (), (), self.to_base(s, stops)))
        return tuple(out)


_COMPOSED: dict = {}  # IndexBook.compose's arguments -> its Access


def _compose(box: Box, exprs: tuple, guard: tuple, pads: tuple, inner: Access) -> Access:
    if not guard and not pads and exprs == _identity(len(exprs)) and all(v in box for v in exprs_vars(inner)):
        return inner  # same-shape elementwise read: nothing to substitute
    env = {f"i{k}": e for k, e in enumerate(exprs)}
    m = tuple(simplify(subs(e, env), box) for e in inner.map)
    g = _prune(tuple(guard) + tuple(simplify(subs(c, env), box) for c in inner.guard), box)
    ps = tuple(pads) + tuple(PadTest(_prune(tuple(simplify(subs(c, env), box) for c in p.guard), box), p.value)
                             for p in inner.pads)
    ps = tuple(p for p in ps if p.guard)
    return Access(inner.value_id, m, g, ps)


_IDENTITY: dict = {}


def _identity(n: int) -> tuple:
    if n not in _IDENTITY:
        _IDENTITY[n] = tuple(Expr.var(f"i{k}") for k in range(n))
    return _IDENTITY[n]


def exprs_vars(acc: Access) -> set:
    return set().union(*(e.variables() for e in acc.map + acc.guard)) if acc.map or acc.guard else set()


def _prune(guard: tuple, box: Box) -> tuple:
    """Drop constraints the box implies and duplicates (remove_redundancies on Exprs)."""
    return tuple(dict.fromkeys(g for g in guard if not always_true(g, box)))


def _operand_maps(node: UOp, info: ValueInfo) -> list:
    """Each operand's index over the node's iteration space (identity; REDUCE re-inserts r..)."""
    if node.op == Ops.REDUCE:
        ax = set(node.arg["axes"])
        it_i, it_r, m = 0, 0, []
        for k in range(len(node.arg["axes"]) + len(node.shape)):
            if k in ax:
                m.append(Expr.var(f"r{it_r}"))
                it_r += 1
            else:
                m.append(Expr.var(f"i{it_i}"))
                it_i += 1
        return [tuple(m)]
    if node.op == Ops.CONTRACT:
        out, red = node.arg["out_idx"], node.arg["reduce_idx"]
        name = {n: f"i{k}" for k, n in enumerate(out)} | {n: f"r{k}" for k, n in enumerate(red)}
        return [tuple(Expr.var(name[n]) for n in node.arg[side]) for side in ("lhs_idx", "rhs_idx")]
    return [tuple(Expr.var(a.name) for a in info.axes)] * len(node.src)


# ---- building ---------------------------------------------------------------------------------------

def _size_ok(d: Dim) -> bool:
    return isinstance(d, int) or d.is_affine


_CONES: dict = {}  # (node, its sources' cone numbers) -> the cone's number: equal numbers, equal cones
_SHARED: dict = {}  # cone number -> the finished entry of its top node (books built with reuse=True)
_VALID: set = set()  # (cone number, params): entries validate() passed


def _cone_numbers(program: Program) -> dict:
    """node id -> the number of its cone (the node and, recursively, its sources; ids included)."""
    if len(_CONES) > 200000:  # the numbers name the shared entries: both go together
        _CONES.clear()
        _SHARED.clear()
        _VALID.clear()
    out: dict = {}
    for n in program.nodes:
        k = (n, tuple(out[s] for s in n.src))
        c = _CONES.get(k)
        if c is None:
            c = _CONES[k] = len(_CONES)
        out[n.id] = c
    return out


def build_indexbook(program: Program, symbols: Sequence[str] | None = None, reuse: bool = False) -> IndexBook:
    """The IndexBook of a program, aligned to the signature's symbols (default: the inputs'). With ``reuse``, an
    entry whose cone (the node and its sources, recursively, ids included) an earlier such book held is taken from
    it: an entry is a function of its cone (the reads are composed down the cone), except the axis ids, which then
    are unique per cone rather than per book (they key nothing the pricing reads; dumps build with reuse off). A
    search builds the books of many extracted programs that share most of their values."""
    entries: dict = {}
    next_id = 0
    cones = _cone_numbers(program) if reuse else {}
    shared = {n.id: _SHARED[cones[n.id]] for n in program.nodes if cones.get(n.id) in _SHARED}

    def fresh_axes(shape, prefix="i", kinds=None) -> tuple:
        nonlocal next_id
        out = []
        for k, d in enumerate(shape):
            kind = kinds[k] if kinds else (BROADCAST if d == 1 else ITER)
            out.append(Axis(next_id, f"{prefix}{k}", d, kind))
            next_id += 1
        return tuple(out)

    for node in program.nodes:
        if node.id in shared:
            entries[node.id] = shared[node.id]
            continue
        non_scop = None
        bad = [d for d in node.shape if not _size_ok(d)]
        if bad:
            non_scop = f"size {bad[0]} is a product of symbols (not affine)"
        if node.op in GroupOp.Unary:
            axes = entries[node.src[0]].axes
        else:
            axes = fresh_axes(node.shape)
        space, inputs, pieces, reduce_axes = axes, (), (Piece("in"),), ()
        if node.op in GroupOp.Movement:
            src = program[node.src[0]]
            try:
                lm = local_map(node, src)
                inputs = (Access(src.id, lm.exprs, lm.guard,
                                 (PadTest(lm.guard, lm.pad_value),) if lm.pad_value is not None and lm.guard else ()),)
            except NonAffine as e:
                non_scop = non_scop or str(e)
                inputs = (Access(src.id, (), (), ()),)
        elif node.op in GroupOp.Indirect:  # rule 5: an index read from memory is not affine
            non_scop = f"{node.op.name} reads at indices computed at run time (not affine)"
            inputs = tuple(Access(s, (), (), ()) for s in node.src)
        elif node.op == Ops.REDUCE:
            src_axes = entries[node.src[0]].axes
            reduce_axes = tuple(src_axes[k].id for k in node.arg["axes"])
            red = fresh_axes([src_axes[k].size for k in node.arg["axes"]], "r", [REDUCE] * len(node.arg["axes"]))
            space = axes + red
        elif node.op == Ops.CONTRACT:  # einsum form: reduce axes are the operand indices not in out_idx
            where = {}
            for side, s in zip(("lhs_idx", "rhs_idx"), node.src, strict=True):
                for k, n in enumerate(node.arg[side]):
                    where.setdefault(n, entries[s].axes[k])
            red_idx = node.arg["reduce_idx"]
            reduce_axes = tuple(where[n].id for n in red_idx)
            space = axes + fresh_axes([where[n].size for n in red_idx], "r", [REDUCE] * len(red_idx))
        if non_scop and node.op not in GroupOp.Movement | GroupOp.Leaf | GroupOp.Indirect:
            info0 = ValueInfo(node.id, node.op, axes, space, pieces, (), reduce_axes, non_scop)
            inputs = tuple(Access(s, m) for s, m in zip(node.src, _operand_maps(node, info0), strict=True))
        info = ValueInfo(node.id, node.op, axes, space, pieces, inputs, reduce_axes, non_scop)
        entries[node.id] = info
    book = IndexBook(program, entries, ())
    # compose compute inputs and the pieces of movement values (needs the whole book for to_base)
    for vid, info in entries.items():
        node = program[vid]
        if info.non_scop or node.op in GroupOp.Leaf or vid in shared:
            continue
        if node.op in GroupOp.Movement:
            (acc,) = book.sources(vid)
            pieces = _pieces(acc)
            entries[vid] = replace(info, pieces=pieces)
        else:
            entries[vid] = replace(info, inputs=book.sources(vid))
    book._memo.clear()
    for info in entries.values():
        for acc in info.inputs:
            if len(acc.pads) > MAX_PIECES:
                book.diagnostics.append(diag(
                    "ExcessivePiecewise", info.value_id,
                    f"the read of {acc.value_id} passes {len(acc.pads)} padding tests (limit {MAX_PIECES})"))
    book.cones = cones
    return align_params(book, symbols if symbols is not None else sorted(program.symbols()))


def _pieces(acc: Access) -> tuple:
    if not acc.guard:
        return (Piece("in"),)
    return (Piece("in", acc.guard), Piece("pad", acc.guard, acc.fill))


# ---- invariants (docs/DESIGN.md §IndexBook) and signature alignment ---------------------------------------

def book_symbols(book: IndexBook) -> dict:
    """symbol -> the first place (value id) that uses it."""
    out: dict = {}
    for info in book:
        for v, where in _entry_symbols(info):
            out.setdefault(v, where)
    return out


def _entry_symbols(info: ValueInfo) -> tuple:
    """(symbol, place) for each symbol use of one entry, in order; kept on the entry (an entry is shared by the
    books of a search's programs, ``build_indexbook`` with reuse)."""
    got = info.__dict__.get("_symbols")
    if got is None:
        out = []

        def see(e, where):
            for v in Expr.of(e).variables():
                if not _axis_like(v):
                    out.append((v, where))
        for a in info.space:
            see(a.size, f"{info.value_id}.{a.name}")
        for acc in info.inputs:
            for e in acc.map + acc.guard:
                see(e, f"{info.value_id} -> {acc.value_id}")
        got = info.__dict__["_symbols"] = tuple(out)
    return got


def _axis_like(name: str) -> bool:
    return len(name) > 1 and name[0] in "ir" and name[1:].isdigit()


def align_params(book: IndexBook, symbols: Sequence[str]) -> IndexBook:
    """Order the isl parameters as the signature's symbols; a symbol the signature lacks is E1304."""
    clash = [s for s in symbols if _axis_like(s) or not iu.is_isl_identifier(s)]
    if clash:
        fail("AxisAlignmentMismatch", "IndexBook.align_params",
             f"symbol {clash[0]!r} clashes with the axis names i0, i1, .. / r0, r1, .. or with isl's keywords",
             "Rename the symbol in the graph signature (e.g. to an upper-case name such as M or SEQ).")
    used = book_symbols(book)
    extra = [s for s in used if s not in symbols]
    if extra:
        s = extra[0]
        fail("AxisAlignmentMismatch", "IndexBook.align_params",
             f"{used[s]} uses symbol {s!r}, which the graph signature does not define "
             f"(signature symbols: {', '.join(symbols) or 'none'})")
    book.params = tuple(symbols)
    return book


def validate(book: IndexBook, infos: "Iterable[ValueInfo] | None" = None) -> None:
    """Check the invariants of docs/DESIGN.md §IndexBook (and bounds of every read) of ``infos`` (default: every
    entry); raise the diagnostics."""
    errs: list[Diagnostic] = []
    for info in book if infos is None else infos:
        node = book.program[info.value_id]
        names = [a.name for a in info.axes]
        if names != [f"i{k}" for k in range(len(names))]:  # rule 2
            errs.append(diag("InternalError", info.value_id, f"axes are named {names}, not i0, i1, .."))
        if node.op == Ops.REDUCE:  # rule 4
            src_ids = [a.id for a in book[node.src[0]].axes]
            if len(info.axes) + len(info.reduce_axes) != len(src_ids) or not set(info.reduce_axes) <= set(src_ids):
                errs.append(diag("InternalError", info.value_id, "reduce_axes do not name the deleted source axes"))
        if info.non_scop:  # rule 5: nothing below needs to hold outside the SCoP
            continue
        for acc in info.inputs:
            src = book.program[acc.value_id]
            for e in acc.map + acc.guard:
                if not e.is_affine:  # rule 1
                    errs.append(diag("NonAffineIndex", info.value_id, f"AxisExpr {e} is not affine + floordiv"))
                for fd in _floordivs(e):  # rule 6
                    coeffs = [c for m, c in fd.num.terms if m]
                    if fd.q <= 1 or math.gcd(fd.q, *coeffs) != 1:
                        errs.append(diag("NonAffineIndex", info.value_id,
                                         f"floordiv {fd} is not in lowest terms with a positive denominator"))
            if len(acc.map) != src.ndim:
                errs.append(diag("InternalError", info.value_id, f"map to {acc.value_id} has {len(acc.map)} "
                                 f"entries for {src.ndim} axes"))
                continue
            if node.op == Ops.EXPAND and acc is info.inputs[0]:  # rule 3
                for k, (a, b) in enumerate(zip(src.shape, node.shape, strict=True)):
                    if a == 1 and b != 1 and acc.map[k] != Expr.const(0):
                        errs.append(diag("InternalError", info.value_id, f"broadcast axis {k} maps to {acc.map[k]}, not 0"))
            err = unguarded(book, info, acc)
            if err:
                errs.append(err)
    if errs:
        raise PolysatError(errs)


def _floordivs(e: Expr):
    for m, _ in e.terms:
        for a in m:
            if isinstance(a, FloorDiv):
                yield a
                yield from _floordivs(a.num)


def domain_set(book: IndexBook, info: ValueInfo, name: str):
    names = info.space_names
    return iu.parse_set(iu.set_text(book.params, name, names,
                                    iu.box_constraints(names, [a.size for a in info.space])))


# ---- JSON (--dump=indexbook) --------------------------------------------------------------------

def _geq(e: Expr) -> str:
    return f"0 <= {e}"


def access_json(acc: Access) -> dict:
    d: dict = {"value_id": acc.value_id, "map": [str(e) for e in acc.map]}
    if acc.guard:
        d["guard"] = [_geq(g) for g in acc.guard]
    if acc.pads:
        d["pads"] = [{"guard": [_geq(g) for g in p.guard], "value": _jsonable(p.value)} for p in acc.pads]
    return d


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


def entry_json(info: ValueInfo) -> dict:
    d: dict = {
        "op": info.op.value,
        "axes": [{"id": a.id, "name": a.name, "size": dim_json(a.size), "kind": a.kind} for a in info.axes],
        "domain": {"constraints": [[f"0<={a.name}", f"{a.name}<{dim_json(a.size)}"] for a in info.space]},
        "inputs": [access_json(a) for a in info.inputs],
    }
    if len(info.pieces) > 1 or info.pieces[0].guard:
        d["domain"]["pieces"] = [
            {"kind": "in", "constraints": [_geq(g) for g in p.guard]} if p.kind == "in"
            else {"kind": "pad", "value": _jsonable(p.value), "constraints": ["else_pad_piece"]}
            for p in info.pieces]
    if info.reduce_axes:
        d["reduce_axes"] = list(info.reduce_axes)
        d["reduce_space"] = [{"id": a.id, "name": a.name, "size": dim_json(a.size), "kind": a.kind}
                             for a in info.space[len(info.axes):]]
    if info.non_scop:
        d["non_scop"] = info.non_scop
    return d


def book_to_json(book: IndexBook) -> dict:
    """``{"index_book": {value id: entry}, "params", "diagnostics"}`` (``--dump=indexbook``)."""
    return {"index_book": {vid: entry_json(info) for vid, info in book.entries.items()},
            "params": list(book.params),
            "diagnostics": [d.to_json() for d in book.diagnostics]}


def checked_indexbook(program: Program, symbols: Sequence[str] | None = None, reuse: bool = False) -> IndexBook:
    """Build, then validate: the IndexBook stage of the pipeline. With ``reuse`` (``build_indexbook``), an entry
    validated under the same params before is not validated again (validate reads only the entry's cone), and the
    book's entries are kept for the next books."""
    book = build_indexbook(program, symbols, reuse)
    if not reuse:
        validate(book)
        return book
    fresh = [info for vid, info in book.entries.items() if (book.cones[vid], book.params) not in _VALID]
    validate(book, fresh)
    for info in fresh:
        c = book.cones[info.value_id]
        _SHARED.setdefault(c, info)
        _VALID.add((c, book.params))
    return book


def indexbook_json(program: Program, symbols: Sequence[str] | None = None) -> dict:
    """The ``indexbook.json`` dump of a program."""
    return book_to_json(checked_indexbook(program, symbols))


def check_dump(doc: Any) -> None:
    """Check an ``indexbook.json`` document's AxisExprs: ``%`` left in a map is E1203 (it must be
    linearized to div + guard), anything else not affine + floordiv is E1201."""
    from ..ir.expr import parse
    if not isinstance(doc, dict) or not isinstance(doc.get("index_book"), dict):
        fail("MalformedStructure", "indexbook.json", "an IndexBook dump is {\"index_book\": {value id: entry}}")
    errs: list[Diagnostic] = []
    for vid, entry in doc["index_book"].items():
        for inp in entry.get("inputs", []):
            for k, text in enumerate(inp.get("map", [])):
                at = f"{vid} -> {inp.get('value_id')} map[{k}]"
                if "%" in str(text) or " mod " in f" {text} ":
                    errs.append(diag("MissingDivGuard", at, f"AxisExpr {text!r} keeps a modulo"))
                    continue
                try:
                    e = parse(str(text))
                except ValueError as err:
                    errs.append(diag("NonAffineIndex", at, str(err)))
                    continue
                if not e.is_affine:
                    errs.append(diag("NonAffineIndex", at, f"AxisExpr {text!r} is not affine + floordiv"))
    if errs:
        raise PolysatError(errs)
