"""Producer -> consumer edges inside a region: fusion class, minimal buffer, barrier and bank hints
(docs/DESIGN.md §Poly Core).

An edge is an internal (deferred) tensor written by one statement and read by a later one. Its
class comes from two counts on the isl relation consumer-cell -> producer-element: fan-in (elements
one consumer cell reads) and fan-out (consumer cells that read one element):
one_to_one (1, 1), many_to_one (n, 1), one_to_many (1, n), stencil (n, n with a halo between
tiles) and many_to_many (n, n, no halo: a whole axis feeds every cell, e.g. PV after softmax).
The minimal buffer is ``reg`` when the value streams (every reader uses it one-to-one and no
reduction runs between producer and reader: an elementwise chain), or when every value has one
consumer cell, no halo and the tile's values fit a register budget. Otherwise the on-chip edges
share what the operand ring leaves of shared memory, smallest first: a ``smem_ring`` of depth 2
(3 with a halo: the window slides) when it fits that many times, depth 1 (one buffer, no overlap
between tiles) when it fits once, else ``gmem`` (a round trip through device memory, priced).
Load-path values (casts of inputs feeding tensor cores) ride in the operand ring.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import gcd

import islpy as isl

from .devices import Device
from .footprint import Tile, card, clamp, extents, tile_footprint
from .poly_region import BoundRegion, BoundStatement, generic

SMEM_BUDGET = 0.8  # docs/DESIGN.md §Cost model STOP: smem per CTA above ~80% of the limit
REG_BUDGET = 64 * 1024  # bytes of one edge a tile may keep in registers (64 regs x 256 threads)
MAX_SUBTILE = 128  # an MMA statement stages operands for at most 128 rows/cols of its output per stage


def sample(s: isl.Set) -> isl.Set:
    """One point of a non-empty parameter-free set, near the middle of its box, as a set."""
    hit = s
    for k, (lo, hi) in enumerate(extents(s)):
        hit = clamp(hit, k, (lo + hi) // 2, (lo + hi) // 2 + 1)
    return hit if not hit.is_empty() else isl.Set.from_point(s.sample_point())


@dataclass(frozen=True)
class Edge:
    tensor: str
    producer: str
    consumer: str
    fan_in: int
    fan_out: int
    kind: str  # one_to_one | many_to_one | one_to_many | stencil | many_to_many
    halo_elems: int  # overlap with the next tile, summed over tiled dims
    tile_elems: int  # elements of the tensor one tile holds
    tile_bytes: int
    buffer: str  # reg | smem_ring | gmem
    depth: int
    staged: bool = False  # a load-path value: staged per k-step with the MMA operands
    transient: bool = False  # streamed element by element through registers, never held as a tile

    def to_json(self) -> dict:
        return dict(self.__dict__)


def _reader_relation(c: BoundStatement, tensor: str) -> isl.Map:
    """consumer output cell -> elements of `tensor` the cell's instances read."""
    reads = [m for t, m in c.reads if t == tensor]
    rel = reads[0]
    for m in reads[1:]:
        rel = rel.union(m)
    return c.write.reverse().apply_range(rel)


def load_path(b: BoundRegion) -> dict:
    """Internal tensors made on the way from memory to the tensor cores: written by an elementwise
    statement (a cast, a scale) from region inputs or other load-path values, and read only by
    tensor-core statements. They are converted per k-step from the staged inputs (in registers),
    so the ring holds their sources: tensor -> the bytes per element staged (the sources' size)."""
    return _load_path(b.region)


@lru_cache(maxsize=2048)
def _load_path(region) -> dict:
    b = region.bind()
    src: dict = {}  # tensor -> itemsize of what is staged for it
    for s in b.statements:
        t = s.stmt.write.tensor
        if region.tensor(t).role != "internal" or s.reduce_dims or s.stmt.unit == "tensor":
            continue
        if not s.reads or not all(region.tensor(x).role == "input" or x in src for x, _ in s.reads):
            continue
        sizes = [src.get(x, region.tensor(x).dtype.itemsize) for x, _ in s.reads]
        src[t] = sum(sizes)
    return {t: n for t, n in src.items() if b.readers(t) and all(r.stmt.unit == "tensor" for r in b.readers(t))}


