"""A partition's kernels priced as the backend emits them (docs/DESIGN.md §Cost model).

Each kernel becomes its Poly-View region (analyses/poly_from_view.py), with its streamed softmax-weighted
sums marked (``mark_streams``) and its contractions priced on the unit the kind that computes it uses
(``as_emitted``: the MMA kinds run them on tensor cores, the SIMT kind on the FP32 pipes), then priced by
``analyses/price.py price`` on its canonical form (tensor and statement names renumbered), so a kernel met
again, in another candidate or another identical layer, hits the price caches. The pipeline, the
``--cost model`` search, the compiled model's measurement log, the pictures and ``--explain`` price with it.
"""
from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, replace
from functools import lru_cache

from ..analyses.indexbook import checked_indexbook
from ..analyses.isl_util import box_constraints, isl_name, set_text
from ..analyses.masked import hide_masked
from ..analyses.poly_from_view import kernel_program, program_context, regions_from_partition
from ..analyses.devices import device
from ..analyses.poly_region import PolyRegion, renamed
from ..analyses.price import Cost, price, price_floor
from ..analyses.roofline import roofline
from ..backend.gemm.prologue import in_loop
from ..backend.kinds import tensor_core_binding
from ..egraph.partition import Kernel, Partition
from ..egraph.region_synth import synthesize
from ..egraph.stream import BLOCK, groups
from ..ir import deadline
from ..ir.diagnostics import PolysatError
from ..ir.dtypes import DType
from ..ir.region_layout import store_for_readers
from ..ir.region_narrow import narrow_boundaries
from ..ir.shapes import bind as bind_shape
from ..ir.tiny import GroupOp, Ops, Program




def kernel_regions(program: Program, partition, params: "dict | None" = None, by_kernel: bool = False,
                   arch: str = "sm90", context=None) -> list:
    """One PolyRegion per kernel of ``partition`` that computes something, priced as emitted (``as_emitted``);
    ``by_kernel``: each built from its kernel's own sub-program (analyses/poly_from_view.py, for a stitched program,
    whose kernels its segments' searches met under other ids); ``context``: the whole partition ``partition``'s
    kernels belong to (some of its kernels, priced alone), whose writers and readers decide their kinds."""
    return as_emitted(program, partition if context is None else context,
                      _named_regions(program, partition, params, by_kernel), arch)


def _named_regions(program: Program, partition, params: "dict | None", by_kernel: bool) -> list:
    """``regions_from_partition``'s regions, each kernel's made once per program under a key without its name
    (its nodes and outputs; a kernel's name is its place in a partition, which shifts when the search merges an
    earlier kernel) and given the kernel's name: a partition evaluated again derives only the kernels that
    changed (those derived together, in one call). Kept per program (equal programs share them; the last 64
    programs, as their Poly-Views), one entry per distinct kernel priced, each name's copy kept beside it so the
    price caches meet the same object."""
    made = _made(program, tuple(sorted(dict(params or {}).items())), by_kernel)
    new = [k for k in dict.fromkeys((k.nodes, k.outputs) for k in partition.kernels) if k not in made]
    if new:
        fresh = Partition(tuple(Kernel(f"m{j}", nodes, outs, ()) for j, (nodes, outs) in enumerate(new)))
        got = {r.name: r for r in regions_from_partition(program, fresh, params, by_kernel=by_kernel)}
        for j, key in enumerate(new):
            made[key] = (got.get(f"m{j}"), {})
    out = []
    for k in partition.kernels:
        region, named = made[(k.nodes, k.outputs)]
        if region is not None:
            if k.name not in named:
                named[k.name] = replace(region, name=k.name)
            out.append(named[k.name])
    return out


@lru_cache(maxsize=64)
def _made(program: Program, params: tuple, by_kernel: bool) -> dict:
    """(kernel nodes, outputs) -> (its region, or None when it computes nothing; kernel name -> its copy so named)."""
    return {}


