"""Random Tiny IR programs: playback of their synthesized regions equals the reference evaluator.

docs/DESIGN.md §Verification: for generated programs (elementwise, casts, WHERE, every
movement op, SUM/MAX/MIN reductions, fan-out), the regions of three partitions — the default one,
the whole program as one kernel, and one kernel per compute node — play back to the reference
evaluator's outputs (rtol = atol = 1e-3, plus half an ulp of a 16-bit output); the regions validate
without diagnostics and their JSON round-trips.
"""
from __future__ import annotations

import json
import math

import numpy as np
from hypothesis import given, settings, strategies as st

from polysat.egraph.partition import Kernel, Partition
from polysat.ir.builder import Builder
from polysat.ir.dtypes import DType
from polysat.ir.evaluate import evaluate
from polysat.ir.playback import playback
from polysat.ir.region import regions_json
from polysat.ir.region_load import regions_from_json
from polysat.egraph.region_synth import default_partition, partition_from_materialized, synthesize
from polysat.analyses.region_validate import validate_regions
from polysat.ir.tiny import GroupOp, Ops

MAX_ELEMS = 400


def _factors(n: int) -> list:
    out, k = [], 2
    while k * k <= n:
        while n % k == 0:
            out.append(k)
            n //= k
        k += 1
    return out + ([n] if n > 1 else [])


