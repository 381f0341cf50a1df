"""SIMT kernels run on the CPU (no GPU needed) against the reference evaluator and numpy oracles.

tests/simt_host.py builds each generated kernel with ``-DPOLYSAT_SIMT_HOST``: its own ``__host__ __device__``
passes (row decomposition, lane-strided element walk, predicated tails, vector loads / stores with the
alignment test, the reduction combine and the butterfly tree order) replayed by ``emulate``. Checked:
softmax / layernorm / row-softmax of scores / max-pool examples on shapes with tails for plans with one
lane per row, sub-warp and whole-warp groups, groups wider than a warp, scalar and vector steps; and
hypothesis-generated programs (elementwise chains, casts, WHERE, every movement op, SUM/MAX/MIN over any
axes) whose regions, whole or one per op, must bind to the SIMT kind and agree with the reference evaluator;
hypothesis-generated Softmax / LayerNorm / Reduce models over any axes under both costs, against numpy.
Pooling windows, contractions and several outputs are generated in test_simt_pool.py, test_simt_tiled.py
and test_simt_multi_output.py.
"""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
from hypothesis import given, settings, strategies as st

from polysat.backend.common.region_match import NoBind
from polysat.backend.simt.bind import bind as simt_bind
from polysat.backend.simt.plan import SimtPlan, candidates, search, stop_reason
from polysat.backend.simt.reference import random_inputs
from polysat.ir.dtypes import round_to
from polysat.ir.evaluate import evaluate
from polysat.ir.playback import playback
from polysat.egraph.region_synth import synthesize
from polysat.pipeline import Compilation

HERE = pathlib.Path(__file__).parent


_spec = importlib.util.spec_from_file_location("polysat_test_simt_host", HERE / "simt_host.py")
host = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(host)
oracle = host.oracle
rand = host.load("polysat_test_playback_random", "test_playback_random.py")
EXAMPLES = HERE.parent / "examples"
PLANS = [SimtPlan("sm80", 128, 1, 1), SimtPlan("sm80", 128, 4, 2), SimtPlan("sm80", 256, 32, 8),
         SimtPlan("sm80", 128, 128, 4), SimtPlan("sm80", 64, 64, 1),
         SimtPlan("sm80", 128, 4, 2, unroll=3), SimtPlan("sm80", 64, 64, 4, unroll=2)]  # steps issued ahead, tails


def _plans(spec) -> list:
    """The plans above the spec admits (the vector width its accesses allow), plus the searched best."""
    best = search(spec, "sm80", {}).best
    return [p for p in PLANS if stop_reason(spec, p) is None and p.key() != best.key()] + [best]


def _simt_regions(path: str) -> list:
    return [r for r in Compilation(str(EXAMPLES / path)).regions if _binds(r)]


def _binds(r) -> bool:
    from polysat.backend.kinds import bind
    return bind(r)[0].name == "simt"


def _inputs(spec, env, seed: int) -> dict:
    return random_inputs(spec, env, seed)


def _check(cases: list) -> None:
    """cases: (label, spec, env, inputs, oracle output or None); every plan of each spec emulated."""
    host.check_cases(cases, _plans)


def test_row_statistics_examples_match_numpy():
    cases = []
    (sm,) = _simt_regions("softmax.json")
    for r, c in ((5, 37), (3, 256), (2, 1)):
        spec = simt_bind(sm).spec
        env = {"R": r, "C": c}
        x = _inputs(spec, env, r * c)
        cases.append((f"softmax {r}x{c}", spec, env, x, oracle.softmax(x["X"].astype(np.float64), -1)))
    (ln,) = _simt_regions("layernorm.json")
    spec = simt_bind(ln).spec
    env = {"T": 3}
    x = _inputs(spec, env, 7)
    want = oracle.layernorm(x["X"].astype(np.float64), -1, 1e-5, x["gamma"].astype(np.float64),
                            x["beta"].astype(np.float64))
    cases.append(("layernorm 3x768", spec, env, x, want))
    (ars,) = _simt_regions("attention_row_softmax.json")
    spec = simt_bind(ars).spec
    env = {"B": 1, "H": 2, "M": 3, "N": 19, "D": 8}
    x = _inputs(spec, env, 3)
    s = np.einsum("bhmd,bhnd->bhmn", x["Q"].astype(np.float64), x["K"].astype(np.float64))
    cases.append(("row softmax of Q K^T", spec, env, x, oracle.softmax(s, -1)))
    _check(cases)


def test_max_pool_window_matches_numpy():
    (pool,) = [r for r in _simt_regions("conv_relu_maxpool.json") if "n12" in {b.name for b in r.inputs}]
    spec = simt_bind(pool).spec
    x = _inputs(spec, {}, 11)
    (name,) = spec.inputs
    want = oracle.maxpool2d(x[name].astype(np.float64), (2, 2), (2, 2))
    _check([("max-pool 2x2/2", spec, {}, x, want)])


