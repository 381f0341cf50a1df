"""Data-dependent gathers as region boundaries (docs/DESIGN.md §Pipeline, §RB-SSA).

A GATHER reads at indices computed at run time: not affine, so it leaves the SCoP (IndexBook invariant 5)
and is a kernel of its own. :func:`split_gathers` cuts the program there before the e-graph: each GATHER
becomes a program input of the affine rest (the buffer its gathering kernel writes), and each operand
the rest computes becomes an output of it (the buffer that kernel reads), so the e-graph sees a memory
boundary on both sides and fuses nothing across it. :meth:`Split.regions` builds the gathering regions
(one ``Gather`` read yielded) and orders them among the regions synthesized from the rest.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from . import region as rg
from .diagnostics import fail
from .dtypes import DType
from .expr import Expr
from .infer import make_uop
from .region import Buffer, Let, MemRef, Region, Yield
from .tiny import GroupOp, Ops, Program, UOp


@dataclass(frozen=True)
class Site:
    """One GATHER: its node, the buffers it reads (data, index) and the buffer it writes."""
    node: UOp
    data: str
    index: str
    out: str
    program_output: bool


@dataclass(frozen=True)
class Split:
    program: Program  # the affine rest: every GATHER an INPUT, every computed operand an output
    sites: tuple  # Site, in program order
    operands: frozenset  # buffer names the rest writes only for a gathering kernel
    source: "Program | None" = None  # the program the sites were read from (gathers of uniform constants folded)

    def regions(self, rest: list, source: Program) -> list[Region]:
        """The rest's regions with a gathering region per site, in an order where every buffer is written
        before it is read."""
        if not self.sites:
            return list(rest)
        written = {b.name: b.memref for r in rest for b in r.outputs}
        gathers = [_gather_region(s, self.source or source, written) for s in self.sites]
        rest = [_unflag(r, self.operands) for r in rest]
        return _redefer(_order(rest + gathers))


def _uniform_gathers(program: Program) -> Program:
    """A GATHER from a uniform constant reads that constant at every index: the constant itself, in the gather's
    shape (a buffer of zeros an exporter expanded and gathered from, as RoBERTa's token-type ids)."""
    if not any(n.op in GroupOp.Indirect and program[n.src[0]].op == Ops.CONST for n in program.nodes):
        return program
    nodes = tuple(make_uop(n.id, Ops.CONST, [], {"value": program[n.src[0]].arg["value"], "dtype": n.dtype,
                                                 "shape": n.shape}, n.tag)
                  if n.op in GroupOp.Indirect and program[n.src[0]].op == Ops.CONST else n for n in program.nodes)
    return Program(nodes, program.outputs)


def split_gathers(program: Program) -> Split:
    """The program cut at its GATHER nodes (the program itself when it has none)."""
    program = _uniform_gathers(program)
    sites_nodes = [n for n in program.nodes if n.op in GroupOp.Indirect]
    if not sites_nodes:
        return Split(program, (), frozenset())
    taken = {n.arg["tensor_id"] for n in program.inputs} | {name for name, _ in program.outputs}
    out_name: dict = {}

    def fresh(base: str) -> str:
        name = base
        while name in taken:
            name = "t_" + name
        taken.add(name)
        return name

    first_output = {}
    for name, nid in program.outputs:
        first_output.setdefault(nid, name)
    for n in sites_nodes:
        out_name[n.id] = first_output.get(n.id) or fresh(n.tag or n.id)
    extra, operands = [], set()

    def buffer_of(nid: str) -> str:
        s = program[nid]
        if s.op == Ops.CONST:
            return ""  # a uniform constant: the gathering kernel holds its value
        if s.op == Ops.INPUT:
            return s.arg["tensor_id"]
        if nid in out_name:
            return out_name[nid]
        if nid in first_output:
            return first_output[nid]
        name = fresh(nid)
        first_output[nid] = name
        extra.append((name, nid))
        operands.add(name)
        return name

    sites = []
    for n in sites_nodes:
        data, index = (buffer_of(s) for s in n.src)
        sites.append(Site(n, data, index, out_name[n.id], n.id in dict((v, k) for k, v in program.outputs)))
    nodes = [make_uop(n.id, Ops.INPUT, [], {"tensor_id": out_name[n.id], "dtype": n.dtype, "shape": n.shape},
                      n.tag) if n.id in out_name else n for n in program.nodes]
    outputs = tuple((name, nid) for name, nid in program.outputs
                    if not (nid in out_name and out_name[nid] == name)) + tuple(extra)
    by_id = {n.id: n for n in nodes}
    live, stack = set(), [nid for _, nid in outputs]
    while stack:
        nid = stack.pop()
        if nid not in live:
            live.add(nid)
            stack.extend(by_id[nid].src)
    rest = Program(tuple(n for n in nodes if n.id in live), outputs)
    return Split(rest, tuple(sites), frozenset(operands), program)


def _gather_region(s: Site, source: Program, written: dict) -> Region:
    """out[i..] = data[i.. with index[...] on the axis]: one Gather read, yielded."""
    n = s.node
    x, idx = (source[k] for k in n.src)
    axis, elements = n.arg["axis"], n.arg["elements"]
    names = tuple(f"i{k}" for k in range(n.ndim))
    v = [Expr.var(a) for a in names]
    if elements:
        at, others = v, v[:axis] + v[axis + 1:]
    else:
        at, others = v[axis:axis + idx.ndim], v[:axis] + v[axis + idx.ndim:]
    if idx.op == Ops.CONST:
        index = rg.const(idx.arg["value"], DType.i32)
    else:
        index = rg.read(s.index, at, DType.i32, names)
    node = rg.gather(s.data, axis, others, index, x.dtype, names)
    if node.axes != names:  # a constant index leaves out the axes only it spans
        node = rg.broadcast(node, names, tuple(n.shape))
    ins = {s.data: written.get(s.data, MemRef(tuple(x.shape), x.dtype))}
    if idx.op != Ops.CONST:
        ins[s.index] = written.get(s.index, MemRef(tuple(idx.shape), idx.dtype))
    out = Buffer(s.out, MemRef(tuple(n.shape), n.dtype), "gmem", s.program_output)
    return Region(f"gather_{n.id}", tuple(zip(names, n.shape)), (), tuple(Buffer(k, m) for k, m in ins.items()),
                  (out,), (Let("v", node),), (Yield("v", s.out, n.dtype, names),))


def _unflag(r: Region, operands: frozenset) -> Region:
    """An operand written only for a gathering kernel is no program output."""
    if not any(b.name in operands for b in r.outputs):
        return r
    return replace(r, outputs=tuple(replace(b, program_output=False, materialize="gmem") if b.name in operands else b
                                    for b in r.outputs))


def _order(regions: list) -> list:
    """Regions in their given order, except that a region waits until every buffer it reads that some region
    writes has been written."""
    writer = {b.name: k for k, r in enumerate(regions) for b in r.outputs}
    done: set = set()
    out, todo = [], list(range(len(regions)))
    while todo:
        for pos, k in enumerate(todo):
            if all(writer.get(b.name) in done or b.name not in writer for b in regions[k].inputs):
                break
        else:
            fail("InternalError", regions[todo[0]].name, "the kernels around a data-dependent gather depend on each "
                 "other (a fused kernel both feeds the gather and reads its result)",
                 "Compile with --cost size, or compute the gather's indices without the values it feeds.")
        done.add(k)
        out.append(regions[todo.pop(pos)])
    return out


def _redefer(regions: list) -> list:
    """A buffer stays ``deferred`` (intended to stay on chip) only while its one reader is the next region."""
    readers: dict = {}
    for k, r in enumerate(regions):
        for b in r.inputs:
            readers.setdefault(b.name, set()).add(k)
    out = []
    for k, r in enumerate(regions):
        if any(b.materialize == "deferred" and readers.get(b.name, set()) != {k + 1} for b in r.outputs):
            r = replace(r, outputs=tuple(replace(b, materialize="gmem") if b.materialize == "deferred"
                                         and readers.get(b.name, set()) != {k + 1} else b for b in r.outputs))
        out.append(r)
    return out
