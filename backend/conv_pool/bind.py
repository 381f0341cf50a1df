"""Recognise a region as Conv2D + epilogue + MaxPool2D fused by compute-at: Region -> ConvBinding, or NoBind.

The extracted form (examples/conv_relu_maxpool.json under the model cost): one MAX reduce over the pool
window (i, j), init -inf, whose body is the conv's epilogue expression E (bias, activation...) around
the conv's SUM reduce, optionally under ``select(pool guard, E, -inf)`` (MaxPool2D's padding), then the
yield's cast. X's index along a spatial dim is then ``c_p*ph + c_i*i + DH*r - const``: the conv pixel
the pool reads is ho = PSH*ph + PDH*i - PPT and X's row is SH*ho + DH*r - PT. The split is the one with
the largest conv stride SH (a divisor of gcd(c_p, c_i)) for which some pool padding PPT (PT >= 0) makes
the pool guard exactly ``PPT <= PSH*ph + PDH*i <= PPT + Ho - 1`` on its grid (conv stride 2 + pool
stride 2 reads X with 4*ph + 2*i + r: SH = 2). Any split that reproduces the maps and the guards
computes the same function; the conv's pad guard is then checked to be exactly "inside X" wherever
the pool reads.
A non-decreasing activation after the pool (relu(max v), the form the reduction normal-form rules give
max(relu v)) is the same function as the activation inside it, so it joins the conv's epilogue.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir.dtypes import DType
from ...ir.region import R, Region
from ..common.epilogue import monotone_after
from ..common.region_match import Aliases, Lets, recogniser, walk
from ..conv.bind import (ConvBinding, Contraction, check_channels, check_guard, contractions, epilogue, evaluate,
                         first_match, grid, guard_parts, output_axes, reject, spatial)
from ..conv.spec import ConvSpec
from .spec import ConvPoolSpec

WHAT = "conv + max-pool"


def _decompose(r: Region, c_p: int, c_i: int, const: int, cons: list, a_p: str | None, a_i: str | None,
               sizes: dict, what: str) -> tuple[int, int, int, int, int, int]:
    """(SH, PSH, PDH, PPT, PT, Ho) with SH*PSH = c_p, SH*PDH = c_i, SH*PPT + PT = -const (PT, PPT >= 0) and the
    pool guard on this dim exactly PPT <= PSH*p + PDH*i <= PPT + Ho - 1: the largest conv stride that works."""
    n_out, n_win = (sizes[a_p] if a_p else 1), (sizes[a_i] if a_i else 1)
    if c_p < 0 or c_i < 0 or (c_p == 0 and n_out > 1) or (c_i == 0 and n_win > 1):
        reject(r, f"X's {what} index does not move with the pool's output and window axes", WHAT)
    box = {a: sizes[a] for a in (a_p, a_i) if a}
    env = grid(box)
    shape = next(iter(env.values())).shape if env else ()
    ok = np.ones(shape, bool)
    for c in cons:
        ok &= evaluate(c, env, shape) >= 0
    if not ok.any():
        reject(r, f"the pool guard along {what} admits no window position", WHAT)
    g = math.gcd(c_p, c_i) or 1
    for sh in sorted((d for d in range(1, g + 1) if g % d == 0), reverse=True):
        psh, pdh = (c_p // sh) or 1, (c_i // sh) or 1
        v = np.broadcast_to((psh * env[a_p] if a_p else 0) + (pdh * env[a_i] if a_i else 0), shape)
        for ppt in range(0, max(0, -const) // sh + 1):
            ho = int(v[ok].max()) - ppt + 1
            if ho >= 1 and np.array_equal(ok, (v >= ppt) & (v <= ppt + ho - 1)):
                return sh, psh, pdh, ppt, -const - sh * ppt, ho
    reject(r, f"no conv stride / pool padding split reproduces X's {what} index and the pool guard "
              "(MaxPool2D's -inf padding over a range of conv pixels)", WHAT)


@recogniser
def bind(region: Region, name: str | None = None) -> ConvBinding:
    """The region as a ConvPoolSpec plus its binding, or NoBind saying why it is not one."""
    r = region
    top, y, (a_n, a_co, a_ph, a_pw), (n, co, hp, wp) = output_axes(r, WHAT)
    lets = Lets(r)
    t = lets(top)
    while t.op == R.BROADCAST and all(r.axis_sizes[a] == 1 for a in t.axes if a not in lets(t.src[0]).axes):
        t = lets(t.src[0])
    if t.op == R.UNARY and t.arg == "cast" and t.dtype == DType.fp32:
        t = lets(t.src[0])
    post: list = []  # a non-decreasing f after the pool (relu(max v), the reductions' normal form R3) is max f(v)
    if t.op != R.REDUCE:
        mxs = [x for x in walk(lets, t) if x.op == R.REDUCE and x.arg[0] == "max"]
        found = monotone_after(lets, t, mxs[0]) if len(mxs) == 1 and t.dtype == DType.fp32 else None
        if found is None:
            reject(r, "its result is not a max-reduce (the pool) under a non-decreasing activation", WHAT)
        post, t = found, mxs[0]
    if t.op != R.REDUCE or t.arg[0] != "max":
        reject(r, "its result is not a max-reduce (the pool)", WHAT)
    mx = t
    _, win_axes, init = mx.arg
    if mx.dtype != DType.fp32 or not (isinstance(init, float) and math.isinf(init) and init < 0):
        reject(r, f"its max-reduce starts from {init} in {mx.dtype.value}; MaxPool2D's starts from -inf in fp32", WHAT)
    body = lets(mx.src[0])
    pool_guard = None
    if body.op == R.SELECT:
        p, a, b = (lets(s) for s in body.src)
        if p.op != R.PRED or b.op != R.CONST or not (isinstance(b.arg, float) and math.isinf(b.arg) and b.arg < 0):
            reject(r, "the pool's body is a Select other than 'guard ? value : -inf'", WHAT)
        pool_guard, body = p, a
    sums = [x for x in walk(lets, body) if x.op == R.REDUCE]
    if len(sums) != 1:
        reject(r, f"the pooled value holds {len(sums)} reductions; the conv has exactly one", WHAT)
    acc = sums[0]
    return first_match(contractions(r, lets, acc, a_co, WHAT),
                       lambda ct: _bind(r, lets, body, acc, ct, pool_guard, win_axes, y, (a_n, a_co, a_ph, a_pw),
                                        (n, co, hp, wp), name, post))


def _bind(r: Region, lets: Lets, body, acc, ct: Contraction, pool_guard, win_axes, y, axes, shape,
          name: str | None, post: list) -> ConvBinding:
    a_n, a_co, a_ph, a_pw = axes
    n, co, hp, wp = shape
    groups, cog = check_channels(r, ct, a_n, n, a_co, co, WHAT)
    _, c_total, h, w = ct.x_shape
    _, cg, kh, kw = ct.w_shape
    sizes = r.axis_sizes
    e_h, e_w = ct.x.read.arg[1][2:]
    # the window axes: the max-reduce's axes that X's row / column index moves with
    pi = next((a for a in win_axes if e_h.coeff(a)), None)
    pj = next((a for a in win_axes if e_w.coeff(a)), None)
    for a in win_axes:
        if a not in (pi, pj) and sizes[a] != 1:
            reject(r, f"the pool axis {a} moves neither X's row nor its column", WHAT)
    ah = spatial(r, e_h, (a_ph, pi), ct.rr, WHAT, "row")
    aw = spatial(r, e_w, (a_pw, pj), ct.rs, WHAT, "column")
    pkh, pkw = (sizes[pi] if pi else 1), (sizes[pj] if pj else 1)
    hvars, wvars = {a_ph, pi} - {None}, {a_pw, pj} - {None}
    ph_cons, pw_cons = guard_parts(r, pool_guard, hvars, wvars, WHAT)
    sh, psh, pdh, ppt, pt, ho = _decompose(r, ah.outer.get(a_ph, 0), ah.outer.get(pi, 0) if pi else 0, ah.const,
                                           ph_cons, a_ph, pi, sizes, "row")
    sw, psw, pdw, ppl, pl, wo = _decompose(r, aw.outer.get(a_pw, 0), aw.outer.get(pj, 0) if pj else 0, aw.const,
                                           pw_cons, a_pw, pj, sizes, "column")
    # the conv's pad guard, wherever the pool reads (its own guard true)
    hs, ws = guard_parts(r, ct.x.guard, hvars | {ct.rr} - {None}, wvars | {ct.rs} - {None}, WHAT)

    def care(a_p, a_i, psx, pdx, ppx, extent):
        def f(env):  # the pool reads conv pixel v: inside the conv output
            shape = next(iter(env.values())).shape
            v = np.broadcast_to((psx * env[a_p] if a_p else 0) + (pdx * env[a_i] if a_i else 0), shape) - ppx
            return (v >= 0) & (v < extent)
        return f
    check_guard(r, hs, e_h, h, {a: sizes[a] for a in (a_ph, pi, ct.rr) if a}, WHAT, "H",
                care(a_ph, pi, psh, pdh, ppt, ho))
    check_guard(r, ws, e_w, w, {a: sizes[a] for a in (a_pw, pj, ct.rs) if a}, WHAT, "W",
                care(a_pw, pj, psw, pdw, ppl, wo))
    pb = max(0, (ho - 1) * sh + ah.dil * (kh - 1) + 1 - h - pt)
    pr = max(0, (wo - 1) * sw + aw.dil * (kw - 1) + 1 - w - pl)
    ops = epilogue(r, lets, body, acc, y.cast, a_co, None, WHAT) + tuple(post)
    al = Aliases(r)
    x_name, w_name = al(ct.x.read.arg[0], "x"), al(ct.w.read.arg[0], "w")
    conv = ConvSpec(name or r.name, n, c_total, h, w, co, kh, kw, stride=(sh, sw), pad=(pt, pb, pl, pr),
                    dilation=(ah.dil, aw.dil), groups=groups, in_dtype=ct.x.read.dtype, out_dtype=y.cast,
                    epilogue=al.epilogue(ops), x=x_name, wt=w_name, y=r.outputs[0].name)
    spec = ConvPoolSpec(conv, (ho, wo), (pkh, pkw), (psh, psw), (ppt, ppl), (pdh, pdw), (hp, wp))
    return ConvBinding(spec, tuple(al.pairs))
