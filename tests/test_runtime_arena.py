"""The memory arena and the constant pool (runtime/arena.py, runtime/model.py, runtime/host.py; docs/DESIGN.md
§Runtime), checked on the CPU for real: the regions run with every tensor a view into ONE numpy byte arena at
its planned offset (fresh bytes are NaN patterns), so a wrong plan corrupts values; outputs are compared with
the reference evaluator (the meaning), not with playback's own output. The planner is checked against an
independent validity check, the live-bytes lower bound and a plain greedy-by-size first-fit written here.
"""
from __future__ import annotations

import dataclasses
import glob
import importlib.util
import pathlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from polysat.bench.models import mlp_stack, transformer
from polysat.cli import random_inputs
from polysat.egraph.region_synth import synthesize
from polysat.ir.evaluate import evaluate
from polysat.pipeline import Compilation
from polysat.runtime.arena import ALIGN, ArenaPlan, Block, align, conflicts, live_lower_bound, plan_arena
from polysat.runtime.host import host_runtime
from polysat.runtime.model import ModelRuntime, Step, execute, parameter_names, steps_of

HERE = pathlib.Path(__file__).resolve().parent


def _load(name):
    spec = importlib.util.spec_from_file_location(f"polysat_test_{name}", HERE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


random_programs = _load("test_playback_random")


# ---- the planner -------------------------------------------------------------------------------------

def first_fit_by_size(blocks) -> int:
    """The baseline, written again: largest first, each at the lowest offset free of every block it lives with."""
    placed, peak = [], 0
    for b in sorted(blocks, key=lambda b: -align(max(b.size, 1))):
        size, at = align(max(b.size, 1)), 0
        moved = True
        while moved:
            moved = False
            for o, s, other in placed:
                if b.start <= other.end and other.start <= b.end and at < o + s and o < at + size:
                    at, moved = o + s, True
        placed.append((at, size, b))
        peak = max(peak, at + size)
    return peak


@st.composite
def block_sets(draw):
    n = draw(st.integers(1, 14))
    out = []
    for k in range(n):
        s = draw(st.integers(-1, 8))
        out.append(Block(f"t{k}", draw(st.integers(0, 5000)), s, s + draw(st.integers(0, 6))))
    return out


@settings(deadline=None, max_examples=200)
@given(block_sets())
def test_the_plan_is_valid_and_between_the_live_bound_and_greedy_first_fit(blocks):
    plan = plan_arena(blocks)
    assert conflicts(plan) == []
    for b in blocks:  # checked again here, independently of conflicts()
        o = plan.offsets[b.name]
        assert o % ALIGN == 0 and o + b.size <= plan.peak
        for c in blocks:
            if c is not b and b.start <= c.end and c.start <= b.end:
                oc = plan.offsets[c.name]
                assert o + max(b.size, 1) <= oc or oc + max(c.size, 1) <= o, (b, c, plan.offsets)
    assert live_lower_bound(blocks) <= plan.peak <= first_fit_by_size(blocks) <= plan.total
    assert plan.peak % ALIGN == 0


def test_blocks_that_never_live_together_share_bytes():
    chain = [Block(f"t{k}", 1000, k, k + 1) for k in range(6)]  # each lives with its neighbours only
    plan = plan_arena(chain)
    assert plan.peak == 2 * align(1000) < plan.total == 6 * align(1000)
    assert ArenaPlan.from_json(plan.to_json()) == plan


def test_conflicts_finds_a_shared_byte_between_live_tensors():
    plan = plan_arena([Block("a", 512, 0, 2), Block("b", 512, 1, 3), Block("c", 512, 3, 4)])
    assert conflicts(plan) == []
    bad = dataclasses.replace(plan, offsets={**plan.offsets, "b": plan.offsets["a"] + ALIGN})
    assert ("a", "b") in conflicts(bad)
    assert conflicts(dataclasses.replace(plan, offsets={**plan.offsets, "c": 100})) != []  # misaligned


# ---- whole models in one numpy byte arena --------------------------------------------------------------

def _close(got: np.ndarray, ref: np.ndarray, what: str):
    random_programs.assert_close(got, ref, what)


def _check_model(model, bind: dict, playback_only: bool, seed: int = 0) -> ModelRuntime:
    c = Compilation(model)
    prog = c.program
    ins = random_inputs(prog, bind, seed)
    ins = {k: v * 0.25 for k, v in ins.items()}
    ref = evaluate(prog, ins)
    rt = host_runtime(c.regions, parameter_names(c.doc), playback_only=playback_only)
    for _ in range(2):  # the second call reuses the arena and the pool
        got = rt.run(ins)
        assert set(got) == set(ref)
        for k in ref:
            _close(got[k], ref[k], f"{model if isinstance(model, str) else 'model'} {k}")
    (mp,) = rt.plans.values()
    assert conflicts(mp.arena) == [] and mp.arena.peak <= mp.arena.total
    return rt


EXAMPLES = sorted(glob.glob(str(HERE.parent / "examples" / "*.json")))
SIZES = {"M": 13, "N": 17, "K": 19, "T": 7, "S": 9, "B": 2}


@pytest.mark.parametrize("model", EXAMPLES, ids=lambda p: pathlib.Path(p).stem)
@pytest.mark.parametrize("playback_only", [True, False], ids=["playback", "kinds"])
def test_examples_in_one_arena_equal_the_reference(model, playback_only):
    rt = _check_model(model, SIZES, playback_only)
    params = parameter_names(Compilation(model).doc)
    assert rt.pool.uploads == len({b.name for r in rt.regions for b in r.inputs} & params)  # once, not per call


@pytest.mark.parametrize("playback_only", [True, False], ids=["playback", "kinds"])
def test_bench_mlp_stack_in_one_arena_reuses_bytes(playback_only):
    rt = _check_model(mlp_stack(layers=4, width=32), {"T": 5}, playback_only)
    (mp,) = rt.plans.values()
    assert len(rt.regions) >= 4 and mp.arena.peak < mp.arena.total  # hidden layers share bytes
    assert rt.pool.uploads == 8


@pytest.mark.parametrize("playback_only", [True, False], ids=["playback", "kinds"])
def test_bench_transformer_in_one_arena_equals_the_reference(playback_only):
    rt = _check_model(transformer(blocks=1, d_model=16, heads=2, d_ff=32), {"S": 6}, playback_only)
    (mp,) = rt.plans.values()
    assert len(rt.regions) > 4 and mp.arena.peak < mp.arena.total


@settings(deadline=None, max_examples=25)
@given(random_programs.programs(), st.integers(0, 2 ** 16))
def test_random_programs_one_kernel_per_node_in_one_arena_equal_the_reference(program, seed):
    regions = synthesize(program, random_programs.finest(program))
    ins = random_programs._inputs(program, seed)
    ref = evaluate(program, ins)
    got = host_runtime(regions, playback_only=True).run(ins)
    assert set(got) == set(ref)
    for k in ref:
        _close(got[k], ref[k], f"output {k}")


def _residual_model():
    """X -> LayerNorm -> GEMM -> + X: X is read again after two kernels wrote."""
    t = {"X": {"dtype": "fp32", "shape": [8, 16]}, "W": {"dtype": "fp32", "shape": [16, 16]},
         "g": {"dtype": "fp32", "shape": [16]}, "b": {"dtype": "fp32", "shape": [16]}}
    g = [{"op": "LayerNorm", "name": "ln", "inputs": ["X", "g", "b"], "outputs": ["L"], "attrs": {"axis": -1}},
         {"op": "Elementwise", "name": "act", "fn": "relu", "inputs": ["L"], "outputs": ["R"]},
         {"op": "GEMM", "name": "proj", "inputs": ["R", "W"], "outputs": ["P"]},
         {"op": "Elementwise", "name": "res", "fn": "add", "inputs": ["P", "X"], "outputs": ["Y"]}]
    ins = [{"tensor": "X"}, {"tensor": "W", "role": "param"}, {"tensor": "g", "role": "param"},
           {"tensor": "b", "role": "param"}]
    return {"signature": {"inputs": ins, "outputs": [{"tensor": "Y"}]}, "tensors": t, "graph": g}


def test_an_overlapping_plan_is_detected_and_corrupts_the_outputs():
    """Mutation check: put a tensor written while another is still to be read on that other's bytes."""
    c = Compilation(_residual_model())
    ins = {k: v for k, v in random_inputs(c.program, {}, 3).items()}
    ref = evaluate(c.program, ins)
    rt = host_runtime(c.regions, parameter_names(c.doc), playback_only=True)
    good = rt.run(ins)
    _close(good["Y"], ref["Y"], "planned arena")
    (key, mp), = rt.plans.items()
    blocks = {b.name: b for b in mp.arena.blocks}
    pairs = [(a, b) for a in blocks.values() for b in blocks.values()
             if a.start < b.start <= a.end and b.start < a.end]  # b is written while a is still to be read
    assert pairs, "the model should keep a tensor live across a later write"
    a, b = pairs[0]
    bad_arena = dataclasses.replace(mp.arena, offsets={**mp.arena.offsets, b.name: mp.arena.offsets[a.name]})
    assert (a.name, b.name) in conflicts(bad_arena) or (b.name, a.name) in conflicts(bad_arena)
    bad = dataclasses.replace(mp, arena=bad_arena)
    got = execute(rt.steps, bad, ins, rt.mem, rt.arena(key), rt.pool)
    assert not np.allclose(got["Y"], ref["Y"], rtol=1e-3, atol=1e-3, equal_nan=True), "a clobbered tensor went unnoticed"


def test_parameters_come_from_the_signature_role_and_the_imported_weights():
    doc = {"signature": {"inputs": [{"tensor": "X"}, {"tensor": "W", "role": "param"}]}, "parameters": {"B": [1.0]}}
    assert parameter_names(doc) == {"W", "B"}
    assert parameter_names({"uops": []}) == frozenset()


def test_the_constant_pool_copies_a_parameter_again_only_when_given_another_array():
    c = Compilation("examples/mlp.json")
    ins = {k: v * 0.05 for k, v in random_inputs(c.program, {"T": 5}, 0).items()}
    rt = host_runtime(c.regions, parameter_names(c.doc))
    first = rt.run(ins)
    assert rt.pool.uploads == 4
    rt.run(ins)
    assert rt.pool.uploads == 4
    w1 = ins["W1"] * 2
    second = rt.run({**ins, "W1": w1})
    assert rt.pool.uploads == 5
    ref = evaluate(c.program, {**ins, "W1": w1})
    _close(second["Y"], ref["Y"], "after a new W1")
    assert not np.allclose(first["Y"].astype(np.float32), second["Y"].astype(np.float32))


def test_a_region_no_kind_takes_runs_on_the_cpu_inside_the_arena_and_says_so(capsys):
    from polysat.ir.diagnostics import diag
    c = Compilation("examples/conv_relu_maxpool.json")
    ins = {k: v * 0.25 for k, v in random_inputs(c.program, {}, 1).items()}
    steps = steps_of(c.regions)
    why = diag("NoKernelTemplate", "region k1", "an output that is not packed row-major")
    steps[-1] = Step(steps[-1].region, None, why)
    from polysat.runtime.host import host_memory
    rt = ModelRuntime(steps, host_memory(), parameter_names(c.doc))
    got = rt.run(ins)
    err = capsys.readouterr().err
    assert f"region {steps[-1].region.name} has no CUDA kernel (E1504" in err and "same arena" in err
    _close(got["P"], evaluate(c.program, ins)["P"], "conv kernel + pool on the CPU")
