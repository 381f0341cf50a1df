"""Tiles, compute-at slices, footprints and counts as isl sets (docs/DESIGN.md §Poly Core, §Fusion; the halos
of two tiles: analyses/halo.py).

A tile is a box on the driver statement's parallel dims (the consumer drives). Its slice in every
producer is the dependence pre-image ``tile.apply(read).apply(write⁻¹)`` taken backwards through
the region (the pre-image rule, docs/DESIGN.md §Poly Core); footprints are the images of the slices
under the accesses. All
sets are parameter-free (the region is bound to a concrete shape), so cardinalities are exact:
boxes are counted by their extents, anything else by ``count_val``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from math import ceil, prod
from typing import Mapping

import islpy as isl

from ..ir.diagnostics import fail
from .isl_util import fresh, held, held_parts, held_renamed, kept, parse_map, parts_of, val_int
from .settext import box_card, box_of_text, bounded_count, separable_count
from .poly_region import BoundRegion, BoundStatement


_MEMO: dict = {}  # (what, isl text but its tuple names) -> value; isl's own set hash collides often, its text does not
def _named(s: isl.Set, name: str) -> isl.Set:
    """s with its tuple named ``name``, held with s's text so renamed and s's memo (isl_util.held_renamed)."""
    return s if s.get_tuple_name() == name else held_renamed(s, s.set_tuple_name(name), {s.get_tuple_name(): name})


def _memo(kind: str, s: isl.Set, fn):
    hit = held(s)
    v = hit[1].get(kind)
    if v is not None:
        return v
    text = hit[2]
    key = (kind, parts_of(hit)[0::2])  # a count or a bound does not read the set's name
    v = _MEMO.get(key)
    if v is None:
        if len(_MEMO) > 50000:
            _MEMO.clear()
        v = _MEMO[key] = fn(s, text)
    hit[1][kind] = v
    return v


def extents(s: isl.Set) -> tuple:
    """(lo, hi) per set dim of a non-empty, parameter-free, bounded set."""
    return _memo("extents", s, _extents)


def _extents(s: isl.Set, text: str) -> tuple:
    """An empty set spans nothing: (0, -1) per dim (no instance, no tail); a dim with no bound is E1007. A box
    is read from its text (analyses/settext.py)."""
    box = box_of_text(text)
    if box is not None and box_card(box):
        return box
    n = s.dim(isl.dim_type.set)
    if s.is_empty():
        return ((0, -1),) * n
    out = []
    for k in range(n):
        lo, hi = val_int(s.dim_min_val(k)), val_int(s.dim_max_val(k))
        if lo is None or hi is None:
            _unbounded(s, f"dim {k} has no bound")
        out.append((lo, hi))
    return tuple(out)


def _unbounded(s: isl.Set, why: str):
    fail("UnaddressableShape", f"the polyhedral set {str(s)[:200]}", f"{why}: Poly Core counts only bounded sets",
         "Give every view and slice of the model a finite, positive extent.")


def card(s: isl.Set) -> int:
    """The number of points of a parameter-free bounded set (exact)."""
    return _memo("card", s, _card)


def _card(s: isl.Set, text: str) -> int:
    """A box by its extents (read from its text when it prints as one), a product of independent dim groups
    group by group (analyses/settext.py), anything else by isl's count."""
    box = box_of_text(text)
    if box is not None:
        return box_card(box)
    if s.is_empty():
        return 0
    s = s.coalesce()
    if s.n_basic_set() == 1 and s.is_box():
        return prod(hi - lo + 1 for lo, hi in extents(s))
    got = separable_count(s)
    if got is not None:
        return got
    got = bounded_count(s)
    if got is None:
        _unbounded(s, "it has infinitely many points")
    return got