@lru_cache(maxsize=8192)
def _fans(region, tensor: str, consumer: str):
    """(fan-in, fan-out) of the edge tensor -> consumer, sampled in the middle of the relation: counts of the
    consumer's own texts and shapes, so kept per its generic form (poly_region.generic) across regions."""
    b = region.bind()
    c = b.stmt(consumer)
    gen = generic(c)
    if gen is None:
        return _fans_of(c, tensor)
    gst, gused, tensors = gen
    key = (gst, region.params, gused, next(p for p, t in tensors.items() if t == tensor))
    if key not in _FANS:
        if len(_FANS) > 50000:
            _FANS.clear()
        _FANS[key] = _fans_of(c, tensor)
    return _FANS[key]


_FANS: dict = {}  # (generic statement, params, shapes, tensor placeholder) -> its fans


def _fans_of(c: BoundStatement, tensor: str):
    rel = _reader_relation(c, tensor)
    if rel.is_empty():
        return None
    return card(sample(rel.domain()).apply(rel)), card(sample(rel.range()).apply(rel.reverse()))


def edges(b: BoundRegion, tile: Tile, halo_per_tensor: dict, smem_budget: int) -> list:
    """The region's edges for one tile. On-chip tensors share `smem_budget` (what the operand
    staging leaves): the smallest are placed first, each with the deepest ring that still fits."""
    found = []
    for t in b.region.tensors:
        if t.role != "internal":
            continue
        p = b.writer(t.name)
        n = card(tile_footprint(b, tile, t.name))
        halo = sum(halo_per_tensor.get(t.name, {}).values())
        for c, fan_in, fan_out in _reads_of(b.region).get(t.name, ()):
            if fan_in == 1 and fan_out == 1:
                kind = "one_to_one"
            elif fan_out == 1:
                kind = "many_to_one"
            elif fan_in == 1:
                kind = "one_to_many"
            else:
                kind = "stencil" if halo else "many_to_many"
            found.append((t, p, c, fan_in, fan_out, kind, halo, n))
    # a tensor that streams (see streamed) lives in registers; any other only if every reader takes each
    # value once, with no halo, and the tile's values fit the register budget
    transient = streamed(b)
    in_regs = {}
    for t, p, c, _, fan_out, kind, halo, n in found:
        ok = fan_out == 1 and halo == 0 and n * t.dtype.itemsize <= REG_BUDGET
        in_regs[t.name] = in_regs.get(t.name, True) and ok
    for name in in_regs:
        in_regs[name] = in_regs[name] or name in transient
    staged = load_path(b)
    placed, left = {name: ("smem_ring", 2) for name in staged}, smem_budget
    on_chip = sorted({t.name: (n * t.dtype.itemsize, halo) for t, *_, halo, n in found
                      if not in_regs[t.name] and t.name not in staged}.items(), key=lambda kv: kv[1][0])
    for name, (nbytes, halo) in on_chip:
        # a ring of 2 (3 with a halo: the window slides) overlaps the next tile's producer with
        # this tile's consumer; a single buffer (depth 1) still keeps the edge on chip
        depth = next((k for k in ((3, 2, 1) if halo else (2, 1)) if nbytes * k <= left), 0)
        placed[name] = ("smem_ring", depth) if depth else ("gmem", 1)
        left -= nbytes * depth
    out = []
    for t, p, c, fan_in, fan_out, kind, halo, n in found:
        buf, depth = ("reg", 1) if in_regs[t.name] and t.name not in staged else placed[t.name]
        out.append(Edge(t.name, p.name, c.name, fan_in, fan_out, kind, halo, n, n * t.dtype.itemsize, buf, depth,
                        t.name in staged, t.name in transient and buf == "reg"))
    return out


