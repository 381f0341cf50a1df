"""Poly Core: the polyhedral analyses of one candidate region and its report (docs/DESIGN.md
§Poly Core, §Fusion).

``analyze(region, arch, tile)`` binds the region to its concrete shape and states, as isl facts:
dependences (flow / anti / output), parallel and reduce axes, tail axes, affine closure of the
producer -> consumer compositions, the compute-at slices of one tile (dependence pre-images, seed
003 rule 1) with their halo per axis and in bytes, recompute factors, the minimal buffer of each
internal edge, barrier and bank-conflict hints. ``to_json()`` is the ``--dump=analysis`` shape.
Everything is cached per (region, device, tile): bound regions, tiles, footprints and counts are
reused across tiles, so a few-statement region takes tens of ms the first time (isl set
operations, ~50 µs each) and nothing after.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Mapping

from ..ir import deadline
from ..ir.diagnostics import PolysatError, fail
from .buffers import (SMEM_BUDGET, barrier_hints, bank_hints, edges, load_path, min_buffer, staged_operands,
                      staging_bytes)
from .dependences import Dependences, dependences
from .devices import Device, device
from .footprint import (Tile, card, extents, full_footprint, make_tile, normalize_tile, readers_of, sectors,
                        stream_tile, tile_footprint)
from .halo import halo
from .poly_region import BoundRegion, PolyRegion
from ..knobs import max_pieces

MAX_RECOMPUTE = 2.0  # a tile may recompute a producer at most this many times over (docs/DESIGN.md §Fusion)


RECOMPUTE_SHARE = 0.05  # ... unless it is a reduction whose redone work stays under this share of the region's


def bounded_recompute(b: BoundRegion, factors: Mapping[str, float]) -> dict:
    """The recompute factors that legality bounds: of tensor-core statements, and of reductions whose redone
    work ((factor - 1) x their own) is at least RECOMPUTE_SHARE of the region's. An elementwise producer (a
    cast or scale on the load path) is redone wherever its value is needed, and so is a small reduction
    (RMSNorm's sum of squares of the rows a GEMM tile reads anyway, redone by every tile along N); the cost
    model prices that work (fan-out penalty) instead of forbidding it."""
    def work(s) -> int:
        return card(s.domain) * max(s.stmt.flops, 1)
    out, total = {}, None
    for k, f in factors.items():
        s = b.stmt(k)
        if s.stmt.unit == "tensor" or (s.reduce_dims and f <= MAX_RECOMPUTE):
            out[k] = f
        elif s.reduce_dims:  # past the bound: is its redone work a real share of the region's?
            total = sum(work(x) for x in b.statements) if total is None else total
            if (f - 1) * work(s) >= RECOMPUTE_SHARE * total:
                out[k] = f
    return out
MAX_PIECES = max_pieces()  # more basic maps than this in one composed access is ExcessivePiecewise


def kstep(dev: Device) -> int:
    """Reduction elements per pipeline stage: 32 (sm80 mma.sync k16 x2), 64 (sm90: 128 B of fp16,
    one 128B-swizzled TMA row)."""
    return 64 if dev.arch == "sm90" else 32


def stages(dev: Device) -> int:
    return 4 if dev.arch == "sm90" else 3


@dataclass(frozen=True)
class TensorFootprint:
    tensor: str
    role: str
    itemsize: int
    tile_elems: int  # elements one tile touches
    tile_sectors: int  # 32-byte sectors of one tile's footprint
    total_elems: int  # elements the whole region touches
    total_sectors: int

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class PolyCoreReport:
    region: PolyRegion
    bound: BoundRegion
    device: Device
    tile: Tile
    deps: Dependences
    parallel_axes: tuple
    reduce_axes: tuple
    tail_axes: tuple
    affine: dict
    halo_per_axis: dict
    halo_bytes: int
    halo_per_tensor: dict
    recompute: dict  # statement -> instances computed over all tiles / instances in its domain
    instances: dict  # statement -> instances in its domain
    slice_instances: dict  # statement -> instances computed by one tile
    edges: tuple  # of Edge
    staged: tuple  # of Staged
    footprints: dict  # tensor -> TensorFootprint
    working_set_bytes: int  # on-chip bytes of the edges one tile holds (smem_ring x depth)
    compute_at_ok: bool
    reasons: tuple  # why compute-at is not ok (empty when ok)
    barrier_hints: tuple
    bank_hints: tuple
    warnings: tuple = field(default=())

    @property
    def min_buffer(self) -> dict:
        return min_buffer(list(self.edges))

    def to_json(self, with_dependences: bool = True) -> dict:
        a = {
            "region": self.region.name,
            "arch": self.device.arch,
            "device": self.device.name,
            "tile": dict(self.tile.sizes),
            "tiles": self.tile.count,
            "parallel_axes": list(self.parallel_axes),
            "reduce_axes": list(self.reduce_axes),
            "tail_axes": list(self.tail_axes),
            "affine_closure": self.affine,
            "compute_at": {"ok": self.compute_at_ok,
                           "halo": {"bytes": self.halo_bytes, "per_axis": dict(self.halo_per_axis)},
                           "recompute": {k: round(v, 4) for k, v in self.recompute.items()},
                           "working_set_bytes": self.working_set_bytes,
                           "reasons": list(self.reasons)},
            "min_buffer": self.min_buffer,
            "edges": [e.to_json() for e in self.edges],
            "footprints": {k: v.to_json() for k, v in self.footprints.items()},
            "barrier_hints": list(self.barrier_hints),
            "bank_hints": list(self.bank_hints),
            "warnings": list(self.warnings),
        }
        if with_dependences:
            a["dependences"] = self.deps.pairs()
        return {"analysis": a}


def _smem_budget(dev: Device) -> int:
    return int(dev.smem_per_cta * SMEM_BUDGET)


def _tail_axes(b: BoundRegion, sizes: Mapping[str, int], dev: Device) -> tuple:
    out = []
    drv = b.driver
    ext = dict(zip(drv.dims, extents(drv.domain), strict=True))
    for d in drv.parallel_dims:
        n = ext[d][1] - ext[d][0] + 1
        if n % sizes[d]:
            out.append(d)
    for s in b.statements:
        e = dict(zip(s.dims, extents(s.domain), strict=True))
        for d in s.reduce_dims:
            n = e[d][1] - e[d][0] + 1
            step = kstep(dev) if s.stmt.unit == "tensor" else 32
            if n > 8 and n % step and d not in out:  # windows up to 8 are unrolled: no tail
                out.append(d)
    return tuple(out)


def _affine(b: BoundRegion) -> dict:
    """Compose every consumer read with its producer's write (consumer instance -> producer
    instance): the composition stays piecewise affine; count its pieces."""
    per_edge, worst = {}, 0
    for c in b.statements:
        for t, m in c.reads:
            p = b.writer(t)
            if p is None or p.index >= c.index:
                continue
            comp = m.apply_range(p.write.reverse()).coalesce()
            n = comp.n_basic_map()
            per_edge[f"{p.name}->{c.name}"] = n
            worst = max(worst, n)
    return {"ok": worst <= MAX_PIECES, "max_pieces": worst, "pieces": per_edge}


def _tensor_footprints(b: BoundRegion, tile: Tile) -> dict:
    out = {}
    for t in b.region.tensors:
        size = t.dtype.itemsize
        ft = tile_footprint(b, tile, t.name)
        fa = full_footprint(b, t.name)
        shape = b.shapes[t.name]
        out[t.name] = TensorFootprint(t.name, t.role, size, card(ft), sectors(ft, size, shape=shape), card(fa),
                                      sectors(fa, size, shape=shape))
    return out


ON_CHIP_VALUES = 64 * 1024  # bytes of internal values one tile may hold (64 regs x 256 threads)


def default_tile(b: BoundRegion, dev: Device) -> dict:
    """A tile with no excessive recompute that fits on chip: start from 64 on the two innermost
    parallel dims, widen a dim to its full extent while a producer is recomputed more than
    MAX_RECOMPUTE times, then halve outer dims while the tile's internal values do not fit
    (ON_CHIP_VALUES, or the smem budget when smaller)."""
    sizes = normalize_tile(b, None)
    drv = b.driver
    full = {d: hi - lo + 1 for d, (lo, hi) in zip(drv.dims, extents(drv.domain), strict=True)}
    for d in reversed(drv.parallel_dims):
        if _max_recompute(b, sizes) <= MAX_RECOMPUTE:
            break
        if sizes[d] < full[d]:
            sizes[d] = full[d]
    budget = min(_smem_budget(dev), ON_CHIP_VALUES)
    for d in drv.parallel_dims:
        while sizes[d] > 1 and _on_chip_bytes(b, sizes) > budget:
            sizes[d] = max(1, sizes[d] // 2)
    return sizes


def _max_recompute(b: BoundRegion, sizes: Mapping[str, int]) -> float:
    t = make_tile(b, dict(sizes))
    return max(bounded_recompute(b, recompute_factors(b, t)).values(), default=1.0)


def recompute_factors(b: BoundRegion, t: Tile) -> dict:
    """Per statement, instances one tile computes per driver instance that needs them, over the same
    ratio for the whole region: 1 when tiles share nothing, above 1 by the halo (or fan-out) recomputed.
    Only the driver instances a statement reaches count (driver_reach): a statement that feeds a part of
    the output (one piece of a concatenation along N) is computed by the tiles over that part alone, not
    recomputed by the one tile that happens to lie there. Kept on the tile: the default tile's search and
    the price ask for the same tile's."""
    if t.factors:
        return dict(t.factors)
    drv_tile = t.slices[b.driver.name]
    out = {}
    for name, reach, whole in _shares(b.region):
        if name not in t.slices:
            continue
        mine = drv_tile if reach is None else drv_tile.intersect(reach)
        out[name] = (card(t.slices[name]) / max(1, card(mine))) / whole
    t.factors.update(out)
    return out


