"""Index arithmetic for rule files: pure functions of attribute strings, called from ``.egg`` rules.

Rules match structure natively; whatever needs arithmetic on shapes and AxisMaps (docs/DESIGN.md
§IndexBook, §RB-SSA: compose a view into a Read's map, fold a pad into a Select guard, renumber reduce axes) calls
one of these through egglog's PyObject primitives, e.g.
``(py-to-string (py-call $fold-map (py-from-string "permute") (py-from-string s) ...))``.
Each helper returns the encoded result, or ``""`` when the rewrite does not apply (a symbolic
reshape that is not affine, say); rules guard with ``(!= r "")``. Helpers never raise: an exception
inside egglog would poison the e-graph, so any error also reads as "does not apply".
"""
from __future__ import annotations

import functools
import re
from typing import Callable

from ..ir import movement as M
from ..ir.expr import Expr
from ..ir.shapes import dim
from . import encode as E

HELPERS: dict[str, Callable[..., str]] = {}


def helper(name: str):
    """Registers fn as the helper ``$name``: never raising, and remembered per argument tuple (a helper is a pure
    function of its strings, and the rules ask the same question many times: every read of one shape and map,
    every segment of a model)."""
    def deco(fn):
        def plain(*args) -> str:
            try:
                out = fn(*args)
                return "" if out is None else out
            except Exception:  # noqa: BLE001 — "does not apply"; see the module docstring
                return ""
        answer = functools.lru_cache(maxsize=1 << 12)(plain)

        @functools.wraps(fn)
        def safe(*args):
            args = tuple(a.decode() if isinstance(a, bytes) else a for a in args)
            try:
                hash(args)
            except TypeError:  # an argument that is no string (a py-dict): asked without the memo
                return plain(*args)
            return answer(*args)
        HELPERS[name] = safe
        return safe
    return deco


# ---- the view map of each movement op: output index -> input index (ir/movement.py) ----------------

@functools.lru_cache(maxsize=4096)
def view(kind: str, in_shape: str, a: str, b: str) -> "tuple | None":
    """(output shape, f) with f[k] the input index along input axis k (ir/movement.py's map of the
    op), or None if not affine. ``broadcast`` is RB-SSA's BroadcastInDim (out shape, kept dims)."""
    s = E.parse_shape(in_shape)
    try:
        if kind == "reshape":
            out = E.parse_shape(a)
            return out, M.reshape_exprs(s, out)
        if kind in ("permute", "transpose"):
            p = E.parse_ints(a)
            if sorted(p) != list(range(len(s))):
                return None
            return tuple(s[pk] for pk in p), M.permute_exprs(p)
        if kind == "expand":
            out = E.parse_shape(a)
            return (out, M.expand_exprs(s)) if len(out) == len(s) else None
        if kind == "broadcast":
            return _broadcast(s, E.parse_shape(a), E.parse_ints(b))
        if kind == "shrink":
            lo, hi, st = E.parse_shrink(a)
            out = tuple(dim((Expr.of(h) - l + (t - 1)).floordiv(t)) for l, h, t in zip(lo, hi, st))
            return out, M.shrink_exprs(lo, st)
        if kind == "flip":
            return s, M.flip_exprs(s, E.parse_ints(a))
        if kind == "view":
            return E.parse_shape(a), E.parse_map(b)
    except M.NonAffine:
        return None
    return None


def _broadcast(s: tuple, out: tuple, dims: tuple) -> "tuple | None":
    """BroadcastInDim: input axis k lands on output axis dims[k]; a size-1 axis broadcast reads 0."""
    if len(dims) != len(s) or any(not 0 <= d < len(out) for d in dims):
        return None
    f = []
    for d, j in zip(s, dims):
        if d == out[j]:
            f.append(M.var(j))
        elif d == 1:
            f.append(Expr.const(0))
        else:
            return None
    return out, tuple(f)


