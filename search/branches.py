"""Identical parallel blocks of a Tiny IR program, found so that each distinct block is saturated, searched and
priced once (docs/DESIGN.md §Fusion, "Parallel segments"): the width analogue of search/segment.py's runs.

A *branch* is the exclusive cone of a value v that every legal partition writes (computed by a reduction, read
only by contractions: ``_contracted``): v and, found backwards from it, every computed node all of whose readers
are in the cone. It reads the rest of the program only through its *entries*, the computed values outside it
that its nodes read, each a *block*: a SHRINK of a computed value that selects one contiguous run of its
elements (step 1, the axes before the first one it cuts of extent 1, those after it whole), which enters as an
input of the block's shape, so experts reading different slices of one tensor have equal canonical programs. The
experts of a soft mixture are such branches: each reads its slots and yields its hidden activation, which its
second GEMM reads (that GEMM writes straight into the concatenation of every expert's output, in one kernel with
it, so it stays outside the branch).

Branches of equal canonical programs (``Segment.key``) form a group (at least two, each holding a reduction, each
reading its own blocks); the groups covering the most nodes first, each taken where it overlaps no group taken
and the cutting still holds (experts of two widths: two groups of one structure, each searched once, the second
taking the first's decisions where they hold, search/transfer.py), cut the program into parts in program order:
*before*, every computed node a block depends on; the branches; *after*, the rest. The values before writes for
later parts must pass the depth segments' boundary rule (``segment._materializable``), the program's outputs must
be after's, and at least MIN_BRANCHES branches must be cut (fewer cost more as parts than whole); otherwise the
program is not cut (``parallel`` returns None) and is searched whole. Segments nest (``nested``): a program cut
in depth has each distinct segment cut so side by side where it can be (a stack of mixture layers).
"""
from __future__ import annotations

from ..ir.tiny import GroupOp, Ops, Program
from .segment import SEGMENT_OUT, Segment, _canonical, _free, _materializable, segment

# the fewest branches cut: a small part's search polishes by the exact descent, so below this the parts cost more
# than the whole program; the parts share one pooled e-graph (egraph/state.py pooled_state: the rules loaded once).
# soft_moe of d 768, compile CPU s cut / whole, back to back (2-4 pairs each, load 4-5): 4 experts 1.73, 1.51 /
# 1.32, 1.12; 5 experts 1.72, 1.17 / 1.63, 1.11; 6 experts 1.66, 1.20, 0.96, 1.12 / 1.91, 1.43, 1.13, 1.22;
# 8 experts 1.58, 1.58 / 1.67, 1.97 (the same kernels and µs each); below it the program is searched whole
MIN_BRANCHES = 6


def parts(prog: Program) -> list:
    """The program's segments: its runs of identical blocks in depth (``segment.segment``), each distinct one cut
    into its identical blocks side by side where it has them (``nested``: a stack of mixture layers, each layer's
    experts), else its identical blocks side by side (``parallel``), else the whole program as one segment."""
    segs = segment(prog)
    return nested(prog, segs) if len(segs) > 1 else parallel(prog) or segs


def nested(prog: Program, segs: list) -> list:
    """The depth segments ``segs`` of ``prog`` with each one whose canonical program ``parallel`` cuts replaced by
    those parts, in program order, each in the whole program's ids: a part's ids map through the segment's
    (``Segment.origin``), and every input it reads that is not a program input is an entry (the segment's own
    entries, read by its first part or its last: the residual stream). Equal depth segments are cut once (the
    same parts), so a stack of L mixture layers of E experts has as many distinct parts as one layer."""
    cuts: dict = {}  # depth segment key -> its parallel parts (None: not cut)
    out: list = []
    for seg in segs:
        if seg.key not in cuts:
            cuts[seg.key] = parallel(seg.program)
        out += [seg] if cuts[seg.key] is None else [in_program(prog, seg, sub) for sub in cuts[seg.key]]
    return out


def in_program(prog: Program, seg: Segment, sub: Segment) -> Segment:
    """``sub`` (a part of ``seg``'s canonical program) in ``prog``'s ids; its canonical program is sub's own."""
    o = {k: seg.origin[v] for k, v in sub.origin.items()}
    reads = sorted((k for k in o if k.startswith("i")), key=lambda k: int(k[1:]))
    return Segment(sub.key, o, lambda: sub.program, lambda: sub.structure,
                   tuple((f"t{k[1:]}", o[k]) for k in reads if prog[o[k]].op != Ops.INPUT),
                   tuple(seg.origin[w] for w in sub.exits))