@lru_cache(maxsize=4096)
def _shares(region: PolyRegion) -> tuple:
    """(statement, its driver_reach, its instances per driver instance it reaches) per statement: what
    recompute_factors divides by, the same for every tile."""
    b = region.bind()
    out = []
    for s in b.statements:
        reach = driver_reach(region, s.name)
        out.append((s.name, reach, card(s.domain) / max(1, card(b.driver.domain if reach is None else reach))))
    return tuple(out)


def driver_reach(region: PolyRegion, name: str):
    """The driver instances that read, through the region's dependences, what statement `name` writes
    (the forward image of its domain); None when it is the driver, reaches all of it (the common case:
    nothing to restrict) or reaches it nowhere (another output)."""
    return _reaches(region)[name][0]


@lru_cache(maxsize=256)
def _reaches(region: PolyRegion) -> dict:
    """statement name -> (driver_reach, whether it reaches the whole driver), the later statements first: a
    forward image stops at the first statement it covers whole that is known to reach the whole driver
    (a chain costs one image per statement, not one per pair)."""
    b = region.bind()
    drv = b.driver
    out: dict = {}
    for st in reversed(b.statements):
        deadline.check(f"region {region.name}, statement {st.name}")
        if st.name == drv.name:
            out[st.name] = (None, True)
            continue
        inst = {st.name: st.domain}
        whole = False
        for q in b.statements[st.index + 1:]:
            for tensor, read in q.reads:
                p = b.writer(tensor)
                if p is None or p.index >= q.index or p.name not in inst:
                    continue
                got = readers_of(read, p) if inst[p.name] is p.domain else \
                    inst[p.name].apply(p.write).apply(read.reverse()).intersect(q.domain)
                inst[q.name] = got if q.name not in inst else inst[q.name].union(got).coalesce()
            if q.name in inst and q.name in out and out[q.name][1] and inst[q.name].is_equal(q.domain):
                whole = True  # q's whole domain reaches the whole driver, and so does st
                break
        got = inst.get(drv.name)
        if not whole and got is not None and not got.is_empty() and got.is_equal(drv.domain):
            whole = True
        out[st.name] = (None if whole or got is None or got.is_empty() else got, whole)
    return out


