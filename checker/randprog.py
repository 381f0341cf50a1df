"""Random Tiny IR programs for the rule soundness checker and the property tests.

``random_program`` grows a random DAG of movement, elementwise, reduce and cast nodes over a few
small inputs; ``motif_programs`` adds the shapes the rule families are written for (contractions as
the frontend lowers them, pads feeding windows, reduces of reduces, broadcast epilogues), with
random sizes. Everything is drawn from a seeded numpy generator, so a failure is reproducible from
its seed. Values stay small (inputs in [-1, 1], no logs or reciprocals of arbitrary values).
"""
from __future__ import annotations

import numpy as np

from ..ir.builder import Builder
from ..ir.dtypes import DType
from ..ir.tiny import Ops, Program, UOp

AT = "random program"


def _shape(rng: np.random.Generator, rank: int) -> tuple:
    return tuple(int(rng.integers(1, 5)) for _ in range(rank))


def random_program(rng: np.random.Generator, size: int = 8) -> Program:
    b = Builder("r")
    pool: list = []
    for k in range(int(rng.integers(1, 4))):
        dt = DType.fp32 if rng.random() < 0.8 else DType.fp16
        pool.append(b.input(f"x{k}", dt, _shape(rng, int(rng.integers(1, 4))), at=AT, nid=f"x{k}"))
    for _ in range(size):
        x = pool[int(rng.integers(len(pool)))]
        try:
            y = _step(b, rng, x, pool)
        except Exception:  # noqa: BLE001 — a draw that does not type-checks is simply redrawn
            continue
        if y is not None:
            pool.append(y)
    outs = [pool[-1]] if len(pool) < 3 or rng.random() < 0.6 else [pool[-1], pool[-2]]
    return b.program([(f"y{k}", o) for k, o in enumerate(outs)])


def _same_shape(pool: list, x: UOp) -> list:
    return [p for p in pool if p.shape == x.shape and p.dtype == x.dtype]