def sectors(s: isl.Set, itemsize: int, sector: int = 32, shape: "tuple | None" = None) -> int:
    """How many `sector`-byte segments of device memory the set touches (the unit of DRAM/L2
    transactions); `card(s) * itemsize / (sectors * sector)` is the access efficiency. With the tensor's
    row-major `shape` (its base sector-aligned), trailing axes the set covers whole are one contiguous run
    of memory: a [32, 16, 3, 3] fp16 weight read whole is 288 sectors, not one per 6-byte row. Without
    it, each row of the innermost axis starts a new sector."""
    dims = s.dim(isl.dim_type.set)
    merge = 0  # trailing axes whose full extent the set spans (each is merged into the axis before it)
    if shape is not None and dims > 1:
        ext = extents(s)  # an empty set spans (0, -1) on every dim: no axis is covered whole
        while merge < dims - 1 and ext[dims - 1 - merge] == (0, shape[dims - 1 - merge] - 1):
            merge += 1
    key = f"sectors{itemsize},{sector}" + (f",{tuple(shape[dims - 1 - merge:])}" if merge else "")
    return _memo(key, s, lambda x, text: _sectors(x, text, itemsize, sector,
                                                  tuple(shape[dims - 1 - merge:]) if merge else ()))


def _sectors(s: isl.Set, text: str, itemsize: int, sector: int, merged: tuple = ()) -> int:
    n = s.dim(isl.dim_type.set)
    if n and (box := box_of_text(text)) is not None:
        return _box_sectors(box, max(1, sector // itemsize), merged)
    if s.is_empty():
        return 0
    if n == 0:
        return 1
    per = max(1, sector // itemsize)
    xs = [f"x{i}" for i in range(n)]
    name = s.get_tuple_name()
    head = f"{name}" if name else ""
    # x_k..x_{n-1} are one row-major run (the merged axes; the innermost alone without them)
    k = n - len(merged) if merged else n - 1
    strides = [prod(merged[i + 1:]) for i in range(len(merged))] if merged else [1]
    linear = " + ".join(f"{st}*x{k + i}" if st != 1 else f"x{k + i}" for i, st in enumerate(strides))
    m = parse_map(f"{{ {head}[{', '.join(xs)}] -> [{', '.join(xs[:k] + [f'floor(({linear})/{per})'])}] }}")
    return card(s.apply(m))


def _box_sectors(box: tuple, per: int, merged: tuple) -> int:
    """_sectors of a box: its outer dims' points times the sectors of one run. The run's axes after the first
    span their whole extent (``merged``: the run's axes, full ones merged), so its elements are the contiguous
    linear range from the first axis's lo to its hi, and a contiguous range [a, b] of elements touches
    floor(b/per) - floor(a/per) + 1 sectors."""
    k = len(box) - len(merged) if merged else len(box) - 1
    inner = prod(merged[1:]) if merged else 1
    lo, hi = box[k]
    if box_card(box) == 0:
        return 0
    return box_card(box[:k]) * ((hi * inner + inner - 1) // per - (lo * inner) // per + 1)


@dataclass(frozen=True, eq=False)
class Tile:
    """One tile of the driver and its compute-at slices (made once per region and sizes: compare
    and hash by identity, so footprints can be cached on it)."""
    sizes: tuple  # ((dim, size), ...) on the driver's parallel dims
    origin: tuple  # ((dim, lo), ...)
    count: int  # number of tiles covering the driver's domain
    slices: dict  # statement name -> isl.Set of its instances computed for this tile
    footprints: dict = field(default_factory=dict, repr=False)  # tensor -> isl.Set (cache)
    factors: dict = field(default_factory=dict, repr=False)  # statement -> recompute factor (polycore's cache)

    def size(self, d: str) -> int:
        return dict(self.sizes)[d]


def clamp(s: isl.Set, k: int, lo: int, hi: int) -> isl.Set:
    """s with set dim k restricted to lo <= x < hi (bounds added directly: no parsing)."""
    return s.lower_bound_val(isl.dim_type.set, k, isl.Val(lo)).upper_bound_val(isl.dim_type.set, k, isl.Val(hi - 1))


_BOXES: dict = {}  # (domain text, bounds) -> the clamped domain; (its text but the tuple name, bounds) -> one of them


def _box(stmt: BoundStatement, ranges: Mapping[str, tuple]) -> isl.Set:
    """stmt's domain clamped to ``ranges`` on its dims of those names, kept by the domain's text (the candidate
    regions of a search share statements and tiles)."""
    ext = extents(stmt.domain)  # a range covering a dim's whole extent bounds nothing
    bounds = tuple((k, lo, hi) for k, lo, hi in ((stmt.dims.index(d), lo, hi) for d, (lo, hi) in ranges.items()
                                                   if d in stmt.dims) if lo > ext[k][0] or hi <= ext[k][1])
    text = held(stmt.domain)[2]
    out = _BOXES.get((text, bounds))
    if out is None:
        if len(_BOXES) > 50000:
            _BOXES.clear()
        unnamed = (held_parts(stmt.domain)[0::2], bounds)  # the domain's text but its name (see image)
        out = _BOXES.get(unnamed)
        if out is None:
            out = stmt.domain
            for k, lo, hi in bounds:
                out = clamp(out, k, lo, hi)
            _BOXES[unnamed] = out
        name = stmt.domain.get_tuple_name()
        out = _BOXES[text, bounds] = _named(out, name)
    return out


def normalize_tile(b: BoundRegion, tile: Mapping[str, int] | None) -> dict:
    """Tile sizes for every parallel dim of the driver (missing dims: 1 outside the two innermost,
    64 on them), clipped to the dim's extent."""
    par, fulls = _frame(b.region)
    out = {}
    for i, (d, full) in enumerate(zip(par, fulls)):
        want = (tile or {}).get(d, 64 if i >= len(par) - 2 else 1)
        if not isinstance(want, int) or want <= 0:
            fail("InvalidAttribute", f"tile of region {b.region.name}", f"tile size of {d} must be a positive int, got {want!r}")
        out[d] = min(want, full)
    for d in tile or {}:
        if d not in par:
            fail("InvalidAttribute", f"tile of region {b.region.name}",
                 f"{d!r} is not a parallel dim of the driver {b.driver.name} (parallel dims: {list(par)})")
    return out


def tile_count(b: BoundRegion, sizes: Mapping[str, int]) -> int:
    """How many tiles of these sizes (normalized: :func:`normalize_tile`) cover the driver's domain: the
    ``count`` of :func:`make_tile`, without making the tile."""
    return prod(ceil(full / n) for n, full in zip(normalize_tile(b, sizes).values(), _frame(b.region)[1], strict=True))


@lru_cache(maxsize=8192)
def _frame(region) -> tuple:
    """(the driver's parallel dims, the full extent of each): what every tile of the region is cut from."""
    drv = region.bind().driver
    ext = dict(zip(drv.dims, extents(drv.domain), strict=True))
    return drv.parallel_dims, tuple(ext[d][1] - ext[d][0] + 1 for d in drv.parallel_dims)


def make_tile(b: BoundRegion, sizes: Mapping[str, int], shift: Mapping[str, int] | None = None) -> Tile | None:
    """The interior tile (the middle one along each dim, so halos are not clipped by the domain
    boundary), optionally moved by `shift` tiles; None when the moved tile leaves the domain."""
    return _make_tile(b.region, tuple(sizes.items()), tuple(sorted((shift or {}).items())))


@lru_cache(maxsize=4096)
def _make_tile(region, sizes_key: tuple, shift_key: tuple) -> Tile | None:
    b = region.bind()
    placed = _placed(b, dict(sizes_key), dict(shift_key))
    if placed is None:
        return None
    ranges, count = placed
    t = _box(b.driver, ranges)
    return Tile(sizes_key, tuple((d, lo) for d, (lo, _) in ranges.items()), count, slices(b, t, ranges))


def _placed(b: BoundRegion, sizes: Mapping[str, int], shift: Mapping[str, int]) -> "tuple | None":
    """(driver dim -> [lo, hi) of the tile, tile count) of the middle tile moved by ``shift`` tiles; None when the
    moved tile leaves the domain."""
    ext = dict(zip(b.driver.dims, extents(b.driver.domain), strict=True))
    ranges, count = {}, 1
    for d, s in sizes.items():
        lo, hi = ext[d]
        n = ceil((hi - lo + 1) / s)
        count *= n
        k = (n - 1) // 2 + shift.get(d, 0)
        if k >= n:
            return None
        start = lo + k * s
        ranges[d] = (start, min(start + s, hi + 1))
    return ranges, count


def slices(b: BoundRegion, driver_tile: isl.Set, ranges: Mapping[str, tuple]) -> dict:
    """Per statement, the instances one driver tile needs: the backward closure of dependence
    pre-images (docs/DESIGN.md §Poly Core). Statements the driver does not reach (other outputs) take the
    tile's ranges on dims of the same name."""
    inst = {b.driver.name: driver_tile}
    for s in reversed(b.statements):
        mine = inst.get(s.name)
        if mine is None:
            if b.region.tensor(s.stmt.write.tensor).role == "internal":
                continue  # dead: nothing downstream in the tile reads it
            mine = inst[s.name] = _box(s, ranges)
        _pull_back(b, s, mine, inst)
    return inst


def _pull_back(b: BoundRegion, s: BoundStatement, mine: isl.Set, inst: dict) -> None:
    """Add to inst, per earlier statement, the instances that write what the instances `mine` of s read."""
    for p, dep in pre_images(b.region, s.name):
        need = image(mine, dep)
        old = inst.get(p.name)
        if old is None or need is old or held(need)[2] == held(old)[2]:  # the same instances (one text, one set)
            inst[p.name] = need if old is None else old
        else:
            inst[p.name] = _readable(old).union(_readable(need)).coalesce()


def _readable(s: isl.Set) -> isl.Set:
    """s, or s read back from its text (isl_util.fresh) when it holds an empty piece (its text a ``: false``
    disjunct beside others): isl's coalesce of a union holding such a piece, as images and unions of them leave
    it, crashed the process (Longformer's sliding-window slices: a segmentation fault in facet wrapping), where
    the same sets read back from their texts, the empty piece gone, coalesce at once."""
    return fresh(s) if " : false" in held(s)[2] and s.n_basic_set() > 1 else s


_IMAGES: dict = {}  # (set text, map text) -> the set's image
_UNNAMED: dict = {}  # the same texts but for their tuple names -> an image of them (under other names)


def image(s: isl.Set, m: isl.Map) -> isl.Set:
    """s.apply(m), kept by the texts of both: the candidate regions of a search share statements, their tiles
    and accesses (a conv with one epilogue or another), so most images recur under other regions' objects; and
    by those texts with the tuple names left out (a statement is S2 in one candidate region, S1 in the next), the
    image then named as this map names its range: the same sets under other names have the same image."""
    hs, hm = held(s), held(m)
    key = (hs[2], hm[2])
    got = _IMAGES.get(key)
    if got is None:
        if len(_IMAGES) > 50000:
            _IMAGES.clear()
            _UNNAMED.clear()
        got = _IMAGES[key] = _image_unnamed(s, m, hs, hm)
    return got


def _image_unnamed(s: isl.Set, m: isl.Map, hs: list, hm: list) -> isl.Set:
    """s.apply(m) kept by the texts around the tuple names (the set's one name, the map's domain and range
    pairs, a union repeating them), the image renamed to the map's range; computed when the names do not pair
    (hs, hm: what isl_util.held gave of s and m)."""
    ps, pm = parts_of(hs), parts_of(hm)
    sn, mn = ps[1::2], pm[1::2]
    if not sn or sn.count(sn[0]) != len(sn) or not mn or len(mn) % 2:
        return s.apply(m)
    src, dst = mn[0], mn[1]
    if src != sn[0] or mn != (src, dst) * (len(mn) // 2):
        return s.apply(m)
    key = (ps[0::2], pm[0::2], src == dst)
    got = _UNNAMED.get(key)
    if got is None:
        got = _UNNAMED[key] = s.apply(m)
        return got
    return _named(got, dst)


@lru_cache(maxsize=8192)
def pre_images(region, name: str) -> tuple:
    """(producer, instance of `name` -> producer instances it reads from) per read of statement `name`
    whose tensor an earlier statement writes: read ∘ write⁻¹ restricted to the producer's domain,
    composed once per region so a tile pulls back with one isl operation per edge."""
    b = region.bind()
    s = b.stmt(name)
    out = []
    for tensor, read in s.reads:
        p = b.writer(tensor)
        if p is None or p.index >= s.index:
            continue
        out.append((p, _dep(read, p)))
    return tuple(out)


_DEPS: dict = {}  # the texts of a read, its writer's write and domain, but their tuple names -> [dependence, names, domain]


def _dep(read: isl.Map, p: BoundStatement) -> isl.Map:
    """read ∘ p.write⁻¹ restricted to p's domain, kept by the texts of the three without their tuple names and
    renamed (held with its text renamed): the regions of a search compose the same statements under other names."""
    names = (read.get_tuple_name(isl.dim_type.in_), p.name)
    dep, was, _ = _dep_entry(tuple(held_parts(x)[0::2] for x in (read, p.write, p.domain)), read, p)
    if was == names:
        return dep
    out = dep.set_tuple_name(isl.dim_type.in_, names[0]).set_tuple_name(isl.dim_type.out, names[1])
    return held_renamed(dep, out, dict(zip(was, names, strict=True)))


def _dep_entry(key: tuple, read: isl.Map, p: BoundStatement) -> list:
    """_DEPS's [dependence, (reader, writer) names it was made under, its domain or None] of these texts."""
    got = _DEPS.get(key)
    if got is None:
        if len(_DEPS) > 50000:
            _DEPS.clear()
        names = (read.get_tuple_name(isl.dim_type.in_), p.name)
        got = _DEPS[key] = [read.apply_range(p.write.reverse()).intersect_range(p.domain), names, None]
    return got


def readers_of(read: isl.Map, p: BoundStatement) -> isl.Set:
    """The instances of a statement that read, through ``read``, an element p writes (over its whole domain): the
    domain of their dependence (:func:`pre_images`), kept with it by text and named as the reader."""
    got = _dep_entry(tuple(held_parts(x)[0::2] for x in (read, p.write, p.domain)), read, p)
    if got[2] is None:
        got[2] = got[0].domain()
    return _named(got[2], read.get_tuple_name(isl.dim_type.in_))


_UNIONS: dict = {}  # ids of the images -> (the images, their union): the images are kept (and shared) by text


def footprint(b: BoundRegion, inst: Mapping[str, isl.Set], tensor: str) -> isl.Set:
    """The elements of `tensor` touched (read or written) by the given instances; the union of the same image
    objects (:func:`image` keeps them by text) is the same object, whose counts are memoized on it."""
    images = tuple({held(im)[2]: im for im in (image(inst[name], m) for name, m in b.accesses(tensor)
                                                if name in inst)}.values())  # one of each text: one set
    if not images:
        return isl.Set.empty(b.tensor_sets[tensor].get_space())
    if len(images) == 1:  # the image itself (kept by text, its counts with it)
        return images[0]
    key = tuple(map(id, images))
    hit = _UNIONS.get(key)
    if hit is not None and all(x is y for x, y in zip(hit[0], images)):
        return hit[1]
    out = images[0]
    for im in images[1:]:
        out = out.union(im)
    out = out.coalesce()
    if len(_UNIONS) > 50000:
        _UNIONS.clear()
    _UNIONS[key] = (images, out)
    return out


def tile_footprint(b: BoundRegion, tile: Tile, tensor: str) -> isl.Set:
    """footprint() of one tile's slices, cached on the tile; of a tensor its writer covers (:func:`covering`), the
    writer's image alone: the slices are closed under the pre-images (every instance that writes an element a
    slice reads is in its writer's slice), except a streamed region's, whose running reductions are cut to a block."""
    fp = tile.footprints.get(tensor)
    if fp is None:
        w = None if b.region.stream else covering(b.region, tensor)
        fp = tile.footprints[tensor] = image(tile.slices[w.name], w.write) if w is not None and w.name in tile.slices \
            else footprint(b, tile.slices, tensor)
    return fp


def full_footprint(b: BoundRegion, tensor: str) -> isl.Set:
    """The elements of `tensor` the whole region touches (cached per region)."""
    return _full_footprint(b.region, tensor)


@lru_cache(maxsize=8192)
def _full_footprint(region, tensor: str) -> isl.Set:
    b = region.bind()
    w = covering(region, tensor)
    return image(w.domain, w.write) if w is not None else footprint(b, b.domains, tensor)


@lru_cache(maxsize=8192)
def covering(region, tensor: str) -> "BoundStatement | None":
    """The statement writing ``tensor`` when it writes every element any statement reads of it and every reader
    comes after it: then the instances a closed set of slices holds (each reader's pre-images included) touch
    just what its writer's slice writes, so that image is the tensor's footprint; None otherwise (an input, or a
    read of what the region never writes)."""
    b = region.bind()
    w = b.writer(tensor)
    if w is None:
        return None
    for r in b.readers(tensor):
        if r.index <= w.index or any(t == tensor and not _covers(w, r, m) for t, m in r.reads):
            return None
    return w


def _covers(w: BoundStatement, r: BoundStatement, read: isl.Map) -> bool:
    """Whether w writes every element r reads through ``read`` (kept by text: isl_util.kept)."""
    return kept("covers", (w.domain, w.write, r.domain, read),
                lambda: image(r.domain, read).is_subset(image(w.domain, w.write)))


def reached(b: BoundRegion, ranges: Mapping[str, tuple], tensor: str) -> isl.Set:
    """The elements of ``tensor`` the driver tile of these ``ranges`` (dim -> [lo, hi)) reads or writes, as
    ``footprint(slices(...))`` counts them: through the tensor's :func:`reach`, one image where the slices cost
    one per dependence; by the slices themselves in a region with an output the driver does not reach."""
    tile = _box(b.driver, ranges)
    m = reach(b.region, tensor)
    return image(tile, m) if m is not None else footprint(b, slices(b, tile, ranges), tensor)


@lru_cache(maxsize=8192)
def reach(region, tensor: str) -> "isl.Map | None":
    """driver instance -> the elements of ``tensor`` its tile reads or writes, the dependence pre-images
    (:func:`pre_images`) composed along every path from the driver, then the accesses: image and union commute,
    so ``footprint(slices(T)) == T.apply(reach)`` for every driver tile T (exact relations, no approximation).
    None when a statement writes an output the driver does not reach (its slice is a box of the tile's ranges,
    not an image)."""
    paths = _paths(region)
    if paths is None:
        return None
    b = region.bind()
    w = covering(region, tensor)  # a covered tensor: its writer's write alone (every driver instance's slices are closed)
    ms = [paths[w.name].apply_range(w.write)] if w is not None and w.name in paths else \
        [paths[name].apply_range(m) for name, m in b.accesses(tensor) if name in paths]
    if not ms:
        return isl.Map.empty(isl.Space.map_from_domain_and_range(b.driver.domain.get_space(),
                                                                  b.tensor_sets[tensor].get_space()))
    out = ms[0]
    for m in ms[1:]:
        out = out.union(m)
    return out.coalesce()


@lru_cache(maxsize=4096)
def _paths(region) -> "dict | None":
    """statement -> (driver instance -> its instances a driver tile needs), the closure :func:`slices` takes per
    tile, taken once on relations; None when some output is not reached from the driver."""
    b = region.bind()
    drv = b.driver
    out = {drv.name: isl.Map.identity(drv.domain.get_space().map_from_set()).intersect_domain(drv.domain)}
    for s in reversed(b.statements):
        mine = out.get(s.name)
        if mine is None:
            if b.region.tensor(s.stmt.write.tensor).role == "internal":
                continue  # dead, as in slices()
            return None
        for p, dep in pre_images(region, s.name):
            m = mine.apply_range(dep)
            out[p.name] = m if p.name not in out else out[p.name].union(m).coalesce()
    return out


def stream_tile(b: BoundRegion, t: Tile) -> Tile:
    """t as a streamed region runs it: the backward closure of the driver tile (docs/DESIGN.md §Poly Core) with
    each running reduction cut to one block of its key dim, so everything it reads in the tile (the
    scores, their producers) is one key block too. t itself when the region is not streamed."""
    region = b.region
    if not region.stream:
        return t
    stream = set(region.stream)
    inst = {b.driver.name: t.slices[b.driver.name]}
    for s in reversed(b.statements):
        mine = inst.get(s.name, t.slices.get(s.name))
        if mine is None:
            continue
        if s.name in stream and len(s.reduce_dims) == 1 and not mine.is_empty():
            k = s.dims.index(s.reduce_dims[0])
            lo, _ = extents(mine)[k]
            mine = clamp(mine, k, lo, lo + region.stream_block)
        inst[s.name] = mine
        _pull_back(b, s, mine, inst)
    return Tile(t.sizes, t.origin, t.count, inst)