def compose(m: tuple, f: tuple) -> tuple:
    """m after f: substitute the view's input index f[k] for i_k in every entry of m."""
    env = {f"i{k}": fk for k, fk in enumerate(f)}
    return tuple(e.subs(env) for e in m)


@helper("shape-after")
def shape_after(kind: str, in_shape: str, a: str, b: str) -> "str | None":
    if kind == "pad":
        s = E.parse_shape(in_shape)
        return E.shape(dim(Expr.of(d) + lo + hi) for d, (lo, hi) in zip(s, E.parse_pads(a), strict=True))
    v = view(kind, in_shape, a, b)
    return None if v is None or v[1] is None else E.shape(v[0])


@helper("fold-map")
def fold_map(kind: str, in_shape: str, m: str, a: str, b: str) -> "str | None":
    """The map of Read(mem, in_shape, m) seen through the movement op (kind, a, b)."""
    v = view(kind, in_shape, a, b)
    if v is None or v[1] is None:
        return None
    old = E.parse_map(m)
    new = compose(old, v[1])
    if not _within(new, v[0], old, E.parse_shape(in_shape)):
        return None
    return E.tup(new)


def _within(new: tuple, new_shape: tuple, old: tuple, old_shape: tuple) -> bool:
    """With static shapes: every entry of the new map provably stays in the range the old map
    covered (interval bounds, as the Tiny IR VIEW check uses), so a valid read stays valid."""
    from ..ir.infer import expr_bounds
    if not all(isinstance(d, int) for d in new_shape + old_shape):
        return True
    nbox = {f"i{k}": (0, d - 1) for k, d in enumerate(new_shape)}
    obox = {f"i{k}": (0, d - 1) for k, d in enumerate(old_shape)}
    for e, o in zip(new, old, strict=True):
        if e.variables() - set(nbox) or o.variables() - set(obox):
            return False
        lo, hi = expr_bounds(e, nbox)
        olo, ohi = expr_bounds(o, obox)
        if lo < olo or hi > ohi:
            return False
    return True


# ---- guarded reads: PAD folded into Select(guard, Read, Const) ------------------------------------

@functools.lru_cache(maxsize=4096)
def _pad_fold(mem_shape: str, guard: str, s: str, m: str, pads: str) -> "tuple | None":
    """Pad of a (guarded) read -> (guard', map'). Each padded read axis k must be a plain axis: one
    mem axis j reads i_k - plo_j (plo_j: the pad already guarded on j) over the whole padded extent."""
    D, shp, mp, P = E.parse_shape(mem_shape), E.parse_shape(s), E.parse_map(m), E.parse_pads(pads)
    g = E.parse_guard(guard)
    env = {}
    for k, (lo, hi) in enumerate(P):
        if lo == 0 and hi == 0:
            continue
        j = _plain_axis(mp, k)
        if j is None:
            return None
        glo, ghi = g.get(j, (0, 0))
        if mp[j] != M.var(k) - glo or shp[k] != dim(Expr.of(D[j]) + glo + ghi):
            return None
        g[j] = (dim(Expr.of(glo) + lo), dim(Expr.of(ghi) + hi))
        env[k] = M.var(k) - lo
    f = tuple(env.get(k, M.var(k)) for k in range(len(shp)))
    return E.guard(g), E.tup(compose(mp, f))


def _plain_axis(mp: tuple, k: int) -> "int | None":
    v = f"i{k}"
    hits = [j for j, e in enumerate(mp) if v in e.variables()]
    if len(hits) != 1 or mp[hits[0]].variables() != {v} or mp[hits[0]].coeff(v) != 1:
        return None
    return hits[0]


@helper("pad-guard")
def pad_guard(mem_shape: str, guard: str, s: str, m: str, pads: str) -> "str | None":
    r = _pad_fold(mem_shape, guard, s, m, pads)
    return None if r is None else r[0]


@helper("pad-map")
def pad_map(mem_shape: str, guard: str, s: str, m: str, pads: str) -> "str | None":
    r = _pad_fold(mem_shape, guard, s, m, pads)
    return None if r is None else r[1]


