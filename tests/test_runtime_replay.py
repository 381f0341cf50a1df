"""Record once, replay after (runtime/replay.py; docs/DESIGN.md §Runtime), checked on the host: the first call
of a shape set records its kernel launches bound to numpy arena views, later calls copy new inputs into the
same arena and replay the recording — the bookkeeping the GPU runs around a CUDA Graph. Outputs are compared
with the reference evaluator on the new inputs, so a replay that missed a copy (or ran stale addresses) fails.
"""
from __future__ import annotations

import numpy as np

from polysat.cli import random_inputs
from polysat.ir.diagnostics import diag
from polysat.ir.evaluate import evaluate
from polysat.pipeline import Compilation
from polysat.runtime.host import HostReplayRuntime
from polysat.runtime.model import Step, parameter_names


def _mlp(t, seed=0):
    c = Compilation("examples/mlp.json")
    return c, {k: v * 0.05 for k, v in random_inputs(c.program, {"T": t}, seed).items()}


def _same(got, want):
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=2e-3, atol=2e-3)


def test_the_second_call_replays_with_new_inputs_and_new_weights():
    c, ins = _mlp(7)
    rt = HostReplayRuntime(c.regions, parameter_names(c.doc))
    _same(rt.run(ins)["Y"], evaluate(c.program, ins)["Y"])
    assert len(rt.captures) == 1 and rt.replays == 0 and rt.pool.uploads == 4
    _, other = _mlp(7, seed=5)
    ins2 = {**ins, "X": other["X"]}
    _same(rt.run(ins2)["Y"], evaluate(c.program, ins2)["Y"])
    assert rt.replays == 1 and rt.pool.uploads == 4
    ins3 = {**ins2, "W2": -ins2["W2"]}
    _same(rt.run(ins3)["Y"], evaluate(c.program, ins3)["Y"])
    assert rt.replays == 2 and rt.pool.uploads == 5  # the new weights went into their slot; the recording stays


def test_each_shape_set_records_its_own_sequence_in_its_own_arena():
    c, a = _mlp(5)
    _, b = _mlp(9, seed=1)
    rt = HostReplayRuntime(c.regions, parameter_names(c.doc))
    for ins in (a, b, a, b):
        _same(rt.run(ins)["Y"], evaluate(c.program, ins)["Y"])
    assert len(rt.captures) == 2 and len(rt.arenas) == 2 and rt.replays == 2


def test_a_new_constant_pool_drops_the_recordings():
    c, ins = _mlp(5)
    rt = HostReplayRuntime(c.regions, parameter_names(c.doc))
    rt.run(ins)
    old = rt.pool.buffer
    rt.pool.slots = {}  # as if another set of parameters came: the next call lays a new pool out
    _same(rt.run(ins)["Y"], evaluate(c.program, ins)["Y"])
    assert rt.pool.buffer is not old and rt.replays == 0 and len(rt.captures) == 1
    _same(rt.run(ins)["Y"], evaluate(c.program, ins)["Y"])
    assert rt.replays == 1


def cpu_step_stays_eager(runtime_cls, capsys) -> None:
    """conv + max-pool with the pool forced onto the CPU: correct on every call, never recorded (shared with the
    GPU test, tests/test_runtime_gpu.py)."""
    c = Compilation("examples/conv_relu_maxpool.json")
    ins = {k: v * 0.25 for k, v in random_inputs(c.program, {}, 1).items()}
    rt = runtime_cls(c.regions, parameter_names(c.doc))
    rt.steps[-1] = Step(rt.steps[-1].region, None, diag("NoKernelTemplate", "region", "not packed row-major"))
    for _ in range(2):
        _same(rt.run(ins)["P"], evaluate(c.program, ins)["P"])
    assert not rt.captures and rt.replays == 0 and capsys.readouterr().err.count("runs on the CPU") == 2


def test_a_model_with_a_cpu_step_is_never_recorded(capsys):
    cpu_step_stays_eager(HostReplayRuntime, capsys)


def test_device_views_are_bounded_windows_of_their_buffer():
    """The GPU runtime's tensors (runtime/cuda.py) without a GPU: pointer arithmetic, reshape, interface."""
    import types

    import pytest

    from polysat.ir.dtypes import DType
    from polysat.runtime.cuda import _view
    buf = types.SimpleNamespace(ptr=1 << 20, nbytes=4096)
    v = _view(buf, 512, (4, 8), np.float16)
    assert v.ptr == (1 << 20) + 512 and v.nbytes == 64 and v.owner is buf
    w = v.reshape((32,))
    assert w.ptr == v.ptr and w.__cuda_array_interface__["shape"] == (32,)
    assert v.__cuda_array_interface__["data"] == (v.ptr, False) and v.__cuda_array_interface__["typestr"] == "<f2"
    assert _view(buf, 0, (2,), DType.bf16.np).__cuda_array_interface__["typestr"] == "<V2"
    with pytest.raises(IndexError):
        _view(buf, 4096 - 32, (64,), np.float16)