def as_emitted(program: Program, partition, regions: list, arch: str = "sm90") -> list:
    """The regions priced as the kind the backend binds each kernel to (``partition``: the partition, or a function
    making it, called only where a kind is asked) (docs/DESIGN.md §Cost model): a Poly-View
    contraction is a tensor-core statement, which is how the MMA kinds (gemm, conv, conv_pool, attention,
    softmax_scores) compute it; when none of them binds the kernel's RB-SSA region (synthesized, narrowed and
    laid out as the pipeline does, then ``backend.kinds.tensor_core_kind``) the SIMT kind computes it, so its
    statements run on the FP32 pipes. A contraction of fp32 operands that an MMA kind binds (the GEMM kind's
    3xTF32) is priced both ways on ``arch`` and runs where it is cheaper: on that path (``mma_path`` tf32x3:
    analyses/price.py ``on_path``) or on the FP32 pipes (``mma_path`` fp32; the pipeline then marks the kernel's
    region ``fp32_pipes`` and the GEMM kind declines it); a GEMM whose fp32 A prologue the kernel computes with its
    row statistic summed in the main loop is marked so (``_in_loop``, before that choice). Regions without a
    contraction are returned as they are.
    Only the contractions' kernels and the writers and readers of their buffers are synthesized (``_neighbours``;
    the narrowing and the layout decide each buffer by its writer and readers alone). Regions
    the RB-SSA synthesis of those kernels refuses keep the Poly-View's units (no such kernel is ever emitted), but
    for contractions of fp32 operands, which stay on the FP32 pipes unless a binder takes them."""
    if not any(st.unit == "tensor" for r in regions for st in r.statements):
        return regions
    if callable(partition):  # made only here (the merge search prices many groups of one program)
        partition = partition()
    try:
        mma = [r for r in regions if any(st.unit == "tensor" for st in r.statements)]  # the kernels whose kind is asked
        emitted = {r.name: r for r in store_for_readers(narrow_boundaries(_near(synthesize(
            program, partition, only=_neighbours(partition, mma)), mma)))}
    except PolysatError:  # no such partition is emitted; fp32 contractions stay on the FP32 pipes, unasked
        return [on_fp32_pipes(r) if _fp32_operands(r) else r for r in regions]
    out = []
    for r in regions:
        rb = emitted.get(r.name)
        if rb is not None and any(st.unit == "tensor" for st in r.statements):
            found = _binding(rb)
            r = on_fp32_pipes(r) if found is None else _cheaper(_in_loop(on_tf32x3(r), found, arch), arch)
        out.append(r)
    return out


def _in_loop(region: PolyRegion, found: tuple, arch: str) -> PolyRegion:
    """region marked ``stat_in_loop`` where the GEMM kind binds it with an A prologue linear in its one row
    statistic (backend/gemm/prologue.py ``in_loop``) and the sm80 skeleton runs it (on sm80, or 3xTF32 on either
    target): the statistic is summed as A's tiles land, with no pass over K before the main loop."""
    spec = getattr(found[1], "spec", None)
    pro = getattr(spec, "a_prologue", None)
    sm80 = arch != "sm90" or region.mma_path == "tf32x3"
    if pro is None or not sm80 or not any(st.unit == "tensor" for st in region.statements):
        return region
    return replace(region, stat_in_loop=True) if in_loop(pro, spec.in_dtype) >= 0 else region


def _cheaper(region: PolyRegion, arch: str) -> PolyRegion:
    """A 3xTF32 region, or its contractions on the FP32 pipes (``mma_path`` fp32) where they price no higher there.
    The side whose floor is lower is priced first; the other is priced only if its floor (``price_floor``, never
    above its price) does not already settle the comparison."""
    if region.mma_path != "tf32x3":
        return region
    on_pipes = replace(on_fp32_pipes(region), mma_path="fp32", stat_in_loop=False)
    tf32, pipes = canonical(region), canonical(on_pipes)
    f_tf32, f_pipes = price_floor(tf32, arch), price_floor(pipes, arch)
    if f_tf32 <= f_pipes:
        t = price(tf32, arch).time_est_us
        faster = f_pipes > t or t < price(pipes, arch).time_est_us
    else:
        s = price(pipes, arch).time_est_us
        faster = f_tf32 < s and price(tf32, arch).time_est_us < s
    return region if faster else on_pipes


def on_tf32x3(region: PolyRegion) -> PolyRegion:
    """region, bound to a tensor-core kind, marked to run its contractions as 3xTF32 when they read fp32 operands."""
    return replace(region, mma_path="tf32x3") if _fp32_operands(region) else region


def _fp32_operands(region: PolyRegion) -> bool:
    """Whether a contraction of the region reads an fp32 operand."""
    return any(region.tensor(a.tensor).dtype == DType.fp32 for st in region.statements if st.unit == "tensor"
               for a in st.reads)


def on_fp32_pipes(region: PolyRegion) -> PolyRegion:
    """region with its contractions priced as the SIMT kind runs them."""
    if not any(st.unit == "tensor" for st in region.statements):
        return region
    return replace(region, statements=tuple(replace(st, unit="fp32") if st.unit == "tensor" else st
                                            for st in region.statements))


