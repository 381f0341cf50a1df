"""CUDA text of one SIMT kernel (`--dump=cu`): ``templates/simt.cu.j2`` around code generated from the
region's RB-SSA ops (emit.py), with the helpers of ``templates/polysat_simt.cuh`` inlined.

Per row (one point of the outer axes) the kernel runs, in order, one pass per row statistic (each lane
folds its strided elements into a partial, ``group_reduce`` combines the group's partials: warp shuffles,
then shared memory for a group wider than a warp) and the final pass (each element computed once, written
once, through a vector store when aligned). Every pass is a ``__host__ __device__`` function of (row,
lane, earlier statistics), so the host emulator (the template's host-emulation macro: ``emulate(args)``) runs the
same code; only the exchange between lanes differs, and ``host_group_reduce`` replays its order.

Kernel ABI (``SimtKernelSource.params``): the region's inputs (const pointers, in region order), its
output pointers (region order), then every size symbol as an i64, sorted by name. Grid: ceil(rows / rows_per_block) CTAs (rows counted in tiles of TM when the
final pass is a micro-tile).
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping

from ...ir.diagnostics import fail
from ...ir.expr import Expr
from ...ir.region import R
# shared pieces, at their current homes
from ..common.names import c_ident, unique_idents
from ..common.render import Param, jinja_env, specialisation_hash, template_text
from .access import Pass, flat_offset, tiled_reduces, vector_reads, vector_store
from .emit import CTYPE, REDUCE_OP, STORE_T, Emitter, convert, neutral_literal
from .plan import SimtPlan
from .spec import SimtSpec


@dataclass(frozen=True)
class SimtKernelSource:
    name: str
    arch: str
    skeleton: str
    source: str
    threads: int
    smem_bytes: int
    params: tuple[Param, ...]
    plan: SimtPlan
    spec: SimtSpec

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.source.encode("utf-8")).hexdigest()

    def grid(self, env: Mapping[str, int] | None = None) -> tuple[int, int, int]:
        return (max(1, math.ceil(self.spec.tile_rows(self.plan.tm, env) / self.plan.rows_per_block)), 1, 1)


@lru_cache(maxsize=None)
def header() -> str:
    return template_text("polysat_simt.cuh")


def kernel_name(spec: SimtSpec, plan: SimtPlan) -> str:
    key = {"region": repr(spec.region), "outer": spec.outer}
    return c_ident(spec.name, "polysat_simt_")[:48] + f"_{specialisation_hash(key, plan)}"


class _Gen:
    def __init__(self, spec: SimtSpec, plan: SimtPlan):
        self.spec, self.plan = spec, plan
        r = spec.region
        names = [b.name for b in r.inputs] + list(spec.outputs)
        self.ptr = dict(zip(names, unique_idents(names, "t_"), strict=True))
        self.sym = {s: c_ident(s, "s_") for s in spec.symbols}
        self.stats = spec.stats()

    def emitter(self) -> Emitter:
        return Emitter(self.spec.region, {t: f"a.{i}" for t, i in self.ptr.items()},
                       {s: f"a.{i}" for s, i in self.sym.items()})

    def prologue(self, em: Emitter, known: int) -> None:
        """Bind the outer axes (from row), the unit axes (0), and the first `known` statistics."""
        spec = self.spec
        if not spec.outer:
            em.line("(void)row;")
        else:
            em.line("long long rest = row;")
            for a in reversed(spec.outer):
                var = em.fresh("o")
                size = em.size(spec.region.axis_sizes[a])
                em.line(f"const long long {var} = rest % {size};")
                em.line(f"rest /= {size};")
                em.bind(a, var)
            em.line("(void)rest;")
        for a in spec.units:
            em.bind(a, "0LL")
        for j, s in enumerate(self.stats[:known]):
            em.remember(s, f"s{j}")

    def walk(self, em: Emitter, p: Pass, each, vec_store: bool) -> None:
        """for each lane step (``plan.unroll`` of them per iteration): preload the vector reads, then each element
        (bound axes) -> each(em)."""
        spec, r = self.spec, self.spec.region
        v = self.plan.vec if len(p.axes) == 1 else 1
        length = " * ".join(em.size(r.axis_sizes[a]) for a in p.axes) or "1LL"
        L = em.let("long long", length, "L")
        vreads = vector_reads(spec, p) if v > 1 else []
        steps = self.plan.unroll if vreads else 1
        if steps == 1:
            em.open(f"for (long long e0 = polysat_simt::first_elem<G, V>(lane); e0 < {L}; e0 += polysat_simt::elem_stride<G, {v}>())"
                    if v == self.plan.vec else
                    f"for (long long e0 = (long long)lane; e0 < {L}; e0 += (long long)G)")
            self.step(em, p, each, vec_store, v, L, self.preload(em, p, v, L, vreads, "e0"))
            em.close()
            return
        # U lane steps per iteration: every step's vector reads issued first, then the steps in order (the
        # lane visits the same elements in the same order as one step at a time)
        em.open(f"for (long long e00 = polysat_simt::first_elem<G, V>(lane); e00 < {L}; "
                f"e00 += {steps} * polysat_simt::elem_stride<G, {v}>())")
        starts = [em.let("long long", f"e00 + {u} * polysat_simt::elem_stride<G, {v}>()", "e0_") for u in range(steps)]
        loaded = [self.preload(em, p, v, L, vreads, e0) for e0 in starts]
        for e0, bufs in zip(starts, loaded, strict=True):
            em.open(f"if ({e0} < {L})")
            em.line(f"const long long e0 = {e0};")
            self.step(em, p, each, vec_store, v, L, bufs)
            em.close()
        em.close()

    def preload(self, em: Emitter, p: Pass, v: int, L: str, vreads: list, e0: str) -> dict:
        """The vector reads of one lane step starting at element e0: {id(read): its register buffer}."""
        r = self.spec.region
        bufs = {}
        if vreads:
            (a,) = p.axes
            prev = em.bound.get(a)
            em.bind(a, e0)
            same: dict = {}  # a tensor read twice at the same indices (two nodes of one value): one load
            for n in vreads:
                if n.op == R.READ and (n.arg, n.dtype) in same:
                    bufs[id(n)] = same[(n.arg, n.dtype)]
                    continue
                buf = em.fresh("vb")
                tensor = n.arg[0]
                shape = next(b.memref.shape for b in r.inputs if b.name == tensor)
                em.line(f"{STORE_T[n.dtype]} {buf}[{v}];")
                if n.op == R.GATHER:  # the row's gathered position, fixed along the walk; outside the tensor: zeros
                    off, checks = em.gather_at(n, em.value(n.src[0]))
                    em.line(f"if ({' && '.join(checks)}) polysat_simt::load_vec<{STORE_T[n.dtype]}, {v}>({buf}, "
                            f"a.{self.ptr[tensor]}, {off}, {e0}, {L}); else polysat_simt::zero_vec<{STORE_T[n.dtype]}, {v}>({buf});")
                else:
                    em.line(f"polysat_simt::load_vec<{STORE_T[n.dtype]}, {v}>({buf}, a.{self.ptr[tensor]}, "
                            f"{em.idx(flat_offset(n.arg[1], shape))}, {e0}, {L});")
                bufs[id(n)] = buf
                if n.op == R.READ:
                    same[(n.arg, n.dtype)] = buf
            em.unbind(a, prev)
        return bufs

    def step(self, em: Emitter, p: Pass, each, vec_store: bool, v: int, L: str, bufs: dict) -> None:
        """One lane step at e0: each element (bound axes) -> each(em), its vector reads from bufs."""
        spec, r = self.spec, self.spec.region
        out_buf = None
        if vec_store and v > 1:
            out_buf = em.fresh("ob")
            em.line(f"{STORE_T[spec.out.memref.dtype]} {out_buf}[{v}];")
        em.line("#pragma unroll")
        em.open(f"for (int v = 0; v < {v}; ++v)")
        em.line("const long long e = e0 + v;")
        em.open(f"if (e < {L})")
        saved = [(a, em.bound.get(a)) for a in p.axes]
        rest = "e"
        for k, a in enumerate(reversed(p.axes)):
            if k == len(p.axes) - 1:
                var = em.let("long long", rest, "i")
            else:
                size = em.size(r.axis_sizes[a])
                var = em.let("long long", f"{rest} % {size}", "i")
                rest = em.let("long long", f"{rest} / {size}", "q")
            ver = em.bind(a, var)
            for n_id, buf in bufs.items():
                em.vec_reads[n_id] = (buf, a, ver)
        each(em, out_buf)
        em.close()
        em.close()
        if out_buf is not None:
            (a,) = p.axes
            prev = em.bound.get(a)
            em.bind(a, "e0")
            em.line(f"if (active) polysat_simt::store_vec<{STORE_T[spec.out.memref.dtype]}, {v}>(a.{self.ptr[spec.c]}, "
                    f"{self.out_offset(em)}, e0, {L}, {out_buf});")
            em.unbind(a, prev)
        for a, prev in saved:
            em.unbind(a, prev)
        em.vec_reads.clear()

    def out_offset(self, em: Emitter, y=None) -> str:
        y = y or self.spec.yield_
        shape = self.spec.buffer(y.dst).memref.shape
        return em.idx(flat_offset(tuple(Expr.var(a) for a in y.axes), shape))

    def put_extras(self, em: Emitter, when: str) -> None:
        """Every other yield at the current point, written where the primary's axes it does not walk with are 0
        (once per element of its output), computed only there; an axis of its own walks with the primary
        axis bind.py matched to it (same size), a size-1 one is 0."""
        for y in self.spec.extras:
            along = self.spec.walk_of(y)
            guard = [f"{em.bound[a][0]} == 0" for a in self.spec.yield_.axes
                     if a not in y.axes and a not in along.values() and a not in self.spec.units]
            em.open(f"if ({' && '.join([when, *guard])})")
            own_units = [(a, em.bound.get(a)) for a in y.axes if a not in self.spec.yield_.axes]
            for a, _prev in own_units:  # its axes the primary lacks: walked with a primary axis, or 0 (size 1)
                em.bind(a, em.bound[along[a]][0] if a in along else "0LL")
            top = self.spec.top_of(y)
            val = convert(em.value(top), em.follow(top).dtype, y.cast)
            em.line(f"polysat_simt::put(&a.{self.ptr[y.dst]}[{self.out_offset(em, y)}], {val});")
            for a, prev in own_units:
                em.unbind(a, prev)
            em.close()

    def phase(self, k: int) -> dict:
        s = self.stats[k]
        op, axes, _init = s.arg
        em = self.emitter()
        self.prologue(em, k)
        ct = CTYPE[s.dtype]
        em.line(f"{ct} part = {neutral_literal(op, s.dtype)};")
        self.walk(em, Pass(s, tuple(axes)), lambda e, _ob: e.accumulate(s, "part"), False)
        em.line("return part;")
        return {"what": f"reduce_{op} over [{', '.join(axes)}] keeping [{', '.join(s.axes)}]", "ctype": ct,
                "body": "\n".join(em.lines), "finish": self.emitter().finish(s, "total"), "op": REDUCE_OP[op],
                "prev": [{"ctype": CTYPE[t.dtype], "name": f"s{j}"} for j, t in enumerate(self.stats[:k])]}

    def decompose(self, em: Emitter, flat: str, axes: tuple, prefix: str) -> dict:
        """Bind axes (row-major) from the flat index flat; {axis: (C variable, binding version)}."""
        out, rest = {}, flat
        for k, a in enumerate(reversed(axes)):
            if k == len(axes) - 1:
                var = em.let("long long", rest, prefix)
            else:
                size = em.size(self.spec.region.axis_sizes[a])
                var = em.let("long long", f"{rest} % {size}", prefix)
                rest = em.let("long long", f"{rest} / {size}", "q")
            out[a] = (var, em.bind(a, var))
        return out

    def store_tiled(self) -> str:
        """The final pass as TM x TN micro-tiles: a group's TM rows by the TN consecutive elements of a lane
        step. Each tiled Reduce runs one loop over its bound axes accumulating all TM x TN points in
        registers; the points are unrolled here, so a value that does not vary along the loop axes (an
        operand row) is loaded once per row and one that does not vary with the row (an operand column)
        once per column (the emitter's common subexpressions). Rows and elements past the end are clamped
        for the computation and masked for the store."""
        spec, plan = self.spec, self.plan
        tm, tn = plan.tm, plan.vec
        em = self.emitter()
        y = spec.yield_
        rows = []
        if spec.outer:  # row = (the outer axes but the last, the tile of TM along the last)
            inner = spec.outer[-1]
            size = em.size(spec.region.axis_sizes[inner])
            tiles = em.let("long long", f"({size} + TM - 1) / TM", "nt")
            prefix = self.decompose(em, em.let("long long", f"row / {tiles}", "q"), spec.outer[:-1], "o")
            t = em.let("long long", f"row % {tiles}", "t")
            for i in range(tm):
                m = em.let("long long", f"{t} * TM + {i}", "m")
                act = em.let("bool", f"active && {m} < {size}", "act")
                var = em.let("long long", f"polysat_simt::clamp_index({m}, {size})", "o")
                rows.append((act, {**prefix, inner: (var, em.bind(inner, var))}))
        else:
            rows.append(("active", {}))
        for a in spec.units:
            em.bind(a, "0LL")
        length = " * ".join(em.size(spec.region.axis_sizes[a]) for a in spec.loop) or "1LL"
        L = em.let("long long", length, "L")
        em.open(f"for (long long e0 = (long long)lane * {tn}; e0 < {L}; e0 += (long long)G * {tn})")
        cols = []
        for j in range(tn):
            ej = em.let("long long", f"polysat_simt::clamp_index(e0 + {j}, {L})", "ej")
            cols.append((f"e0 + {j} < {L}", self.decompose(em, ej, spec.loop, "i")))
        points = [(i, j) for i in range(tm) for j in range(tn)]

        def at(i: int, j: int) -> None:
            em.bound.update(rows[i][1])
            em.bound.update(cols[j][1])

        for n in tiled_reduces(spec):
            op, axes, _init = n.arg
            accs = {}
            for pt in points:
                accs[pt] = em.fresh("acc")
                em.line(f"{CTYPE[n.dtype]} {accs[pt]} = {neutral_literal(op, n.dtype)};")

            def step(n=n, accs=accs):
                for pt in points:
                    at(*pt)
                    em.accumulate(n, accs[pt])
            em.over_axes(axes, step)
            for pt in points:
                at(*pt)
                em.remember(n, em.let(CTYPE[n.dtype], em.finish(n, accs[pt]), "red"))
        for i, j in points:
            at(i, j)
            val = convert(em.value(spec.top), em.follow(spec.top).dtype, y.cast)
            em.line(f"if ({rows[i][0]} && {cols[j][0]}) polysat_simt::put(&a.{self.ptr[spec.c]}[{self.out_offset(em)}], {val});")
            self.put_extras(em, f"{rows[i][0]} && {cols[j][0]}")
        em.close()
        return "\n".join(em.lines)

    def store(self) -> str:
        spec = self.spec
        if tiled_reduces(spec):
            return self.store_tiled()
        em = self.emitter()
        self.prologue(em, len(self.stats))
        top, y = spec.top, spec.yield_
        vs = vector_store(spec) and self.plan.vec > 1

        def each(e: Emitter, out_buf):
            val = convert(e.value(top), e.follow(top).dtype, y.cast)
            if out_buf is not None:
                e.line(f"polysat_simt::put(&{out_buf}[v], {val});")
            else:
                e.line(f"if (active) polysat_simt::put(&a.{self.ptr[spec.c]}[{self.out_offset(e)}], {val});")
            self.put_extras(e, "active")

        em.line("(void)active;")
        self.walk(em, Pass(None, spec.loop), each, vs)
        return "\n".join(em.lines)


def render(spec: SimtSpec, plan: SimtPlan) -> SimtKernelSource:
    if plan.skeleton != "simt":
        fail("InternalError", f"simt {spec.name!r}", f"plan {plan.key()} is not a SIMT plan")
    gen = _Gen(spec, plan)
    kname = kernel_name(spec, plan)
    r = spec.region
    ptrs = [{"ctype": f"const {STORE_T[b.memref.dtype]}", "ident": gen.ptr[b.name]} for b in r.inputs]
    ptrs += [{"ctype": STORE_T[b.memref.dtype], "ident": gen.ptr[b.name]} for b in r.outputs]
    syms = [gen.sym[s] for s in spec.symbols]
    em = gen.emitter()
    sizes = [em.size(r.axis_sizes[a]) for a in spec.outer]
    if plan.tm > 1 and sizes:  # row tiles of TM along the innermost outer axis
        sizes[-1] = f"(({sizes[-1]} + TM - 1) / TM)"
    n_rows = " * ".join(sizes) or "1LL"
    phases = [gen.phase(k) for k in range(len(gen.stats))]
    stats = [{"ctype": CTYPE[s.dtype], "name": f"s{j}"} for j, s in enumerate(gen.stats)]
    red_types = sorted({ph["ctype"] for ph in phases})
    kparams = ",\n    ".join([f"{p['ctype']}* __restrict__ {p['ident']}" for p in ptrs] + [f"long long {s}" for s in syms])
    also = "".join(f", {y.dst}[{', '.join(y.axes)}]" for y in spec.extras)
    summary = (f"{spec.c}[{', '.join(spec.yield_.axes)}]{also} of region {r.name}: rows over [{', '.join(spec.outer)}], "
               f"{len(phases)} row statistic(s), walking [{', '.join(spec.loop)}]")
    src = jinja_env().get_template("simt.cu.j2").render(
        kernel=kname, summary=summary, plan_key=plan.key(), header=header(), ns=f"ns_{kname}", group=plan.group,
        vec=plan.vec, rows=plan.rows_per_block, tm=plan.tm, threads=plan.threads, ptrs=ptrs, syms=syms, n_rows=n_rows,
        phases=phases, stats=stats, store=gen.store(), red_types=red_types, kparams=kparams)
    params = tuple([Param(gen.ptr[b.name], "ptr", b.name) for b in (*r.inputs, *r.outputs)]
                   + [Param(gen.sym[s], "i64", s) for s in spec.symbols])
    return SimtKernelSource(kname, plan.arch, "simt", src, plan.threads, plan.smem_bytes, params, plan, spec)
