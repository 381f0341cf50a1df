"""Every region of the examples, the bench MLP stack and the bench transformer gets a kernel (no E1504) for
sm80 and sm90, and every SIMT kernel among them builds with nvcc for sm_80 and sm_90a without spills; the
PTX of a row-softmax kernel holds the vector loads / stores and the warp shuffles its plan asks for.
No GPU needed.
"""
from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess

import pytest

from polysat.backend import stages
from polysat.backend.kinds import bind
from polysat.backend.common.nvcc import ARCH_FLAGS, nvcc_path
from polysat.backend.simt.bind import bind as simt_bind
from polysat.backend.simt.plan import SimtPlan
from polysat.backend.simt.render import render
from polysat.bench.models import mlp_stack, transformer
from polysat.pipeline import Compilation

HERE = pathlib.Path(__file__).parent
_spec = importlib.util.spec_from_file_location("polysat_test_oracle", HERE / "oracle.py")
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)
EXAMPLES = sorted((HERE.parent / "examples").glob("*.json"))
MODELS = {**{p.stem: str(p) for p in EXAMPLES}, "bench_mlp2": mlp_stack(2), "bench_transformer1": transformer(1)}


@pytest.fixture(scope="module")
def compiled() -> dict:
    return {name: Compilation(model).regions for name, model in MODELS.items()}


@pytest.mark.parametrize("arch", ["sm80", "sm90"])
def test_every_region_has_a_kernel(compiled, arch):
    for name, regions in compiled.items():
        sources = stages.kernel_sources(regions, arch)  # E1504 for any region without one
        assert len(sources) == len(regions), name


def test_the_conv_pool_example_runs_the_pool_as_a_simt_kernel(compiled):
    kinds = [bind(r)[0].name for r in compiled["conv_relu_maxpool"]]
    assert kinds == ["conv", "simt"]
    assert {bind(r)[0].name for r in compiled["softmax"] + compiled["layernorm"]} == {"simt"}


def test_every_simt_kernel_builds_without_spills(compiled):
    index = []
    for name, regions in compiled.items():
        for arch in ("sm80", "sm90"):
            for r, ks in zip(regions, stages.kernel_sources(regions, arch), strict=True):
                if ks.skeleton == "simt":
                    index.append((f"{name}/{r.name}", arch, ks))
    assert {label.split("/")[0] for label, _, _ in index} >= {"softmax", "layernorm", "attention_row_softmax",
                                                               "conv_relu_maxpool", "bench_transformer1"}
    bad = [(label, arch, rep.log[-1500:]) for label, arch, _ks, rep in oracle.nvcc_builds(index, "SIMT kernels")
           if not rep.ok or rep.spills]
    assert not bad, bad


def test_ptx_holds_vector_accesses_and_shuffles(tmp_path):
    exe = nvcc_path()
    assert exe, "nvcc is required for the compile checks"
    (region,) = Compilation(str(HERE.parent / "examples" / "softmax.json")).regions
    spec = simt_bind(region).spec
    # fp16 X and Y: 8 elements move as 4 x 32 bits, 4 elements as 4 x 16 bits (one 64-bit access)
    for plan, want in ((SimtPlan("sm80", 256, 32, 8), ("ld.global.v4.u32", "st.global.v4.u32", "shfl.sync.bfly")),
                       (SimtPlan("sm80", 256, 256, 4), ("ld.global.v4.u16", "st.global.v4.u16", "shfl.sync.bfly",
                                                        "bar.sync"))):
        src = tmp_path / f"{plan.key()}.cu"
        src.write_text(render(spec, plan).source)
        ptx = tmp_path / f"{plan.key()}.ptx"
        p = subprocess.run([exe, "-ptx", "-std=c++17", *ARCH_FLAGS["sm80"], "-o", str(ptx), str(src)],
                           capture_output=True, text=True, check=False)
        assert p.returncode == 0, p.stderr[-3000:]
        text = ptx.read_text()
        for instr in want:
            assert instr in text.replace(".nc", ""), (plan.key(), instr)


def test_plan_and_gpu_dumps_of_a_simt_region(tmp_path):
    """layernorm: two row statistics (mean, then the variance of the centred row), each a pass and a
    group reduction in the GPU IR, then the final pass; the plan lists the ranked candidates."""
    import json

    from polysat import cli
    assert cli.main(["compile", str(HERE.parent / "examples" / "layernorm.json"), "--dump=plan,gpu,cu",
                     "--out", str(tmp_path)]) == 0
    (plan,) = json.load(open(tmp_path / "plan.json"))["plans"]
    assert plan["kind"] == "simt" and plan["spec"]["outer"] == ["t"]
    assert [s["op"] for s in plan["spec"]["row_statistics"]] == ["sum", "sum"]
    chosen = plan["chosen"]
    assert chosen["rows_per_block"] * chosen["threads_per_row"] == chosen["block"]
    assert len(plan["ranked"]) > 10 and plan["ranked"][0]["time_s"] <= plan["ranked"][-1]["time_s"]
    (kernel,) = json.load(open(tmp_path / "gpu.json"))["kernels"]
    (row,) = kernel["gpu_ir"]["stmts"]
    ops = [next(iter(s)) for s in row["ForRow"]["body"]]
    assert ops == ["ForLaneStep", "GroupReduce", "ForLaneStep", "GroupReduce", "ForLaneStep"]


def test_a_bool_function_the_kernel_cannot_compute_is_refused_at_bind_with_its_reason():
    """or/and of bool values bind; another bool function (here sub, spelled into the region) is a NoBind
    with its reason at bind time, never an error while rendering."""
    from polysat.backend.common.region_match import NoBind
    from polysat.ir.region import region_json
    from polysat.ir.region_load import region_from_json
    doc = {"signature": {"inputs": ["x", "y"], "outputs": ["z"]},
           "tensors": {t: {"dtype": "bool", "shape": [4, 8]} for t in "xyz"},
           "graph": [{"op": "Elementwise", "name": "either", "inputs": ["x", "y"], "outputs": ["z"], "attrs": {"fn": "max"}}]}
    (r,) = Compilation(doc).regions
    assert not isinstance(simt_bind(r), NoBind)
    bad = region_from_json(json.loads(json.dumps(region_json(r)).replace('"max"', '"sub"')))
    no = simt_bind(bad)
    assert isinstance(no, NoBind) and "sub of bool values" in no.reason
