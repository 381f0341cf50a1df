"""Candidate regions from the Poly-View: one kernel of a partition as a :class:`PolyRegion`
(docs/DESIGN.md §Poly-View -> §Poly Core).

Each Poly-View block the kernel evaluates becomes a statement (its domain and access relations
as they are; a contraction is a tensor-core statement, a REDUCE names its combine op, transcendental
unary ops run on the SFU). Tensors the kernel's blocks write are ``output`` when the kernel
materializes them and ``internal`` (deferred) otherwise; everything else it reads is an ``input``.
Symbols are bound by ``params`` (Poly Core counts on concrete shapes).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterable, Mapping

from ..ir.diagnostics import PolysatError
from ..ir.dtypes import DType
from ..ir.tiny import Arg, GroupOp, Ops, Program, UOp
from .indexbook import checked_indexbook
from .isl_util import isl_name
from .poly_region import Access, PolyRegion, Statement, TensorInfo, renamed
from .polyview import Block, PolyView, block_texts, build_polyview, tensor_names

SFU_OPS = {Ops.EXP2, Ops.LOG2, Ops.SQRT, Ops.RSQRT, Ops.RECIPROCAL, Ops.POW}
COMBINE = {"SUM": "sum", "MAX": "max", "MIN": "min"}


def _statement(pv: PolyView, blk: Block) -> Statement:
    """The block's Statement, printed once per block (a block is shared by the views that hold the same value,
    analyses/polyview.py ``_block``, and its statement depends only on the block and its node)."""
    st = blk.__dict__.get("_statement")
    if st is None:
        st = blk.__dict__["_statement"] = _make_statement(pv, blk)
    return st


def _make_statement(pv: PolyView, blk: Block) -> Statement:
    node = pv.book.program[blk.value_id]
    unit, flops, combine = "fp32", 1, None
    if blk.kind == "contraction_pattern":
        unit, flops, combine = "tensor", 2, "sum"
    elif blk.kind == "reduce":
        combine = COMBINE[str(node.arg["op"]).upper()]
    elif blk.kind == "copy":
        flops = 0
    elif node.op in SFU_OPS:
        unit = "sfu"
    elif node.op == Ops.FDIV:
        flops = 2
    (w,) = blk.writes()
    domain, reads, write = block_texts(blk)
    return Statement(blk.name, domain, tuple(Access(a.tensor, t) for a, t in zip(blk.reads(), reads, strict=True)),
                     Access(w.tensor, write), flops, unit, combine)


def region_from_polyview(pv: PolyView, nodes: Iterable[str] | None = None, outputs: Iterable[str] | None = None,
                         params: Mapping[str, int] | None = None, name: str = "region") -> PolyRegion:
    """The kernel evaluating `nodes` (value ids; default: every block) and materializing `outputs`
    (default: the program outputs among them, and values read by blocks outside the kernel)."""
    prog = pv.book.program
    if nodes is None:
        blocks = pv.blocks
    else:  # the kernel's blocks in the view's order, found by value (a search builds many small kernels of one view)
        at = block_places(pv)
        blocks = [pv.blocks[k] for k in sorted(at[v] for v in set(nodes) if v in at)]
    mine = {b.value_id for b in blocks}
    if outputs is None:
        outside = {a.value_id for b in pv.blocks if b.value_id not in mine for a in b.reads()}
        outputs = {nid for _, nid in prog.outputs} | outside
    outs = set(outputs) & mine
    tensors: dict = {}
    for b in blocks:
        for a in b.accesses:
            if a.tensor in tensors:
                continue
            node = prog[a.value_id]
            written = a.value_id in mine
            role = "input" if not written else ("output" if a.value_id in outs else "internal")
            tensors[a.tensor] = TensorInfo(a.tensor, tuple(node.shape), node.dtype, role)
    for b in blocks:  # a block's own write decides its tensor's role
        (w,) = b.writes()
        t = tensors[w.tensor]
        tensors[w.tensor] = TensorInfo(t.name, t.shape, t.dtype, "output" if b.value_id in outs else "internal")
    return PolyRegion(name, tuple(tensors.values()), tuple(_statement(pv, b) for b in blocks), dict(params or {}))


def block_places(pv: PolyView) -> dict:
    """value id -> the place of its block in ``pv.blocks``, made once per view."""
    got = pv.__dict__.get("_places")
    if got is None:
        got = pv.__dict__["_places"] = {b.value_id: k for k, b in enumerate(pv.blocks)}
    return got


def region_from_program(program: Program, params: Mapping[str, int] | None = None, name: str = "region",
                        symbols=None) -> PolyRegion:
    """The whole program as one kernel."""
    return region_from_polyview(build_polyview(checked_indexbook(program, symbols)), params=params, name=name)


def regions_from_partition(program: Program, partition, params: Mapping[str, int] | None = None,
                           symbols=None, by_kernel: bool = False) -> list:
    """One PolyRegion per kernel of an extraction partition (``egraph.partition.Partition``:
    kernels with ``nodes`` and ``outputs``) that computes something, in its order; the same regions either way:

    - by default on the program's Poly-View, built once per program (a search prices many partitions of one
      extracted program, and its programs share most of their values: IndexBook entries and blocks are reused);
    - ``by_kernel``: each from the kernel's own sub-program (``kernel_program``), kept by its text in local names,
      so a kernel met before under other node ids (the segments of a stitched program, searched on their own) is
      renamed, not rebuilt: the work follows the distinct kernels, not the program."""
    syms = None if symbols is None else tuple(symbols)
    if not by_kernel:
        pv = program_view(program, syms)
        made = pv.__dict__.setdefault("_regions", {})  # a kernel met again in another partition of the program
        bound = tuple(sorted(dict(params or {}).items()))
        out = []
        for k in partition.kernels:
            key = (k.nodes, k.outputs, k.name, bound)
            if key not in made:
                at = block_places(pv)
                made[key] = region_from_polyview(pv, k.nodes, k.outputs, params, k.name) \
                    if any(v in at for v in k.nodes) else None
            if made[key] is not None:
                out.append(made[key])
        return out
    ctx = program_context(program, syms)
    return [r for r in (kernel_region(ctx, k, params) for k in partition.kernels) if r.statements]


@dataclass(frozen=True, eq=False)
class _Context:
    """What a kernel's region reads of the whole program beyond its sub-program."""
    program: Program
    symbols: tuple  # the isl parameters, in the signature's order
    names: dict  # node id -> its tensor name (polyview.tensor_names)
    consumers: dict  # node id -> the ids of the nodes reading it
    position: dict  # node id -> its place in program order
    outputs: frozenset  # program output node ids
    local_ok: bool  # no symbol is spelled like a local id (then the whole program's view is used)
    made: dict = field(default_factory=dict)  # (kernel nodes, outputs, name, params) -> its region


