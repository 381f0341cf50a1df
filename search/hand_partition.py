"""The hand-style partition of a program: the kernels a person writes by hand, built by one rule from the
program's structure (no per-model table), for ``polysat extract --explain`` to price beside the chosen
partition with the same cost (docs/DESIGN.md §Cost model).

The rule. Compute nodes are grouped by the user's op they come from (ir/user_names.py: ``fc1``, ``ln1``).

1. An op holding a contraction (a CONTRACT, or a SUM over a product of two non-constant operands: GEMM,
   convolution) or another reduction (softmax, layernorm, a pool: a row reduction) anchors a kernel. Sibling
   contractions whose results the extraction concatenated (rules/siblings.egg: adds of zero-padded pieces)
   anchor one kernel with that concatenation: Q/K/V, gate/up written as one GEMM. So do sibling contractions
   (one operand in common) whose results one elementwise value combines: SiLU(gate) x up, a paired GEMM.
2. A streamed softmax-weighted sum (egraph/stream.py) anchors one kernel together with the contraction
   that computes its scores, when that contraction feeds nothing else: flash attention.
   Nodes of such an op not connected to its reduction (a cast of an input the extraction duplicated for
   another kernel) count as an op of their own.
3. Every other op (elementwise: bias, activation, residual add, cast; its movement is free) joins the
   kernel of its latest producer unless that would make two kernels wait on each other; an op read only by
   one op holding a row reduction (not a contraction) joins that op's kernel (its body: RMSNorm's square); an op
   that reads only the program's inputs joins the kernel of its first consumer (a prologue).
4. A cast of a loaded value that ops of several kernels read is recomputed by each (each converts what it
   loads in registers). Any other value another kernel reads, and every program output, is written to memory.

So a pre-LN transformer block is LayerNorm, the Q/K/V projection(s), attention, projection + residual,
LayerNorm, FFN1 + bias + GELU, FFN2 + bias + residual.
"""
from __future__ import annotations

from dataclasses import replace

from ..ir.tiny import GroupOp, Ops, Program
from ..ir.trampoline import run
from ..ir.user_names import node_names
from ..egraph.partition import FREE_OPS, Kernel, Partition
from ..egraph.stream import groups as stream_groups


def hand_partition(original: Program, program: Program) -> tuple:
    """(program, partition): the hand-style partition (module docstring) of `program`, whose ops are named after
    `original`'s, and the program it partitions (`program` with the casts rule 4 recomputes copied per kernel)."""
    owner = _groups(original, program)
    p = _recompute_casts(program, owner)
    if p is not program:
        owner = _groups(original, p)
    return p, _kernels(p, owner, {i: _computed_reads(p, i) for i in owner})


def _groups(original: Program, p: Program) -> dict:
    """compute node id -> its kernel (a group name), by rules 1-3."""
    pos = {n.id: k for k, n in enumerate(p.nodes)}
    compute = [n.id for n in p.nodes if n.op not in FREE_OPS and n.op != Ops.INPUT]
    names = node_names(original, p)
    unit = {i: names.get(i, i) for i in compute}
    for key, g in stream_groups(p).items():  # a streamed softmax-weighted sum is one op
        for i in g.roles.values():
            if i in unit:
                unit[i] = f"stream {key}"
    reads = {i: _computed_reads(p, i) for i in compute}
    _split_detached(p, compute, unit, reads)
    joined = _concatenations(p, unit, reads) + _paired(p, compute, unit, reads)
    members: dict = {}
    for i in compute:
        members.setdefault(unit[i], []).append(i)
    group = {u: u for u, ns in members.items() if any(_is_reduction(p, i) for i in ns)}  # rule 1
    for us in joined:  # rule 1, sibling contractions: one kernel with the concatenation of their results
        anchor = group[min(u for u in us if u in group)]
        group.update({u: anchor for u in us})
    for key, g in stream_groups(p).items():  # rule 2
        s = f"stream {key}"
        for c in _scores_contractions(p, g, unit, reads):
            inside = {s, c} | {unit[i] for i in _cone(g.s, unit, c, reads)}
            users = {unit[x] for x in compute for r in reads[x] if unit[r] in inside - {s}}
            if users <= inside:
                group.update({u: s for u in inside})
    order = sorted(members, key=lambda u: pos[members[u][0]])
    read_by: dict = {}  # op -> the other ops that read it
    for x in compute:
        for r in reads[x]:
            if r in unit and unit[r] != unit[x]:
                read_by.setdefault(unit[r], set()).add(unit[x])
    later = []
    for u in order:  # rule 3: epilogues, in program order
        if u in group:
            continue
        body = read_by.get(u, set())
        if len(body) == 1 and (b := next(iter(body))) in group and _row_reduction(p, members[b]) \
                and not _cyclic({**group, u: group[b]}, members, unit, reads, group[b]):
            group[u] = group[b]  # read by one row reduction's op alone: its body (a norm's square)
            continue
        producers = {group.get(unit[r]) for i in members[u] for r in reads[i] if unit[r] != u}
        producers.discard(None)
        if not producers:
            later.append(u)
            continue
        last = {g: max(pos[i] for v, h in group.items() if h == g for i in members[v]) for g in producers}
        for g in sorted(producers, key=lambda g: -last[g]):  # the latest producer first
            if not _cyclic({**group, u: g}, members, unit, reads, g):
                group[u] = g
                break
        else:
            group[u] = u
    for u in reversed(later):  # prologues: the first consumer's kernel
        consumers = sorted((pos[x], group.get(unit[x])) for x in compute for r in reads[x]
                           if unit[r] == u and unit[x] != u and group.get(unit[x]) is not None)
        target = next((g for _, g in consumers if not _cyclic({**group, u: g}, members, unit, reads, g)), u)
        group[u] = target
    return _merge_cycles({i: group[unit[i]] for i in compute}, reads)