def _on_chip_bytes(b: BoundRegion, sizes: Mapping[str, int]) -> int:
    staged = load_path(b)
    held = [x for x in b.region.tensors if x.role == "internal" and x.name not in staged]
    if not held:  # nothing held on chip: no tile to make
        return 0
    t = make_tile(b, dict(sizes))
    return max(card(tile_footprint(b, t, x.name)) * x.dtype.itemsize for x in held)


def analyze(region: PolyRegion, arch: "str | Device" = "sm90", tile: Mapping[str, int] | None = None,
            exact: bool = False) -> PolyCoreReport:
    """The Poly Core report of `region` on `arch` for one tile of its driver statement (default:
    :func:`default_tile`). `exact` computes value-based flow dependences (isl dataflow)."""
    dev = device(arch)
    key = tuple(sorted(tile.items())) if tile else None
    try:
        return _analyze(region, dev, key, exact)
    except PolysatError:
        raise
    except Exception as e:  # an isl failure on a malformed region: report it, never a traceback
        from ..knobs import debug
        if debug():  # POLYSAT_DEBUG=1: the command prints the traceback
            raise
        fail("InternalError", f"Poly Core on region {region.name}", f"{type(e).__name__}: {e}")


@lru_cache(maxsize=1024)
def _analyze(region: PolyRegion, dev: Device, tile_key, exact: bool) -> PolyCoreReport:
    b = region.bind()
    sizes = normalize_tile(b, dict(tile_key)) if tile_key else default_tile(b, dev)
    tile = make_tile(b, sizes)
    deps = dependences(b, exact)
    drv = b.driver
    parallel = deps.parallel(drv)
    reduce_axes = []
    for s in b.statements:
        reduce_axes += [d for d in s.reduce_dims if d not in reduce_axes]
    tensors = [t.name for t in region.tensors]
    h = halo(b, tile, tensors)
    recompute = recompute_factors(b, tile)
    budget = _smem_budget(dev)
    step = stream_tile(b, tile)  # what one step holds on chip (tile itself unless the region is streamed)
    staged = staged_operands(b, step, kstep(dev))
    es = edges(b, step, h.per_tensor, max(0, budget - staging_bytes(staged, stages(dev))))
    on_chip = {e.tensor: e for e in es if e.buffer == "smem_ring" and not e.staged}
    working = sum(e.tile_bytes * e.depth for e in on_chip.values())
    reasons = []
    for t, bad in deps.unwritten_reads().items():
        reasons.append(f"{t} is read where no earlier statement of the region wrote it: {bad}")
    for s, f in bounded_recompute(b, recompute).items():
        if f > MAX_RECOMPUTE:
            reasons.append(f"one tile recomputes {s} {f:.2f}x over (limit {MAX_RECOMPUTE}); widen the tile "
                           f"along the axes {s} reduces")
    for e in es:
        if e.buffer == "gmem":
            reasons.append(f"edge {e.producer}->{e.consumer} holds {e.tile_bytes} B of {e.tensor} per tile, more "
                           f"than the on-chip budget {budget} B")
    if working > budget:
        reasons.append(f"on-chip edges need {working} B per tile, more than {budget} B")
    affine = _affine(b)
    warnings = []
    if not affine["ok"]:
        warnings.append(f"W2101 ExcessivePiecewise: a composed access has {affine['max_pieces']} pieces")
    if h.boxed:
        warnings.append("W2102 BoundedAnalysis: the halo of " + ", ".join(f"{t} along {d}" for t, d in h.boxed)
                        + " is its footprints' bounding boxes' overlap (isl past its operation quota)")
    return PolyCoreReport(
        region=region, bound=b, device=dev, tile=tile, deps=deps, parallel_axes=parallel,
        reduce_axes=tuple(reduce_axes), tail_axes=_tail_axes(b, sizes, dev), affine=affine,
        halo_per_axis=h.per_axis, halo_bytes=h.bytes, halo_per_tensor=h.per_tensor, recompute=recompute,
        instances={s.name: card(s.domain) for s in b.statements},
        slice_instances={k: card(v) for k, v in tile.slices.items()},
        edges=tuple(es), staged=tuple(staged), footprints=_tensor_footprints(b, tile),
        working_set_bytes=working, compute_at_ok=not reasons, reasons=tuple(reasons),
        barrier_hints=tuple(barrier_hints(b, es, staged, dev, stages(dev))),
        bank_hints=tuple(bank_hints(b, es, staged, tile, dev)), warnings=tuple(warnings))
