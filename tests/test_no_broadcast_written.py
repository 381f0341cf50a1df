"""No partition the ``--cost model`` search returns writes a broadcast to memory: a value that one
kernel writes and another reads (not a program output) never repeats along an axis of extent > 1.

The oracle is the reference evaluator on random inputs: every intermediate a kernel writes is
evaluated, and a value constant along an axis is a broadcast (a real computed value of random data is
not). The models: every example, the bench transformer (small sizes), sibling GEMMs that read one
broadcast input, and random programs of the generator the merge search is tested on.
"""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

from polysat.bench.models import sibling_gemms, transformer
from polysat.commands.extract import run_extract
from polysat.tests.numeric import bind_env, random_inputs
from polysat.checker.randprog import random_program
from polysat.ir.evaluate import evaluate
from polysat.ir.tiny_json import dump_tiny

EX = sorted((pathlib.Path(__file__).resolve().parent.parent / "examples").glob("*.json"))


def broadcast_axes(v: np.ndarray) -> list:
    """Axes of extent > 1 along which v does not change."""
    out = []
    for ax, n in enumerate(v.shape):
        if n > 1:
            first = np.take(v, [0], axis=ax)
            if np.array_equal(np.broadcast_to(first, v.shape), v, equal_nan=True):
                out.append(ax)
    return out


def written_broadcasts(model, bind=None, seed: int = 3) -> list:
    """(kernel, node id, shape, axes) for every intermediate written to memory that is a broadcast."""
    x = run_extract(model, cost="model", bind=bind)["_extraction"]
    p = x.program
    rng = np.random.default_rng(seed)
    vals = evaluate(p, random_inputs(p, rng, bind_env(p, rng)), keep_all=True)
    outs = {nid for _, nid in p.outputs}
    bad = []
    for k in x.partition.kernels:
        for o in k.outputs:
            axes = [] if o in outs else broadcast_axes(vals[o])
            if axes:
                bad.append((k.name, o, vals[o].shape, axes))
    return bad


def test_the_oracle_sees_a_broadcast():
    v = np.broadcast_to(np.arange(3.0)[:, None], (3, 4))
    assert broadcast_axes(v) == [1] and broadcast_axes(np.random.default_rng(0).random((3, 4))) == []


@pytest.mark.parametrize("path", EX, ids=[p.stem for p in EX])
def test_no_example_partition_writes_a_broadcast(path):
    assert written_broadcasts(str(path)) == []


@pytest.mark.parametrize("model,bind", [
    (transformer(1, d_model=32, heads=2, d_ff=64), {"S": 16}),
    (transformer(2, d_model=32, heads=2, d_ff=64), {"S": 16}),
    (sibling_gemms(width=64), {"T": 32}),
], ids=["transformer_1", "transformer_2", "sibling_gemms"])
def test_no_bench_model_partition_writes_a_broadcast(model, bind):
    assert written_broadcasts(model, bind) == []


@pytest.mark.parametrize("seed", range(12))
def test_no_random_program_partition_writes_a_broadcast(seed):
    p = random_program(np.random.default_rng(seed))
    assert written_broadcasts(dump_tiny(p), seed=seed) == []