def _concatenations(p: Program, unit: dict, reads: dict) -> list:
    """The concatenations the extraction made of sibling contractions' results (rules/siblings.egg: a tree of adds
    of zero-padded pieces, each piece a contraction's value or its cast), each made an op of its own (``concat`` +
    its root), returned with the ops that compute their pieces: [{the concatenation's op, the pieces' ops}] (a
    person writes sibling GEMMs as one GEMM over their weights side by side: Q/K/V, gate/up). A concatenation of
    other values (rotate-half's) is left to the other rules."""
    def padded(i: str) -> "str | None":  # the value a PAD view of it shows, through movement
        x, pad = p[i], False
        while x.op in FREE_OPS:
            pad |= x.op == Ops.PAD
            x = p[x.src[0]]
        return x.id if pad and x.id in unit else None

    joins: set = set()  # adds of padded pieces or of such adds, in program order (sources first)
    for i in unit:
        if p[i].op == Ops.ADD and all(padded(s) is not None or s in joins for s in p[i].src):
            joins.add(i)
    inner = {s for i in joins for s in p[i].src if s in joins}
    out = []
    for root in (i for i in unit if i in joins and i not in inner):
        stack, nodes, pieces = [root], [], []
        while stack:
            i = stack.pop()
            nodes.append(i)
            for s in p[i].src:
                if s in joins:
                    stack.append(s)
                    continue
                piece = padded(s)
                if p[piece].op == Ops.CAST and reads[piece]:  # a piece's cast: the concatenation's too
                    nodes.append(piece)
                    piece = reads[piece][0]
                pieces.append(piece)
        if all(_is_contraction(p, x) for x in pieces):
            name = f"concat {root}"
            out.append({name} | {unit[x] for x in pieces})
            unit.update({x: name for x in nodes})
    return out


def _paired(p: Program, compute: list, unit: dict, reads: dict) -> list:
    """[{the ops of sibling contractions}] whose results one elementwise value combines, each read directly or
    through elementwise values of it alone: contractions with an operand in common (through movement and casts), as
    gate and up read the normed x and SiLU(gate) x up combines them (a person writes them as one GEMM over both
    weights: the paired GEMM)."""
    feeds: dict = {}  # elementwise node -> the contractions it reads, directly or through values of one of them
    out = []
    for i in compute:  # program order: a node's reads come first
        if p[i].op in GroupOp.Reduce:
            continue
        got = set()
        for r in reads[i]:
            if r in unit and _is_contraction(p, r):
                got.add(r)
            elif len(feeds.get(r, ())) == 1:
                got |= feeds[r]
        feeds[i] = got
        if len(got) < 2:
            continue
        ops = {c: {_through(p, o) for o in _operands(p, c)} for c in got}
        for a in sorted(got):
            sib = {unit[a]} | {unit[b] for b in got if b != a and ops[a] & ops[b]}
            if len(sib) > 1 and sib not in out:
                out.append(sib)
    return out


def _operands(p: Program, i: str) -> tuple:
    """A contraction's two operands (a CONTRACT's sources, or those of the product a SUM reduces)."""
    return p[i].src if p[i].op == Ops.CONTRACT else p[_product(p, i)].src


def _through(p: Program, i: str) -> str:
    """The node i shows, through movement and casts."""
    x = p[i]
    while x.op in GroupOp.Movement or x.op == Ops.CAST:
        x = p[x.src[0]]
    return x.id


