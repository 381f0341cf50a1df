"""Candidate regions from the Poly-View: one kernel of a partition as a :class:`PolyRegion`
(docs/DESIGN.md §Poly-View -> §Poly Core).

Each Poly-View block the kernel evaluates becomes a statement (its domain and access relations
as they are; a contraction is a tensor-core statement, a REDUCE names its combine op, transcendental
unary ops run on the SFU). Tensors the kernel's blocks write are ``output`` when the kernel
materializes them and ``internal`` (deferred) otherwise; everything else it reads is an ``input``.
Symbols are bound by ``params`` (Poly Core counts on concrete shapes).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Iterable, Mapping

from ..ir.tiny import Ops, Program
from .indexbook import checked_indexbook
from .poly_region import Access, PolyRegion, Statement, TensorInfo
from .polyview import Block, PolyView, build_polyview

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
    return Statement(blk.name, str(blk.domain), tuple(Access(a.tensor, str(a.map)) for a in blk.reads()),
                     Access(w.tensor, str(w.map)), flops, unit, combine)


def region_from_polyview(pv: PolyView, nodes: Iterable[str] | None = None, outputs: Iterable[str] | None = None,
                         params: Mapping[str, int] | None = None, name: str = "region") -> PolyRegion:
    """The kernel evaluating `nodes` (value ids; default: every block) and materializing `outputs`
    (default: the program outputs among them, and values read by blocks outside the kernel)."""
    prog = pv.book.program
    wanted = None if nodes is None else set(nodes)
    blocks = [b for b in pv.blocks if wanted is None or b.value_id in wanted]
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


def region_from_program(program: Program, params: Mapping[str, int] | None = None, name: str = "region",
                        symbols=None) -> PolyRegion:
    """The whole program as one kernel."""
    return region_from_polyview(build_polyview(checked_indexbook(program, symbols)), params=params, name=name)


def regions_from_partition(program: Program, partition, params: Mapping[str, int] | None = None,
                           symbols=None) -> list:
    """One PolyRegion per kernel of an extraction partition (``egraph.partition.Partition``:
    kernels with ``nodes`` and ``outputs``), in its order."""
    pv = _view(program, None if symbols is None else tuple(symbols))
    return [region_from_polyview(pv, k.nodes, k.outputs, params, k.name) for k in partition.kernels
            if any(b.value_id in k.nodes for b in pv.blocks)]


@lru_cache(maxsize=64)
def _view(program: Program, symbols: "tuple | None") -> PolyView:
    """The Poly-View of a program, built once: a partition search prices many partitions of one
    extracted program, and many programs that share most of their values (their IndexBook entries are reused,
    ``build_indexbook``)."""
    return build_polyview(checked_indexbook(program, symbols, reuse=True))