def parallel(prog: Program) -> "list | None":
    """[before, branch, ..., after] (each a Segment; before left out when it computes nothing), or None when no
    group of at least two identical branches cuts the program (see the module docstring)."""
    free, texts = _free(prog), {}  # texts: each node's key text around its ids, shared by every candidate
    if sum(1 for n in prog.nodes if n.op == Ops.SHRINK and n.src[0] not in free and _contiguous(n, prog[n.src[0]])) \
            < MIN_BRANCHES:  # each branch reads a block of its own: too few blocks, no cut (a linear scan)
        return None
    users = prog.consumers()
    pos = {n.id: k for k, n in enumerate(prog.nodes)}
    outputs = {nid for _, nid in prog.outputs}
    groups: dict = {}  # key -> [(v, its nodes, its entries)]
    for n in prog.nodes:
        if n.id in free or n.id in outputs or n.op in GroupOp.Movement or n.op == Ops.CAST or not users[n.id] \
                or not _contracted(prog, n.id, users):
            continue
        nodes, entries = _cone(prog, n.id, free, users)
        if not any(prog[i].op == Ops.REDUCE for i in nodes) or any(prog[e].op != Ops.SHRINK for e in entries):
            continue
        order = sorted(nodes, key=pos.__getitem__)
        seg = _canonical(prog, free, order, frozenset(entries), ((SEGMENT_OUT, n.id),), texts)
        groups.setdefault(seg.key, []).append((n.id, order, entries, seg))
    runs = [g for g in groups.values() if len(g) >= 2 and
            len({i for _, order, _, _ in g for i in order}) == sum(len(order) for _, order, _, _ in g) and
            len({(prog[e].src[0], prog[e].arg["lo"]) for _, _, entries, _ in g for e in entries}) ==
            sum(len(entries) for _, _, entries, _ in g)]  # each branch its own blocks
    # the groups covering the most nodes first, each taken where it overlaps none taken and the cutting holds
    cut, taken, inside = None, [], set()
    for g in sorted(runs, key=lambda g: (-len(g) * len(g[0][1]), pos[g[0][0]])):
        mine = {i for _, order, _, _ in g for i in order}
        if not mine & inside:
            trial = _cut(prog, free, texts, taken + g, users, pos)
            if trial is not None:
                cut, taken, inside = trial, taken + g, inside | mine
    return cut if len(taken) >= MIN_BRANCHES else None


def _contracted(prog: Program, v: str, users: dict) -> bool:
    """Whether every reader of v (through views and casts) is the MUL of a contraction (MUL -> REDUCE(SUM)): with
    v computed by a reduction, no legal partition fuses v into its readers (rules/fusion.egg: a reduction read
    many-to-many, GEMM -> GEMM), so every partition writes it, as a segment boundary does."""
    stack, seen = list(users[v]), set()
    while stack:
        u = stack.pop()
        if u in seen:
            continue
        seen.add(u)
        n = prog[u]
        if n.op in GroupOp.Movement or n.op == Ops.CAST:
            stack.extend(users[u])
        elif not (n.op == Ops.MUL and users[u] and
                  all(prog[r].op == Ops.REDUCE and str(prog[r].arg["op"]).upper() == "SUM" for r in users[u])):
            return False
    return bool(seen)


def _cone(prog: Program, v: str, free: set, users: dict) -> tuple:
    """(the computed nodes of v's exclusive cone, its entries): a node joins when every reader of it has (the last
    reader to join pushes it again); an entry read through one contiguous SHRINK enters as that SHRINK."""
    mine, stack = {v}, list(prog[v].src)
    while stack:
        s = stack.pop()
        if s in mine or s in free:
            continue
        if all(u in mine for u in users[s]):
            mine.add(s)
            stack.extend(prog[s].src)
    for i in list(mine):
        n = prog[i]
        if n.op == Ops.SHRINK and n.src[0] not in mine and n.src[0] not in free and _contiguous(n, prog[n.src[0]]):
            mine.discard(i)
    entries = {s for i in mine for s in prog[i].src if s not in mine and s not in free}
    return mine, entries


def _contiguous(n, src) -> bool:
    """Whether SHRINK n selects one contiguous run of src's row-major elements: steps of 1, every axis before the
    first one it cuts of extent 1, every axis after it whole."""
    a, shape = n.arg, src.shape
    if any(s != 1 for s in a["step"]):
        return False
    cut = [k for k in range(len(shape)) if (a["lo"][k], a["hi"][k]) != (0, shape[k])]
    return not cut or all(shape[k] == 1 for k in range(cut[0])) and all(
        (a["lo"][k], a["hi"][k]) == (0, shape[k]) for k in range(cut[0] + 1, len(shape)))


def _cut(prog: Program, free: set, texts: dict, group: list, users: dict, pos: dict) -> "list | None":
    """The parts of the cutting of ``group``'s branches (of one group or several; the module docstring), or None when
    a crossing value is not worth materializing or a program output is not after's."""
    inside = {i for _, order, _, _ in group for i in order}
    views = {e for _, _, entries, _ in group for e in entries if prog[e].op == Ops.SHRINK}  # entries as blocks
    bases = {prog[e].src[0] if e in views else e for _, _, entries, _ in group for e in entries}
    before, stack = set(), list(bases)
    while stack:
        i = stack.pop()
        if i in before or i in free:
            continue
        before.add(i)
        stack.extend(prog[i].src)
    if before & (inside | views):
        return None
    comp = [n.id for n in prog.nodes if n.id not in free]
    after = [i for i in comp if i not in before and i not in inside and i not in views]
    exits = sorted({i for i in before if any(u not in before for u in users[i])}, key=pos.__getitem__)
    if not after or any(nid not in after for _, nid in prog.outputs) or \
            not all(_materializable(prog, i, users) for i in exits):
        return None
    ahead = [_canonical(prog, free, sorted(before, key=pos.__getitem__), frozenset(),
                        tuple((SEGMENT_OUT, i) for i in exits), texts)] if before else []
    values = frozenset(exits) | {v for v, _, _, _ in group}
    return ahead + [seg for _, _, _, seg in sorted(group, key=lambda g: pos[g[0]])] + \
        [_canonical(prog, free, after, values, tuple(prog.outputs), texts)]
