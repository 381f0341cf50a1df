"""Recognise an extracted RB-SSA region as an implicit-GEMM conv: Region -> ConvBinding, or NoBind.

The region (what the frontend's Conv2D lowering extracts to) is one SUM reduce over (c, r, s) of
``cast(select(guard, read X[n, g*Cg + c, SH*ho + DH*r - PT, SW*wo + DW*s - PL], 0)) * cast(read W[co, c, r,
s])``, followed by an elementwise epilogue and one yield to the NCHW output [N, Co, Ho, Wo]. Matching is
semantic where the spelling may vary: axis roles come from the yield (n, co, ho, wo) and from W's read
(c, r, s); the channel map ``g*Cg + c`` (g = co // Cog; depthwise and channel multipliers included), the
row/column maps and the pad guard are checked by evaluating them on their whole (small) index grids,
so a guard that tests more or less than "inside X" is rejected rather than trusted. Size-1 axes may be
spelled as the constant 0. The epilogue is peeled from the yield down to the accumulator: bias along
co, an NCHW residual, casts, and any read-free f(x) that is a scale or an activation (common.epilogue's
probe). Anything else is a NoBind saying why.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from typing import NoReturn

from ...ir.dtypes import DType
from ...ir.expr import Expr
from ...ir.region import R, Region, RNode
from ..common.epilogue import HALF, addend_source, peel_epilogue
from ..common.region_match import Aliases, Lets, Mismatch, RegionBinding, axis_var, recogniser, the_yield, walk
from ..common.spec import EpilogueOp
from .spec import ConvSpec


def reject(r: Region, why: str, what: str = "conv") -> NoReturn:
    raise Mismatch(f"not a {what} region: {why}")


def int_shape(r: Region, buf, what: str, kind: str) -> tuple[int, ...]:
    shape = tuple(buf.memref.shape)
    if not all(isinstance(d, int) for d in shape):
        reject(r, f"{what} {buf.name!r} has the symbolic shape {list(map(str, shape))}; the conv template is "
                  "specialised on static shapes", kind)
    if buf.memref.layout.kind != "row_major":
        reject(r, f"{what} {buf.name!r} has layout {buf.memref.layout.kind}; the template reads NCHW tensors", kind)
    return shape


def grid(sizes: Mapping[str, int]) -> dict[str, np.ndarray]:
    """Every point of the box over the named axes, as broadcastable index arrays."""
    names = list(sizes)
    arrs = np.meshgrid(*(np.arange(sizes[a], dtype=np.int64) for a in names), indexing="ij") if names else []
    return dict(zip(names, arrs))


def evaluate(e: Expr, env: Mapping[str, np.ndarray], shape) -> np.ndarray:
    return np.broadcast_to(np.asarray(e.evaluate(env), dtype=np.int64), shape)


# ---- the contraction ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Operand:
    read: RNode
    guard: RNode | None   # the Select's Pred, or None when the read is unguarded


def operand(r: Region, lets: Lets, n: RNode, kind: str) -> Operand:
    """cast(select(P, read, 0)), select(P, cast(read), 0) or cast(read), with the read fp16|bf16."""
    n = lets(n)
    guard = None
    seen_cast = False
    for _ in range(4):
        if n.op == R.UNARY and n.arg == "cast" and not seen_cast:
            seen_cast = True
            n = lets(n.src[0])
        elif n.op == R.SELECT and guard is None:
            p, a, b = (lets(s) for s in n.src)
            if p.op != R.PRED or b.op != R.CONST or b.arg != 0:
                reject(r, "an operand is a Select that is not an affine guard with 0 outside", kind)
            guard, n = p, a
        else:
            break
    if n.op != R.READ:
        reject(r, "the reduce body multiplies something other than two (guarded) reads", kind)
    if n.dtype not in HALF:
        reject(r, f"operand {n.arg[0]!r} is {n.dtype.value}; the MMA template takes fp16 or bf16", kind)
    return Operand(n, guard)


def single_reduce(r: Region, lets: Lets, top: RNode, kind: str, op: str = "sum") -> list[RNode]:
    return [n for n in walk(lets, top) if n.op == R.REDUCE and n.arg[0] == op]


@dataclass(frozen=True)
class Contraction:
    """The conv's contraction: its reads, the reduce axes by role (None: a size-1 axis spelled 0) and sizes."""
    x: Operand
    w: Operand
    rc: str | None
    rr: str | None
    rs: str | None
    x_shape: tuple[int, ...]
    w_shape: tuple[int, ...]


