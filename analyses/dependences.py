"""Flow, anti and output dependences of a region and the axes they leave parallel (docs/DESIGN.md
§Poly Core).

Dependences come from isl's dataflow analysis (``UnionAccessInfo.compute_flow``) over the region's
schedule (statement sequence, then loop order). A reducing statement also reads the cell it
accumulates into, so its self-dependence is carried by the reduction dims and only by them.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import islpy as isl

from ..ir import deadline
from .isl_util import val_int
from .poly_region import BoundRegion, BoundStatement


def _union(maps) -> isl.UnionMap:
    """The union of the maps (None for none), joined pairwise in rounds: each union copies its operands, so
    joining one map at a time would copy the growing union once per map."""
    us = [isl.UnionMap.from_map(m) for m in maps]
    return _union_maps(us) if us else None


@dataclass(frozen=True)
class Dependences:
    region: BoundRegion
    flow: isl.UnionMap  # write instance -> read instance of the value it produced (RAW)
    anti: isl.UnionMap  # read instance -> later overwriting instance (WAR)
    output: isl.UnionMap  # write instance -> later write of the same cell (WAW)
    live_in: isl.UnionMap  # read instance -> element read with no writer in the region

    @cached_property
    def all(self) -> isl.UnionMap:
        return self.flow.union(self.anti).union(self.output)

    def between(self, src: str, dst: str, kind: str = "flow") -> isl.Map:
        """The dependences of `kind` from statement src to statement dst (an isl.Map, maybe empty)."""
        s, d = self.region.stmt(src), self.region.stmt(dst)
        space = isl.Space.map_from_domain_and_range(s.domain.get_space(), d.domain.get_space())
        return getattr(self, kind).extract_map(space)

    def carried(self, st: BoundStatement) -> tuple:
        """Loop dims of `st` (in loop order) that carry one of its self-dependences."""
        self_deps = self.between(st.name, st.name, "flow").union(self.between(st.name, st.name, "anti")) \
            .union(self.between(st.name, st.name, "output"))
        if self_deps.is_empty():
            return ()
        deltas = self_deps.deltas()
        out = []
        for d in st.loop_order:
            k = st.dims.index(d)
            # an unbounded distance (None) is carried too
            if (val_int(deltas.dim_min_val(k)), val_int(deltas.dim_max_val(k))) != (0, 0):
                out.append(d)
            deltas = deltas.fix_val(isl.dim_type.set, k, isl.Val(0))  # inner dims: only deps equal here
            if deltas.is_empty():
                break
        return tuple(out)

    def parallel(self, st: BoundStatement) -> tuple:
        carried = set(self.carried(st))
        return tuple(d for d in st.loop_order if d not in carried)

    def pairs(self) -> list:
        """JSON-able summary: one entry per (kind, src, dst) with the relation as isl text, in statement order
        (read off the maps each relation holds, not looked up per pair of statements)."""
        out = []
        pos = {s.name: k for k, s in enumerate(self.region.statements)}
        for kind in ("flow", "anti", "output"):
            maps: list = []
            getattr(self, kind).foreach_map(maps.append)
            got = {}
            for m in maps:
                if not m.is_empty():
                    got[(m.get_tuple_name(isl.dim_type.in_), m.get_tuple_name(isl.dim_type.out))] = m
            for (src, dst) in sorted(got, key=lambda k: (pos[k[0]], pos[k[1]])):
                out.append({"kind": kind, "src": src, "dst": dst, "relation": str(got[(src, dst)].coalesce())})
        return out

    def unwritten_reads(self) -> dict:
        """Region-written tensors read where no instance of the region wrote them (read before write,
        or reading cells nobody writes): tensor -> isl.Set of such elements."""
        out = {}
        written = {s.stmt.write.tensor for s in self.region.statements}
        rng = self.live_in.range()
        for t in written:
            sp = self.region.tensor_sets[t].get_space()
            bad = rng.extract_set(sp)
            if not bad.is_empty():
                out[t] = bad
        return out


def dependences(b: BoundRegion, exact: bool = False) -> Dependences:
    """Memory-based dependences (every earlier writer of a cell; ~4 ms, what legality and
    parallelism need), or with `exact` value-based flow dependences (the last writer only, isl
    dataflow analysis, ~3x slower; what `--dump=analysis` prints).

    Built per tensor from the pairs of statements that access it, each pair ordered by its own two
    schedules (``lex_lt_map``): linear in the accesses, where one order over the whole schedule has a piece
    per pair of statements (a 300-statement chain took 18 s)."""
    writes: dict = {}  # tensor -> [(statement, write map)]
    reads: dict = {}  # tensor -> [(statement, read map)], the accumulation's read of its own cell included
    for s in b.statements:
        writes.setdefault(s.stmt.write.tensor, []).append((s, s.write))
        for t, m in s.reads:
            reads.setdefault(t, []).append((s, m))
        if s.reduce_dims:
            reads.setdefault(s.stmt.write.tensor, []).append((s, s.write))
    before = _Before(b)
    flow, anti, output = [], [], []
    for t, ws in writes.items():
        deadline.check(f"region {b.region.name}, the dependences on {t}")
        rs = reads.get(t, [])
        output += [before.among(w1, m1, w2, m2) for w1, m1 in ws for w2, m2 in ws]
        anti += [before.among(r, mr, w, mw) for r, mr in rs for w, mw in ws]
        if not exact:
            flow += [before.among(w, mw, r, mr) for w, mw in ws for r, mr in rs]
    if exact:  # isl's dataflow analysis per tensor, over the schedules of the statements that access it
        for t, ws in writes.items():
            rs = reads.get(t, [])
            if rs:
                sched = _union(b.schedule_maps[n] for n in dict.fromkeys(s.name for s, _ in ws + rs))
                fl = isl.UnionAccessInfo.from_sink(_union(m for _, m in rs)).set_must_source(
                    _union(m for _, m in ws)).set_schedule_map(sched).compute_flow()
                flow.append(fl.get_must_dependence())
        flow_map = _union_maps(flow) if flow else isl.UnionMap("{ }")
    else:
        flow_map = _union_nonempty(flow)
    # live-ins: per tensor, the reads no earlier instance wrote (the accumulation's own read is not one)
    live = []
    for s in b.statements:
        for t, m in s.reads:
            w = b.writer(t)
            live.append(m if w is None else m.subtract(before.produced(w, s, m)))
    return Dependences(b, flow_map, _union_nonempty(anti), _union_nonempty(output), _union_nonempty(live).coalesce())


def _union_nonempty(maps) -> isl.UnionMap:
    return _union_or_empty([m for m in maps if not m.is_empty()])


def _union_maps(ums: list) -> isl.UnionMap:
    """The union of union maps, joined pairwise in rounds."""
    while len(ums) > 1:
        ums = [ums[k].union(ums[k + 1]) if k + 1 < len(ums) else ums[k] for k in range(0, len(ums), 2)]
    return ums[0]


def _union_or_empty(maps: list) -> isl.UnionMap:
    return _union(maps) if maps else isl.UnionMap("{ }")


class _Before:
    """theta(i) < theta(j) between the instances of two statements, made once per pair."""

    def __init__(self, b: BoundRegion):
        self.sched = b.schedule_maps
        self.pairs: dict = {}

    def __call__(self, src: BoundStatement, dst: BoundStatement) -> isl.Map:
        key = (src.name, dst.name)
        got = self.pairs.get(key)
        if got is None:
            got = self.pairs[key] = self.sched[src.name].lex_lt_map(self.sched[dst.name])
        return got

    def among(self, src: BoundStatement, m_src: isl.Map, dst: BoundStatement, m_dst: isl.Map) -> isl.Map:
        """src instance -> later dst instance accessing the same cell (m_src, m_dst: their accesses)."""
        return m_src.apply_range(m_dst.reverse()).intersect(self(src, dst))

    def produced(self, w: BoundStatement, r: BoundStatement, reads: isl.Map) -> isl.Map:
        """The read accesses of r (instance -> element) whose element an earlier instance of w wrote."""
        ordered = w.write.reverse().apply_range(self(w, r))  # e -> r instance later than a writer of e
        return ordered.reverse().intersect(reads)