@lru_cache(maxsize=4096)
def _reads_of(region) -> dict:
    """internal tensor -> (consumer, fan-in, fan-out) of each reader with a non-empty relation."""
    b = region.bind()
    out: dict = {}
    for t in region.tensors:
        if t.role == "internal":
            for c in b.readers(t.name):
                fans = _fans(region, t.name, c.name)
                if fans is not None:
                    out.setdefault(t.name, []).append((b.stmt(c.name), *fans))
    return out


def streamed(b: BoundRegion) -> frozenset:
    """Internal tensors that stream through registers element by element (an elementwise chain): every
    reader uses them one-to-one, with no reduction between the producer and the reader. No tile changes it."""
    return _streamed(b.region)


@lru_cache(maxsize=4096)
def _streamed(region) -> frozenset:
    b = region.bind()
    ok: dict = {}
    for name, reads in _reads_of(region).items():
        p = b.writer(name)
        for c, fan_in, fan_out in reads:
            between = [s for s in b.statements if p.index < s.index < c.index]
            ok[name] = ok.get(name, True) and fan_in == 1 and fan_out == 1 and not c.reduce_dims \
                and not any(s.reduce_dims for s in between)
    return frozenset(n for n, v in ok.items() if v)


def halo_matters(b: BoundRegion) -> list:
    """The internal tensors whose halo can change their edges' class or buffer: those with a reader that
    do not stream (a streamed edge is one-to-one and lives in registers whatever the halo)."""
    reads = _reads_of(b.region)
    return [t.name for t in b.region.tensors if t.name in reads and t.name not in streamed(b)]


def staging_bytes(staged: list, n_stages: int) -> int:
    """Shared memory of the operand ring: tensor-core statements run one after another and share it."""
    per: dict = {}
    for st in staged:
        per[st.statement] = per.get(st.statement, 0) + st.bytes
    return max(per.values(), default=0) * n_stages


_RANK = {"reg": 0, "smem_ring": 1, "gmem": 2}


def min_buffer(es: list) -> dict:
    """The region's minimal buffer: the largest class any edge needs (docs/DESIGN.md §Poly Core `min_buffer`);
    load-path values ride in the operand ring like the inputs and do not count."""
    es = [e for e in es if not e.staged]
    if not es:
        return {"buffer": "reg", "depth": 2}
    worst = max(es, key=lambda e: (_RANK[e.buffer], e.depth))
    depth = max([e.depth for e in es if e.buffer == worst.buffer] + [2])
    return {"buffer": worst.buffer, "depth": depth}


@dataclass(frozen=True)
class Staged:
    """An operand tile a tensor-core statement stages through shared memory, one k-step of it."""
    statement: str
    tensor: str
    box: tuple  # extents of the staged tile per tensor axis
    bytes: int


def staged_operands(b: BoundRegion, tile: Tile, kstep: int) -> list:
    """Per tensor-core statement, the operand tiles of one pipeline stage: region inputs and
    load-path values (see :func:`load_path`)."""
    out = []
    lp = load_path(b)
    for s in b.statements:
        if s.stmt.unit != "tensor" or s.name not in tile.slices or tile.slices[s.name].is_empty():
            continue
        sl = tile.slices[s.name]
        ext = dict(zip(s.dims, extents(sl), strict=True))
        # one stage covers `kstep` elements of the flattened reduction (implicit GEMM K = C*R*S):
        # inner reduce dims whole while they fit, then a power-of-two chunk of the next one out
        budget = kstep
        for d in reversed([d for d in s.loop_order if d in s.reduce_dims]):
            lo, hi = ext[d]
            n = hi - lo + 1
            if n <= budget:
                budget //= n
                continue
            chunk = 1 << (max(1, budget).bit_length() - 1)
            sl = clamp(sl, s.dims.index(d), lo, lo + chunk)
            budget = 1
        for d in s.parallel_dims:  # a large slice runs as MMA sub-tiles of at most MAX_SUBTILE per dim
            lo, hi = ext[d]
            if hi - lo + 1 > MAX_SUBTILE:
                sl = clamp(sl, s.dims.index(d), lo, lo + MAX_SUBTILE)
        for t, m in s.reads:
            if b.region.tensor(t).role != "input" and t not in lp:
                continue  # an internal operand computed in the tile is already on chip
            fp = sl.apply(m)
            if fp.is_empty():
                continue
            box = tuple(hi - lo + 1 for lo, hi in extents(fp))
            out.append(Staged(s.name, t, box, card(fp) * lp.get(t, b.region.tensor(t).dtype.itemsize)))
    return out