def _near(rbs: list, regions: list) -> list:
    """The RB-SSA regions that decide how the kernels of ``regions`` store and read memory: those kernels,
    and every writer and reader of a buffer they read or write (the boundary narrowing and the layout
    pass decide a buffer by its writer and all its readers, each buffer on its own)."""
    want = {r.name for r in regions}
    bufs = {b.name for r in rbs if r.name in want for b in (*r.inputs, *r.outputs)}
    return [r for r in rbs if r.name in want or any(b.name in bufs for b in (*r.inputs, *r.outputs))]


def _neighbours(partition, regions: list) -> frozenset:
    """The names of the kernels of ``regions`` and of every kernel that reads or writes a value they read or
    write: the kernels ``_near`` may keep, so the others are never synthesized."""
    want = {r.name for r in regions}
    vals = {v for k in partition.kernels if k.name in want for v in (*k.inputs, *k.outputs)}
    return frozenset(k.name for k in partition.kernels if k.name in want or not vals.isdisjoint((*k.inputs, *k.outputs)))


def _binding(region) -> "tuple | None":
    return _binding_of(replace(region, name="kernel"))  # the kernel's name does not change its kind


@lru_cache(maxsize=4096)
def _binding_of(region) -> "tuple | None":
    return tensor_core_binding(region)



def canonical_names(region: PolyRegion) -> dict:
    """The renaming :func:`canonical` applies: statement -> S<k>, tensor -> T<j>, in region order."""
    ren: dict = {}
    for k, s in enumerate(region.statements):
        ren[s.name] = f"S{k}"
    j = 0
    for t in region.tensors:  # inputs too: the same layer over other weights is the same kernel
        if t.name not in ren:
            ren[t.name] = f"T{j}"
            j += 1
    return ren


_CANONICAL_WORD = re.compile(r"\b[ST][0-9]+\b")


def named_back(text: str, ren: dict) -> str:
    """text about a canonical region (its S<k>/T<j>) with the region's own names again (ren: canonical_names)."""
    back = {v: k for k, v in ren.items()}
    return _CANONICAL_WORD.sub(lambda m: back.get(m.group(0), m.group(0)), text)


@lru_cache(maxsize=8192)
def canonical(region: PolyRegion) -> PolyRegion:
    """region with statements S0.. and tensors T0..: equal kernels from different extractions (or
    layers) compare equal, so the price and analysis caches hit. Kept per region: a search meets the same
    kernel in many candidates."""
    return renamed(region, canonical_names(region), "kernel")


@dataclass
class Priced:
    """One kernel of a partition with its Poly Core region and price."""
    kernel: object  # egraph.partition.Kernel
    region: "PolyRegion | None"  # None: a kernel with no statement (a pure copy of memory, priced by copy_cost)
    cost: "Cost | None"


def mark_streams(prog: Program, part, regions: list) -> list:
    """regions with the streamed softmax-weighted sums of each kernel marked (PolyRegion.stream: the
    statements of their running max, sum and weighted sum, advancing BLOCK keys at a time), so Poly
    Core prices their internal values per key block (analyses/price.py); where a tensor-core kind runs one whose
    scores a causal index guard masks, without the pairs it hides (analyses/masked.py)."""
    gs = list(groups(prog).values())
    if not gs:
        return regions
    kernels = {k.name: k for k in part.kernels}
    out = []
    for r in regions:
        k = kernels.get(r.name)
        names = {s.name for s in r.statements}
        mine = [g for g in gs if k is not None and g.nodes <= k.nodes]
        marks = tuple(s for s in (f"S_{isl_name(i)}" for g in mine for i in g.reduces) if s in names)
        again = tuple(s for s in (f"S_{isl_name(i)}" for g in mine if g.passes == 2 for i in _rewalked(prog, k, g))
                      if s in names)
        if marks and any(st.unit == "tensor" for st in r.statements):  # a tensor-core kind streams it: the attention kind
            for g in mine:
                got = _masked_select(prog, g)
                if got is not None:
                    r = hide_masked(r, *got, frozenset(f"S_{isl_name(i)}" for i in g.nodes))
        out.append(dataclasses.replace(r, stream=marks, stream_block=BLOCK, stream_recompute=again) if marks else r)
    return out


