"""Every region of every model we ship or test gets a kernel for sm80 and sm90 under both costs, and a
representative set of those kernels builds with nvcc without spills (no GPU needed).

The models (bench/kinds_models.py): the examples, the bench MLP stack and transformer, and one or more
models per frontend op (every op of the lowering table, with the edge cases tests/test_frontend_ops.py
draws; of those that differ only in their float dtype, one each), each compiled with ``--cost size`` and ``--cost model``; the ONNX architectures of examples/
under ``--cost size`` (TEST_COSTS). Every region is bound to its kind and rendered for both archs (what
``--dump=cu`` writes). No region is E1504: one that reads through run-time indices (a Gather by an index
input) is a SIMT kernel (tests/test_simt_gather.py). The representative build: per (kind, arch), the distinct kernels of distinct plan
shapes, a few each (the exhaustive build of every distinct kernel is ``python -m polysat.bench.kinds_build``).
"""
from __future__ import annotations

import importlib.util
import pathlib

import pytest

from polysat.bench.kinds_build import kernels
from polysat.bench.kinds_models import GROUPS, frontend_op_models, groups, ops_of

HERE = pathlib.Path(__file__).parent
_spec = importlib.util.spec_from_file_location("polysat_test_oracle", HERE / "oracle.py")
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)

ARCHS = ["sm80", "sm90"]
COSTS = ["size", "model"]
# the imported architectures (fp32 graphs of 7 to 12 regions) take 10 to 60 s each to compile under --cost
# model and 5 to 30 s under --cost size: here the ONNX ones under --cost size; the bench (python -m
# polysat.bench.kinds_build) compiles them and their torch.export twins under both costs
TEST_COSTS = {"onnx": ["size"], "torch": []}
TESTED = [g for g in GROUPS if TEST_COSTS.get(g, COSTS)]
# models that do not compile today for a reason outside the backend, each with the text of its diagnostic;
# the test fails when one starts compiling (then delete it here)
KNOWN_FAILURES: dict = {}
PER_KIND = 4  # distinct plan shapes built per (kind, arch)


@pytest.fixture(scope="module")
def found() -> dict:
    models = {g: frontend_op_models(full=False) if g == "ops" else groups([g]) for g in TESTED}
    return {(g, c): kernels(models[g], ARCHS, [c]) for g in TESTED for c in TEST_COSTS.get(g, COSTS)}


def test_every_frontend_op_has_a_model():
    from polysat.frontend import lower_elementwise, lower_gather, lower_linear, lower_movement, lower_resize, lower_window  # noqa: F401
    from polysat.frontend.lower import LOWERINGS
    covered = set().union(*(ops_of(d) for d in frontend_op_models().values()))
    assert set(LOWERINGS) <= covered, sorted(set(LOWERINGS) - covered)


@pytest.mark.parametrize("group", TESTED)
def test_every_region_has_a_kernel_under_both_costs(found, group):
    for cost in TEST_COSTS.get(group, COSTS):
        res = found[(group, cost)]
        failed = {(f["model"], f["cost"]): f["error"] for f in res["failed"]}
        for key, what in KNOWN_FAILURES.items():
            if key in failed:
                assert what in failed.pop(key), failed
        assert not failed, failed
        assert not res["no_kernel"], res["no_kernel"]
        assert res["rows"], (group, cost)
        # both archs, every bound region
        per_arch = {a: sum(r["arch"] == a for r in res["rows"]) for a in ARCHS}
        assert per_arch["sm80"] == per_arch["sm90"] > 0, per_arch


def test_known_failures_still_fail(found):
    """A known failure that starts compiling must leave KNOWN_FAILURES (so this list cannot hide a fixed gap)."""
    for (model, cost), what in KNOWN_FAILURES.items():
        assert any(f["model"] == model and what in f["error"] for (_g, c), res in found.items()
                   if c == cost for f in res["failed"]), model


def test_the_gather_models_run_their_gathers_as_simt_kernels(found):
    rows = [r for r in found[("ops", "size")]["rows"] if r["model"] in ("gather_runtime_indices", "gather_elements")]
    gathers = {(r["model"], r["arch"]) for r in rows if r["region"].startswith("gather_") and r["kind"] == "simt"}
    assert gathers == {(m, a) for m in ("gather_runtime_indices", "gather_elements") for a in ARCHS}, rows


def test_every_kind_appears(found):
    kinds = {r["kind"] for res in found.values() for r in res["rows"]}
    assert kinds >= {"simt", "gemm", "conv", "conv_pool", "attention", "softmax_scores"}, kinds


def test_a_representative_kernel_set_builds_without_spills(found):
    sources, plans = {}, {}
    for res in found.values():
        sources.update(res["sources"])
        for r in res["rows"]:
            plans.setdefault(r["kernel"], r["plan"])
    pick: dict = {}
    for digest in sorted(sources):
        kind, arch, _src, _smem = sources[digest]
        chosen = pick.setdefault((kind, arch), {})
        if len(chosen) < PER_KIND and plans[digest] not in chosen:
            chosen[plans[digest]] = digest
    index = [(f"{kind}/{plan}", arch, _Src(sources[d][2]))
             for (kind, arch), chosen in sorted(pick.items()) for plan, d in chosen.items()]
    bad = [(label, arch, rep.log[-1500:]) for label, arch, _ks, rep in oracle.nvcc_builds(index, "kernels per kind")
           if not rep.ok or rep.spills]
    assert not bad, bad


class _Src:
    def __init__(self, source: str):
        self.source = source


def test_an_element_that_walks_a_loop_of_its_own_gets_at_most_256_threads():
    """A residual + LayerNorm over an fp32 contraction is one SIMT kernel whose elements each walk the
    contraction inline: a CTA wider than 256 threads (64 registers a thread under its launch bounds) is
    pruned with the reason (the imported BERT's such kernel spilled at 1024 threads); a softmax row, whose
    elements walk no loop, keeps the wide CTAs."""
    from polysat.backend.simt.bind import bind as simt_bind
    from polysat.backend.simt.plan import candidates, stop_reason
    from polysat.pipeline import Compilation
    doc = oracle.model({"X": ("fp32", [16, 64]), "A": ("fp32", [16, 64]), "W": ("fp32", [64, 64]), "b": ("fp32", [64])},
                       [oracle.node("GEMM", ["A", "W"], "P"), oracle.node("Elementwise", ["P", "b"], "Q", fn="add"),
                        oracle.node("Elementwise", ["X", "Q"], "R", fn="add"),
                        oracle.node("LayerNorm", ["R"], "Y", eps=1e-5)], ["Y"])
    (region,) = Compilation(doc).regions
    spec = simt_bind(region).spec
    assert len(spec.stats()) == 2
    wide = [p for p in candidates("sm80", spec) if p.block > 256]
    assert wide and all("registers" in (stop_reason(spec, p) or "") for p in wide)
    (sm,) = Compilation(str(HERE.parent / "examples" / "softmax.json")).regions
    sspec = simt_bind(sm).spec
    assert any(stop_reason(sspec, p) is None for p in candidates("sm80", sspec) if p.block == 1024)