@lru_cache(maxsize=64)
def program_context(program: Program, symbols: "tuple | None") -> _Context:
    syms = symbols if symbols is not None else tuple(sorted(program.symbols()))
    return _Context(program, syms, tensor_names(program), program.consumers(),
                    {n.id: k for k, n in enumerate(program.nodes)}, frozenset(n for _, n in program.outputs),
                    not any(_LOCAL_ID.fullmatch(str(x)) for x in syms))


_LOCAL_ID = re.compile(r"(S_)?v[0-9]+")  # the names of a kernel program's nodes, tensors and statements
_WIDE = (DType.fp16, DType.bf16)
_REGIONS: dict = {}  # kernel program key -> its region in local names


def kernel_program(ctx: _Context, kernel) -> tuple:
    """(key, a function making (Program, consumers), real id per local id) of ``kernel``'s sub-program: its nodes (ids ``v0..`` in
    program order) and what building their IndexBook entries and Poly-View blocks reads of the rest: the
    movement chains their reads compose through, a MUL a REDUCE of the kernel contracts over and a widening
    CAST a contraction reads through (each with its own sources), constants, and the REDUCE of another kernel
    that is the only reader of a MUL of this one (the MUL folds into it); every other value read (a
    program input, another kernel's output) is an INPUT of the same shape and dtype. An entry is a function of
    its node's cone, which this cuts only at values whose reads stop there, so the kernel's entries and blocks
    are the whole program's. ``consumers`` stands in for the whole program's (a MUL folds into its contraction
    only when nothing else reads it); the key holds everything the region depends on, in local ids."""
    prog = ctx.program
    mine = kernel.nodes
    keep, holes = set(mine), set()
    stack = [s for i in mine for s in prog[i].src if s not in mine]
    stack += [prog[i].src[0] for i in mine if prog[i].op == Ops.REDUCE]
    # a MUL of the kernel read only by a REDUCE of another kernel folds into that contraction (no statement)
    stack += [c for i in mine if prog[i].op == Ops.MUL for c in ctx.consumers[i] if c not in mine
              and prog[c].op == Ops.REDUCE and len(ctx.consumers[i]) == 1]
    while stack:
        i = stack.pop()
        if i in keep or i in holes:
            continue
        n = prog[i]
        wide = n.op == Ops.CAST and n.dtype == DType.fp32 and prog[n.src[0]].dtype in _WIDE
        if n.op in GroupOp.Movement or n.op in (Ops.CONST, Ops.MUL) or wide or n.op == Ops.REDUCE and n.src[0] in mine:
            keep.add(i)
            stack.extend(n.src)
        else:
            holes.add(i)
    pos = ctx.position
    order = sorted(keep | holes, key=pos.__getitem__)
    local = {i: f"v{j}" for j, i in enumerate(order)}
    rows, cons = [], {}
    for i in order:
        n = prog[i]
        if i in holes:
            rows.append((n.dtype, n.shape))
            continue
        lid = local[i]
        cons[lid] = tuple(local[c] if c in keep else "" for c in ctx.consumers[i])
        rows.append((n.op, tuple(local[x] for x in n.src), n.arg, n.dtype, n.shape, i in mine, i in ctx.outputs, cons[lid]))
    key = (tuple(rows), tuple(local[o] for o in kernel.outputs), ctx.symbols)

    def make() -> tuple:
        nodes = []
        for i in order:
            n, lid = prog[i], local[i]
            if i in holes:
                nodes.append(UOp(lid, Ops.INPUT, (), Arg({"tensor_id": lid, "dtype": n.dtype, "shape": n.shape}), n.dtype,
                                 n.shape))
            else:
                nodes.append(UOp(lid, n.op, tuple(local[x] for x in n.src), n.arg, n.dtype, n.shape, n.tag))
        outs = tuple((lid, lid) for i, lid in local.items() if i in ctx.outputs and i in keep)
        return Program(tuple(nodes), outs), {v: list(c) for v, c in cons.items()}
    return key, make, {v: k for k, v in local.items()}


