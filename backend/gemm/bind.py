"""Recognise an extracted RB-SSA region as a GEMM kernel: Region -> GemmBinding, or NoBind saying why not.

The region must be one contraction ``let acc = reduce(sum, k){ mul(cast(read A), cast(read B)) }`` over
fp16|bf16 operands widened to fp32 (or ``mul(read A, read B)`` over fp32 operands: 3xTF32), with one reduce
axis, followed by an epilogue applied elementwise to the accumulator, and one yield with a cast. Axis roles come
from the yield and the reads: the output's innermost axis is n and the operand that reads it is B, the other is
A; m is the output axis A reads and B does not (the second innermost when it qualifies: a batched operand
broadcast over the other reads its batch axes too), the other output axes are batch axes, wherever they sit (a
transposed output [S, heads, d]: heads is the batch).

* Read maps must be permutations of axis variables (plus constant 0 on size-1 dims): the order of (m, k)
  gives A's ``row``/``col`` layout, (k, n) B's; an operand that reads no batch axis is ``broadcast``.
  A tensor whose dims are not in the packed order (batch leading) is read through strides
  (``GemmSpec.a_dims`` ..): its innermost dim must be a matrix dim and its batch dims adjacent and in order.
* Epilogue (:mod:`..common.epilogue`), peeled from the yield down to the accumulator: ``add`` of a read of a
  1-D tensor along n or m (bias) or of a same-shape read (residual); casts; scale and activations.

A tensor in two roles (x @ x^T, x @ W + x) is bound under an alias (``X.b``, ``X.residual``): the
:class:`GemmBinding` maps each spec tensor back to the region tensor, so the runner passes one buffer twice.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from typing import NoReturn

from ...ir.dtypes import DType
from ...ir.region import R, Region, RNode
from ..common.epilogue import HALF, addend_source, peel_epilogue
from ..common.region_match import (Aliases, Lets, Mismatch, RegionBinding, axis_size, axis_var, recogniser,
                                   row_major_input, the_yield, walk)
from ..common.spec import EpilogueOp
from . import prologue
from .concat import merged
from .paired import paired
from .spec import GemmSpec, packed_dims


def _reject(r: Region, why: str) -> NoReturn:
    raise Mismatch(f"not a GEMM-family region: {why}")


def _read_axes(r: Region, node: RNode, what: str) -> tuple[str, tuple[str, ...]]:
    """(tensor, the axis variables of its read map in order), checking the map is a packed permutation."""
    tensor, index = node.arg
    buf = row_major_input(r, tensor, what, partial(_reject, r))
    sizes = r.axis_sizes
    axes = []
    for k, (e, d) in enumerate(zip(index, buf.memref.shape, strict=True)):
        v = axis_var(e)
        if v is None:
            if e.is_const and e.constant == 0 and d == 1:
                continue  # a size-1 dim: dropped from the operand's shape
            _reject(r, f"{what} read {tensor}[{', '.join(map(str, index))}]: index {k} ({e}) is not an axis "
                       "variable; the template needs reads that are permutations of the axes")
        if v in axes:
            _reject(r, f"{what} read {tensor}[{', '.join(map(str, index))}] uses axis {v} twice")
        if d != sizes[v]:
            _reject(r, f"{what} {tensor!r} has size {d} on dim {k}, axis {v} has size {sizes[v]}; "
                       "the template reads whole, packed tensors")
        axes.append(v)
    return tensor, tuple(axes)


def _operand(r: Region, lets: Lets, n: RNode) -> tuple[RNode, DType]:
    """A contraction operand: cast(read T, fp32) with T fp16|bf16, or a read of fp32 (3xTF32)."""
    n = lets(n)
    if n.op == R.UNARY and n.arg == "cast" and n.dtype == DType.fp32:
        src = lets(n.src[0])
        if src.op == R.READ and src.dtype in HALF:
            return src, src.dtype
    if n.op == R.READ and n.dtype == DType.fp32:
        return n, n.dtype
    if n.op == R.READ:
        _reject(r, f"operand {n.arg[0]!r} is {n.dtype.value}; the MMA template takes fp16, bf16 or fp32 operands")
    _reject(r, "the reduce body multiplies something other than two (widened) reads")


def _tf32x3_ok(r: Region, dtype: DType) -> None:
    """fp32 operands run 3xTF32 unless the cost model priced the region's contraction cheaper on the FP32 pipes
    (``Region.fp32_pipes``, pricing/kernels.py ``as_emitted``)."""
    if dtype == DType.fp32 and r.fp32_pipes:
        _reject(r, "its fp32 contraction is priced below 3xTF32 on the FP32 pipes (the SIMT kind computes it)")


def _accumulator(r: Region, lets: Lets, top: RNode) -> RNode:
    reds = [n for n in walk(lets, top) if n.op == R.REDUCE]
    inner = {id(x) for n in reds for x in walk(lets, n.src[0]) if x.op == R.REDUCE}
    reds = [n for n in reds if id(n) not in inner]  # one inside the operand: a prologue's statistic (prologue.py)
    if len(reds) != 1:
        _reject(r, f"it has {len(reds)} reductions; a GEMM has exactly one")
    acc = reds[0]
    op, axes, init = acc.arg
    if op != "sum" or init != 0 or acc.dtype != DType.fp32:
        _reject(r, f"its reduction is {op} (init {init}, {acc.dtype.value if acc.dtype else '?'}); "
                   "a GEMM sums from 0 in fp32")
    if len(axes) != 1:
        _reject(r, f"its reduction binds {len(axes)} axes; the template contracts exactly one")
    body = lets(acc.src[0])
    if not (body.op == R.BINARY and body.arg == "mul"):
        _reject(r, "the reduce body is not a product (C-CON1)")
    return acc


def _addend(r: Region, lets: Lets, n: RNode, m_ax: str, n_ax: str, out_axes: tuple) -> EpilogueOp:
    """bias / residual from the non-accumulator side of an add: [BroadcastInDim of] [cast fp32 of] a read."""
    n = addend_source(lets, n)
    if n.op != R.READ:
        _reject(r, "the epilogue adds a term that is not a tensor read (bias along n or m, or a residual)")
    if n.dtype not in (*HALF, DType.fp32):
        _reject(r, f"the epilogue tensor {n.arg[0]!r} is {n.dtype.value}; bias and residual are fp16, bf16 or fp32")
    tensor, axes = _read_axes(r, n, "epilogue tensor")
    if axes == (n_ax,):
        return EpilogueOp("bias", tensor, "n", n.dtype)
    if axes == (m_ax,):
        return EpilogueOp("bias", tensor, "m", n.dtype)
    if axes == out_axes:
        return EpilogueOp("residual", tensor, dtype=n.dtype)
    _reject(r, f"the epilogue adds {tensor}[{', '.join(map(str, n.arg[1]))}], which is neither a bias along "
               f"{n_ax} or {m_ax} nor a residual over [{', '.join(out_axes)}]")


# ---- the region -----------------------------------------------------------------------------------

@recogniser
def bind(region: Region, name: str | None = None) -> "GemmBinding":
    """The region as a GemmSpec plus its tensor binding, or NoBind saying why it is not a GEMM. A
    region that yields the concatenation along N of sibling contractions (rules/siblings.egg) binds as
    one GEMM whose B is the concatenation of theirs (backend/gemm/concat.py)."""
    pair = paired(region)
    if pair is not None:  # two sibling GEMMs combined column by column (backend/gemm/paired.py)
        one, pieces, steps = pair
        g = _bind(one, name)
        spec = replace(g.spec, b_pieces=pieces, pair=steps)
        have = dict(g.tensors)
        return GemmBinding(spec, tuple((n, have.get(n, n)) for n in spec.inputs))
    got = merged(region)
    if got is None:
        return _bind(region, name)
    one, pieces = got
    g = _bind(one, name)
    spec = replace(g.spec, b_pieces=pieces)
    have = dict(g.tensors)
    return GemmBinding(spec, tuple((n, have.get(n, n)) for n in spec.inputs))


def _bind(region: Region, name: str | None) -> "GemmBinding":
    r = region
    reject = partial(_reject, r)
    lets = Lets(r)
    y, out, top = the_yield(r, lets, reject)
    while lets(top).op == R.TRANSPOSE:  # the output stored in another order than the sum's axes: axes are named
        top = lets(lets(top).src[0])
    if len(y.axes) < 2:
        _reject(r, "its output has fewer than two axes (a GEMM writes [*batch, m, n])")
    if set(lets(top).axes) != set(y.axes):
        _reject(r, f"it yields a value over [{', '.join(lets(top).axes)}] to [{', '.join(y.axes)}]")
    if out.memref.layout.kind != "row_major":
        _reject(r, f"its output has layout {out.memref.layout.kind}")
    if tuple(out.memref.shape) != tuple(r.axis_sizes[a] for a in y.axes):
        _reject(r, f"its output {out.name!r} is not the packed [{', '.join(y.axes)}] tensor")
    acc = _accumulator(r, lets, top)
    (k_ax,) = acc.arg[1]
    if set(acc.axes) != set(y.axes):
        _reject(r, f"the reduction keeps axes [{', '.join(acc.axes)}], the output has [{', '.join(y.axes)}]")
    got = _prologue_operand(r, lets, acc, y.axes, k_ax)
    if got is not None:
        return _bind_prologue(r, name, lets, y, out, top, acc, k_ax, *got)
    (x, xdt), (w, wdt) = (_operand(r, lets, s) for s in lets(acc.src[0]).src)
    _tf32x3_ok(r, xdt)
    if xdt != wdt:
        _reject(r, f"the operands are {xdt.value} and {wdt.value}; the MMA takes one input type")
    rx, ry = (_read_axes(r, n, "operand") for n in (x, w))
    n_ax = y.axes[-1]
    if n_ax in rx[1] and n_ax not in ry[1]:
        rx, ry = ry, rx
    (a_name, a_axes), (b_name, b_axes) = rx, ry
    m_ax = _m_axis(r, y.axes, a_axes, b_axes)
    batch_axes = tuple(a for a in y.axes if a not in (m_ax, n_ax))

    label = {m_ax: "m", n_ax: "n", k_ax: "k", **{a: f"b{i}" for i, a in enumerate(batch_axes)}}

    def layout(axes: tuple, row: tuple, what: str) -> tuple[str, bool, tuple[str, ...]]:
        core = tuple(a for a in axes if a not in batch_axes)
        batch = tuple(a for a in axes if a in batch_axes)
        if sorted(core) != sorted(row):
            _reject(r, f"operand {what} reads axes [{', '.join(axes)}]; it must read [{', '.join(row)}] "
                       f"(in some order) plus the batch axes")
        _strided_ok(r, axes, batch, batch_axes, what)
        return ("row" if core == row else "col"), not batch and bool(batch_axes), tuple(label[a] for a in axes)

    a_layout, a_bcast, a_dims = layout(a_axes, (m_ax, k_ax), repr(a_name))
    b_layout, b_bcast, b_dims = layout(b_axes, (k_ax, n_ax), repr(b_name))
    _strided_ok(r, tuple(y.axes), batch_axes, batch_axes, f"output {out.name!r}")
    if a_bcast and b_bcast:
        _reject(r, "neither operand reads the batch axes (the batch would only repeat one product)")
    epilogue = peel_epilogue(lets, top, acc, y.cast, lambda n: _addend(r, lets, n, m_ax, n_ax, tuple(y.axes)), reject)
    if y.cast not in (DType.fp16, DType.bf16, DType.fp32):
        _reject(r, f"it writes {y.cast.value}; the template writes fp16, bf16 or fp32")
    al = Aliases(r)  # x @ x^T, x @ W + x: one tensor in two roles
    a_spec, b_spec = al(a_name, "a"), al(b_name, "b")
    size = partial(axis_size, r, reject=reject)
    spec = GemmSpec(name or r.name, size(m_ax), size(n_ax), size(k_ax),
                    batch=tuple(size(a) for a in batch_axes), in_dtype=xdt, out_dtype=y.cast,
                    a_layout=a_layout, b_layout=b_layout, a_broadcast=a_bcast, b_broadcast=b_bcast,
                    epilogue=al.epilogue(epilogue), a=a_spec, b=b_spec, c=out.name)
    stored = {"a": a_dims, "b": b_dims, "c": tuple(label[a] for a in y.axes)}  # non-packed orders: strided
    spec = replace(spec, **{f"{role}_dims": d for role, d in stored.items() if d != packed_dims(spec, role)})
    return GemmBinding(spec, tuple(al.pairs))


def _prologue_operand(r: Region, lets: Lets, acc: RNode, out_axes: tuple, k_ax: str) -> "tuple | None":
    """(prologue, operand type, B's read) when one factor of the product is A computed by a prologue
    (:mod:`.prologue`) and the other a widened read of B; None when neither factor is a prologue. A prologue
    GEMM has no batch: the output is [m, n]."""
    if len(out_axes) != 2:
        return None
    m_ax, n_ax = out_axes[0], out_axes[1]
    for a, b in (lets(acc.src[0]).src, lets(acc.src[0]).src[::-1]):
        got = prologue.from_operand(r, lets, a, m_ax, k_ax)
        if got is None:
            continue
        try:
            w, wdt = _operand(r, lets, b)
        except Mismatch:
            return None
        if wdt != got[1]:
            _reject(r, f"the operands are {got[1].value} and {wdt.value}; the MMA takes one input type")
        _tf32x3_ok(r, wdt)
        return got[0], wdt, w, m_ax, n_ax
    return None


def _bind_prologue(r: Region, name: "str | None", lets: Lets, y, out, top: RNode, acc: RNode, k_ax: str,
                   pro: "prologue.Prologue", dtype: DType, w: RNode, m_ax: str, n_ax: str) -> "GemmBinding":
    """The GEMM whose A is computed by a prologue: B a packed [k, n] or [n, k] read, no batch."""
    b_name, b_axes = _read_axes(r, w, "operand")
    if sorted(b_axes) != sorted((k_ax, n_ax)):
        _reject(r, f"operand {b_name!r} reads axes [{', '.join(b_axes)}]; it must read [{k_ax}, {n_ax}]")
    epilogue = peel_epilogue(lets, top, acc, y.cast, lambda n: _addend(r, lets, n, m_ax, n_ax, tuple(y.axes)),
                             partial(_reject, r))
    if y.cast not in (DType.fp16, DType.bf16, DType.fp32):
        _reject(r, f"it writes {y.cast.value}; the template writes fp16, bf16 or fp32")
    al = Aliases(r)
    alias = {t: al(t, "a") for t in pro.tensors}  # in kernel-parameter order: the prologue's tensors, B, epilogue
    pro = prologue.Prologue(tuple(replace(s, tensor=alias[s.tensor]) for s in pro.sources), pro.steps)
    b_spec = al(b_name, "b")
    size = partial(axis_size, r, reject=partial(_reject, r))
    why = prologue.check(pro, size(m_ax), size(k_ax), dtype)
    if why is not None:
        _reject(r, why)
    spec = GemmSpec(name or r.name, size(m_ax), size(n_ax), size(k_ax), in_dtype=dtype, out_dtype=y.cast,
                    b_layout="row" if b_axes == (k_ax, n_ax) else "col", epilogue=al.epilogue(epilogue),
                    a=_free_name(r, "A"), b=b_spec, c=out.name, a_prologue=pro)
    return GemmBinding(spec, tuple(al.pairs))


def _free_name(r: Region, stem: str) -> str:
    """A name no tensor of r has (the computed A: never a kernel parameter)."""
    taken = {b.name for b in (*r.inputs, *r.outputs)}
    return next(x for x in (stem + "_" * i for i in range(len(taken) + 1)) if x not in taken)


def _m_axis(r: Region, out_axes: tuple, a_axes: tuple, b_axes: tuple) -> str:
    """m: the output axis A reads and B does not; the second innermost output axis when it is one of them."""
    only_a = [a for a in out_axes[:-1] if a in a_axes and a not in b_axes]
    if not only_a:
        _reject(r, f"no output axis of [{', '.join(out_axes)}] is read by one operand only ([{', '.join(a_axes)}], "
                   f"[{', '.join(b_axes)}]): there is no m")
    return out_axes[-2] if out_axes[-2] in only_a else only_a[-1]


def _strided_ok(r: Region, axes: tuple, batch: tuple, batch_axes: tuple, what: str) -> None:
    """A tensor's dims in storage order: a consecutive run of the batch axes (in the output's order; all of
    them for the output, none for a broadcast operand), adjacent, and a
    matrix dim innermost (unit stride): one row stride and one batch stride address it."""
    at = batch_axes.index(batch[0]) if batch else 0
    if batch != batch_axes[at:at + len(batch)]:
        _reject(r, f"{what} reads batch axes [{', '.join(batch)}] of [{', '.join(batch_axes)}]; the template "
                   "needs a consecutive run of them, in order (broadcast along the others)")
    if axes[-1] in batch_axes:
        _reject(r, f"{what} is stored [{', '.join(axes)}] with batch axis {axes[-1]} innermost; the template "
                   "reads matrix rows with unit stride")
    pos = [i for i, a in enumerate(axes) if a in batch_axes]
    if pos and pos[-1] - pos[0] != len(pos) - 1:
        _reject(r, f"{what} is stored [{', '.join(axes)}] with its batch axes apart; the template takes one "
                   "batch stride")


@dataclass(frozen=True)
class GemmBinding(RegionBinding):
    """A region's GemmSpec and, for each tensor the kernel reads, the region tensor behind it."""
    spec: GemmSpec