def barrier_hints(b: BoundRegion, es: list, staged: list, dev: Device, stages: int) -> list:
    """Where the kernel must synchronise and with what (docs/DESIGN.md §Poly Core, §GPU IR): sm80 cp.async groups
    and bar.sync; sm90 TMA completing on mbarriers, and a proxy fence before tensor cores read smem
    that threads wrote."""
    out = []
    for st in sorted({s.statement for s in staged}):
        ts = [s.tensor for s in staged if s.statement == st]
        if dev.arch == "sm80":
            out.append({"at": st, "buffers": ts, "sync": "cp.async.commit_group; cp.async.wait_group " + str(stages - 2)
                        + "; __syncthreads()", "stages": stages})
        else:
            out.append({"at": st, "buffers": ts, "sync": "cp.async.bulk.tensor -> mbarrier.arrive.expect_tx; "
                        "mbarrier.try_wait.parity per stage", "stages": stages})
    for e in es:
        if e.buffer == "reg" or e.staged:
            continue
        tensor_consumer = b.stmt(e.consumer).stmt.unit == "tensor"
        if dev.arch == "sm80":
            sync = "__syncthreads() between producer stores and consumer loads"
        else:
            sync = ("fence.proxy.async.shared::cta; named barrier (bar.sync) before wgmma reads"
                    if tensor_consumer else "named barrier (bar.sync) between producer and consumer warps")
        if e.buffer == "gmem":
            sync = "kernel boundary or grid-wide sync: the edge does not fit on chip"
        out.append({"at": f"{e.producer}->{e.consumer}", "buffers": [e.tensor], "sync": sync, "stages": e.depth})
    return out


def bank_hints(b: BoundRegion, es: list, staged: list, tile: Tile, dev: Device) -> list:
    """Shared-memory tiles whose rows are a multiple of 128 bytes put a column walk (ldmatrix,
    wgmma) on one bank: recommend a swizzle (sm90: the TMA swizzle mode) or padding (docs/DESIGN.md §Poly Core)."""
    lp = load_path(b)
    rows = [(s.statement, s.tensor, s.box, lp.get(s.tensor, b.region.tensor(s.tensor).dtype.itemsize)) for s in staged]
    for e in es:
        if e.buffer != "smem_ring" or e.staged:
            continue
        fp = tile_footprint(b, tile, e.tensor)
        rows.append((e.producer, e.tensor, tuple(hi - lo + 1 for lo, hi in extents(fp)),
                     b.region.tensor(e.tensor).dtype.itemsize))
    out = []
    for at, tensor, box, itemsize in rows:
        if len(box) < 2 or box[-2] <= 1:
            continue
        row = box[-1] * itemsize
        # 8 rows of 16 B (one ldmatrix / one wgmma core matrix) start at i*row mod 128 B: they
        # repeat every 128/gcd(row, 128) rows, so that many distinct bank groups serve 8 rows.
        ways = 8 // min(8, 128 // gcd(row, 128))
        if ways <= 1:
            continue
        sw = next(w for w in (128, 64, 32) if row % w == 0)
        fix = (f"TMA/wgmma {sw}B swizzle" if dev.arch == "sm90"
               else f"XOR swizzle of 16B chunks within {sw}B rows (or pad each row by 16B)")
        out.append({"at": at, "tensor": tensor, "row_bytes": row, "conflict_ways": ways, "fix": fix})
    return out