def guard_pads(guard: str, rank: int) -> tuple:
    """The per-mem-axis pads of a Select guard (the padded buffer a guarded read stays inside)."""
    g = E.parse_guard(guard)
    return tuple(g.get(j, (0, 0)) for j in range(rank))


# ---- shapes and axes ------------------------------------------------------------------------------

@helper("reduce-shape")
def reduce_shape(in_shape: str, axes: str) -> str:
    ax = set(E.parse_ints(axes))
    return E.shape(d for k, d in enumerate(E.parse_shape(in_shape)) if k not in ax)


@helper("unit-dims")
def unit_dims(x_shape: str, s1: str) -> "str | None":
    """Positions of x's axes in s1 when s1 only inserts size-1 axes into x's shape (else None)."""
    xs, ys = E.parse_shape(x_shape), E.parse_shape(s1)
    dims, j = [], 0
    for d in xs:
        while j < len(ys) and ys[j] != d and ys[j] == 1:
            j += 1
        if j == len(ys) or ys[j] != d:
            return None
        dims.append(j)
        j += 1
    if any(ys[k] != 1 for k in range(len(ys)) if k not in dims):
        return None
    return E.tup(dims)


@helper("iota")
def iota(shape: str) -> str:
    return E.tup(range(len(E.parse_shape(shape))))


@helper("merge-axes")
def merge_axes(inner: str, outer: str, body_shape: str) -> "str | None":
    """R0: the body axes of Reduce(outer){Reduce(inner){body}}, as one axis set."""
    ia = set(E.parse_ints(inner))
    kept = [k for k in range(len(E.parse_shape(body_shape))) if k not in ia]
    return E.tup(sorted(ia | {kept[o] for o in E.parse_ints(outer)}))


@functools.lru_cache(maxsize=4096)
def _hoist(y_shape: str, s: str, dims: str, axes: str) -> "tuple | None":
    ys, out, d, ax = E.parse_shape(y_shape), E.parse_shape(s), E.parse_ints(dims), set(E.parse_ints(axes))
    if any(dj in ax and ys[k] != 1 for k, dj in enumerate(d)):
        return None  # y varies along a reduced axis: not invariant
    kept = [j for j in range(len(out)) if j not in ax]
    keep_ops = [k for k, dj in enumerate(d) if dj not in ax]
    if len(keep_ops) != len(d):
        return None  # a size-1 operand axis sits on a reduced axis: reshape first
    new_dims = tuple(kept.index(d[k]) for k in keep_ops)
    return E.shape(out[j] for j in kept), E.tup(new_dims)


@helper("hoist-shape")
def hoist_shape(y_shape: str, s: str, dims: str, axes: str) -> "str | None":
    r = _hoist(y_shape, s, dims, axes)
    return None if r is None else r[0]


@helper("hoist-dims")
def hoist_dims(y_shape: str, s: str, dims: str, axes: str) -> "str | None":
    r = _hoist(y_shape, s, dims, axes)
    return None if r is None else r[1]


@helper("drop-axes-map")
@functools.lru_cache(maxsize=4096)
def drop_axes_map(m: str, s: str, axes: str) -> "str | None":
    """The map of Read(mem, s, m) seen over s with the axes ``axes`` removed, when m does not depend on
    them (R1/R2: a value invariant along the reduced axes K), else None. An axis of extent 1 may appear
    in m (its index is always 0); any other K axis in m means m depends on K."""
    shp, mp, ax = E.parse_shape(s), E.parse_map(m), set(E.parse_ints(axes))
    if not ax or any(not 0 <= k < len(shp) for k in ax):
        return None
    index = {f"i{k}" for k in range(len(shp))}
    used = set().union(*(e.variables() for e in mp)) if mp else set()
    if any(re.fullmatch(r"i\d+", v) and v not in index for v in used):
        return None  # a map over another shape
    if any(f"i{k}" in used and shp[k] != 1 for k in ax):
        return None  # depends on K
    kept = [k for k in range(len(shp)) if k not in ax]
    env = {f"i{k}": Expr.const(0) for k in ax}
    env.update({f"i{k}": Expr.var(f"i{j}") for j, k in enumerate(kept)})
    return E.tup(e.subs(env) for e in mp)


