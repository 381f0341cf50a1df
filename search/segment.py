"""Repeated blocks of a Tiny IR program, found so that each distinct block is saturated, searched and
priced once (docs/DESIGN.md §Fusion, "Segments").

A *cut* is a point of the program's order where few computed values are still needed later (its *live*
values; program inputs, constants and views of them are free: each part re-reads or recomputes them), each
one worth materializing (``_materializable``). The residual stream between two transformer blocks is a cut
of one live value; the start of a U-Net's next level a cut of several (the stream and the skip tensors the
decoder reads later). ``segment`` first uses the cuts of ONE live value: it groups their atoms into the
longest run of at least two consecutive, identical *segments* (same ops, arguments, shapes and dtypes, same
wiring; tensor identities and user names do not count), then, in the parts before and after it, their own
longest runs, and so on (the stages of a ResNet: blocks identical within a run, of another shape in the
next). A part no such run covers is then cut (``most`` above 0: POLYSAT_SEGMENT_LIVE, off by default) at the
cuts of at most ``most`` values each into its longest run of consecutive segments of one *structure* (equal
but for extents, ``Segment.structure``: a U-Net's encoder levels, its decoder levels), and so on around it. Only the cuts at segment boundaries are used, and
each of their live values is materialized by the partition (the hand partition of a transformer writes the
residual stream there too; every level-by-level partition of a U-Net writes the skip tensors). A program
without a run is one segment.

Every segment becomes a standalone canonical Program (``Segment.program``): its inputs are the program
inputs it reads and the live values of its first cut it reads, in first-use order, with ids ``i0..``, tensor
ids ``t0..``, its nodes ``n0..`` (free nodes it needs ``f0..``), its outputs the values it computes that are
live at its last cut, in program order (the last segment: the program's outputs it computes). Equal segments
have equal canonical programs (``key``), so one search serves them all; ``Segment.origin`` maps canonical ids
back to the program's ids.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Callable

from ..ir.tiny import Arg, GroupOp, Ops, Program, UOp
from ..knobs import segment_live

SEGMENT_OUT = "segment_out"  # the output name of a segment that is not the last one


@dataclass(frozen=True, eq=False)
class Segment:
    key: str  # equal keys: equal programs up to ids, tensor ids and tags
    origin: dict  # canonical node id -> the whole program's node id ("n" and "i" ids; "f" ids are copies)
    make: "Callable[[], Program]" = dataclasses.field(repr=False)  # builds the canonical program (once, on use)
    shape_free: "Callable[[], str]" = dataclasses.field(default=lambda: "", repr=False)  # builds ``structure``
    entries: tuple = ()  # (canonical tensor id, the program's node id) of each value it reads from a segment before
    exits: tuple = ()  # the program's node id of each canonical output, in order

    @property
    def structure(self) -> str:
        """Equal structures: equal keys but for the extents (each shape by its rank); built when first asked,
        as ``program`` is."""
        got = self.__dict__.get("_structure")
        if got is None:
            got = self.shape_free()
            object.__setattr__(self, "_structure", got)
        return got

    @property
    def program(self) -> Program:
        """The canonical program, built when first asked: the run search keys many candidate segments it never
        uses (``segment``'s ``longest``)."""
        got = self.__dict__.get("_program")
        if got is None:
            got = self.make()
            object.__setattr__(self, "_program", got)
        return got


def _free(prog: Program) -> set:
    """INPUT and CONST nodes, views of them and casts of constants: every part may re-read or recompute them. (A
    16-bit program casts its constants to fp32 where fp32 values read them, and the importers share equal constants:
    such a cast, were it a value, would stay live from its first reader to its last, and no cut would lie between.
    A cast of an input stays a value: the first block's cast of the program's input is the later blocks' cast of
    the stream.)"""
    out: set = set()
    const: set = set()  # CONST nodes, their views and casts
    outputs = {nid for _, nid in prog.outputs}
    for n in prog.nodes:
        if n.op == Ops.CONST or n.op in GroupOp.Movement and all(s in const for s in n.src) or \
                n.op == Ops.CAST and n.src[0] in const and n.id not in outputs:
            const.add(n.id)
            out.add(n.id)
        elif n.op == Ops.INPUT or n.op in GroupOp.Movement and all(s in out for s in n.src):
            out.add(n.id)
    return out


def _cut_points(prog: Program, free: set, most: int, worth_of: "Callable | None" = None) -> dict:
    """{position in the computed-node order: the live values there} for every cut of at most ``most`` live
    values, each ``worth_of(prog, v, users)`` (default ``_materializable``)."""
    worth_of = worth_of or _materializable
    comp = [n for n in prog.nodes if n.id not in free]
    pos = {n.id: k for k, n in enumerate(comp)}
    last = {n.id: pos[n.id] for n in comp}
    for n in comp:
        for s in n.src:
            if s in pos:
                last[s] = max(last[s], pos[n.id])
    for _, nid in prog.outputs:
        if nid in pos:
            last[nid] = len(comp)
    live: set = set()
    users = prog.consumers()
    ends: dict = {}
    for v, k in last.items():
        ends.setdefault(k, []).append(v)
    worth: dict = {}  # value -> whether it is materializable, asked once
    out = {}
    for k, n in enumerate(comp[:-1]):
        live.add(n.id)
        for v in ends.get(k, ()):
            live.discard(v)
        if 0 < len(live) <= most and \
                all(worth[v] if v in worth else worth.setdefault(v, worth_of(prog, v, users)) for v in live):
            out[k + 1] = frozenset(live)
    return out


def _materializable(prog: Program, v: str, users: dict) -> bool:
    """A value worth a segment boundary: no view (never write a broadcast), not inside a contraction
    (MUL -> REDUCE(SUM) and the casts of its operands), and read (through casts and views) by a
    reduction or a contraction, which read it whole anyway: an elementwise consumer would rather be
    fused into v's kernel as its epilogue."""
    if not cuttable(prog, v, users):
        return False
    stack, seen = list(users.get(v, ())), set()
    while stack:
        u = stack.pop()
        if u in seen:
            continue
        seen.add(u)
        if prog[u].op == Ops.REDUCE or _contraction_mul(prog, u, users):
            return True
        if prog[u].op in GroupOp.Movement or prog[u].op == Ops.CAST:
            stack.extend(users.get(u, ()))
    return False


def cuttable(prog: Program, v: str, users: dict) -> bool:
    """Whether v can be written at a cut at all: no view (never write a broadcast or a padding) and not inside a
    contraction (the MUL of MUL -> REDUCE(SUM), or a CAST of one of its operands)."""
    n = prog[v]
    return not (n.op in GroupOp.Movement or _contraction_mul(prog, v, users) or
                n.op == Ops.CAST and any(_contraction_mul(prog, u, users) for u in users.get(v, ())))


def _contraction_mul(prog: Program, i: str, users: dict) -> bool:
    return prog[i].op == Ops.MUL and any(prog[u].op == Ops.REDUCE and str(prog[u].arg["op"]).upper() == "SUM"
                                         for u in users.get(i, ()))


def _broadcast_read(prog: Program, v: str, users: dict) -> bool:
    """Whether v is read by a contraction that broadcasts it: followed through views, casts and concatenations (a
    sum of pads, ``_joins``), some reader is the MUL of a contraction (MUL -> REDUCE(SUM)) reading it through an
    EXPAND that widens an axis each of those REDUCEs keeps, each element of v read by many outputs and each output
    reading many (a GEMM's or a convolution's operand). The reduction computing v is then never computed in that
    contraction's kernel (rules/fusion.egg: a reduction read many-to-many): a cut there moves no fusion of the whole
    search across it (but for v's elementwise tail, a ReLU, applied in its readers instead). A pooling, a row
    statistic or a product summed without a broadcast (x * sigmoid(x) averaged) reads v halo or owned, a legal
    fusion: the whole search may compute v inside it (a conv's ReLU, concatenation and max pool in one kernel);
    and a value read on through other elementwise ops (a transformer's residual stream, read by its LayerNorm's
    normalization and the next residual sum) may be recomputed in each reader, never written: a cut before any
    of them would forbid what the whole search finds."""
    stack, seen = [v], {v}
    while stack:
        x = stack.pop()
        for u in users.get(x, ()):
            n = prog[u]
            if n.op == Ops.MUL and users.get(u) and all(prog[r].op == Ops.REDUCE and str(prog[r].arg["op"]).upper() == "SUM"
                                                        for r in users[u]):
                if prog[x].op == Ops.EXPAND and _widens_kept(prog[x], prog[prog[x].src[0]], [prog[r] for r in users[u]]):
                    return True
                continue
            if u not in seen and (n.op in GroupOp.Movement or n.op == Ops.CAST or _joins(prog, u)):
                seen.add(u)
                stack.append(u)
    return False


def _joins(prog: Program, u: str) -> bool:
    """Whether u is a concatenation: an ADD each of whose operands is a PAD or such an ADD (frontend's Concat, a
    balanced sum of its pieces, each padded to the whole)."""
    stack = [u]
    while stack:
        n = prog[stack.pop()]
        if n.op != Ops.ADD:
            return False
        stack.extend(s for s in n.src if prog[s].op != Ops.PAD)
    return True


def _widens_kept(expand: UOp, src: UOp, reduces: list) -> bool:
    """Whether the EXPAND widens (extent 1 to more) an axis that every one of ``reduces`` keeps."""
    if len(src.shape) != len(expand.shape):
        return False
    wide = {k for k, (a, b) in enumerate(zip(src.shape, expand.shape)) if a == 1 and b != 1}
    return any(all(k not in r.arg["axes"] for r in reduces) for k in wide)


def _canonical(prog: Program, free: set, nodes: list, entries: frozenset, outputs: tuple, texts: dict) -> Segment:
    """The standalone program of ``nodes`` (computed node ids in order) reading ``entries`` (the live values of
    the cut before them, those it reads) and the free nodes they need, yielding ``outputs`` ((name, id), ...).
    ``texts``: each node's key text around its ids (``_texts``), filled on first use and shared by every
    candidate segment."""
    mine = set(nodes)
    free = set(free)
    for i in nodes:  # views of the values flowing in are as free as views of a program input
        n = prog[i]
        if n.op in GroupOp.Movement and all(q in entries or q in free for q in n.src):
            free.add(i)
            mine.discard(i)
    body: list = []  # the free nodes each node needs just before it (first use), so equal parts list equally
    seen: set = set()

    def emit(i: str) -> None:
        stack = [(i, False)]
        while stack:
            j, ready = stack.pop()
            if ready:
                body.append(j)
            elif j not in seen and j not in entries and (j in mine or j in free and prog[j].op != Ops.INPUT):
                seen.add(j)
                stack.append((j, True))
                stack.extend((s, False) for s in reversed(prog[j].src) if s not in mine)
    for i in nodes:
        emit(i)
    ids: dict = {}
    inputs: list = []
    for i in body:
        for s in prog[i].src:
            if s not in ids and (s in entries or prog[s].op == Ops.INPUT):
                ids[s] = f"i{len(inputs)}"
                inputs.append(s)
    nf = nn = 0
    for i in body:
        if i in mine:
            ids[i], nn = f"n{nn}", nn + 1
        else:
            ids[i], nf = f"f{nf}", nf + 1
    outs = tuple((f"o{k}", ids[nid]) for k, (_, nid) in enumerate(outputs))

    def make() -> Program:
        uops = []
        for k, s in enumerate(inputs):
            n = prog[s]
            uops.append(UOp(ids[s], Ops.INPUT, (), _input_arg(k, n.dtype, n.shape), n.dtype, n.shape))
        for i in body:
            n = prog[i]
            uops.append(dataclasses.replace(n, id=ids[i], src=tuple(ids[s] for s in n.src)))
        return Program(tuple(uops), outs)
    # the key is the canonical program's nodes as text, read off the whole program's nodes (no node is built):
    # the repr of the rows (op, id, src, dtype, shape, arg text), each node's text around its ids made once
    rows = [_input_row(k, prog[s].dtype, prog[s].shape) for k, s in enumerate(inputs)]
    for i in body:
        head, tail = texts.get(i) or texts.setdefault(i, _texts(prog[i]))
        rows.append(f"({head}, {ids[i]!r}, {tuple(ids[s] for s in prog[i].src)!r}{tail}")
    rows += [repr(o) for o in outs]
    key = "(" + ", ".join(rows) + ("," if len(rows) == 1 else "") + ")"
    origin = {ids[i]: i for i in inputs} | {ids[i]: i for i in nodes if i in mine}

    def shape_free() -> str:
        structure = [_shape_free(Ops.INPUT.value, ids[s], (), n.dtype, n.shape, _input_arg(k, n.dtype, n.shape))
                     for k, s in enumerate(inputs) for n in (prog[s],)]
        structure += [_shape_free(n.op.value, ids[i], tuple(ids[s] for s in n.src), n.dtype, n.shape, n.arg)
                      for i in body for n in (prog[i],)]
        return repr(tuple(structure) + outs)
    return Segment(key, origin, make, shape_free, tuple((f"t{k}", s) for k, s in enumerate(inputs) if s in entries),
                   tuple(nid for _, nid in outputs))


@functools.lru_cache(maxsize=4096)
def _input_row(k: int, dtype, shape: tuple) -> str:
    """Canonical input k's key row as text (its id ``i{k}``, its tensor ``t{k}``)."""
    return repr((Ops.INPUT.value, f"i{k}", (), dtype, shape, _items_key(_input_arg(k, dtype, shape))))


def _texts(n: UOp) -> tuple:
    """Node n's key row as text before its id and after its sources: the row is
    ``(op, id, src, dtype, shape, arg text)``, as its repr reads."""
    return repr(n.op.value), f", {n.dtype!r}, {n.shape!r}, {_arg_key(n)!r})"


_SHAPES = ("shape", "result_shape")  # the args that hold extents (a view's index map and an axis stay)


def _shape_free(op: str, i: str, src: tuple, dtype, shape: tuple, arg: Arg) -> tuple:
    """A key row with every extent dropped: the node's shape and its args' shapes by their rank, a constant pad
    by the sides it pads (a concatenation's pads are the other part's extent; a convolution's halo keeps its
    sides), a constant's value (a LayerNorm's width, read by no price) by nothing."""
    items = sorted((k, len(v) if k in _SHAPES and isinstance(v, tuple) else
                    tuple(tuple(x > 0 if isinstance(x, int) else x for x in side) for side in v)
                    if k == "pad" and op == Ops.PAD.value else v)  # a symbolic pad as it is
                   for k, v in arg.items() if not (op == Ops.CONST.value and k == "value"))
    return op, i, src, dtype, len(shape), repr(items)


def _input_arg(k: int, dtype, shape: tuple) -> Arg:
    """The arg of canonical input k, of that dtype and shape."""
    return Arg({"tensor_id": f"t{k}", "dtype": dtype, "shape": shape})


def _arg_key(u) -> str:
    return _items_key(u.arg)


def _items_key(arg: Arg) -> str:
    return repr(sorted((k, v) for k, v in arg.items()))


TIES = 4  # the longest runs of a part of the second pass whose cuttings are compared (those starting last)


def segment(prog: Program, most: "int | None" = None) -> list:
    """The program's segments in order (see the module docstring); one segment when nothing repeats.
    A repeated segment must hold a reduction (materializing between elementwise ops never pays). ``most``: the
    most values live at a cut of the second pass (default ``knobs.segment_live``; 0: no second pass)."""
    most = segment_live() if most is None else most
    free = _free(prog)
    comp = [n.id for n in prog.nodes if n.id not in free]
    whole = [Segment("whole", {n.id: n.id for n in prog.nodes}, lambda: prog)]  # searched as it is: not renamed
    if any(nid not in comp for _, nid in prog.outputs):
        return whole
    cut = {0: frozenset()} | _cut_points(prog, free, max(1, most))
    end = len(comp)
    pos = {i: k for k, i in enumerate(comp)}
    heavy = [k for k, i in enumerate(comp) if prog[i].op not in GroupOp.Movement]
    sig = [(prog[comp[k]].op, prog[comp[k]].dtype, prog[comp[k]].shape, _arg_key(prog[comp[k]])) for k in heavy]
    loose = [x[:2] for x in sig]  # what a structure keeps of a node's signature
    weight = {k: sum(1 for h in heavy if h < k) for k in set(cut) | {end}}  # non-view nodes before each cut
    users = prog.consumers()
    made: dict = {}  # (start, end) -> its Segment, built once

    @functools.lru_cache(maxsize=None)
    def broad(v: str) -> bool:
        return _broadcast_read(prog, v, users)
    texts: dict = {}  # node id -> its key text around its ids, shared by every candidate segment

    def seg(a: int, b: int) -> Segment:
        if (a, b) not in made:
            outs = tuple((n, v) for n, v in prog.outputs if pos[v] >= a) if b == end else \
                tuple((SEGMENT_OUT, v) for v in sorted(cut[b], key=pos.__getitem__) if pos[v] >= a)
            made[(a, b)] = _canonical(prog, free, comp[a:b], cut[a], outs, texts)
        return made[(a, b)]

    def rereads(a: int, b: int) -> bool:
        """Whether segment [a, b) reads a value it writes for the segments after it."""
        return any(a <= pos.get(u, -1) < b for v in cut.get(b, ()) if pos[v] >= a for u in users.get(v, ()))

    def longest(lo: int, hi: int, starts: list, sig: list, same: Callable, ties: bool) -> list:
        """The bounds of the longest run of at least two consecutive segments inside [lo, hi], each ``same`` as
        the first, and holding a reduction; of runs covering as many nodes, the one of the shortest period (with
        ``ties``: each such run, the first first, and only of segments that read none of the values they write:
        such a value, a U-Net's skip tensor read by the level's pooling, is one the whole search may rather
        leave unwritten, its ReLU applied in each reader, which a segment that must write it never finds)."""
        best, found = None, []  # (nodes covered, -period), the runs of it
        inside = [k for k in starts if lo <= k <= hi]
        at = {weight[k]: k for k in inside}  # a weight -> its last cut (only views between cuts of one weight)
        for a in inside:
            for b in inside:
                n = weight[b] - weight[a]
                room = (weight[hi] - weight[a]) // n * n if n > 0 else 0  # the most this run could cover
                if n <= 0 or room < 2 * n or best is not None and (room < best[0] or room == best[0] and not ties) \
                        or ties and rereads(a, b):
                    continue
                bounds = [a, b]
                while weight[bounds[-1]] + n in at and \
                        sig[weight[a]:weight[b]] == sig[weight[bounds[-1]]:weight[bounds[-1]] + n] and \
                        same(seg(a, b), seg(bounds[-1], at[weight[bounds[-1]] + n])):
                    bounds.append(at[weight[bounds[-1]] + n])
                cand = ((len(bounds) - 1) * n, -n)
                if len(bounds) < 3 or best is not None and cand < best or \
                        not any(prog[i].op == Ops.REDUCE for i in comp[a:b]) or \
                        ties and all(len(cut[k]) < 2 for k in bounds[1:-1]):  # the segment's own nodes
                    continue
                best, found = (cand, [bounds]) if best is None or cand > best else (best, found + [bounds])
        return found

    cuts = {0, end}
    # identical blocks at the cuts of one value, cut greedily: each part at its longest run, then the parts
    # around it the same way
    parts, rest = [(0, end)], []
    ones = sorted(k for k, v in cut.items() if len(v) <= 1) + [end]
    while parts:
        lo, hi = parts.pop()
        run = next(iter(longest(lo, hi, ones, sig, lambda x, y: x.key == y.key, False)), None)
        if run:
            cuts.update(run)
            parts += [(lo, run[0]), (run[-1], hi)]
        else:
            rest.append((lo, hi))
    # in the parts between those runs, blocks of one structure at any cut; of the longest runs of a part (a
    # U-Net's decoder levels may start at the bottleneck or after it), the one whose whole cutting writes the
    # fewest values at its boundaries
    # a cut of this pass moves no fusion of the whole search across it: each value live there is read by a
    # contraction that broadcasts it (``_broadcast_read``); the first pass's cuts keep ``_materializable`` alone
    every, split, found = sorted(k for k, v in cut.items() if all(broad(x) for x in v)) + [end], {}, {}

    def best(part: tuple) -> tuple:
        """(values written at the segment ends, the cuts, the run's start) of ``part`` (lo, hi): each of its longest
        runs with the best cutting of the parts around it; the fewest writes taken, then the run starting last (a
        U-Net's decoder levels then start at their upsampling and end at their last ReLU: priced as the whole
        program's search at 2 to 7 levels, where the run starting first, cut after each level's first conv, was
        0.5% dearer at 6 levels). A stack: the parts around a run before the part they are in."""
        todo = [part]
        while todo:
            lo, hi = todo[-1]
            if (lo, hi) in split:
                todo.pop()
                continue
            if (lo, hi) not in found:
                found[(lo, hi)] = longest(lo, hi, every, loose, lambda x, y: x.structure == y.structure,
                                          True)[-TIES:] if lo < hi else []
            around = [q for run in found[(lo, hi)] for q in ((lo, run[0]), (run[-1], hi)) if q not in split]
            if around:  # each strictly inside [lo, hi]: a run covers two segments at least
                todo += around
                continue
            todo.pop()
            options = [(split[(lo, run[0])][0] + split[(run[-1], hi)][0] +
                        sum(len(seg(x, y).exits) for x, y in zip(run, run[1:])),
                        split[(lo, run[0])][1] + tuple(run) + split[(run[-1], hi)][1], run[0]) for run in found[(lo, hi)]]
            split[(lo, hi)] = min(options, key=lambda o: (o[0], -o[2])) if options else \
                (len(seg(lo, hi).exits) if lo < hi else 0, (), 0)
        return split[part]
    for part in rest if most > 0 else ():
        cuts.update(best(part)[1])
    if len(cuts) == 2:
        return whole
    bounds = sorted(cuts)
    return [seg(x, y) for x, y in zip(bounds, bounds[1:])]