def _merge_cycles(owner: dict, reads: dict) -> dict:
    """owner with the groups that still wait on each other made one kernel, a cycle at a time (rule 3 joins an op
    to a producer only where no cycle forms, but an op joined early may read one placed later: SiLU x up beside
    the gate/up concatenation, its gate's SiLU in a kernel of its own). What a person would write is one kernel."""
    while True:
        deps: dict = {}
        for i, g in owner.items():
            deps.setdefault(g, set()).update(owner[r] for r in reads[i] if r in owner and owner[r] != g)
        done: set = set()
        while True:
            ready = [g for g in deps if g not in done and deps[g] <= done]
            if not ready:
                break
            done.update(ready)
        left = [g for g in deps if g not in done]
        if not left:
            return owner
        path, g = [], left[0]
        while g not in path:  # every group left waits on another left: the walk meets itself
            path.append(g)
            g = next(h for h in sorted(deps[g]) if h not in done)
        cycle = set(path[path.index(g):])
        owner = {i: (g if h in cycle else h) for i, h in owner.items()}


def _recompute_casts(p: Program, owner: dict) -> Program:
    """p with each cast of a loaded value (an input, or a value of another kernel) that ops of other kernels
    read copied into each of them (with the views between), so no kernel writes a converted copy (rule 4)."""
    reads = {i: _computed_reads(p, i) for i in owner}
    shared = {i for i, g in owner.items() if p[i].op == Ops.CAST and all(owner.get(r) != g for r in reads[i])
              and any(i in reads[x] and owner[x] != g for x in owner)}
    if not shared:
        return p
    nodes = {n.id: n for n in p.nodes}
    gid = {g: k for k, g in enumerate(dict.fromkeys(owner.values()))}  # a group's number, for the copies' ids
    after: dict = {}  # original id -> the copies placed right after it
    made: dict = {}

    def copy(nid: str, g: str):  # a walk (ir/trampoline.py): the views between a reader and the cast are a chain
        n = nodes[nid]
        if (nid, g) in made:
            return made[nid, g]
        if nid in shared:
            new = replace(n, id=f"{nid}_g{gid[g]}", tag=None)  # named after the op that reads it
        elif n.op in FREE_OPS and _reaches(p, nid, shared):
            src = []
            for s in n.src:
                src.append((yield copy(s, g)))
            new = replace(n, id=f"{nid}_g{gid[g]}", src=tuple(src))
        else:
            return nid
        made[nid, g] = new.id
        after.setdefault(nid, []).append(new)
        return new.id
    for x, g in owner.items():
        if any(r in shared and owner[r] != g for r in reads[x]):
            nodes[x] = replace(nodes[x], src=tuple(run(copy(s, g)) if owner.get(s) != g else s for s in nodes[x].src))
    out = []
    for n in p.nodes:
        out.append(nodes[n.id])
        out.extend(after.get(n.id, ()))
    return Program(tuple(out), p.outputs)


def _reaches(p: Program, nid: str, targets: set) -> bool:
    stack = [nid]
    while stack:
        n = p[stack.pop()]
        if n.id in targets:
            return True
        if n.op in FREE_OPS:
            stack.extend(n.src)
    return False


def _split_detached(p: Program, compute: list, unit: dict, reads: dict) -> None:
    """Nodes of an op that holds a reduction but are not connected to it within the op (a cast of an input
    that the extraction duplicated for another kernel) become ops of their own (``op·id``)."""
    by: dict = {}
    for i in compute:
        by.setdefault(unit[i], []).append(i)
    for u, ns in by.items():
        if not any(_is_reduction(p, i) for i in ns):
            continue
        mine, near = set(ns), {i: set() for i in ns}
        for i in ns:
            for r in reads[i]:
                if r in mine:
                    near[i].add(r)
                    near[r].add(i)
        keep, stack = set(), [i for i in ns if _is_reduction(p, i)]
        while stack:
            i = stack.pop()
            if i not in keep:
                keep.add(i)
                stack.extend(near[i])
        for i in mine - keep:
            unit[i] = f"{u}\u00b7{i}"


def _is_reduction(p: Program, i: str) -> bool:
    return p[i].op in GroupOp.Reduce


def _row_reduction(p: Program, nodes: list) -> bool:
    """Whether an op's nodes hold a reduction but no contraction of their own (a MatMul's product and sum are
    one op's; the sum of a square another op computes, a norm's, is a row reduction)."""
    mine = set(nodes)
    return any(_is_reduction(p, i) for i in nodes) and not any(
        p[i].op == Ops.CONTRACT or _is_contraction(p, i) and _product(p, i) in mine for i in nodes)


def _product(p: Program, i: str) -> str:
    """The node a SUM reduces, through movement and casts."""
    x = p[p[i].src[0]]
    while x.op in GroupOp.Movement or x.op == Ops.CAST:
        x = p[x.src[0]]
    return x.id


def _computed_reads(p: Program, i: str) -> list:
    """The compute nodes (and INPUTs) node i reads, through movement and constants."""
    out, stack = [], list(p[i].src)
    while stack:
        n = p[stack.pop()]
        if n.op in FREE_OPS:
            stack.extend(n.src)
        elif n.op != Ops.INPUT and n.id not in out:
            out.append(n.id)
    return out


