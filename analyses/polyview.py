"""Poly-View: SCoP blocks with their isl domain and access relations (docs/DESIGN.md §Poly-View).

Built from the IndexBook. A block is one statement: its domain is the box of its iteration space
(``i0..`` then the reduce axes ``r0..``), and its accesses are isl maps from that space to tensors,
each marked ``read`` or ``write``; reads are composed through movement-only chains and are defined
on their in-bounds piece only (padding is not a read; ``in_bounds`` gives that piece gisted against
the domain, i.e. the predicate a padded read needs). Maps are coalesced and freed of redundant
constraints. Blocks are made for every compute value, and
for program outputs that are pure data movement (a copy block). Values outside the SCoP
(``non_scop``) get no block: they are listed as region boundaries and read as tensors.

``REDUCE(SUM)`` over a ``MUL`` whose operands are movement-only views, where every reduce axis
indexes both operands and the operands are two different reads (not a square), is a ContractionPattern (``matmul``
when every operand index is one variable, ``conv`` when some index combines variables with offsets), with ``lhs_idx, rhs_idx, out_idx, reduce_idx, affine_offsets`` as in §Poly-View; the MUL is
folded into the contraction block when nothing else reads it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import islpy as isl

from ..ir.dtypes import DType
from ..ir.expr import Expr
from ..ir.tiny import GroupOp, Ops, Program
from . import isl_util as iu
from .indexbook import Access, IndexBook, ValueInfo, access_map, checked_indexbook, domain_set


@dataclass(frozen=True)
class AccessRel:
    tensor: str  # isl tuple name of the range
    value_id: str  # the node read or written
    kind: str  # "read" | "write"
    map: isl.Map
    access: Access | None = None  # the Expr form of a read
    in_bounds: isl.Set | None = None  # a padded read: its in-bounds piece, gisted against the domain


@dataclass
class Block:
    name: str
    value_id: str
    kind: str  # contraction_pattern | reduce | elementwise | copy
    space: tuple  # iteration variable names
    domain: isl.Set
    accesses: list
    attrs: dict = field(default_factory=dict)

    def reads(self) -> list:
        return [a for a in self.accesses if a.kind == "read"]

    def writes(self) -> list:
        return [a for a in self.accesses if a.kind == "write"]


@dataclass
class PolyView:
    book: IndexBook
    blocks: list
    edges: list  # {"from", "to", "tensor"}
    non_scop: list  # {"value", "why"}
    tensors: dict  # value id -> tensor name

    def block(self, value_id: str) -> Block:
        for b in self.blocks:
            if b.value_id == value_id:
                return b
        raise KeyError(value_id)


def tensor_names(program: Program) -> dict:
    """value id -> a unique isl tensor name: input tensor ids, output names, else node ids."""
    want: dict = {}
    for n in program.inputs:
        want[n.id] = n.arg["tensor_id"]
    for name, nid in program.outputs:
        if program[nid].op != Ops.INPUT:
            want.setdefault(nid, name)
    out, taken = {}, set()
    for n in program.nodes:
        base = iu.isl_name(want.get(n.id, n.id))
        name, k = base, 1
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        taken.add(name)
        out[n.id] = name
    return out


def contraction_attrs(space: Sequence[str], n_out: int, lhs: Access, rhs: Access) -> dict:
    """The ContractionPattern of a REDUCE(SUM) over MUL(lhs, rhs), both reads over ``space``."""
    def idx(acc: Access) -> list:
        return [str(e) for e in acc.map]

    def plain(e: Expr) -> bool:
        return e.is_const or (len(e.terms) == 1 and e.terms[0][1] == 1 and len(e.terms[0][0]) == 1
                              and isinstance(e.terms[0][0][0], str))

    offsets = {}
    for side, acc in (("lhs", lhs), ("rhs", rhs)):
        for k, e in enumerate(acc.map):
            if not plain(e):
                offsets[f"{side}[{k}]"] = str(e)
    return {"pattern": "conv" if offsets else "matmul", "lhs": lhs.value_id, "rhs": rhs.value_id,
            "lhs_idx": idx(lhs), "rhs_idx": idx(rhs), "out_idx": list(space[:n_out]),
            "reduce_idx": list(space[n_out:]), "affine_offsets": offsets}


def _contraction(book: IndexBook, info: ValueInfo):
    """(reads, attrs, MUL id or None) when info is a CONTRACT or a REDUCE(SUM) of a movement-only MUL."""
    node = book.program[info.value_id]
    if node.op == Ops.CONTRACT:  # already the abstraction: its inputs are the operand reads
        return info.inputs, contraction_attrs(info.space_names, len(info.axes), *info.inputs), None
    if node.op != Ops.REDUCE or node.arg["op"] != "SUM":
        return None
    mul = book.program[node.src[0]]
    minfo = book[mul.id]
    if mul.op != Ops.MUL or minfo.non_scop:
        return None
    (red_in,) = info.inputs
    reads = tuple(_widened(book, info, book.compose(info.box, red_in.map, (), (), acc)) for acc in minfo.inputs)
    if any(book.program[a.value_id].op == Ops.CONST for a in reads):
        return None
    used = [set().union(*(e.variables() for e in a.map)) for a in reads]
    red = {a.name for a in info.space[len(info.axes):] if a.size != 1}
    if not (red <= used[0] and red <= used[1]) or reads[0] == reads[1]:
        return None  # not a contraction: a reduce axis misses an operand, or a square (x*x)
    return reads, contraction_attrs(info.space_names, len(info.axes), *reads), mul.id


def _widened(book: IndexBook, info: ValueInfo, acc: Access) -> Access:
    """An operand read through an exact widening CAST (fp16/bf16 -> fp32) reads the narrow tensor:
    "FP16 in, FP32 accumulate" keeps the cast inside the contraction (frontend ``widen``)."""
    node = book.program[acc.value_id]
    while node.op == Ops.CAST and node.dtype == DType.fp32 and book.program[node.src[0]].dtype in (DType.fp16, DType.bf16):
        inner = book.to_base(node.src[0], ())
        acc = book.compose(info.box, acc.map, acc.guard, acc.pads, inner)
        node = book.program[acc.value_id]
    return acc


def _plans(book: IndexBook, consumers: "dict | None" = None) -> tuple:
    """(value info, block kind, reads, attrs) per block, the folded MULs, and the non_scop values. ``consumers``
    (default: the program's) decides which MULs fold: those read only by their contraction."""
    prog = book.program
    consumers = prog.consumers() if consumers is None else consumers
    outputs = {nid for _, nid in prog.outputs}
    plans, folded, non_scop = [], set(), []
    for info in book:
        node = prog[info.value_id]
        if info.non_scop:
            non_scop.append({"value": info.value_id, "why": info.non_scop})
        elif node.op == Ops.INPUT:
            if any(nid == info.value_id and name != node.arg["tensor_id"] for name, nid in prog.outputs):
                plans.append((info, "copy", (Access(info.value_id, tuple(Expr.var(a.name) for a in info.axes)),), {}))
        elif node.op in GroupOp.Movement:
            if info.value_id in outputs:
                plans.append((info, "copy", book.sources(info.value_id), {}))
        elif node.op != Ops.CONST:
            con = _contraction(book, info)
            if con is not None:
                reads, attrs, mul_id = con
                if mul_id is not None and consumers[mul_id] == [info.value_id] and mul_id not in outputs:
                    folded.add(mul_id)
                plans.append((info, "contraction_pattern", reads, attrs))
            else:
                plans.append((info, "reduce" if node.op == Ops.REDUCE else "elementwise", info.inputs, {}))
    return [p for p in plans if p[0].value_id not in folded], non_scop


_BLOCKS: dict = {}  # what a block is made of -> the Block (never changed once made)
_FORMS: dict = {}  # a block's form (its key with the names taken out) -> a Block of that form, renamed per use


def _block(book: IndexBook, names: dict, info: ValueInfo, kind: str, reads: tuple, attrs: dict) -> Block:
    """The value's block. Kept across views by everything it is made of (the node itself, its space and axes,
    the reads with their tensors' names, padding values by repr, the params): a search builds the views of many
    programs that share most of their values, and a shared block also keeps its Statement text
    (analyses/poly_from_view.py). A block of a form made before under other names (the identical experts of a
    mixture, the same layer at other node ids: ``_form``) is that block renamed, not built again."""
    prog = book.program
    out_name = names[info.value_id]
    if prog[info.value_id].op == Ops.INPUT:  # an input returned as an output: copy to the output's name
        out_name = iu.isl_name(next(n for n, nid in prog.outputs if nid == info.value_id and n != out_name))
    key = (prog[info.value_id], kind, book.params, tuple((a.name, a.size) for a in info.space),
           tuple(a.name for a in info.axes), out_name, repr(attrs),
           tuple((acc, repr(acc.pads), names[acc.value_id], prog[acc.value_id].op == Ops.CONST) for acc in reads))
    got = _BLOCKS.get(key)
    if got is None:
        if len(_BLOCKS) > 50000:
            _BLOCKS.clear()
            _FORMS.clear()
        form = _form(book, names, info, kind, reads, attrs, out_name)
        like = _FORMS.get(form)
        if like is None:
            got = _FORMS[form] = _make_block(book, names, info, kind, reads, attrs, out_name)
        else:
            got = _renamed_block(like, book, names, info, reads, attrs, out_name)
        _BLOCKS[key] = got
    return got


def _form(book: IndexBook, names: dict, info: ValueInfo, kind: str, reads: tuple, attrs: dict, out_name: str) -> tuple:
    """What ``_make_block`` makes a block of, with the names taken out: the space, the axes, the params, the
    reads' maps, guards and padding (each read's tensor as the first place its name occurs among the written
    tensor and the reads), the contraction's operands as places among the reads; equal forms give blocks equal
    but for the statement's and tensors' names."""
    prog = book.program
    place = {out_name: 0}
    rows = tuple((acc.map, acc.guard, repr(acc.pads), prog[acc.value_id].op == Ops.CONST,
                  place.setdefault(names[acc.value_id], len(place))) for acc in reads)
    ids = [acc.value_id for acc in reads]
    shape = {k: (ids.index(v) if k in ("lhs", "rhs") and v in ids else v) for k, v in attrs.items()}
    return (kind, book.params, tuple((a.name, a.size) for a in info.space), tuple(a.name for a in info.axes),
            repr(shape), rows)


def _renamed_block(like: Block, book: IndexBook, names: dict, info: ValueInfo, reads: tuple, attrs: dict,
                   out_name: str) -> Block:
    """``like`` (a block of the same ``_form``) with this value's statement and tensor names: its isl sets and maps
    renamed, its reads this block's own."""
    stmt = "S_" + iu.isl_name(info.value_id)
    live = [acc for acc in reads if book.program[acc.value_id].op != Ops.CONST]
    accs = []
    for a, acc in zip(like.reads(), live, strict=True):
        tensor = names[acc.value_id]
        m = a.map.set_tuple_name(isl.dim_type.in_, stmt).set_tuple_name(isl.dim_type.out, tensor)
        ib = a.in_bounds.set_tuple_name(stmt) if a.in_bounds is not None else None
        accs.append(AccessRel(tensor, acc.value_id, "read", m, acc, ib))
    (w,) = like.writes()
    accs.append(AccessRel(out_name, info.value_id, "write",
                          w.map.set_tuple_name(isl.dim_type.in_, stmt).set_tuple_name(isl.dim_type.out, out_name)))
    blk = Block(stmt, info.value_id, like.kind, info.space_names, like.domain.set_tuple_name(stmt), accs, attrs)
    ren = {like.name: stmt}
    for a, b in zip(like.accesses, accs, strict=True):
        if ren.setdefault(a.tensor, b.tensor) != b.tensor:
            return blk  # a name of like's that two of its names share (its texts are printed afresh)
    blk.__dict__["_like"] = (like, ren)
    return blk


def block_texts(blk: Block) -> tuple:
    """(domain, each read's map, the write's map) of a block as isl prints them, kept on the block; a block renamed
    from another (``_renamed_block``) renames that block's texts instead of printing its own."""
    got = blk.__dict__.get("_texts")
    if got is None:
        like = blk.__dict__.get("_like")
        if like is not None:
            texts = block_texts(like[0])
            got = (iu.rename_tuples(texts[0], like[1]), tuple(iu.rename_tuples(t, like[1]) for t in texts[1]),
                   iu.rename_tuples(texts[2], like[1]))
        if got is None or got[0] is None or got[2] is None or None in got[1]:
            (w,) = blk.writes()
            got = (str(blk.domain), tuple(str(a.map) for a in blk.reads()), str(w.map))
        blk.__dict__["_texts"] = got
    return got


def _make_block(book: IndexBook, names: dict, info: ValueInfo, kind: str, reads: tuple, attrs: dict,
                out_name: str) -> Block:
    prog = book.program
    stmt = "S_" + iu.isl_name(info.value_id)
    dom = domain_set(book, info, stmt)
    accs = []
    for acc in reads:
        if prog[acc.value_id].op == Ops.CONST:
            continue  # a constant is not a memory read
        m = iu.simplify_map(access_map(book, info, acc, stmt, names[acc.value_id]))
        ib = iu.in_bounds_gist(m, dom) if acc.guard else None
        accs.append(AccessRel(names[acc.value_id], acc.value_id, "read", m, acc, ib))
    wmap = iu.parse_map(iu.map_text(book.params, stmt, info.space_names, out_name,
                                    [Expr.var(a.name) for a in info.axes],
                                    iu.box_constraints(info.space_names, [a.size for a in info.space])))
    accs.append(AccessRel(out_name, info.value_id, "write", wmap))
    return Block(stmt, info.value_id, kind, info.space_names, dom, accs, attrs)


def build_polyview(book: IndexBook, names: "dict | None" = None, consumers: "dict | None" = None) -> PolyView:
    """One block per compute value (a contraction folds its MUL) and per movement output. ``names`` and
    ``consumers`` (default: the program's own) stand in for those of a larger program the book's program is a
    part of (analyses/poly_from_view.py ``kernel_program``)."""
    names = tensor_names(book.program) if names is None else names
    plans, non_scop = _plans(book, consumers)
    blocks = [_block(book, names, *p) for p in plans]
    producer = {b.value_id: b.name for b in blocks}
    edges = [{"from": producer[a.value_id], "to": b.name, "tensor": a.tensor}
             for b in blocks for a in b.reads() if a.value_id in producer]
    return PolyView(book, blocks, edges, non_scop, names)


def _access_json(a: AccessRel) -> dict:
    d = {"tensor": a.tensor, "kind": a.kind, "map": str(a.map)}
    if a.in_bounds is not None:
        d["in_bounds"] = str(a.in_bounds)
    return d


def block_json(b: Block) -> dict:
    return {"name": b.name, "value": b.value_id, "kind": b.kind, "space": list(b.space),
            "domain": {"set": str(b.domain)},
            "accesses": [_access_json(a) for a in b.accesses],
            "attrs": b.attrs}


def polyview_to_json(pv: PolyView) -> dict:
    return {"poly_view": {"params": list(pv.book.params), "blocks": [block_json(b) for b in pv.blocks],
                          "edges": pv.edges, "non_scop": pv.non_scop}}


def poly_view_json(program: Program, symbols: Sequence[str] | None = None) -> dict:
    """The ``poly_view.json`` dump of a program (docs/DESIGN.md §Poly-View)."""
    return polyview_to_json(build_polyview(checked_indexbook(program, symbols)))
