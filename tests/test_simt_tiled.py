"""SIMT contractions as register micro-tiles, on the host (no GPU) against numpy and the reference evaluator.

A region whose final pass reaches a Reduce that is not a row statistic (a matmul, a vecmat, a matvec, a
contraction with K or N below the MMA tile, an fp32 contraction, a pooling window) is computed in TM x TN
micro-tiles: TM rows along the innermost outer axis by TN consecutive elements of a lane step, one fp32
accumulator per point, each operand value loaded once per tile row or column. Checked: hypothesis over
shapes with tails (TM and TN not dividing M and N), dtypes and epilogues, every plan shape from one
element per thread to 4 x 4 tiles; the bench transformer's SIMT contractions (attention's P V and the
output projection under ``--cost size``) choose a tiled plan and agree with the reference evaluator; the
tiled kernels build for sm_80 and sm_90a without spills.
"""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
from hypothesis import Phase, given, settings, strategies as st

from polysat.backend.kinds import bind
from polysat.backend.simt.access import tiled_reduces
from polysat.backend.simt.bind import bind as simt_bind
from polysat.backend.simt.plan import SimtPlan, search, stop_reason
from polysat.backend.simt.reference import random_inputs
from polysat.backend.simt.render import render
from polysat.bench.models import transformer
from polysat.ir.evaluate import evaluate
from polysat.ir.playback import playback
from polysat.pipeline import Compilation

HERE = pathlib.Path(__file__).parent
_spec = importlib.util.spec_from_file_location("polysat_test_simt_host", HERE / "simt_host.py")
host = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(host)
oracle = host.oracle
SHAPES = [SimtPlan("sm80", 128, 1, 1, 1), SimtPlan("sm80", 128, 4, 4, 2), SimtPlan("sm80", 128, 32, 2, 4),
          SimtPlan("sm80", 64, 64, 4, 4), SimtPlan("sm80", 128, 8, 1, 4), SimtPlan("sm80", 256, 32, 8, 1)]


def _plans(spec) -> list:
    best = search(spec, "sm80", {}).best
    return [p for p in SHAPES if stop_reason(spec, p) is None and p.key() != best.key()] + [best]


def _tiled(label: str, spec) -> None:
    assert tiled_reduces(spec), f"{label}: the final pass is not tiled"


def _emulate(cases: list) -> None:
    """cases: (label, spec, env, inputs, numpy oracle or None); every plan shape of each spec emulated."""
    host.check_cases(cases, _plans, _tiled)


def _gemm_model(a_shape, b_shape, dt: str, epilogue: str) -> dict:
    graph = [oracle.node("GEMM", ["A", "B"], "C", acc_dtype="fp32")]
    outs = "C"
    if epilogue == "bias_relu":
        graph += [oracle.node("Elementwise", ["C", "bias"], "Cb", fn="add"),
                  oracle.node("Elementwise", ["Cb"], "Y", fn="relu")]
        outs = "Y"
    inputs = {"A": (dt, a_shape), "B": (dt, b_shape)}
    if epilogue == "bias_relu":
        inputs["bias"] = ("fp32", [b_shape[-1]])
    return oracle.model(inputs, graph, [outs])


@settings(deadline=None, max_examples=5, phases=(Phase.explicit, Phase.reuse, Phase.generate))
@given(st.integers(2, 13), st.integers(2, 37), st.integers(2, 40), st.sampled_from(["fp32", "fp16", "bf16"]),
       st.sampled_from(["none", "bias_relu"]), st.sampled_from(["matmul", "vecmat", "batched"]),
       st.integers(0, 2 ** 16))
