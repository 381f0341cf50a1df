"""A kernel's region built from its own sub-program (``by_kernel``, analyses/poly_from_view.py
``kernel_program``) equals the one built on the whole program's Poly-View, for any set of nodes a kernel
evaluates; a stitched program is priced that way (pipeline ``priced``) with the same regions and prices."""
from __future__ import annotations

import numpy as np
import pytest

from polysat.analyses.poly_from_view import regions_from_partition
from polysat.bench.models import transformer
from polysat.checker.randprog import AT, motif_programs, random_program
from polysat.egraph.partition import Kernel, Partition
from polysat.ir.builder import Builder
from polysat.ir.dtypes import DType
from polysat.ir.tiny import GroupOp, Ops
from polysat.pipeline import Compilation
from polysat.pricing.kernels import price_kernels
from polysat.search.stitch import SegmentedState


def _both(prog, part, params=None) -> tuple:
    return (regions_from_partition(prog, part, params),
            regions_from_partition(prog, part, params, by_kernel=True))


def _random_kernels(prog, rng: np.random.Generator, n: int) -> Partition:
    """n kernels, each a random run of the program's non-input nodes (kernels may overlap: only node sets
    matter here), materializing a random subset of them."""
    ids = [u.id for u in prog.nodes if u.op != Ops.INPUT]
    out = []
    for k in range(n if ids else 0):
        lo = int(rng.integers(0, len(ids)))
        hi = int(rng.integers(lo + 1, len(ids) + 1))
        nodes = [i for i in ids[lo:hi] if rng.random() < 0.8] or [ids[lo]]
        outs = tuple(i for i in nodes if rng.random() < 0.5) or (nodes[-1],)
        out.append(Kernel(f"k{k}", frozenset(nodes), outs, ()))
    return Partition(tuple(out))


@pytest.mark.parametrize("seed", range(6))
def test_random_kernels_of_random_and_motif_programs_have_the_whole_programs_regions(seed):
    rng = np.random.default_rng(seed)
    progs = motif_programs(rng) + [random_program(rng, 10) for _ in range(3)]
    for p in progs:
        part = _random_kernels(p, rng, 6)
        whole, by_kernel = _both(p, part)
        assert whole == by_kernel, p


def _mul_sum(shared: bool):
    """m = a*b summed over its last axis (a contraction), and (shared) also read by an EXP2 outside that kernel:
    the program and its kernels."""
    b = Builder("t")
    m = b.alu(Ops.MUL, b.input("A", DType.fp32, (4, 8), at=AT), b.input("B", DType.fp32, (4, 8), at=AT), at=AT)
    r = b.reduce(m, "SUM", (1,), DType.fp32, at=AT)
    kernels = [Kernel("k0", frozenset([m.id, r.id]), (r.id,), ())]
    outs = [("r", r)]
    if shared:
        e = b.add(Ops.EXP2, [m], at=AT)
        kernels.append(Kernel("k1", frozenset([m.id, e.id]), (e.id,), ()))
        outs.append(("e", e))
    return b.program(outs), Partition(tuple(kernels))


@pytest.mark.parametrize("shared", [False, True])
def test_a_mul_folds_into_its_contraction_only_when_no_other_kernel_reads_it(shared):
    """The whole program decides the folding: a MUL another kernel also reads keeps its own statement."""
    p, part = _mul_sum(shared)
    whole, by_kernel = _both(p, part)
    assert whole == by_kernel
    assert len(by_kernel[0].statements) == (2 if shared else 1)


def test_a_contraction_reads_through_a_widening_cast_another_kernel_holds():
    """fp16 operands cast up outside the kernel: the contraction still reads the fp16 tensors."""
    b = Builder("h")
    x = b.cast(b.input("A", DType.fp16, (4, 8), at=AT), DType.fp32, at=AT)
    w = b.cast(b.input("B", DType.fp16, (8, 8), at=AT), DType.fp32, at=AT)
    m = b.alu(Ops.MUL, b.view(x, (4, 8, 8), ("i0", "i2"), at=AT), b.view(w, (4, 8, 8), ("i2", "i1"), at=AT), at=AT)
    y = b.reduce(m, "SUM", (2,), DType.fp32, at=AT)
    p = b.program([("y", y)])
    inside = frozenset(u.id for u in p.nodes if u.op not in {Ops.INPUT, Ops.CAST} | GroupOp.Movement)
    part = Partition((Kernel("k0", inside, (y.id,), ()),))
    whole, by_kernel = _both(p, part)
    assert whole == by_kernel
    assert {t.dtype for t in by_kernel[0].tensors if t.role == "input"} == {DType.fp16}


def test_a_stitched_program_is_priced_kernel_by_kernel_with_the_whole_programs_prices():
    c = Compilation(transformer(2, d_model=64, heads=4, d_ff=128), cost="model")
    assert isinstance(c.saturated[0], SegmentedState)
    x = c.extraction
    whole = price_kernels(x.program, x.partition, c.params, c.arch)
    assert [(p.kernel, p.region, p.cost.to_json() if p.cost else None) for p in c.priced] == \
        [(p.kernel, p.region, p.cost.to_json() if p.cost else None) for p in whole]


@pytest.mark.parametrize("by_kernel", [False, True])
def test_a_partition_priced_again_under_shifted_names_derives_only_its_new_kernels(by_kernel, monkeypatch):
    """kernel_regions keeps each kernel's region by its nodes and outputs, not its name (a name is a place in a
    partition, which shifts when an earlier kernel merges): a second partition with its kernels renamed and one
    kernel added derives only that kernel, and every region equals a fresh derivation under the new names."""
    import polysat.pricing.kernels as pk
    rng = np.random.default_rng(7)
    prog = motif_programs(rng)[0]
    part = _random_kernels(prog, rng, 5)
    calls = []
    real = pk.regions_from_partition
    monkeypatch.setattr(pk, "regions_from_partition", lambda *a, **kw: calls.extend(a[1].kernels) or real(*a, **kw))
    first = pk.kernel_regions(prog, part, by_kernel=by_kernel)
    distinct = {(k.nodes, k.outputs) for k in part.kernels}
    assert len(calls) == len(distinct)
    new = _random_kernels(prog, np.random.default_rng(8), 1).kernels[0]
    shifted = Partition(tuple(Kernel(f"k{j}", k.nodes, k.outputs, k.inputs)
                              for j, k in enumerate((new, *part.kernels))))
    again = pk.kernel_regions(prog, shifted, by_kernel=by_kernel)
    assert len(calls) == len(distinct | {(new.nodes, new.outputs)})
    assert again == real(prog, shifted, by_kernel=by_kernel)
    assert [r.name for r in first] != [r.name for r in again[-len(first):]] or not first