def kernel_region(ctx: _Context, kernel, params: Mapping[str, int] | None = None) -> PolyRegion:
    """The region of one kernel (its statements empty when it computes nothing), named as the whole program names
    it; built on its sub-program (``kernel_program``) once per distinct sub-program and params."""
    bound = tuple(sorted(dict(params or {}).items()))
    mk = (kernel.nodes, kernel.outputs, kernel.name, bound)
    made = ctx.made.get(mk)
    if made is not None:
        return made
    if not ctx.local_ok:
        made = _whole(ctx, kernel, params)
    else:
        key, make, real = kernel_program(ctx, kernel)
        key = (key, bound)
        got = _REGIONS.get(key)
        if got is None:
            prog, cons = make()
            try:
                pv = build_polyview(checked_indexbook(prog, ctx.symbols), {n.id: n.id for n in prog.nodes}, cons)
            except PolysatError:  # reported on the whole program, naming its nodes
                return _whole(ctx, kernel, params)
            mine = {local for local, i in real.items() if i in kernel.nodes}
            outs = [local for local, i in real.items() if i in kernel.outputs]
            got = region_from_polyview(pv, mine, outs, params, "kernel")
            if len(_REGIONS) > 20000:
                _REGIONS.clear()
            _REGIONS[key] = got
        ren = {}
        for local, i in real.items():
            ren[local] = ctx.names[i]
            ren["S_" + local] = "S_" + isl_name(i)
        made = renamed(got, ren, kernel.name)
    ctx.made[mk] = made
    return made


def _whole(ctx: _Context, kernel, params: Mapping[str, int] | None) -> PolyRegion:
    """The kernel's region on the whole program's Poly-View."""
    return region_from_polyview(program_view(ctx.program, ctx.symbols), kernel.nodes, kernel.outputs, params, kernel.name)


@lru_cache(maxsize=64)
def program_view(program: Program, symbols: "tuple | None") -> PolyView:
    """The Poly-View of a whole program, built once: a partition search prices many partitions of one extracted
    program (its kernels here, its merge search's groups: search/merge.py), and many programs that share most of
    their values (their IndexBook entries are reused, ``build_indexbook``)."""
    return build_polyview(checked_indexbook(program, symbols, reuse=True))