def contractions(r: Region, lets: Lets, acc: RNode, co_ax: str, kind: str) -> list[Contraction]:
    """The ways to read the reduce body as X times W (one, unless both reads look like W[co, c, r, s]:
    then the caller keeps the assignment whose whole conv checks out)."""
    op, axes, init = acc.arg
    if op != "sum" or init != 0 or acc.dtype != DType.fp32:
        reject(r, f"its reduction is {op} (init {init}); a conv sums from 0 in fp32", kind)
    body = lets(acc.src[0])
    if not (body.op == R.BINARY and body.arg == "mul"):
        reject(r, "the reduce body is not a product", kind)
    ops = [operand(r, lets, s, kind) for s in body.src]
    if ops[0].read.dtype != ops[1].read.dtype:
        reject(r, f"the operands are {ops[0].read.dtype.value} and {ops[1].read.dtype.value}", kind)
    sizes = r.axis_sizes
    bufs = {b.name: b for b in r.inputs}
    for o in ops:
        if o.read.arg[0] not in bufs:
            reject(r, f"it reads {o.read.arg[0]!r}, which is not one of its inputs", kind)

    def is_w(o: Operand) -> bool:
        index = o.read.arg[1]
        e0 = index[0] if len(index) == 4 else None
        return o.guard is None and e0 is not None and (
            axis_var(e0) == co_ax or (e0.is_const and e0.constant == 0 and sizes[co_ax] == 1))
    ws = [k for k, o in enumerate(ops) if is_w(o)]
    if not ws:
        reject(r, f"no operand reads the weights as W[{co_ax}, c, r, s]", kind)

    def candidate(k: int) -> Contraction:
        w, x = ops[k], ops[1 - k]
        w_shape = int_shape(r, bufs[w.read.arg[0]], "the weight", kind)
        x_shape = int_shape(r, bufs[x.read.arg[0]], "the input", kind)
        if len(x_shape) != 4 or len(x.read.arg[1]) != 4:
            reject(r, f"the input {x.read.arg[0]!r} is not a 4-D NCHW tensor", kind)
        roles: list[str | None] = []
        for j, e in enumerate(w.read.arg[1][1:], start=1):
            v = axis_var(e)
            if v is None:
                if not (e.is_const and e.constant == 0 and w_shape[j] == 1):
                    reject(r, f"W's index {j} is {e}; a conv reads W[co, c, r, s] with reduce axes", kind)
                roles.append(None)
                continue
            if v not in axes or v in roles:
                reject(r, f"W's index {j} ({v}) is not a distinct axis of the reduction", kind)
            if sizes[v] != w_shape[j]:
                reject(r, f"the reduce axis {v} has size {sizes[v]}, W's dim {j} has {w_shape[j]}", kind)
            roles.append(v)
        for a in axes:
            if a not in roles and sizes[a] != 1:
                reject(r, f"the reduce axis {a} (size {sizes[a]}) does not index W", kind)
        return Contraction(x, w, *roles, x_shape=x_shape, w_shape=w_shape)

    out, first = [], None
    for k in reversed(ws):
        try:
            out.append(candidate(k))
        except Mismatch as e:
            first = first or e
    if not out:
        raise first
    return out


