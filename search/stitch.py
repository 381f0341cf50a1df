"""A program of repeated segments (search/segment.py) saturated and searched once per distinct
segment, and the results stitched back into one whole-program answer (docs/DESIGN.md §Fusion,
"Segments").

``SegmentedState`` stands where an ``EGraphState`` stands for such a program: it holds the saturated
e-graph of each distinct segment and exports one stitched ``EGraphView`` (each segment instance's
classes at its own offset; a tensor a segment reads from a segment before it is ``Mat`` of that
segment's root for the value, so its reads are reads of a materialized value). ``stitch`` turns the per-segment
searches into one ``Search`` whose best candidate is a whole-program ``Extraction`` (Tiny IR program,
partition, chosen terms, roots), so every later stage works on it unchanged.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Callable

from ..egraph import encode as E
from ..egraph.api import Extraction
from ..egraph.boundaries import movement_args
from ..egraph.graph import ENode, EGraphView, export
from ..egraph.partition import Kernel, Partition
from ..egraph.saturate import StopReason
from ..egraph.state import MOVE_NAMES
from ..analyses.isl_util import isl_name
from ..analyses.origin import sector_aligned, shifted
from ..analyses.poly_region import renamed
from ..analyses.polyview import tensor_names
from ..egraph.stream import parse_tag, tag
from ..ir.tiny import Ops, Program
from ..pricing.kernels import Priced
from .result import Candidate, Rejection, Search, Streamed
from .segment import Segment


BOUNDARY = ("segment boundary: a value flowing from one block to a later one (the stream, a skip tensor, an "
            "expert's slots or activation) is "
            "materialized, so each distinct block is searched once (docs/DESIGN.md §Fusion)")


@dataclass
class SegmentedState:
    """The e-graphs of a segmented program: ``states[key]`` (EGraphState of the canonical segment
    program) and ``reports[key]`` (its RunReport), ``segments`` in program order."""
    program: Program
    segments: list  # Segment
    states: dict
    reports: dict
    files: tuple = ()
    halved: int = 0  # parts halved because their saturation stopped at a limit (search/size_cut.py)
    _view: "tuple | None" = field(default=None, repr=False)
    _instances: "list | None" = field(default=None, repr=False)

    @property
    def rulesets(self) -> list:
        return next(iter(self.states.values())).rulesets

    def _build(self) -> tuple:
        if self._view is None:
            self._view = _stitch_view(self)
        return self._view

    def export(self) -> EGraphView:
        """The stitched view: every instance's e-nodes at its offsets (built when first asked: the search's
        stitch maps only the e-nodes it chose, ``_Instance.node``)."""
        return self._build()[0]

    @property
    def index(self) -> dict:
        """The whole program's node id -> N index of the stitched view."""
        return self._build()[1]

    def instance(self, j: int) -> "_Instance":
        if self._instances is None:
            self._instances = _place(self)
        return self._instances[j]


@dataclass
class _Instance:
    """Segment j's offsets in the stitched view; its e-nodes there are made on demand (``node``), once each."""
    coff: int
    ioff: int
    order: int  # the stitched export position of the segment's first e-node
    view: EGraphView  # the segment's own view
    entry: dict  # a canonical tensor id it reads from a segment before -> that segment's root class for it
    rename: Callable  # a canonical tensor id of a program input -> the program's tensor id
    entry_classes: tuple  # the stitched classes of the tensors it reads from segments before
    made: dict = field(default_factory=dict)  # a segment ENode's order -> the stitched ENode
    blocks: dict = field(default_factory=dict)  # a canonical tensor id read as a block of a value from a segment
    # before (search/branches.py) -> (the block's e-node op and args, the stitched class of that value's Mat)
    extra: dict = field(default_factory=dict)  # a stitched class of no segment (a block's Mat) -> its e-nodes

    def node(self, n: ENode) -> ENode:
        """The stitched e-node of the segment's e-node ``n``: its classes at the offset, a program input's Tensor
        named by the program's tensor id, a tensor read from a segment before a Mat of that segment's root, and one
        read as a block of such a value that block (a Shrink) of its Mat."""
        got = self.made.get(n.order)
        if got is None:
            tid = n.args[0].strip('"') if n.op == "Tensor" else None
            c, o = n.eclass + self.coff, self.order + n.order
            if tid is not None and tid in self.entry:
                got = ENode("Mat", (), (self.entry[tid],), c, o)
            elif tid is not None and tid in self.blocks:
                (op, args), mat = self.blocks[tid]
                got = ENode(op, args, (mat,), c, o)
            elif tid is not None:
                got = ENode("Tensor", (n.args[0].replace(tid, self.rename(tid)),), (), c, o)
            else:
                got = ENode(n.op, n.args, tuple(ch + self.coff for ch in n.children), c, o)
            self.made[n.order] = got
        return got


