"""SIMT kernels that write several outputs, on the host (no GPU) against the reference evaluator and numpy.

A region whose values are both written and read on (a softmax that also writes its exponentials and row
sums, a LayerNorm that also writes its mean and rstd, a value with a column reduction of it) is one
kernel: the primary output (over the most axes) is walked, every other output is computed and written
once per element of its own, where the primary's axes it lacks are 0. Checked: hypothesis over shapes
with tails, dtypes and output sets, every plan shape; the whole-program regions of random programs with
several outputs; each kernel builds for sm_80 and sm_90a without spills.
"""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
from hypothesis import Phase, given, settings, strategies as st

from polysat.backend.common.region_match import NoBind
from polysat.backend.kinds import bind
from polysat.backend.simt.bind import bind as simt_bind
from polysat.backend.simt.plan import SimtPlan, search, stop_reason
from polysat.backend.simt.reference import random_inputs, references
from polysat.backend.simt.render import render
from polysat.egraph.region_synth import synthesize
from polysat.ir.dtypes import round_to
from polysat.ir.evaluate import evaluate
from polysat.pipeline import Compilation

HERE = pathlib.Path(__file__).parent
_spec = importlib.util.spec_from_file_location("polysat_test_simt_host", HERE / "simt_host.py")
host = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(host)
oracle = host.oracle
rand = host.load("polysat_test_playback_random", "test_playback_random.py")
SHAPES = [SimtPlan("sm80", 128, 1, 1), SimtPlan("sm80", 128, 4, 2), SimtPlan("sm80", 256, 32, 4),
          SimtPlan("sm80", 128, 128, 2), SimtPlan("sm80", 128, 8, 2, 2), SimtPlan("sm80", 128, 8, 4, unroll=2)]


def _plans(spec) -> list:
    best = search(spec, "sm80", {}).best
    return [p for p in SHAPES if stop_reason(spec, p) is None and p.key() != best.key()] + [best]


def _check(cases: list) -> list:
    """cases: (label, spec, inputs, {output: oracle array}); every output of every plan shape emulated and
    compared with playback and the oracles. Returns the kernel sources (for the build check)."""
    jobs, meta = [], []
    for label, spec, x, want in cases:
        assert len(spec.outputs) > 1, label
        for p in _plans(spec):
            jobs.append((render(spec, p), x, {}))
            meta.append((f"{label} {p.key()}", spec, x, want))
    for got, (label, spec, x, want) in zip(host.emulate_outputs(jobs), meta, strict=True):
        ref = references(spec, x, {})
        assert set(got) == set(spec.outputs)
        for name, arr in got.items():
            dt = spec.dtypes()[name].value
            oracle.assert_close(arr, ref[name].astype(np.float64), dt, f"{label} {name} vs playback")
            if name in want:
                oracle.assert_close(arr, np.asarray(want[name], np.float64).reshape(arr.shape), dt, f"{label} {name} vs oracle")
    return [ks for ks, _x, _e in jobs]


def _whole(doc: dict):
    """The program of doc as one region (every op in one kernel)."""
    c = Compilation(doc)
    (region,) = synthesize(c.program, rand.single_kernel(c.program))
    return c, region


def _softmax_parts(r: int, col: int, dt: str, extra: str) -> dict:
    n = oracle.node
    graph = [n("Elementwise", ["X"], "E", fn="exp"),
             n("Reduce", ["E"], "S", op="sum", axes=[1], keepdim=True, acc_dtype="fp32"),
             n("Elementwise", ["E", "S"], "P", fn="div")]
    outs = ["P", "E", "S"]
    if extra == "column_max":  # a reduction over the rows: an inline reduce written where the row is 0
        graph.append(n("Reduce", ["E"], "M", op="max", axes=[0], acc_dtype="fp32"))
        outs.append("M")
    elif extra == "transpose":  # the same axes in another order
        graph.append(n("Transpose", ["P"], "PT", perm=[1, 0]))
        outs.append("PT")
    return oracle.model({"X": (dt, [r, col])}, graph, outs)


@settings(deadline=None, max_examples=5, phases=(Phase.explicit, Phase.reuse, Phase.generate))
@given(st.integers(1, 9), st.integers(2, 70), st.sampled_from(["fp32", "fp16", "bf16"]),
       st.sampled_from(["none", "column_max", "transpose"]), st.integers(0, 2 ** 16))