def first_match(cands: list, match):
    """match(c) for the first candidate that matches; the first candidate's rejection when none does."""
    first = None
    for c in cands:
        try:
            return match(c)
        except Mismatch as e:
            first = first or e
    raise first


def check_channels(r: Region, ct: Contraction, n_ax: str | None, n: int, co_ax: str, co: int, kind: str) -> tuple[int, int]:
    """X's batch and channel maps: X[n, g*Cg + c, ...] with g = co // Cog. Returns (groups, Cog)."""
    e_n, e_c = ct.x.read.arg[1][:2]
    if not ((n_ax is not None and e_n == Expr.of(n_ax)) or (n == 1 and e_n.is_const and e_n.constant == 0)):
        reject(r, f"X's batch index is {e_n}, not the output's batch axis", kind)
    c_total, cg = ct.x_shape[1], ct.w_shape[1]
    if c_total % cg or co % (c_total // cg):
        reject(r, f"X has {c_total} channels and W {cg} per group: no grouping of {co} output channels fits", kind)
    groups = c_total // cg
    cog = co // groups
    allowed = {co_ax} | ({ct.rc} if ct.rc else set())
    if not e_c.variables() <= allowed:
        reject(r, f"X's channel index {e_c} uses axes other than {sorted(allowed)}", kind)
    sizes = {co_ax: co, **({ct.rc: cg} if ct.rc else {})}
    env = grid(sizes)
    shape = env[co_ax].shape
    want = (env[ct.rc] if ct.rc else 0) + cg * (env[co_ax] // cog)
    if not np.array_equal(evaluate(e_c, env, shape), np.broadcast_to(want, shape)):
        reject(r, f"X's channel index {e_c} is not g*{cg} + c with g = co // {cog} (groups = {groups})", kind)
    return groups, cog


@dataclass(frozen=True)
class Axis:
    """X's index along one spatial dim: sum of coeff*var over the outer (output-side) vars + dil*tap + const."""
    outer: dict            # outer var -> coefficient
    dil: int               # coefficient of the tap axis (1 when the window is 1 wide)
    const: int


def spatial(r: Region, e: Expr, outer: tuple, tap: str | None, kind: str, what: str) -> Axis:
    allowed = {v for v in outer if v} | ({tap} if tap else set())
    if not e.variables() <= allowed or any(not isinstance(a, str) for m, _ in e.terms for a in m):
        reject(r, f"X's {what} index {e} is not an affine map of {sorted(allowed)}", kind)
    coeffs = {v: e.coeff(v) for v in outer if v}
    dil = e.coeff(tap) if tap else 1
    rebuilt = Expr.const(e.constant) + sum((Expr.var(v) * c for v, c in coeffs.items() if c), Expr.const(0))
    if tap:
        rebuilt = rebuilt + Expr.var(tap) * dil
    if rebuilt != e or any(c < 0 for c in coeffs.values()) or dil < 1:
        reject(r, f"X's {what} index {e} is not stride*out + dilation*tap - pad with positive steps", kind)
    return Axis(coeffs, dil, e.constant)


def guard_parts(r: Region, guard: RNode | None, h_vars: set, w_vars: set, kind: str) -> tuple[list, list]:
    """The guard's constraints split by spatial dim (each must involve one dim's axes only)."""
    hs, ws = [], []
    for g in (guard.arg if guard is not None else ()):
        vs = g.variables()
        if vs <= h_vars:
            hs.append(g)
        elif vs <= w_vars:
            ws.append(g)
        else:
            reject(r, f"the guard {g} >= 0 mixes the spatial dims (or tests other axes)", kind)
    return hs, ws


def check_guard(r: Region, cons: list, e: Expr, extent: int, sizes: Mapping[str, int], kind: str, what: str,
                care=None) -> None:
    """The guard's constraints on one dim equal 0 <= e < extent on every point of the grid (where care says)."""
    env = grid(sizes)
    shape = next(iter(env.values())).shape if env else ()
    pos = evaluate(e, env, shape)
    inside = (pos >= 0) & (pos < extent)
    ok = np.ones(shape, bool)
    for c in cons:
        ok &= evaluate(c, env, shape) >= 0
    mask = np.ones(shape, bool) if care is None else np.broadcast_to(care(env), shape)
    if not np.array_equal(ok[mask], inside[mask]):
        reject(r, f"the pad guard along {what} is not exactly '0 <= {e} < {extent}' (reads outside X are zero)", kind)


# ---- the epilogue ---------------------------------------------------------------------------------

def _strip_broadcast(r: Region, lets: Lets, n: RNode, kind: str) -> RNode:
    while n.op == R.BROADCAST:
        src = lets(n.src[0])
        added = [a for a in n.axes if a not in src.axes]
        if any(r.axis_sizes[a] != 1 for a in added):
            return n
        n = src
    return n


def _addend(r: Region, lets: Lets, n: RNode, co_ax: str, out_map: tuple, kind: str) -> EpilogueOp:
    n = addend_source(lets, n)
    if n.op != R.READ or n.dtype not in (*HALF, DType.fp32):
        reject(r, "the epilogue adds a term that is not a bias along the channels or an NCHW residual", kind)
    tensor, index = n.arg
    buf = next((b for b in r.inputs if b.name == tensor), None)
    if buf is None:
        reject(r, f"the epilogue reads {tensor!r}, which is not one of its inputs", kind)
    shape = int_shape(r, buf, "epilogue tensor", kind)
    sizes = r.axis_sizes
    if len(index) == 1 and shape == (sizes[co_ax],) and (
            index[0] == Expr.of(co_ax) or (index[0].is_const and index[0].constant == 0 and sizes[co_ax] == 1)):
        return EpilogueOp("bias", tensor, "n", n.dtype)
    if len(index) == len(out_map) and all(e == Expr.of(a) or (e.is_const and e.constant == 0 and sizes[a] == 1)
                                          for e, a in zip(index, out_map)) \
            and shape == tuple(sizes[a] for a in out_map):
        return EpilogueOp("residual", tensor, dtype=n.dtype)
    reject(r, f"the epilogue adds {tensor}[{', '.join(map(str, index))}], neither a bias along {co_ax} nor "
              "an NCHW residual of the output's shape", kind)


def epilogue(r: Region, lets: Lets, top: RNode, acc: RNode, out_dtype: DType, co_ax: str, out_map: tuple | None,
             kind: str) -> tuple[EpilogueOp, ...]:
    """The ops from the accumulator up to top (first applied first); out_map None: no residual allowed."""

    def addend(n: RNode) -> EpilogueOp:
        op = _addend(r, lets, n, co_ax, out_map or (), kind)
        if op.kind == "residual" and out_map is None:
            reject(r, "a residual over the conv output needs it materialized", kind)
        return op
    return peel_epilogue(lets, top, acc, out_dtype, addend, lambda why: reject(r, why, kind),
                         strip=lambda t: _strip_broadcast(r, lets, t, kind))


@dataclass(frozen=True)
class ConvBinding(RegionBinding):
    """A region's conv (or conv + pool) spec and, for each tensor the kernel reads, the region tensor behind it
    (tensors in two roles, conv(x) + x, under :class:`Aliases`)."""


# ---- the region -----------------------------------------------------------------------------------

def output_axes(r: Region, kind: str) -> tuple[RNode, Any, tuple, tuple[int, ...]]:
    """(top expression, yield, its 4 axes, the output's static shape)."""
    y, out, top = the_yield(r, Lets(r), lambda why: reject(r, why, kind))
    if len(y.axes) != 4:
        reject(r, f"its output has {len(y.axes)} axes; the template writes NCHW", kind)
    shape = int_shape(r, out, "the output", kind)
    if shape != tuple(r.axis_sizes[a] for a in y.axes):
        reject(r, f"its output {out.name!r} is not the packed [{', '.join(y.axes)}] tensor", kind)
    if y.cast not in (DType.fp16, DType.bf16, DType.fp32):
        reject(r, f"it writes {y.cast.value}; the template writes fp16, bf16 or fp32", kind)
    return top, y, tuple(y.axes), shape


@recogniser
def bind(region: Region, name: str | None = None) -> ConvBinding:
    """The region as a ConvSpec plus its tensor binding, or NoBind saying why it is not a conv."""
    r, kind = region, "conv"
    top, y, (a_n, a_co, a_ho, a_wo), (n, co, ho, wo) = output_axes(r, kind)
    lets = Lets(r)
    reds = [x for x in walk(lets, top) if x.op == R.REDUCE]
    if len(reds) != 1:
        reject(r, f"it has {len(reds)} reductions; a conv has exactly one", kind)
    acc = reds[0]
    return first_match(contractions(r, lets, acc, a_co, kind),
                       lambda ct: _conv_binding(r, lets, top, acc, ct, y, (a_n, a_co, a_ho, a_wo), (n, co, ho, wo), name))


def _conv_binding(r: Region, lets: Lets, top: RNode, acc: RNode, ct: Contraction, y, axes, shape,
                  name: str | None) -> ConvBinding:
    kind = "conv"
    a_n, a_co, a_ho, a_wo = axes
    n, co, ho, wo = shape
    groups, cog = check_channels(r, ct, a_n, n, a_co, co, kind)
    _, c_total, h, w = ct.x_shape
    _, cg, kh, kw = ct.w_shape
    e_h, e_w = ct.x.read.arg[1][2:]
    ah = spatial(r, e_h, (a_ho,), ct.rr, kind, "row")
    aw = spatial(r, e_w, (a_wo,), ct.rs, kind, "column")
    sizes = r.axis_sizes
    stride = []
    for ax, out_size, a in ((a_ho, ho, ah), (a_wo, wo, aw)):
        s = a.outer.get(ax, 0)
        if s == 0 and out_size > 1:
            reject(r, f"X's index does not move with the output axis {ax}", kind)
        stride.append(s or 1)
    pt, pl = -ah.const, -aw.const
    if pt < 0 or pl < 0:
        reject(r, f"the window starts {max(-pt, -pl)} pixels inside X (a negative pad)", kind)
    hs, ws = guard_parts(r, ct.x.guard, {a_ho, ct.rr} - {None}, {a_wo, ct.rs} - {None}, kind)
    check_guard(r, hs, e_h, h, {a: sizes[a] for a in (a_ho, ct.rr) if a}, kind, "H")
    check_guard(r, ws, e_w, w, {a: sizes[a] for a in (a_wo, ct.rs) if a}, kind, "W")
    pb = max(0, (ho - 1) * stride[0] + ah.dil * (kh - 1) + 1 - h - pt)
    pr = max(0, (wo - 1) * stride[1] + aw.dil * (kw - 1) + 1 - w - pl)
    ops = epilogue(r, lets, top, acc, y.cast, a_co, (a_n, a_co, a_ho, a_wo), kind)
    al = Aliases(r)
    x_name, w_name = al(ct.x.read.arg[0], "x"), al(ct.w.read.arg[0], "w")
    spec = ConvSpec(name or r.name, n, c_total, h, w, co, kh, kw, stride=tuple(stride), pad=(pt, pb, pl, pr),
                    dilation=(ah.dil, aw.dil), groups=groups, in_dtype=ct.x.read.dtype, out_dtype=y.cast,
                    epilogue=al.epilogue(ops), x=x_name, wt=w_name, y=r.outputs[0].name)
    if spec.out_hw != (ho, wo):
        reject(r, f"the output is {ho}x{wo}, the conv of its window gives {spec.out_hw[0]}x{spec.out_hw[1]}", kind)
    assert math.prod(spec.shapes()[spec.c]) == n * co * ho * wo
    return ConvBinding(spec, tuple(al.pairs))