def _place(s: SegmentedState) -> list:
    """Each segment instance's offsets and entry (no e-node is made)."""
    views = {k: export(st) for k, st in s.states.items()}
    tensors = {k: {n.args[0].strip('"'): c for c, ns in v.classes.items() for n in ns if n.op == "Tensor"}
               for k, v in views.items()}
    out, coff, ioff, order = [], 0, 0, 0
    root: dict = {}  # a boundary value (the program's node id) -> the stitched class of its segment's root for it
    blocks: list = []  # (instance, canonical tensor id, the block's program node) of each tensor read as a block
    for seg in s.segments:
        st, v = s.states[seg.key], views[seg.key]
        entry = {t: root[w] for t, w in seg.entries if w in root and t in tensors[seg.key]}
        block = {t: w for t, w in seg.entries if w not in root and t in tensors[seg.key]}

        def rename(tid: str, seg=seg) -> str:
            return s.program[seg.origin[f"i{tid[1:]}"]].arg["tensor_id"]
        out.append(_Instance(coff, ioff, order, v, entry, rename,
                             tuple(tensors[seg.key][t] + coff for t in (*entry, *block))))
        blocks += [(out[-1], t, s.program[w]) for t, w in block.items()]
        for (_, out_id), w in zip(st.program.outputs, seg.exits, strict=True):
            root[w] = v.by_index[st.index[out_id]] + coff
        coff += max(v.classes, default=-1) + 1
        ioff += max(st.index.values(), default=-1) + 1
        order += v.nodes
    for k, (inst, t, n) in enumerate(blocks):  # each block's Mat: a class of its own after every segment's
        base = s.program[n.src[0]]
        _, x, _ = movement_args(n)
        inst.blocks[t] = ((MOVE_NAMES[n.op], (f'"{x}"',)), coff + k)
        inst.extra[coff + k] = ([ENode("Mat", (), (root[base.id],), coff + k, order + k)], E.shape(base.shape),
                                base.dtype.value)
    return out


def _stitch_view(s: SegmentedState) -> tuple:
    classes, shape, dtype, by_index, index = {}, {}, {}, {}, {}
    order = 0
    for j, seg in enumerate(s.segments):
        inst, st = s.instance(j), s.states[seg.key]
        v, coff, ioff = inst.view, inst.coff, inst.ioff
        for c, ns in v.classes.items():
            classes[c + coff] = [inst.node(n) for n in ns]
        shape.update({c + coff: x for c, x in v.shape.items()})
        dtype.update({c + coff: x for c, x in v.dtype.items()})
        by_index.update({i + ioff: c + coff for i, c in v.by_index.items()})
        for cid, i in st.index.items():
            if cid.startswith("n"):
                index[seg.origin[cid]] = i + ioff
        order += v.nodes
        for c, (ns, sh, dt) in inst.extra.items():
            classes[c], shape[c], dtype[c] = ns, sh, dt
            order += len(ns)
    return EGraphView(classes, shape, dtype, by_index, order), index


_ID = re.compile(r"\b[nif][0-9]+\b")
_CLASS = re.compile(r"@([0-9]+)")


def _whole(r, c: int, seg: Segment, others_us: float, others_kernels: int):
    """A segment's rejection in the whole program's terms: its class at the instance's offset, the
    node ids (and e-classes) its reason names mapped to the program's, and (a whole-partition rejection) the other
    segments' kernels and time added to both sides."""
    why = _ID.sub(lambda m: seg.origin.get(m.group(0), m.group(0)), r.why)
    why = _CLASS.sub(lambda m: f"@{int(m.group(1)) + c}", why)  # a class a legality rule names
    if r.local:
        return dataclasses.replace(r, mat=r.mat + c, why=why)
    return dataclasses.replace(r, mat=r.mat + c, why=why, separate_us=r.separate_us + others_us,
                               fused_us=None if r.fused_us is None else r.fused_us + others_us,
                               kernels_before=r.kernels_before + others_kernels,
                               kernels_after=None if r.kernels_after is None else r.kernels_after + others_kernels)