def _scores_contractions(p: Program, g, unit: dict, reads: dict) -> list:
    """The ops holding a contraction that the stream's scores are computed from (through elementwise ops)."""
    out, stack, seen = [], [g.s], set()
    while stack:
        i = stack.pop()
        if i in seen or i not in unit:
            continue
        seen.add(i)
        if _is_contraction(p, i):
            out.append(unit[i])
            continue
        if p[i].op not in GroupOp.Reduce:
            stack.extend(reads[i])
    return list(dict.fromkeys(out))


def _cone(s: str, unit: dict, stop: str, reads: dict) -> list:
    """The compute nodes between the scores node s and the contraction op `stop` (scale, mask)."""
    out, stack = [], [s]
    while stack:
        i = stack.pop()
        if i in out or i not in unit or unit[i] == stop:
            continue
        out.append(i)
        stack.extend(reads[i])
    return out


def _is_contraction(p: Program, i: str) -> bool:
    n = p[i]
    if n.op == Ops.CONTRACT:
        return True
    if n.op != Ops.REDUCE or str(n.arg.get("op", "")).upper() != "SUM":
        return False
    x = p[_product(p, i)]
    return x.op == Ops.MUL and all(_varies(p, s) for s in x.src)


def _varies(p: Program, i: str) -> bool:
    x = p[i]
    while x.op in GroupOp.Movement:
        x = p[x.src[0]]
    return x.op != Ops.CONST


def _deps(group: dict, members: dict, unit: dict, reads: dict) -> dict:
    out: dict = {}
    for u, ns in members.items():
        g = group.get(u, u)
        for i in ns:
            for r in reads[i]:
                h = group.get(unit[r], unit[r])
                if h != g:
                    out.setdefault(g, set()).add(h)
    return out


def _cyclic(group: dict, members: dict, unit: dict, reads: dict, at: str) -> bool:
    """Whether group ``at`` waits on itself: a path of group dependencies from it back to it. Only cycles through
    the group an op was just joined to count: groups that wait on each other elsewhere (an op whose nodes the
    extraction placed on both sides of a streamed sum) are not this join's doing, and ``_merge_cycles`` makes
    them one kernel at the end."""
    deps = _deps(group, members, unit, reads)
    seen, stack = set(), list(deps.get(at, ()))
    while stack:
        g = stack.pop()
        if g == at:
            return True
        if g not in seen:
            seen.add(g)
            stack.extend(deps.get(g, ()))
    return False


def _kernels(p: Program, owner: dict, reads: dict) -> Partition:
    """One kernel per group: its compute nodes, the views and constants they read, what others read written."""
    outputs = {nid for _, nid in p.outputs}
    read_by: dict = {}
    for x, g in owner.items():
        for r in reads[x]:
            read_by.setdefault(r, set()).add(g)
    written: dict = {}
    for i, g in owner.items():
        if i in outputs or read_by.get(i, set()) - {g}:
            written.setdefault(g, []).append(i)
    extra: dict = {}  # a program output that is a view of a computed value: written by that value's kernel
    for o in outputs:
        base = o
        while p[base].op in GroupOp.Movement:
            base = p[base].src[0]
        if o != base and base in owner:
            extra.setdefault(owner[base], []).append(o)
    order: list = []
    for n in p.nodes:
        if n.id in owner and owner[n.id] not in order:
            order.append(owner[n.id])
    kernels = []
    for g in _topo(order, owner, reads):
        nodes, inputs = set(), []
        stack = [i for i, h in owner.items() if h == g] + extra.get(g, [])
        while stack:
            x = p[stack.pop()]
            if x.id in nodes:
                continue
            if x.op == Ops.INPUT or (x.id in owner and owner[x.id] != g):
                if x.id not in inputs:
                    inputs.append(x.id)
                continue
            nodes.add(x.id)
            stack.extend(x.src)
        outs = [i for i in p.nodes if i.id in set(written.get(g, [])) | set(extra.get(g, []))]
        kernels.append(Kernel(f"h{len(kernels)}", frozenset(nodes), tuple(n.id for n in outs), tuple(sorted(inputs))))
    part = Partition(tuple(kernels))
    part.check(p)
    return part


def _topo(order: list, owner: dict, reads: dict) -> list:
    deps = {g: set() for g in order}
    for i, g in owner.items():
        deps[g].update(owner[r] for r in reads[i] if r in owner and owner[r] != g)
    out: list = []
    while len(out) < len(order):
        ready = [g for g in order if g not in out and deps[g] <= set(out)]
        if not ready:
            raise ValueError("hand-style groups wait on each other")
        out.append(ready[0])
    return out