def test_streamed_attention_region_matches_numpy():
    """A streamed softmax-weighted sum (the attention kind's region), bound by the SIMT kind directly: each
    output element walks its keys three times (max, sum, weighted sum)."""
    doc = oracle.model({"Q": ("fp16", [1, 2, "M", 16]), "K": ("fp16", [1, 2, "N", 16]), "V": ("fp16", [1, 2, "N", 8])},
                       [oracle.node("Attention", ["Q", "K", "V"], "O", causal=True)], ["O"], {"O": {"dtype": "fp16"}})
    (region,) = Compilation(doc, cost="model").regions
    spec = simt_bind(region).spec
    env = {"M": 5, "N": 11}
    x = _inputs(spec, env, 5)
    want = oracle.attention(*(x[n].astype(np.float64) for n in ("Q", "K", "V")), causal=True)
    _check([("streamed causal attention", spec, env, x, want)])


def test_plans_cover_lane_and_row_shapes():
    """Every candidate shape is a legal launch: rows per CTA * threads per row = CTA size <= 1024."""
    for p in candidates("sm80"):
        assert p.rows_per_block * p.group == p.block <= 1024 and (p.group <= 32 or p.rows_per_block == 1)


@settings(deadline=None, max_examples=6)
@given(rand.programs(), st.integers(0, 2 ** 16), st.booleans())
def test_generated_regions_bind_and_match_the_reference(program, seed, whole):
    part = rand.single_kernel(program) if whole else rand.finest(program)
    regions = synthesize(program, part)
    inputs = rand._inputs(program, seed)
    tensors = {**{k: np.asarray(v) for k, v in inputs.items()}, **playback(regions, inputs, keep_all=True)}
    ref = evaluate(program, inputs)
    cases = []
    for r in regions:
        b = simt_bind(r)
        if isinstance(b, NoBind):
            assert len(r.outputs) > 1, f"region {r.name} does not bind: {b.reason}"  # several outputs: not one kernel
            continue
        spec = b.spec
        x = {b.name: np.asarray(round_to(tensors[b.name], b.memref.dtype)).astype(b.memref.dtype.np)
             for b in r.inputs}
        want = ref.get(spec.c) if spec.out.program_output else None
        cases.append((f"region {r.name}", spec, {}, x, None if want is None else np.asarray(want, np.float64)))
    if cases:
        _check(cases)


@st.composite
def row_statistic_models(draw):
    """Softmax, LayerNorm or a Reduce over any axis (or axes) of a 2-D to 4-D tensor with odd sizes."""
    shape = draw(st.lists(st.integers(1, 11), min_size=2, max_size=4))
    r, dt = len(shape), draw(st.sampled_from(["fp32", "fp16", "bf16"]))
    op = draw(st.sampled_from(["softmax", "layernorm", "sum", "max", "min", "mean"]))
    if op == "softmax":
        axis = draw(st.integers(0, r - 1))
        return oracle.model({"X": (dt, shape)}, [oracle.node("Softmax", ["X"], "Y", axis=axis)], ["Y"]), \
            lambda x: oracle.softmax(x, axis)
    if op == "layernorm":
        axis = draw(st.integers(1, r - 1))
        return oracle.model({"X": (dt, shape)}, [oracle.node("LayerNorm", ["X"], "Y", axis=axis, eps=1e-5)], ["Y"]), \
            lambda x: oracle.layernorm(x, axis, 1e-5)
    axes = sorted(draw(st.sets(st.integers(0, r - 1), min_size=1, max_size=r - 1)))
    keep = draw(st.booleans())
    return oracle.model({"X": (dt, shape)}, [oracle.node("Reduce", ["X"], "Y", op=op, axes=axes, keepdim=keep)], ["Y"]), \
        lambda x: oracle.reduce(x, op, axes, keep)


@settings(deadline=None, max_examples=5)
@given(row_statistic_models(), st.sampled_from(["size", "model"]), st.integers(0, 2 ** 16))
def test_row_statistics_over_any_axis_match_numpy(case, cost, seed):
    """Every region of a Softmax / LayerNorm / Reduce over any axes binds to the SIMT kind; emulated on the
    searched plan and the fixed plan shapes it admits, it equals the region's playback and, for the region
    that writes the model's output, numpy."""
    doc, want_of = case
    c = Compilation(doc, cost=cost)
    x = {"X": np.random.default_rng(seed).uniform(-3, 3, doc["tensors"]["X"]["shape"]).astype(np.float32)}
    tensors = {**x, **playback(c.regions, x, keep_all=True)}
    xr = oracle.rounded(x["X"], doc["tensors"]["X"]["dtype"]).astype(np.float64)
    cases = []
    for r in c.regions:
        assert _binds(r), r.name
        spec = simt_bind(r).spec
        ins = {b.name: np.asarray(round_to(tensors[b.name], b.memref.dtype)).astype(b.memref.dtype.np) for b in r.inputs}
        want = want_of(xr) if spec.c == "Y" else None
        cases.append((f"region {r.name}", spec, {}, ins, want))
    _check(cases)