def merge_reports(reports: list):
    """One RunReport for the distinct segments' saturations: nodes and seconds summed, iterations in
    turn, rule matches summed, the first stop that is not saturation."""
    first = reports[0]
    rules: dict = {}
    for r in reports:
        for name, rs in r.rules.items():
            got = rules.get(name)
            rules[name] = rs if got is None else dataclasses.replace(got, matches=got.matches + rs.matches,
                                                                    seconds=got.seconds + rs.seconds)
    stop = next((r.stop for r in reports if r.stop != StopReason.saturated), first.stop)
    return dataclasses.replace(first, stop=stop, iterations=[it for r in reports for it in r.iterations], rules=rules,
                               nodes=sum(r.nodes for r in reports), seconds=sum(r.seconds for r in reports),
                               rolled_back=any(r.rolled_back for r in reports))


def _in_place(prog: Program, priced: list, again: dict, price: Callable) -> list:
    """``priced`` with each kernel that reads a block (``again``: its name -> (its form: the segment and the kernel's
    place there, the instance's canonical id -> stitched id, each block input -> (the value it is a block of, the
    block's lower corner))) priced where it reads the block: the first kernel of each form by ``price``; each other
    one is that kernel's region with the names of its own instance and its blocks' accesses moved to its own
    corners, at the same price where every block moves by whole sectors (analyses/origin.py: no term of the price
    tells such regions apart), else priced by ``price`` too."""
    kernels, whole = {p.kernel.name: p.kernel for p in priced}, tensor_names(prog)
    firsts: dict = {}
    for name, (form, _, _) in again.items():
        firsts.setdefault(form, name)
    got = {p.kernel.name: p for p in price(prog, Partition(tuple(kernels[n] for n in firsts.values())))}
    rest = []
    for name, (form, ids, blocks) in again.items():
        first = firsts[form]
        if name == first:
            continue
        _, at, corners = again[first]
        moves = {whole[base]: tuple(a - b for a, b in zip(corners[c][1], lo, strict=True))
                 for c, (base, lo) in blocks.items()}
        p = got[first]
        if p.region is None or any(corners[c][0] != base or not all(isinstance(x, int) for x in prog[base].shape) or
                                   not sector_aligned(moves[whole[base]], prog[base].shape, prog[base].dtype.itemsize)
                                   for c, (base, _) in blocks.items()):
            rest.append(name)
            continue
        names = {whole[w]: whole[ids[c]] for c, w in at.items() if c not in blocks} | \
            {"S_" + isl_name(w): "S_" + isl_name(ids[c]) for c, w in at.items()}
        got[name] = Priced(kernels[name], renamed(shifted(p.region, moves), names, name),
                           dataclasses.replace(p.cost, region=name))
    if rest:
        got.update({p.kernel.name: p for p in price(prog, Partition(tuple(kernels[n] for n in rest)))})
    return [got.get(p.kernel.name, p) for p in priced]


def _named(prog: Program, priced: list, local: list) -> list:
    """The segments' priced kernels with their regions in the whole program's names (its tensor names, its
    statements ``S_<node id>``): each segment's kernels are priced where it was searched, and a kernel's price
    reads no name, so the stitched program is not priced again (the same regions and prices as
    ``pricing.kernels.price_kernels`` of the stitched program, tests/test_kernel_regions.py)."""
    whole, mine, names = tensor_names(prog), {}, {}
    out = []
    for p, (j, seg_prog, ids) in zip(priced, local, strict=True):
        if p.region is None:
            out.append(p)
            continue
        if j not in names:
            got = mine.setdefault(id(seg_prog), (seg_prog, tensor_names(seg_prog)))[1]  # held: its id stays its own
            names[j] = {got[i]: whole[w] for i, w in ids.items()} | \
                {"S_" + isl_name(i): "S_" + isl_name(w) for i, w in ids.items()}
        out.append(dataclasses.replace(p, region=renamed(p.region, names[j], p.kernel.name)))
    return out