@helper("axes-count")
def axes_count(s: str, axes: str) -> "str | None":
    """The number of points of the axes ``axes`` of shape s as a float constant's text ("16.0"), when
    they are static and at most 2**24 (exact in fp32), else None."""
    shp, ax = E.parse_shape(s), E.parse_ints(axes)
    if not ax or len(set(ax)) != len(ax) or any(not 0 <= k < len(shp) or not isinstance(shp[k], int) for k in ax):
        return None
    n = 1
    for k in ax:
        n *= shp[k]
    return E.value(float(n)) if 0 < n <= 2 ** 24 else None


@helper("is-identity")
def is_identity(m: str, mem_shape: str, s: str) -> str:
    """"yes" when the read map is the identity and the read shape is the memory's shape."""
    return "yes" if E.parse_shape(mem_shape) == E.parse_shape(s) and m == E.identity_map(len(E.parse_shape(s))) else "no"


def prelude() -> str:
    """egglog text binding every helper to a global ``$name``."""
    lines = []
    for name in HELPERS:
        lines.append(f'(let ${name} (py-eval "__import__(\'polysat.egraph.ixfns\', fromlist=[\'_\']).HELPERS[\'{name}\']" '
                     f'(py-dict) (py-dict)))')
    return "\n".join(lines)


@helper("compose-perm")
def compose_perm(p: str, q: str) -> "str | None":
    """Permute(Permute(x, p), q) = Permute(x, r) with r[j] = p[q[j]]."""
    pp, qq = E.parse_ints(p), E.parse_ints(q)
    if sorted(pp) != list(range(len(pp))) or sorted(qq) != list(range(len(pp))):
        return None
    return E.tup(pp[j] for j in qq)


@helper("compose-maps")
def compose_maps(m: str, m2: str) -> str:
    """Read(Mat(Read(mem, s, m)), s2, m2) reads mem at m(m2(i))."""
    return E.tup(compose(E.parse_map(m), E.parse_map(m2)))


@helper("identity-map")
def identity_map(shape: str) -> str:
    return E.identity_map(len(E.parse_shape(shape)))


@helper("unit-reduce-shape")
def unit_reduce_shape(in_shape: str, axes: str) -> "str | None":
    """The output shape when every reduced axis has size 1 (the reduce is then a reshape), else None."""
    s, ax = E.parse_shape(in_shape), set(E.parse_ints(axes))
    if any(s[k] != 1 for k in ax):
        return None
    return E.shape(d for k, d in enumerate(s) if k not in ax)


@helper("read-kind")
def read_kind(s: str, m: str) -> str:
    """The fusion class of a read ``Read(Mat(x), s, m)`` (docs/DESIGN.md §Fusion):
    "halo" when every axis of s longer than 1 moves the index (each element of x is read by a
    bounded number of consumer points: one-to-one, or a window: many-to-one by compute-at with halo);
    "prefix" when the axes m uses are a leading prefix of s, each read plainly in order (x is
    computed once per outer iteration: a block owns the reduced extent, as a row max in a softmax);
    "owned" when m reads x plainly at some of s's axes in another order or skipping inner ones (a
    projection: a kernel that tiles the axes m uses and owns the whole extent of the others computes
    x once per tile, as a softmax over a middle axis computes its max; whether the consumer's loop
    order allows that is checked on the chosen partition, search/model.py);
    "broadcast" otherwise (one-to-many: x would be recomputed per use)."""
    shape, mp = E.parse_shape(s), E.parse_map(m)
    used = set()
    for e in mp:
        used |= {v for v in e.variables() if re.fullmatch(r"i\d+", v)}
    live = [k for k, d in enumerate(shape) if d != 1]
    if all(f"i{k}" in used for k in live):
        return "halo"
    plain = [str(e) for e in mp if not e.is_const]
    want = [f"i{k}" for k in live if f"i{k}" in used]
    if plain == want and want == [f"i{k}" for k in live[:len(want)]]:
        return "prefix"
    if _projection(mp, plain):
        return "owned"
    return "broadcast"


