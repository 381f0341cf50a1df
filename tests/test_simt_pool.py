"""Pooling windows: a standalone MaxPool2D / AvgPool2D and conv + ReLU + max-pool under either cost get a
kernel of a proper kind, and it computes what numpy does (no GPU needed).

A pooling window is a Reduce keeping every output axis: the SIMT kind computes it as a register micro-tile
(TM output rows by TN output columns per thread, the window walked once per tile) or, when the roofline
prices it faster, one output element per row group whose lanes share the window; either way a searched plan.
Checked: hypothesis over kernel, stride, dilation, padding, count_include_pad, shapes and dtypes, both
costs, host emulation against numpy and the reference evaluator; conv + ReLU + max-pool binds to
``conv`` then ``simt`` under ``--cost size`` and to ``conv_pool`` under ``--cost model``, and every
kernel of both builds for sm_80 and sm_90a without spills.
"""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
from hypothesis import Phase, given, settings, strategies as st

from polysat.backend import stages
from polysat.backend.kinds import bind
from polysat.backend.simt.access import tiled_reduces
from polysat.backend.simt.plan import SimtPlan, search, stop_reason
from polysat.backend.simt.reference import random_inputs, reference
from polysat.backend.simt.render import render
from polysat.ir.evaluate import evaluate
from polysat.pipeline import Compilation

HERE = pathlib.Path(__file__).parent
_spec = importlib.util.spec_from_file_location("polysat_test_simt_host", HERE / "simt_host.py")
host = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(host)
oracle = host.oracle
SHAPES = [SimtPlan("sm80", 128, 1, 1, 1), SimtPlan("sm80", 128, 8, 2, 2), SimtPlan("sm80", 128, 32, 4, 4)]


def pool_np(x: np.ndarray, op: str, k: int, s: int, d: int, p: int, include: bool) -> np.ndarray:
    """Max or average of each dilated window of x (N, C, H, W) padded by p on every side (-inf for max,
    zeros for avg; avg divides by the window's taps, the padded ones counted when include)."""
    n, c, h, w = x.shape
    fill = -np.inf if op == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=fill)
    ones = np.pad(np.ones((h, w)), p, constant_values=1.0 if include else 0.0)
    ho = (h + 2 * p - d * (k - 1) - 1) // s + 1
    wo = (w + 2 * p - d * (k - 1) - 1) // s + 1
    y = np.full((n, c, ho, wo), fill)
    cnt = np.zeros((ho, wo))
    for i in range(k):
        for j in range(k):
            win = xp[:, :, i * d: i * d + s * (ho - 1) + 1: s, j * d: j * d + s * (wo - 1) + 1: s]
            y = np.maximum(y, win) if op == "max" else y + win
            cnt += ones[i * d: i * d + s * (ho - 1) + 1: s, j * d: j * d + s * (wo - 1) + 1: s]
    return y if op == "max" else y / cnt


def _model(op: str, shape, dt: str, k: int, s: int, d: int, p: int, include: bool) -> dict:
    attrs = {"kernel": k, "stride": s, "dilation": d, "pad": p}
    if op == "avg":
        attrs["count_include_pad"] = include
    node = oracle.node("MaxPool2D" if op == "max" else "AvgPool2D", ["X"], "Y", **attrs)
    return oracle.model({"X": (dt, shape)}, [node], ["Y"])


@settings(deadline=None, max_examples=6, phases=(Phase.explicit, Phase.reuse, Phase.generate))
@given(st.sampled_from(["max", "avg"]), st.integers(1, 2), st.integers(1, 5), st.integers(5, 19), st.integers(5, 19),
       st.sampled_from(["fp16", "fp32", "bf16"]), st.integers(2, 3), st.integers(1, 2), st.integers(1, 2),
       st.integers(0, 1), st.booleans(), st.sampled_from(["size", "model"]), st.integers(0, 2 ** 16))
def test_a_standalone_pool_is_a_simt_kernel_equal_to_numpy(op, n, c, h, w, dt, k, s, d, p, include, cost, seed):
    doc = _model(op, [n, c, h, w], dt, k, s, d, p, include)
    comp = Compilation(doc, cost=cost)
    assert len(stages.kernel_sources(comp.regions, "sm90")) == len(comp.regions)  # E1504 for a region without one
    jobs, meta = [], []
    x = None
    for r in comp.regions:
        kind, b = bind(r)
        assert kind.name == "simt", (r.name, kind.name)
        spec = b.spec
        if not (tiled_reduces(spec) or spec.stats()):  # no window here (a cast, the count's division)
            continue
        x = random_inputs(spec, {}, seed)
        for plan in [q for q in SHAPES if stop_reason(spec, q) is None] + [search(spec, "sm80", {}).best]:
            jobs.append((render(spec, plan), x, {}))
            meta.append((plan.key(), spec, x))
    assert jobs, "no region computes the window"
    if len(comp.regions) == 1:
        (name,) = meta[0][1].inputs
        want = pool_np(meta[0][2][name].astype(np.float64), op, k, s, d, p, include)
        ref = evaluate(comp.program, {"X": meta[0][2][name]})["Y"]
        oracle.assert_close(np.asarray(ref, np.float64), want, dt, "reference evaluator vs numpy")
    else:
        want = None
    for got, (key, spec, xx) in zip(host.emulate_many(jobs), meta, strict=True):
        out_dt = spec.dtypes()[spec.c].value
        oracle.assert_close(got, reference(spec, xx, {}).astype(np.float64), out_dt, f"{op} pool {key} vs playback")
        if want is not None:
            oracle.assert_close(got, want.reshape(got.shape), out_dt, f"{op} pool {key} vs numpy")


def test_conv_relu_maxpool_binds_and_builds_under_either_cost():
    model = str(HERE.parent / "examples" / "conv_relu_maxpool.json")
    index = []
    for cost, kinds in (("size", ["conv", "simt"]), ("model", ["conv_pool"])):
        regions = Compilation(model, cost=cost).regions
        assert [bind(r)[0].name for r in regions] == kinds, cost
        for arch in ("sm80", "sm90"):
            for r, ks in zip(regions, stages.kernel_sources(regions, arch), strict=True):
                index.append((f"{cost}/{r.name}/{ks.skeleton}", arch, ks))
    bad = [(label, arch, rep.log[-1500:]) for label, arch, _ks, rep in oracle.nvcc_builds(index, "conv + pool kernels")
           if not rep.ok or rep.spills]
    assert not bad, bad