def stitch(s: SegmentedState, found: dict, price: Callable):
    """The whole program's Search from ``found[key]`` (the Search of each distinct segment). A kernel that reads a
    block of a value (search/branches.py) was priced reading a tensor of the block's shape: it is priced again
    where it reads the block (``price``: (program, partition) -> its Priced kernels, each region built from its own
    kernel), so every price is the stitched program's own."""
    taken = {n.id for n in s.program.nodes}
    again: dict = {}  # the stitched kernels that read a block (``_in_place``)
    blocks: set = set()  # the blocks' views in the stitched program
    nodes, kernels, priced, chosen, rejected, sites, streamed = [], [], [], {}, [], {}, []
    local: list = []  # per priced kernel: (its segment instance, the extraction's program, its id -> the whole program's)
    fused: set = set()
    bounds: list = []  # the Mat classes of the segment boundaries
    made: dict = {}  # a boundary value or program output (the program's node id) -> its id in the stitched program
    root: dict = {}  # a program output (the program's node id) -> its class in the stitched view
    for j, seg in enumerate(s.segments):
        res, inst = found[seg.key], s.instance(j)
        x = res.best.extraction
        ins = {n.id for n in x.program.inputs}
        ids: dict = {}
        mem: dict = {}  # a canonical input read as a block -> the stitched value it is a block of
        corner: dict = {}  # a canonical input read as a block -> the block's lower corner
        for n in x.program.inputs:
            o = seg.origin[n.id]
            if s.program[o].op == Ops.INPUT or o in made:
                ids[n.id] = o if s.program[o].op == Ops.INPUT else made[o]
                continue
            b = s.program[o]  # a block: its view of the value, in the stitched program once
            if o not in blocks:
                nodes.append(dataclasses.replace(b, src=(made[b.src[0]],)))
                blocks.add(o)
            ids[n.id], mem[n.id], corner[n.id] = o, made[b.src[0]], tuple(b.arg["lo"])
        for n in x.program.nodes:
            if n.id in ins:
                continue
            if n.id.startswith("n") and n.id in seg.origin:
                ids[n.id] = seg.origin[n.id]
            else:
                new = f"s{j}{n.id}"
                while new in taken:
                    new += "_"
                ids[n.id] = new
            taken.add(ids[n.id])
            pt = parse_tag(n.tag)
            nodes.append(dataclasses.replace(n, id=ids[n.id], src=tuple(ids[q] for q in n.src),
                                             tag=tag(f"{pt[0]}s{j}", pt[1]) if pt else n.tag))
        kmap = {}
        for place, k in enumerate(x.partition.kernels):
            kmap[k.name] = Kernel(f"k{len(kernels)}", frozenset(ids[i] for i in k.nodes), tuple(ids[i] for i in k.outputs),
                                  tuple(dict.fromkeys(mem.get(i, ids[i]) for i in k.inputs)))
            kernels.append(kmap[k.name])
            if mem.keys() & set(k.inputs):
                again[kmap[k.name].name] = ((seg.key, place), ids,
                                            {i: (mem[i], corner[i]) for i in k.inputs if i in mem})
        priced += [Priced(kmap[p.kernel.name], p.region,
                          None if p.cost is None else dataclasses.replace(p.cost, region=kmap[p.kernel.name].name))
                   for p in res.best.priced]
        local += [(j, x.program, ids)] * len(res.best.priced)
        c = inst.coff
        chosen.update({k + c: inst.node(n) for k, n in x.chosen.items()})
        for e in inst.entry_classes:
            chosen[e] = inst.node(inst.view.classes[e - c][0])
            bounds.append(e)
        chosen.update({m: ns[0] for m, (ns, _, _) in inst.extra.items()})
        fused |= {m + c for m in res.best.fused}
        rejected.append((c, seg, res))
        sites.update({m + c: tuple(tuple(inst.node(n) for n in part) for part in v) for m, v in res.sites.items()})
        streamed += [(r, c) for r in res.streamed]
        for (_, nid), w, r in zip(x.program.outputs, seg.exits, x.roots, strict=True):
            made[w], root[w] = ids[nid], r + c
    prog = Program(tuple(s.program.inputs) + tuple(nodes), tuple((name, made[nid]) for name, nid in s.program.outputs))
    part = Partition(tuple(kernels))
    part.check(prog)
    priced = _named(prog, priced, local)
    if again:
        priced = _in_place(prog, priced, again, price)
    total = sum(p.cost.time_est_us for p in priced if p.cost is not None)
    best = Candidate(frozenset(fused), Extraction(prog, part, total, chosen, tuple(root[nid] for _, nid in s.program.outputs)), priced, [], total)

    def base() -> Candidate:  # priced on demand, as each segment's
        ps = [p for seg in s.segments for p in found[seg.key].baseline.priced]
        return Candidate(frozenset(), None, ps, total=sum(p.cost.time_est_us for p in ps if p.cost is not None))
    streamed = [Streamed(r.value + c, total, len(priced), r.passes) for r, c in streamed]

    def rejections() -> list:  # priced on demand, as each segment's (--explain)
        out = [_whole(r, c, seg, total - res.best.total, len(priced) - len(res.best.priced))
               for c, seg, res in rejected for r in res.rejected]
        return out + [Rejection(b, BOUNDARY, total, None, len(priced), len(priced)) for b in bounds]
    first = [found[k] for k in found]
    stop = next((f.stop for f in first if f.stop != "exhausted"), "exhausted")
    return Search(best, base, rejections, sum(f.evaluations for f in first), sites, streamed, stop,
                  sum(f.nodes for f in first), sum(f.groups_priced for f in first))