def _projection(mp: tuple, plain: list) -> bool:
    """Every non-constant coordinate of the map is a distinct plain axis variable (no offset, no stride)."""
    return len(plain) == len(set(plain)) and all(re.fullmatch(r"i\d+", v) for v in plain) and \
        all(e.is_const for e in mp if str(e) not in plain)


# ---- streaming softmax (rules/streaming.egg) -------------------------------------------------------

def _rank(shape: str) -> int:
    return len(E.parse_shape(shape))


@helper("drop-last")
def drop_last(shape: str) -> "str | None":
    """The shape without its last axis (the shape of a SoftmaxSum over values of this shape)."""
    s = E.parse_shape(shape)
    return E.shape(s[:-1]) if s else None


@helper("row-dims")
def row_dims(s_shape: str) -> "str | None":
    """(0, .., r-2): where a row statistic of an [*x, N] value lands in [*x, N] or in [*x, Dv]."""
    r = _rank(s_shape)
    return E.tup(range(r - 1)) if r >= 1 else None


@helper("row-stat-ok")
def row_stat_ok(ss: str, ax: str, sb: str, dims: str) -> "str | None":
    """"yes" when a reduce over axes ax of a value of shape ss runs along its last axis and its
    broadcast back (BroadcastInDim to shape sb with dims) restores ss along that axis."""
    r = _rank(ss)
    if r < 1 or E.parse_ints(ax) != (r - 1,) or E.parse_shape(sb) != E.parse_shape(ss):
        return None
    return "yes" if E.parse_ints(dims) == tuple(range(r - 1)) else None


@helper("row-axis-ok")
def row_axis_ok(ss: str, ax: str) -> "str | None":
    r = _rank(ss)
    return "yes" if r >= 1 and E.parse_ints(ax) == (r - 1,) else None


@helper("pv-ok")
def pv_ok(ss: str, sl: str, dl: str, sb: str, dims: str, ax: str, sv: str, p: str) -> "str | None":
    """"yes" for the second contraction of attention in the C-CON1 form: P ([*x, N], rounded to the
    16-bit float p, or fp32 P) broadcast into the body [*x, Dv, N] along every axis but Dv, times the values
    term of that shape, summed over N (the body's last axis); the normaliser l ([*x]) of P's row
    broadcast back over N (shape sl, dims dl)."""
    s, body, v = E.parse_shape(ss), E.parse_shape(sb), E.parse_shape(sv)
    r = len(s)
    if p not in ("fp16", "bf16", "fp32") or r < 1 or len(body) != r + 1 or body != v:
        return None
    if body[:r - 1] != s[:-1] or body[-1] != s[-1] or E.parse_shape(sl) != s:
        return None
    if E.parse_ints(dl) != tuple(range(r - 1)) or E.parse_ints(ax) != (r,):
        return None
    return "yes" if E.parse_ints(dims) == tuple(range(r - 1)) + (r,) else None


@helper("pv-out-ok")
def pv_out_ok(ss: str, so: str, dl: str, sb: str, dims: str, ax: str, sv: str, p: str) -> "str | None":
    """pv-ok for the un-normalised form: the normaliser is broadcast over the output [*x, Dv] instead."""
    s, out, v = E.parse_shape(ss), E.parse_shape(so), E.parse_shape(sv)
    if len(v) != len(s) + 1 or out != v[:-1] or E.parse_ints(dl) != tuple(range(len(s) - 1)):
        return None
    return pv_ok(ss, ss, dl, sb, dims, ax, sv, p)


# ---- fusion legality (rules/fusion.egg) ------------------------------------------------------------

OPAQUE = "opaque"  # a reach map no affine composition gives (a PAD on the way): never fusable