def _masked_select(prog: Program, g) -> "tuple | None":
    """(the select's statement, the isl set of its instances the mask keeps) where group g's scores are
    ``where(keep, s, -inf)`` with ``keep`` an index guard (a view of a padded constant true: the causal mask the
    frontend writes), else None (a mask read from memory: every key block is walked)."""
    w = prog[g.s]
    if w.op == Ops.CAST and w.dtype == DType.fp32 and prog[w.src[0]].op == Ops.WHERE:  # a 16-bit select widened
        w = prog[w.src[0]]
    if w.op != Ops.WHERE or not _movement_of_const(prog, w.src[0]) or not _movement_of_const(prog, w.src[2]):
        return None
    ctx = program_context(prog, None)
    _, make, real = kernel_program(ctx, Kernel("mask", frozenset({w.id}), (w.id,), ()))
    local = {i: lid for lid, i in real.items()}[w.id]
    book = checked_indexbook(make()[0], ctx.symbols)
    keep, _, other = book.sources(local)
    kc, oc = book.program[keep.value_id], book.program[other.value_id]
    if kc.op != Ops.CONST or kc.arg["value"] is not True or not keep.guard or \
            any(p.value is not False for p in keep.pads) or oc.op != Ops.CONST or oc.arg["value"] != -math.inf or \
            other.guard or other.pads:
        return None
    info = book[local]
    names, sizes = info.space_names, [a.size for a in info.space]
    text = set_text(book.params, f"S_{isl_name(w.id)}", names,
                    box_constraints(names, sizes) + [f"{e.to_isl()} >= 0" for e in keep.guard])
    return f"S_{isl_name(w.id)}", text


def _movement_of_const(prog: Program, i: str) -> bool:
    """Whether value i is a constant seen through movement ops only."""
    while prog[i].op in GroupOp.Movement:
        i = prog[i].src[0]
    return prog[i].op == Ops.CONST


def _rewalked(prog: Program, k, g) -> list:
    """The compute nodes a two-pass stream evaluates in both passes: the scores (their cone inside
    kernel k) and the exponentials."""
    out, stack, seen = [g.roles[r] for r in ("shift", "scaled", "exp")], [g.s], set()
    while stack:
        i = stack.pop()
        if i in seen or i not in k.nodes or i in k.inputs:
            continue
        seen.add(i)
        if prog[i].op not in GroupOp.Movement and prog[i].op != Ops.CONST:
            out.append(i)
        stack.extend(prog[i].src)
    return out


def price_kernels(prog: Program, part, params: dict, arch: str, by_kernel: bool = False,
                  above: float = math.inf, context=None) -> "list | None":
    """Each kernel of ``part`` with its region and price (``by_kernel``, ``context``: see ``kernel_regions``); None as
    soon as the kernels priced so far add up to more than ``above`` (the rest unpriced: a search asking only whether
    a partition beats a price it has), or sooner: as soon as they and the floors of the rest (``price_floor``, a
    fraction of a price) add up to more than ``above`` by more than a rounding (the kernels would too)."""
    regions = {r.name: r for r in mark_streams(prog, part,
                                               kernel_regions(prog, part, params, by_kernel, arch, context))}
    out, total = [], 0.0
    copies = {k.name: copy_cost(prog, k, params, arch) for k in part.kernels if k.name not in regions}
    floors = None if above == math.inf else \
        [copies[k.name].time_est_us if (r := regions.get(k.name)) is None else price_floor(canonical(r), arch)
         for k in part.kernels]  # a copy's floor is its price
    rest = sum(floors or ())
    for i, k in enumerate(part.kernels):
        if total + rest > above * (1 + 1e-9) + 1e-9:
            return None
        deadline.check(f"kernel {k.name}")
        r = regions.get(k.name)
        c = copies[k.name] if r is None else dataclasses.replace(price(canonical(r), arch), region=k.name)
        out.append(Priced(k, r, c))
        total += c.time_est_us
        if total > above:
            return None
        rest -= floors[i] if floors else 0.0
    return out


def copy_cost(prog: Program, k, params: dict, arch: str) -> Cost:
    """The price of a kernel with no statement: a copy of memory (a slice of the sibling GEMMs' concatenation,
    a transpose or a broadcast written out), which the SIMT kind launches like any kernel: the launch, its
    outputs written and as many bytes read (at most its inputs' bytes) at the device's copy bandwidth."""
    dev = device(arch)

    def size(i: str) -> int:
        return math.prod(bind_shape(prog[i].shape, params)) * prog[i].dtype.itemsize
    wrote = sum(size(o) for o in k.outputs)
    read = min(wrote, sum(size(i) for i in k.inputs))
    load, store = (n / (dev.dram_tbps * 1e12) * 1e6 for n in (read, wrote))
    return Cost(roofline(dev, (load + store,), unit="us"), 0, read + wrote, 0, 0, 0, 0, 0.0, 0, 0, (), "memory",
                (("load", load), ("store", store), ("launch", dev.launch_us)), (), 0.0, (), 1, k.name)


def total_us(priced: list) -> float:
    return sum(p.cost.time_est_us for p in priced if p.cost is not None)