@st.composite
def programs(draw):
    """A random program: a pool of values grown by random ops; one or two outputs."""
    b = Builder()
    pool = []
    for k in range(draw(st.integers(1, 3))):
        shape = tuple(draw(st.integers(1, 5)) for _ in range(draw(st.integers(1, 3))))
        dt = draw(st.sampled_from([DType.fp32, DType.fp16]))
        pool.append(b.input(f"x{k}", dt, shape, at=f"x{k}", nid=f"x{k}"))
    for step in range(draw(st.integers(1, 8))):
        at = f"step{step}"
        x = draw(st.sampled_from(pool))
        kind = draw(st.sampled_from(["unary", "binary", "binary", "reduce", "reduce", "reshape", "permute",
                                     "expand", "pad", "shrink", "flip", "cast", "where"]))
        shape = list(x.shape)
        if kind == "unary":
            y = b.add(draw(st.sampled_from([Ops.NEG, Ops.RELU, Ops.EXP2, Ops.RECIPROCAL])), [x], at=at)
        elif kind == "binary":
            others = [p for p in pool if p.dtype == x.dtype]
            other = draw(st.sampled_from(others))
            try:
                y = b.alu(draw(st.sampled_from([Ops.ADD, Ops.SUB, Ops.MUL, Ops.MAX, Ops.MIN])), x, other, at=at)
            except Exception:  # shapes that do not broadcast: pair x with itself
                y = b.alu(Ops.MUL, x, x, at=at)
        elif kind == "reduce":
            axes = sorted(draw(st.sets(st.integers(0, x.ndim - 1), min_size=1, max_size=x.ndim)))
            if len(axes) == x.ndim:
                axes = axes[:-1] or axes
                if len(axes) == x.ndim:
                    continue
            y = b.reduce(x, draw(st.sampled_from(["SUM", "MAX", "MIN"])), axes, DType.fp32, at=at)
        elif kind == "reshape":
            primes = draw(st.permutations(_factors(math.prod(shape))))
            new = [1] * draw(st.integers(1, 4))
            for p in primes:
                new[draw(st.integers(0, len(new) - 1))] *= p
            y = b.reshape(x, new, at=at)
        elif kind == "permute":
            y = b.permute(x, draw(st.permutations(range(x.ndim))), at=at)
        elif kind == "expand":
            if 1 not in shape:
                x = b.reshape(x, [1] + shape, at=at)
                shape = [1] + shape
            y = b.expand(x, [draw(st.integers(1, 3)) if d == 1 else d for d in shape], at=at)
        elif kind == "pad":
            pads = [(draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape]
            y = b.pad(x, pads, draw(st.sampled_from([0.0, -1.5])), at=at)
        elif kind == "shrink":
            lo, hi, step_ = [], [], []
            for d in shape:
                l = draw(st.integers(0, (d - 1) // 2))
                lo.append(l)
                hi.append(draw(st.integers(l + 1, d)))
                step_.append(draw(st.integers(1, 2)))
            y = b.shrink(x, lo, hi, step_, at=at)
        elif kind == "flip":
            y = b.flip(x, sorted(draw(st.sets(st.integers(0, x.ndim - 1), min_size=1))), at=at)
        elif kind == "cast":
            y = b.cast(x, DType.fp16 if x.dtype == DType.fp32 else DType.fp32, at=at)
        else:
            zero = b.const_like(0.0, x, at=at)
            y = b.add(Ops.WHERE, [b.add(Ops.CMPLT, [x, zero], at=at), b.add(Ops.NEG, [x], at=at), x], at=at)
        if math.prod(d for d in y.shape) > MAX_ELEMS or y.ndim == 0:
            continue
        pool.append(y)
    computed = [p for p in pool if p.op != Ops.INPUT]
    outs = [pool[-1]] + ([draw(st.sampled_from(computed))] if computed and draw(st.booleans()) else [])
    outs = list(dict.fromkeys(outs))
    return b.program([(f"out{k}", o) for k, o in enumerate(outs)])


def _inputs(program, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {n.arg["tensor_id"]: rng.standard_normal(n.shape).astype(np.float32) for n in program.inputs}


def single_kernel(program) -> Partition:
    nodes = frozenset(n.id for n in program.nodes if n.op != Ops.INPUT)
    outs = tuple(dict.fromkeys(nid for _, nid in program.outputs if program[nid].op != Ops.INPUT))
    inputs = tuple(n.id for n in program.inputs)
    return Partition((Kernel("whole", nodes, outs, inputs),) if outs else ())


def finest(program) -> Partition:
    mat = {n.id for n in program.nodes if n.op not in GroupOp.Movement | {Ops.CONST, Ops.INPUT}}
    mat |= {nid for _, nid in program.outputs}
    return partition_from_materialized(program, mat)


def assert_close(got: np.ndarray, ref: np.ndarray, what: str):
    assert got.shape == ref.shape and got.dtype == ref.dtype, (what, got.shape, ref.shape, got.dtype, ref.dtype)
    g, r = got.astype(np.float64), ref.astype(np.float64)
    with np.errstate(invalid="ignore"):  # inf - inf where both overflowed
        ulp = np.spacing(np.abs(ref)).astype(np.float64) / 2 if ref.dtype.itemsize == 2 else 0.0
        ok = np.isclose(g, r, rtol=1e-3, atol=1e-3, equal_nan=True) | (np.abs(g - r) <= ulp)
    assert ok.all(), f"{what}: max |diff| {np.nanmax(np.abs(g - r))} at {np.argwhere(~ok)[:3].tolist()}"


def check_partition(program, partition, seed: int, name: str):
    regions = synthesize(program, partition)
    assert validate_regions(regions) == [], name
    doc = json.loads(json.dumps(regions_json(regions)))
    assert regions_from_json(doc) == regions, f"{name}: JSON does not round-trip"
    inputs = _inputs(program, seed)
    ref = evaluate(program, inputs)
    got = playback(regions, inputs)
    assert set(got) == set(ref), name
    for k in ref:
        assert_close(got[k], ref[k], f"{name} output {k}")


@settings(deadline=None)
@given(programs(), st.integers(0, 2 ** 16))
def test_playback_of_default_partition_equals_reference(program, seed):
    check_partition(program, default_partition(program), seed, "default partition")


@settings(deadline=None)
@given(programs(), st.integers(0, 2 ** 16))
def test_playback_of_whole_program_region_equals_reference(program, seed):
    check_partition(program, single_kernel(program), seed, "one kernel")


@settings(deadline=None, max_examples=20)
@given(programs(), st.integers(0, 2 ** 16))
def test_playback_of_one_kernel_per_compute_node_equals_reference(program, seed):
    check_partition(program, finest(program), seed, "finest partition")


@settings(deadline=None, max_examples=25)
@given(programs())
def test_default_partition_meets_the_partition_contract(program):
    part = default_partition(program)
    part.check(program)  # raises E1999 on a broken contract
    owned = [nid for k in part.kernels for nid in k.nodes
             if program[nid].op not in GroupOp.Movement | {Ops.CONST}]
    assert len(owned) == len(set(owned)), "a compute node is in two kernels"