@helper("reach-compose")
@functools.lru_cache(maxsize=65536)
def reach_compose(inner: str, m: str) -> str:
    """The map from a read's space to a reduction it reaches: inner (the read value's space -> the
    reduction's) after the read's map m; "opaque" when either is."""
    if OPAQUE in (inner, m):
        return OPAQUE
    return compose_maps(inner, m) or OPAQUE


@helper("fusion-class")
@functools.lru_cache(maxsize=65536)
def fusion_class(s: str, m: str, red: str) -> str:
    """The legality class (docs/DESIGN.md §Fusion) of a reduction read at map m inside a kernel
    iterating space s in the loop order of a Reduce over axes ``red`` of s ("()": no Reduce encloses
    the read, every axis is parallel): "halo" (one-to-one or a window), "prefix" (at a prefix of the
    loop order), "owned" (a projection whose axes are all parallel or include every parallel axis:
    the kernel tiles the axes it uses and owns the whole extent of the others, a softmax on any
    axis), "broadcast" (along an axis no tile owns) or "opaque" (no affine map)."""
    if m == OPAQUE:
        return OPAQUE
    shape, mp, ax = E.parse_shape(s), E.parse_map(m), set(E.parse_ints(red))
    order = [k for k in range(len(shape)) if k not in ax] + sorted(ax)
    pos = {f"i{k}": Expr.var(f"i{j}") for j, k in enumerate(order)}
    kind = read_kind(E.shape(shape[k] for k in order), E.tup(e.subs(pos) for e in mp))
    if kind in ("halo", "prefix"):
        return kind
    used = {int(v[1:]) for e in mp for v in e.variables() if re.fullmatch(r"i\d+", v)}
    par = {k for k in range(len(shape)) if k not in ax and shape[k] != 1}  # a size-1 axis needs no tile
    used = {k for k in used if shape[k] != 1}  # ... nor is it a use: i0 of a size-1 axis is 0
    return "owned" if kind == "owned" and (used <= par or par <= used) else "broadcast"


@helper("use-through")
def use_through(kind: str, in_shape: str, a: str, b: str, m: str) -> str:
    """Where a movement op's operand (of shape in_shape) is read when the op's result is read at m:
    the op's view map after m (a pad's: the shift by its low pads, as legality reads pads); "opaque"
    when it is not affine."""
    if kind == "pad":  # the padded value at i reads the operand at i - lo (the pad's guard aside: a shift)
        return reach_compose(E.tup(Expr.var(f"i{k}") - lo for k, (lo, _) in enumerate(E.parse_pads(a))), m)
    v = view(kind, in_shape, a, b)  # no range check as fold_map's: this places a use, it rewrites nothing
    return reach_compose(E.tup(v[1]), m) if v is not None and v[1] is not None else OPAQUE



_GENERIC = 97  # a symbolic size in range checks: every symbol bound alike (views relate sizes, not symbols)


@helper("in-range")
def in_range(s_in: str, s_out: str, m: str) -> str:
    """"yes" when map m over shape s_out reads inside shape s_in on every axis (symbols bound to one generic
    size), else "". A read that can go out of range exists only under a Select, whose guard is written in that
    read's base axes: composing such a read into a read of another base would leave the guard on the wrong
    axes, so the composing rules (read-view, fuse-materialized-read) require this."""
    from ..ir.infer import expr_bounds

    def size(d) -> int:
        e = Expr.of(d)
        return int(e.evaluate({v: _GENERIC for v in e.variables()}))
    sin, sout, mp = E.parse_shape(s_in), E.parse_shape(s_out), E.parse_map(m)
    box = {f"i{k}": (0, size(d) - 1) for k, d in enumerate(sout)}
    for e, d in zip(mp, sin, strict=True):
        e = Expr.of(e)
        sym = {v for v in e.variables() if v not in box}
        lo, hi = expr_bounds(e.subs({v: _GENERIC for v in sym}) if sym else e, box)
        if lo < 0 or hi >= size(d):
            return None
    return "yes"