def test_softmax_with_its_intermediates_writes_every_output(r, col, dt, extra, seed):
    c, region = _whole(_softmax_parts(r, col, dt, extra))
    b = simt_bind(region)
    assert not isinstance(b, NoBind), b.reason
    spec = b.spec
    x = random_inputs(spec, {}, seed)
    ref = evaluate(c.program, x)
    want = {name: ref[name] for name in spec.outputs if name in ref}
    xe = np.exp(x["X"].astype(np.float64))
    want.setdefault("S", xe.sum(1, keepdims=True))
    _check([(f"softmax parts {r}x{col} {dt} {extra}", spec, x, want)])


def test_layernorm_writes_its_mean_and_rstd():
    n = oracle.node
    graph = [n("Reduce", ["X"], "mean", op="mean", axes=[1], keepdim=True, acc_dtype="fp32"),
             n("Elementwise", ["X", "mean"], "xc", fn="sub"),
             n("Elementwise", ["xc", "xc"], "sq", fn="mul"),
             n("Reduce", ["sq"], "var", op="mean", axes=[1], keepdim=True, acc_dtype="fp32"),
             n("Elementwise", ["var", "eps"], "ve", fn="add"),
             n("Elementwise", ["ve"], "rstd", fn="rsqrt"),
             n("Elementwise", ["xc", "rstd"], "Y", fn="mul")]
    doc = oracle.model({"X": ("fp16", [5, 77]), "eps": ("fp32", [1])}, graph, ["Y", "mean", "rstd"])
    c, region = _whole(doc)
    spec = simt_bind(region).spec
    assert spec.c == "Y" and set(spec.outputs) == {"Y", "mean", "rstd"}
    x = random_inputs(spec, {}, 1)
    x["eps"] = np.full((1,), 1e-5, np.float32)
    x64 = x["X"].astype(np.float64)
    mu = x64.mean(1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x64 - mu) ** 2).mean(1, keepdims=True) + 1e-5)
    sources = _check([("layernorm + stats", spec, x, {"mean": mu, "rstd": rstd, "Y": (x64 - mu) * rstd})])
    index = [(ks.plan.key(), arch, render(spec, search(spec, arch, {}).best)) for arch in ("sm80", "sm90")
             for ks in sources[-1:]]
    bad = [(label, arch, rep.log[-1500:]) for label, arch, _ks, rep in oracle.nvcc_builds(index, "multi-output kernels")
           if not rep.ok or rep.spills]
    assert not bad, bad
    assert bind(region)[0].name == "simt"


@settings(deadline=None, max_examples=8, phases=(Phase.explicit, Phase.reuse, Phase.generate))
@given(rand.programs(), st.integers(0, 2 ** 16))
def test_whole_program_regions_with_several_outputs_match_the_reference(program, seed):
    """A random program as one kernel: when it writes several outputs and they lie within one output's
    axes, the SIMT kind takes it and every output agrees with the reference evaluator."""
    regions = synthesize(program, rand.single_kernel(program))
    inputs = rand._inputs(program, seed)
    ref = evaluate(program, inputs)
    cases = []
    for r in regions:
        b = simt_bind(r)
        if isinstance(b, NoBind):
            # the one thing a kernel refuses about several outputs: axes outside the primary's
            assert len(r.outputs) > 1 and "one kernel walks one output's axes" in b.reason, b.reason
            continue
        if len(r.outputs) < 2:
            continue
        x = {i.name: np.asarray(round_to(np.asarray(inputs[i.name]), i.memref.dtype)).astype(i.memref.dtype.np)
             for i in r.inputs}
        cases.append((f"region {r.name}", b.spec, x, {n: ref[n] for n in b.spec.outputs if n in ref}))
    if cases:
        _check(cases)


def test_the_model_runtime_gets_every_output_of_a_several_output_kernel():
    """The runtime's arena hands a SIMT kernel every output it writes (runtime/model.py), here on the host
    runtime (each kernel its kind's numpy meaning on arena views): the region is a kernel, not a CPU step,
    and every program output equals the reference evaluator's."""
    from polysat.runtime.host import host_runtime
    c, region = _whole(_softmax_parts(4, 33, "fp16", "column_max"))
    rt = host_runtime([region])
    assert rt.steps[0].kind is not None and rt.steps[0].kind.name == "simt"
    x = {"X": np.random.default_rng(2).uniform(-2, 2, (4, 33)).astype(np.float16)}
    got = rt.run(x)
    ref = evaluate(c.program, x)
    assert set(got) == {"P", "E", "S", "M"}
    for name, arr in got.items():
        oracle.assert_close(arr, np.asarray(ref[name], np.float64).reshape(arr.shape), "fp16", name)