def _step(b: Builder, rng: np.random.Generator, x: UOp, pool: list) -> "UOp | None":
    r = rng.random()
    if r < 0.12:
        op = [Ops.NEG, Ops.RELU, Ops.EXP2][int(rng.integers(3))]
        if op == Ops.EXP2:
            x = b.alu(Ops.MUL, x, b.const_like(0.5, x, at=AT), at=AT)
        return b.add(op, [x], at=AT)
    if r < 0.30:
        op = [Ops.ADD, Ops.SUB, Ops.MUL, Ops.MAX][int(rng.integers(4))]
        choice = rng.random()
        if choice < 0.35:
            other = b.const_like(float(rng.choice([0.0, 1.0, 0.5, 2.0])), x, at=AT)
        elif choice < 0.7 and x.ndim > 1:
            small = [p for p in pool if p.dtype == x.dtype and p.ndim < x.ndim and p.shape == x.shape[x.ndim - p.ndim:]]
            other = small[int(rng.integers(len(small)))] if small else x
        else:
            same = _same_shape(pool, x)
            other = same[int(rng.integers(len(same)))]
        a, c = (x, other) if rng.random() < 0.5 else (other, x)
        return b.alu(op, a, c, at=AT)
    if r < 0.40 and x.ndim >= 1:
        perm = list(rng.permutation(x.ndim))
        return b.permute(x, perm, at=AT)
    if r < 0.48:
        k = int(rng.integers(x.ndim + 1))
        y = b.reshape(x, x.shape[:k] + (1,) + x.shape[k:], at=AT)
        return b.expand(y, y.shape[:k] + (int(rng.integers(2, 4)),) + y.shape[k + 1:], at=AT)
    if r < 0.54 and x.ndim >= 1:
        pads = [(int(rng.integers(0, 2)), int(rng.integers(0, 2))) for _ in x.shape]
        return b.pad(x, pads, 0.0 if rng.random() < 0.7 else float("-inf"), at=AT)
    if r < 0.59 and x.ndim >= 1 and any(d > 1 for d in x.shape):
        lo = [int(rng.integers(0, d)) for d in x.shape]
        hi = [int(rng.integers(l + 1, d + 1)) for l, d in zip(lo, x.shape)]
        return b.shrink(x, lo, hi, [int(rng.integers(1, 3)) for _ in x.shape], at=AT)
    if r < 0.63 and x.ndim >= 1:
        return b.flip(x, [int(rng.integers(x.ndim))], at=AT)
    if r < 0.66 and x.ndim >= 1:
        return b.reshape(x, (int(np.prod(x.shape)),), at=AT)
    if r < 0.69 and x.ndim >= 1:  # a window-like view: every other element of the last axis
        d = x.shape[-1]
        return b.view(x, x.shape[:-1] + ((d + 1) // 2,), tuple(f"i{k}" for k in range(x.ndim - 1)) + (f"2*i{x.ndim - 1}",), at=AT)
    if r < 0.82 and x.ndim >= 1:
        axes = sorted({int(a) for a in rng.integers(0, x.ndim, int(rng.integers(1, x.ndim + 1)))})
        op = ["SUM", "MAX", "MIN"][int(rng.integers(3))]
        return b.reduce(x, op, axes, DType.fp32, at=AT)
    if r < 0.88:
        return b.cast(x, DType.fp16 if x.dtype == DType.fp32 else DType.fp32, at=AT)
    if r < 0.94:
        same = _same_shape(pool, x)
        y = same[int(rng.integers(len(same)))]
        return b.add(Ops.WHERE, [b.add(Ops.CMPLT, [x, y], at=AT), x, y], at=AT)
    if x.dtype == DType.fp32:
        return b.alu(Ops.FDIV, x, b.add(Ops.EXP2, [x], at=AT), at=AT)
    return None


# ---- motifs --------------------------------------------------------------------------------------

def _gemm(b: Builder, a: UOp, w: UOp) -> UOp:
    """tinygrad dot as the frontend lowers it: [M,K]x[K,N] -> reshape, permute, expand, MUL, REDUCE."""
    m, k = a.shape
    n = w.shape[1]
    x = b.expand(b.reshape(a, (m, 1, k), at=AT), (m, n, k), at=AT)
    y = b.expand(b.permute(b.reshape(w, (1, k, n), at=AT), (0, 2, 1), at=AT), (m, n, k), at=AT)
    return b.reduce(b.alu(Ops.MUL, x, y, at=AT), "SUM", (2,), DType.fp32, at=AT)


def motif_programs(rng: np.random.Generator) -> list:
    out = []
    m, k, n = (int(v) for v in rng.integers(1, 5, 3))
    dt = DType.fp32 if rng.random() < 0.7 else DType.fp16

    b = Builder("g")  # GEMM + bias + relu, with upcasts as the frontend writes them
    a = b.cast(b.input("A", dt, (m, k), at=AT), DType.fp32, at=AT)
    w = b.cast(b.input("B", dt, (k, n), at=AT), DType.fp32, at=AT)
    bias = b.cast(b.input("bias", dt, (n,), at=AT), DType.fp32, at=AT)
    y = b.add(Ops.RELU, [b.alu(Ops.ADD, _gemm(b, a, w), bias, at=AT)], at=AT)
    out.append(b.program([("y", b.cast(y, dt, at=AT))]))

    b = Builder("c")  # pad + sliding window + reduce (conv / pool shape)
    h = int(rng.integers(3, 6))
    x = b.input("X", DType.fp32, (2, h, h), at=AT)
    xp = b.pad(b.cast(x, DType.fp32, at=AT), ((0, 0), (1, 1), (1, 1)), 0.0, at=AT)
    win = b.view(xp, (2, h, h, 3, 3), ("i0", "i1 + i3", "i2 + i4"), at=AT)
    wt = b.input("Wt", DType.fp32, (3, 3), at=AT)
    prod = b.alu(Ops.MUL, win, wt, at=AT)
    conv = b.reduce(prod, "SUM", (3, 4), DType.fp32, at=AT)
    pooled = b.reduce(b.view(b.pad(conv, ((0, 0), (0, 1), (0, 1)), float("-inf"), at=AT),
                             (2, (h + 1) // 2, (h + 1) // 2, 2, 2), ("i0", "2*i1 + i3", "2*i2 + i4"), at=AT),
                      "MAX", (3, 4), DType.fp32, at=AT)
    out.append(b.program([("pool", pooled), ("conv", conv)]))

    b = Builder("s")  # softmax rows: max, exp2, sum, divide; then reduce of reduce and hoisting
    s = b.input("S", DType.fp32, (m + 1, n + 1), at=AT)
    mx = b.reduce(s, "MAX", (1,), DType.fp32, at=AT)
    e = b.add(Ops.EXP2, [b.alu(Ops.MUL, b.alu(Ops.SUB, s, b.reshape(mx, (m + 1, 1), at=AT), at=AT),
                                b.const(1.4426950408889634, DType.fp32, (m + 1, n + 1), at=AT), at=AT)], at=AT)
    z = b.reduce(e, "SUM", (1,), DType.fp32, at=AT)
    p = b.alu(Ops.FDIV, e, b.reshape(z, (m + 1, 1), at=AT), at=AT)
    out.append(b.program([("p", p)]))

    b = Builder("r")  # nested same-op reduces, invariant factors, distribution, epilogues
    x = b.input("X", DType.fp32, (2, m + 1, n + 1), at=AT)
    c = b.input("c", DType.fp32, (n + 1,), at=AT)
    r0 = b.reduce(b.reduce(x, "SUM", (2,), DType.fp32, at=AT), "SUM", (0,), DType.fp32, at=AT)
    r1 = b.reduce(b.reduce(x, "MAX", (1,), DType.fp32, at=AT), "MAX", (1,), DType.fp32, at=AT)
    r2 = b.reduce(b.reduce(x, "MIN", (0,), DType.fp32, at=AT), "MIN", (0,), DType.fp32, at=AT)
    h1 = b.reduce(b.alu(Ops.MUL, x, c, at=AT), "SUM", (1,), DType.fp32, at=AT)
    h2 = b.reduce(b.alu(Ops.ADD, x, c, at=AT), "MAX", (1,), DType.fp32, at=AT)
    d = b.reduce(b.alu(Ops.ADD, x, b.add(Ops.NEG, [x], at=AT), at=AT), "SUM", (0, 2), DType.fp32, at=AT)
    ep = b.reduce(b.add(Ops.EXP2, [x], at=AT), "MAX", (2,), DType.fp32, at=AT)
    rl = b.reduce(b.add(Ops.RELU, [x], at=AT), "MAX", (0,), DType.fp32, at=AT)
    ng = b.reduce(b.add(Ops.NEG, [x], at=AT), "SUM", (1,), DType.fp32, at=AT)
    mr = b.reduce(b.reduce(x, "SUM", (2,), DType.fp32, at=AT), "MAX", (1,), DType.fp32, at=AT)
    out.append(b.program([("r0", r0), ("r1", r1), ("r2", r2), ("h1", h1), ("h2", h2), ("d", d), ("ep", ep),
                          ("rl", rl), ("ng", ng), ("mr", mr)]))

    b = Builder("a")  # algebra: identities, casts, where, double negation, flips and shrinks of reads
    x = b.input("X", DType.fp16, (m + 1, n + 1), at=AT)
    xf = b.cast(x, DType.fp32, at=AT)
    one = b.alu(Ops.MUL, xf, b.const_like(1.0, xf, at=AT), at=AT)
    zero = b.alu(Ops.ADD, one, b.const_like(0.0, xf, at=AT), at=AT)
    nn = b.add(Ops.NEG, [b.add(Ops.NEG, [zero], at=AT)], at=AT)
    rt = b.cast(b.cast(x, DType.fp32, at=AT), DType.fp16, at=AT)
    wh = b.add(Ops.WHERE, [b.add(Ops.CMPLT, [xf, nn], at=AT), nn, nn], at=AT)
    dv = b.alu(Ops.FDIV, wh, b.add(Ops.EXP2, [xf], at=AT), at=AT)
    fl = b.flip(b.shrink(b.permute(x, (1, 0), at=AT), (0, 0), (n + 1, m + 1), (1, 2), at=AT), (0,), at=AT)
    out.append(b.program([("dv", dv), ("rt", rt), ("fl", fl)]))

    b = Builder("m")  # movement chains: over pads (guarded reads), constants, and each other
    x = b.input("X", DType.fp32, (m, n + 1), at=AT)
    xh = b.cast(b.input("H", DType.fp16, (m, n + 1), at=AT), DType.fp32, at=AT)
    pd = b.pad(x, ((1, 0), (0, 1)), 0.0, at=AT)
    pp = b.add(Ops.PAD, [pd], {"pad": ((0, 1), (1, 0)), "value": 0.0}, at=AT)
    pv = b.view(pd, (m, n + 1), ("i0 + 1", "i1"), at=AT)
    pr = b.add(Ops.RESHAPE, [pd], {"result_shape": (1, m + 1, n + 2)}, at=AT)
    pt = b.add(Ops.PERMUTE, [pd], {"perm": (1, 0)}, at=AT)
    pe = b.add(Ops.EXPAND, [b.add(Ops.RESHAPE, [pd], {"result_shape": (m + 1, 1, n + 2)}, at=AT)],
               {"result_shape": (m + 1, 3, n + 2)}, at=AT)
    ph = b.add(Ops.PAD, [xh], {"pad": ((0, 1), (1, 1)), "value": 0.0}, at=AT)
    pn = b.add(Ops.PAD, [xh], {"pad": ((1, 0), (0, 0)), "value": float("-inf")}, at=AT)
    vh = b.add(Ops.VIEW, [xh], {"result_shape": (m,), "index_map": ("i0", "0")}, at=AT)
    ex = b.add(Ops.EXPAND, [b.add(Ops.RESHAPE, [b.add(Ops.EXP2, [x], at=AT)], {"result_shape": (m, 1, n + 1)}, at=AT)],
               {"result_shape": (m, 2, n + 1)}, at=AT)
    rs = b.add(Ops.RESHAPE, [b.add(Ops.NEG, [x], at=AT)], {"result_shape": (1, m, n + 1)}, at=AT)
    c0 = b.const(0.5, DType.fp32, (m, 1), at=AT)
    ce = b.add(Ops.EXPAND, [c0], {"result_shape": (m, 4)}, at=AT)
    cr = b.add(Ops.RESHAPE, [c0], {"result_shape": (1, m)}, at=AT)
    rn = b.add(Ops.RESHAPE, [x], {"result_shape": (m, n + 1)}, at=AT)
    r2 = b.add(Ops.RESHAPE, [b.add(Ops.RESHAPE, [x], {"result_shape": (m * (n + 1),)}, at=AT)], {"result_shape": (n + 1, m)}, at=AT)
    e1 = b.add(Ops.EXPAND, [b.add(Ops.RESHAPE, [x], {"result_shape": (1, m, n + 1)}, at=AT)], {"result_shape": (2, m, n + 1)}, at=AT)
    e2 = b.add(Ops.EXPAND, [e1], {"result_shape": (2, m, n + 1)}, at=AT)
    bb = b.expand(b.reshape(b.alu(Ops.ADD, x, xh, at=AT), (1, m, n + 1), at=AT), (2, m, n + 1), at=AT)
    p2 = b.add(Ops.PERMUTE, [b.add(Ops.PERMUTE, [e1], {"perm": (1, 2, 0)}, at=AT)], {"perm": (2, 0, 1)}, at=AT)
    out.append(b.program([(f"o{k}", v) for k, v in enumerate(
        (pp, pv, pr, pt, pe, ph, pn, vh, ex, rs, ce, cr, rn, r2, e2, p2, bb))]))

    b = Builder("l")  # two layers: the second contraction reads the first through a kernel boundary
    x = b.input("X", DType.fp32, (m, k), at=AT)
    w1 = b.input("W1", DType.fp32, (k, n), at=AT)
    w2 = b.input("W2", DType.fp32, (n, 2), at=AT)
    h1 = b.add(Ops.RELU, [_gemm(b, x, w1)], at=AT)
    p16 = b.cast(b.cast(b.add(Ops.EXP2, [_gemm(b, x, w1)], at=AT), DType.fp16, at=AT), DType.fp32, at=AT)
    u = b.input("U", DType.fp32, (m, 1), at=AT)
    mu = b.reshape(b.reduce(u, "MAX", (1,), DType.fp32, at=AT), (m, 1), at=AT)
    out.append(b.program([("y1", _gemm(b, h1, w2)), ("y2", _gemm(b, p16, w2)), ("y3", _gemm(b, mu, b.input("V", DType.fp32, (1, 3), at=AT)))]))

    out.append(_attention(rng, m, n, k))
    return out


def _attention(rng: np.random.Generator, m: int, n: int, dv: int, p: "DType | None" = None,
               rows: bool = False) -> Program:
    """softmax(mask(scale·S)) V as the frontend lowers attention (rules/streaming.egg): row max, exp2,
    sum, divide, P cast to V's 16-bit type (or, a model computed in fp32, P and V fp32 with no cast), batched
    dot with fp32 accumulation; some rows fully masked. rows: P^T V instead (the dot sums over P's rows,
    along which the normaliser varies: the streaming rules' shape guards must refuse it)."""
    b = Builder("t")
    p = p or (DType.fp16 if rng.random() < 0.6 else DType.bf16)
    wide = p == DType.fp32
    s = b.alu(Ops.MUL, b.input("S", DType.fp32, (2, m + 1, n + 1), at=AT), b.const(0.5, DType.fp32, (2, m + 1, n + 1), at=AT), at=AT)
    keep = b.alu(Ops.CMPLT, b.input("R", DType.fp32, (m + 1, n + 1), at=AT), b.const(0.6, DType.fp32, (m + 1, n + 1), at=AT), at=AT)
    keep = b.expand(b.reshape(keep, (1, m + 1, n + 1), at=AT), (2, m + 1, n + 1), at=AT)
    s = b.add(Ops.WHERE, [keep, s, b.const(float("-inf"), DType.fp32, (2, m + 1, n + 1), at=AT)], at=AT)
    mx = b.reshape(b.reduce(s, "MAX", (2,), DType.fp32, at=AT), (2, m + 1, 1), at=AT)
    e = b.add(Ops.EXP2, [b.alu(Ops.MUL, b.alu(Ops.SUB, s, mx, at=AT),
                                b.const(1.4426950408889634, DType.fp32, (2, m + 1, n + 1), at=AT), at=AT)], at=AT)
    z = b.reshape(b.reduce(e, "SUM", (2,), DType.fp32, at=AT), (2, m + 1, 1), at=AT)
    q = b.alu(Ops.FDIV, e, z, at=AT)
    v = b.input("V", p, (2, m + 1 if rows else n + 1, dv), at=AT)
    v = v if wide else b.cast(v, DType.fp32, at=AT)
    pq = q if wide else b.cast(b.cast(q, p, at=AT), DType.fp32, at=AT)
    if rows:  # o[b, j, d] = sum_i P[b, i, j] V[b, i, d]
        x = b.expand(b.reshape(pq, (2, m + 1, n + 1, 1), at=AT), (2, m + 1, n + 1, dv), at=AT)
        w = b.expand(b.reshape(v, (2, m + 1, 1, dv), at=AT), (2, m + 1, n + 1, dv), at=AT)
        o = b.reduce(b.alu(Ops.MUL, x, w, at=AT), "SUM", (1,), DType.fp32, at=AT)
        return b.program([("o", o if wide else b.cast(o, p, at=AT))])
    x = b.reshape(pq, (2, m + 1, 1, n + 1), at=AT)
    w = b.permute(b.reshape(v, (2, 1, n + 1, dv), at=AT), (0, 1, 3, 2), at=AT)
    o = b.reduce(b.alu(Ops.MUL, x, w, at=AT), "SUM", (3,), DType.fp32, at=AT)
    return b.program([("o", o if wide else b.cast(o, p, at=AT))])


def attention_programs(rng: np.random.Generator, count: int, p: "DType | None" = None, rows: bool = False) -> list:
    """count attention programs of random small sizes (the streaming rules' shapes); P fp16 or bf16 at
    random, or the dtype p (fp32: a model computed in fp32); rows: P^T V."""
    return [_attention(rng, *(int(v) for v in rng.integers(1, 5, 3)), p=p, rows=rows) for _ in range(count)]


def sibling_programs(rng: np.random.Generator) -> list:
    """GEMMs that read one operand (rules/siblings.egg): fp16 in, fp32 accumulate, fp16 out, as the
    frontend writes them: a Q/K/V-like group of three, a pair of different widths, and twice a pair and
    a group of three over two different inputs in one program."""
    m, k, n = (int(v) for v in rng.integers(2, 5, 3))  # no unit axis: a unit K or N is a reshape, not a contraction
    dt = DType.fp16

    def group(b: Builder, x: UOp, names: str, widths: list) -> list:
        xf = b.cast(x, DType.fp32, at=AT)
        return [(f"y{nm}", b.cast(_gemm(b, xf, b.cast(b.input(f"W{nm}", dt, (k, w), at=AT), DType.fp32, at=AT)), dt, at=AT))
                for nm, w in zip(names, widths)]
    out = []
    b = Builder("q")
    out.append(b.program(group(b, b.input("X", dt, (m, k), at=AT), "qkv", [n, n, n])))
    b = Builder("p")
    out.append(b.program(group(b, b.input("X", dt, (m, k), at=AT), "ab", [n, n + 1])))
    b = Builder("t")
    out.append(b.program(group(b, b.input("X", dt, (m, k), at=AT), "ab", [n, n + 2])
                         + group(b, b.input("Z", dt, (m + 1, k), at=AT), "cde", [n + 1, n, 2])))
    b = Builder("u")
    out.append(b.program(group(b, b.input("X", dt, (m + 2, k), at=AT), "fg", [2, n])
                         + group(b, b.input("Z", dt, (m, k), at=AT), "hij", [n, 3, n + 1])))
    return out


def owned_programs(rng: np.random.Generator) -> list:
    """Softmaxes over an axis that is not the last (the middle one, then the first): the max and sum are read at
    a projection of the consumer's axes, which a kernel owning the whole reduced extent computes once per tile
    (rules/fusion.egg legal-owned); one program each, so a rule must hold on each (the checker's cases)."""
    a, n, c = (int(v) for v in rng.integers(2, 5, 3))  # no unit axis: a unit axis is never a broadcast axis
    out = []
    for name, shape, ax in (("o", (a, n + 1, c), 1), ("f", (n + 1, a, c), 0), ("g", (a, c, n + 2, 2), 2)):
        b = Builder(name)
        x = b.input("X", DType.fp32, shape, at=AT)
        kept = tuple(1 if j == ax else d for j, d in enumerate(shape))
        mx = b.reduce(x, "MAX", (ax,), DType.fp32, at=AT)
        e = b.add(Ops.EXP2, [b.alu(Ops.SUB, x, b.reshape(mx, kept, at=AT), at=AT)], at=AT)
        z = b.reduce(e, "SUM", (ax,), DType.fp32, at=AT)
        out.append(b.program([("p", b.alu(Ops.FDIV, e, b.reshape(z, kept, at=AT), at=AT))]))
    return out


def chained_gemm_programs(rng: np.random.Generator) -> list:
    """(A B) C: the second GEMM reads the first's reduction at (m, k) inside its own (m, n, k) loop, along
    its N axis, which no kernel tile owns whole (rules/fusion.egg many-to-many: the fusion is never legal)."""
    out = []
    for _ in range(3):  # three sizes: a rule that must fire on three programs has three to fire on
        m, k, n, p = (int(v) for v in rng.integers(2, 5, 4))  # no unit axis: a unit axis is never a broadcast axis
        b = Builder("h")
        ab = _gemm(b, b.input("A", DType.fp32, (m, k), at=AT), b.input("B", DType.fp32, (k, n), at=AT))
        out.append(b.program([("y", _gemm(b, ab, b.input("C", DType.fp32, (n, p), at=AT)))]))
    return out