def test_contractions_of_any_shape_match_numpy(m, n, k, dt, epilogue, form, seed):
    a_shape = {"matmul": [m, k], "vecmat": [k], "batched": [2, m, k]}[form]
    doc = _gemm_model(a_shape, [k, n], dt, epilogue)
    c = Compilation(doc)
    (region,) = c.regions
    spec = simt_bind(region).spec
    x = random_inputs(spec, {}, seed)
    ref = evaluate(c.program, {**x})
    (out,) = [b.name for b in region.outputs]
    want = np.asarray(ref[out], np.float64).reshape(spec.shapes({})[spec.c])
    a, b = x["A"].astype(np.float64), x["B"].astype(np.float64)
    np_want = a @ b
    if epilogue == "bias_relu":
        np_want = np.maximum(np_want + x["bias"].astype(np.float64), 0.0)
    oracle.assert_close(want, np_want.reshape(want.shape), spec.dtypes()[spec.c].value, "reference vs numpy")
    _emulate([(f"{form} {m}x{n}x{k} {dt} {epilogue}", spec, {}, x, np_want.reshape(want.shape))])


def test_matvec_and_a_skinny_contraction_match_numpy():
    """A matvec (one output column: rows reduced inline, or one row per element reduced by the group) and
    a contraction with K and N below the MMA tile (fp16 operands the tensor-core kinds would also take)."""
    cases = []
    for label, a_shape, b_shape in (("matvec", [19, 33], [33]), ("skinny", [70, 5], [5, 3])):
        doc = _gemm_model(a_shape, b_shape, "fp16", "none")
        (region,) = Compilation(doc).regions
        for spec in {simt_bind(region).spec}:
            if not tiled_reduces(spec):
                continue
            x = random_inputs(spec, {}, 3)
            want = (x["A"].astype(np.float64) @ x["B"].astype(np.float64)).reshape(spec.shapes({})[spec.c])
            cases.append((label, spec, {}, x, want))
    assert cases
    _emulate(cases)


def _transformer_contractions(seq: int) -> tuple[list, dict]:
    """The SIMT regions with a tiled final pass (--cost size) of a small fp32 bench transformer (fp32
    operands: no tensor-core kind takes its contractions), with their inputs at sequence length seq as
    playback makes them."""
    doc = transformer(1, d_model=64, heads=2, d_ff=128, dtype="fp32")
    c = Compilation(doc)
    rng = np.random.default_rng(0)
    inputs = {}
    for name, t in doc["tensors"].items():
        if name in {i["tensor"] for i in doc["signature"]["inputs"]}:
            shape = [seq if d == "S" else d for d in t["shape"]]
            inputs[name] = rng.uniform(-1, 1, size=shape).astype(np.float32)
    tensors = {**inputs, **playback(c.regions, inputs, keep_all=True)}
    return [r for r in c.regions if bind(r)[0].name == "simt" and tiled_reduces(simt_bind(r).spec)], tensors


def test_bench_transformer_contractions_choose_a_micro_tile_and_match_the_reference():
    regions, tensors = _transformer_contractions(37)
    assert regions, [r.name for r in regions]
    cases = []
    for r in regions:
        spec = simt_bind(r).spec
        best = search(spec, "sm90", {}).best
        assert best.tm * best.vec > 1, (r.name, best.key())  # the searched plan reuses operands in registers
        x = {b.name: np.asarray(tensors[b.name]).astype(b.memref.dtype.np) for b in r.inputs}
        cases.append((f"transformer {r.name}", spec, {"S": 37}, x, None))
    _emulate(cases)


def test_tiled_kernels_build_without_spills():
    regions, _ = _transformer_contractions(8)
    index = []
    for r in regions:
        spec = simt_bind(r).spec
        for arch in ("sm80", "sm90"):
            best = search(spec, arch, {}).best
            for p in {best, SimtPlan(arch, 128, 32, 4, 4)}:
                if stop_reason(spec, p) is None:
                    index.append((f"{r.name}/{p.key()}", arch, render(spec, p)))
    bad = [(label, arch, rep.log[-1500:]) for label, arch, _ks, rep in oracle.nvcc_builds(index, "tiled SIMT kernels")
           if not rep.ok or rep.spills]
    assert not bad, bad
