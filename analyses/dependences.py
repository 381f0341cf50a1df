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

from .poly_region import BoundRegion, BoundStatement


def _union(maps) -> isl.UnionMap:
    out = None
    for m in maps:
        u = isl.UnionMap.from_map(m)
        out = u if out is None else out.union(u)
    return out


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
            lo, hi = deltas.dim_min_val(k).to_python(), deltas.dim_max_val(k).to_python()
            if (lo, hi) != (0, 0):
                out.append(d)
            deltas = deltas.fix_val(isl.dim_type.set, k, isl.Val(0))  # inner dims: only deps equal here
            if deltas.is_empty():
                break
        return tuple(out)

    def parallel(self, st: BoundStatement) -> tuple:
        carried = set(self.carried(st))
        return tuple(d for d in st.loop_order if d not in carried)

    def pairs(self) -> list:
        """JSON-able summary: one entry per (kind, src, dst) with the relation as isl text."""
        out = []
        for kind in ("flow", "anti", "output"):
            for s in self.region.statements:
                for d in self.region.statements:
                    m = self.between(s.name, d.name, kind)
                    if not m.is_empty():
                        out.append({"kind": kind, "src": s.name, "dst": d.name, "relation": str(m.coalesce())})
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
    dataflow analysis, ~3x slower; what `--dump=analysis` prints)."""
    sched = b.schedule
    before = sched.lex_lt_union_map(sched)  # i -> j : theta(i) < theta(j)
    writes = _union([s.write for s in b.statements])
    per_tensor_reads: dict = {}
    for s in b.statements:
        for t, m in s.reads:
            per_tensor_reads.setdefault(t, []).append(m)
    accum = [s.write for s in b.statements if s.reduce_dims]  # the accumulation reads its own cell
    reads_all = _union([m for ms in per_tensor_reads.values() for m in ms] + accum) if (per_tensor_reads or accum) \
        else isl.UnionMap.empty(writes.get_space())
    output = writes.apply_range(writes.reverse()).intersect(before)
    anti = reads_all.apply_range(writes.reverse()).intersect(before)
    if exact:
        fl = isl.UnionAccessInfo.from_sink(reads_all).set_must_source(writes).set_schedule_map(sched).compute_flow()
        flow = fl.get_must_dependence()
    else:
        flow = writes.apply_range(reads_all.reverse()).intersect(before)
    # live-ins: per tensor, the reads no earlier instance wrote
    live = isl.UnionMap.empty(writes.get_space())
    for t, ms in per_tensor_reads.items():
        r = _union(ms)
        w = b.writer(t)
        if w is not None:
            r = r.subtract(_produced_before(w, r, before))
        live = live.union(r)
    return Dependences(b, flow, anti, output, live.coalesce())


def _produced_before(w: BoundStatement, reads: isl.UnionMap, before: isl.UnionMap) -> isl.UnionMap:
    """The read accesses (instance -> element) whose element an earlier instance of w wrote."""
    ordered = isl.UnionMap.from_map(w.write).reverse().apply_range(before)  # e -> R later than a writer of e
    return ordered.reverse().intersect(reads)
