"""The backend stages over extracted regions (backend/stages.py): plan / gpu / cu dumps, compile checks of every
region's kernel through the pipeline, the region runner, and `polysat run --target cuda` on a GPU (docs/DESIGN.md
§Backend).

Compile checks need nvcc only (no GPU): each region's kernel builds with -arch=sm_80 and with
-gencode=arch=compute_90a,code=sm_90a, ptxas reports 0 spill bytes and the PTX holds the skeleton's
instructions. GPU tests are marked ``gpu`` and skipped only when no CUDA GPU is visible.
"""
import importlib.util
import json
import os
import pathlib
import re

import numpy as np
import pytest

from polysat import cli
from polysat.backend import kinds, stages
from polysat.runtime import regions as device_run
from polysat.backend.gemm.bind import bind as gemm_binding
from polysat.backend.common.nvcc import missing_instructions, REQUIRED_PTX
from polysat.backend.common.gpu import cuda_available
from polysat.ir.diagnostics import PolysatError
from polysat.ir.playback import playback
from polysat.ir.region import region_json
from polysat.ir.region_load import region_from_json
from polysat.pipeline import Compilation

_oracle_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_oracle_spec)
_oracle_spec.loader.exec_module(oracle)


def gemm_model(a_shape, b_shape, dt="fp16", bias=None, trans_b=False):
    """Frontend IR: C = A @ B (+ bias of shape `bias`; bias="A" adds A itself: a residual)."""
    t = {"A": {"dtype": dt, "shape": a_shape}, "B": {"dtype": dt, "shape": b_shape}}
    g = [{"op": "GEMM", "name": "g", "inputs": ["A", "B"], "outputs": ["C0"], "attrs": {"acc_dtype": "fp32", "trans_b": trans_b}}]
    ins = [{"tensor": "A"}, {"tensor": "B"}]
    out = "C0"
    if bias is not None:
        if bias != "A":
            t["bias"] = {"dtype": dt, "shape": bias}
            ins.append({"tensor": "bias"})
        g.append({"op": "Elementwise", "name": "b", "fn": "add", "inputs": ["C0", "bias" if bias != "A" else "A"],
                  "outputs": ["C1"]})
        out = "C1"
    t[out] = {"dtype": dt}
    return {"signature": {"inputs": ins, "outputs": [{"tensor": out}]}, "tensors": t, "graph": g}


MODELS = {
    "gemm": gemm_model(["M", "K"], ["K", "N"]),
    "gemm_bias_relu": "examples/gemm_bias_relu.json",
    "batched": gemm_model([4, 256, 128], [4, 128, 192]),
    "bf16_symbolic": gemm_model(["M", "K"], ["K", "N"], "bf16", bias=["N"]),
    "mlp": "examples/mlp.json",
    "self_residual": gemm_model([256, 128], [128, 128], bias="A"),  # A is operand and residual
}
N_REGIONS = {"gemm": 1, "gemm_bias_relu": 1, "batched": 1, "bf16_symbolic": 1, "mlp": 2, "self_residual": 1}
_COMP: dict = {}


def regions(key):
    if key not in _COMP:
        _COMP[key] = Compilation(MODELS[key]).regions
    return _COMP[key]


# ---- dumps -----------------------------------------------------------------------------------------

PLAN_FIELDS = ("tile", "stages", "bind", "warp_tile", "cache", "vectorize", "predicate_tail", "epilogue", "arch",
               "layout_hints", "algo_choice", "local_edges", "async", "barrier_model")


@pytest.mark.parametrize("arch", ["sm80", "sm90"])
def test_plan_json_has_one_section_8_1_plan_per_region_with_ranked_candidates(arch):
    doc = stages.plan_json(regions("mlp"), arch)
    json.dumps(doc)
    assert doc["arch"] == arch and [p["region"] for p in doc["plans"]] == [r.name for r in regions("mlp")]
    for p, r in zip(doc["plans"], regions("mlp")):
        assert p["spec"] == gemm_binding(r).spec.to_json()
        for f in PLAN_FIELDS:
            assert f in p["chosen"], (f, sorted(p["chosen"]))
        assert p["chosen"]["arch"] == arch
        assert p["ranked"] and len(p["ranked"]) + len(p["pruned"]) >= 10


@pytest.mark.parametrize("arch", ["sm80", "sm90"])
def test_gpu_json_is_the_skeleton_of_the_chosen_plan(arch):
    doc = stages.gpu_json(regions("gemm_bias_relu"), arch)
    (k,) = doc["kernels"]
    text = json.dumps(k)
    stmts = set(re.findall(r'\{"([A-Z]\w+)": \{', text))
    want = {"CpAsync", "CommitGroup", "LdMatrix", "MmaSync"} if arch == "sm80" else {"TmaLoad", "MBarrierInit", "Wgmma"}
    assert want <= stmts and {"Epilogue", "StGlobalVec"} <= stmts, sorted(stmts)
    assert {"TokLoad", "TokCompute", "TokEpilogue"} <= set(re.findall(r'"token_kind": "(\w+)"', text))
    (epi,) = re.findall(r'"Epilogue": \{"acc": "acc", "ops": (\[[^\]]*\])', text)
    assert [o["op"] for o in json.loads(epi)] == ["bias", "relu", "cast"]


def test_write_cu_writes_one_standalone_kernel_per_region(tmp_path):
    paths = stages.write_cu(regions("mlp"), "sm90", str(tmp_path))
    assert len(paths) == 2 and len(set(paths)) == 2
    for p in paths:
        src = open(p, encoding="utf-8").read()
        assert "__global__" in src and "#include" in src and p.endswith(".cu")


def test_cli_compile_dumps_plan_gpu_and_cu(tmp_path):
    rc = cli.main(["compile", "examples/mlp.json", "--dump=plan,gpu,cu", "--out", str(tmp_path)])
    assert rc == 0
    cu = json.load(open(tmp_path / "cu.json"))
    assert len(cu["files"]) == 2 and all(os.path.exists(f) for f in cu["files"])
    assert len(json.load(open(tmp_path / "plan.json"))["plans"]) == 2
    assert len(json.load(open(tmp_path / "gpu.json"))["kernels"]) == 2


def _col_major_output(region):
    """The region with its output declared column-major: no kernel kind writes that layout."""
    doc = json.loads(json.dumps(region_json(region)))
    doc["region"]["outputs"][0]["memref"]["layout"] = {"kind": "col_major"}
    return region_from_json(doc)


def test_a_region_without_template_is_a_coded_diagnostic(tmp_path, capsys):
    """softmax is a SIMT kernel now; a region no kind takes is E1504 from every dump stage."""
    soft = Compilation("examples/softmax.json").regions
    assert [kinds.bind(r)[0].name for r in soft] == ["simt"]
    odd = [_col_major_output(soft[0])]
    for fn in (lambda: stages.plan_json(odd), lambda: stages.gpu_json(odd), lambda: stages.write_cu(odd, "sm90", str(tmp_path))):
        with pytest.raises(PolysatError) as e:
            fn()
        d = e.value.diagnostics[0]
        assert d.code == "E1504" and "not a SIMT region" in d.why and "row-major" in d.why
    assert cli.main(["compile", "examples/softmax.json", "--dump=cu", "--out", str(tmp_path)]) == 0
    assert [os.path.basename(f).startswith("polysat_simt_") for f in json.load(open(tmp_path / "cu.json"))["files"]] == [True]


def test_running_a_region_without_template_plays_it_back_and_says_so(capsys):
    """--target cuda's path with a region no kind takes in the middle: that region runs on the CPU (with a
    message naming it and the E1504 reason), the others as kernels, the model's outputs as playback's."""
    regions = Compilation("examples/conv_relu_maxpool.json").regions
    assert [kinds.bind(r)[0].name for r in regions] == ["conv", "simt"]
    odd = [regions[0], _col_major_output(regions[1])]
    rng = np.random.default_rng(0)
    x = {"X": rng.uniform(-1, 1, (1, 16, 34, 34)).astype(np.float16), "W": rng.uniform(-1, 1, (32, 16, 3, 3)).astype(np.float16)}
    hooks, launched = oracle.numpy_device()
    got = device_run.run_regions(odd, x, **hooks)
    err = capsys.readouterr().err
    assert len(launched) == 1 and f"region {regions[1].name} has no CUDA kernel (E1504" in err and "playback" in err
    want = playback(regions, x)
    assert set(got) == set(want) == {"P"}
    oracle.assert_close(got["P"], want["P"].astype(np.float64), "fp16", "conv + pool with the pool on the CPU")
    if not cuda_available():  # no GPU: still E1502, not E1504
        with pytest.raises(PolysatError) as e:
            device_run.run_cuda(odd, x)
        assert e.value.diagnostics[0].code == "E1502"


# ---- compile checks through the pipeline ---------------------------------------------------------------

@pytest.fixture(scope="module")
def builds():
    index = [(f"{key}/{r.name}", arch, ks) for key in MODELS for arch in ("sm80", "sm90")
             for r, ks in zip(regions(key), stages.kernel_sources(regions(key), arch))]
    return oracle.nvcc_builds(index, "region kernels")


def test_every_region_kernel_builds_for_sm80_and_sm90a_without_spills(builds):
    assert len(builds) == 2 * sum(N_REGIONS.values())
    for label, arch, ks, rep in builds:
        assert rep.ok, f"{label} for {arch}:\n{rep.log[-3000:]}"
        assert rep.spills == 0 and rep.stack_frame == 0, f"{label} for {arch} spills:\n{rep.log}"


def test_region_kernels_use_the_arch_skeleton_instructions(builds):
    for label, arch, ks, rep in builds:
        assert ks.skeleton == arch, f"{label}: the {arch} plan chose the {ks.skeleton} skeleton"
        assert missing_instructions(rep, arch) == [], (label, arch, rep.ptx_counts)
        assert all(rep.count(i) > 0 for i in REQUIRED_PTX[arch])


# ---- running regions ------------------------------------------------------------------------------------

def _inputs(comp_regions, env, seed=0):
    """Uniform inputs for every program input the regions read, operands scaled so sums stay O(1)."""
    rng = np.random.default_rng(seed)
    produced = {b.name for r in comp_regions for b in r.outputs}
    out = {}
    for r in comp_regions:
        for b in r.inputs:
            if b.name in produced or b.name in out:
                continue
            shape = tuple(d if isinstance(d, int) else int(d.evaluate(env)) for d in b.memref.shape)
            k = max(shape)
            out[b.name] = (rng.uniform(-1, 1, size=shape) * k ** -0.25).astype(np.float32)
    return out


@pytest.mark.parametrize("key,env", [("mlp", {"T": 19}), ("gemm_bias_relu", {"M": 37, "N": 45, "K": 29}),
                                     ("self_residual", {})])
def test_region_runner_chains_regions_and_equals_playback(key, env):
    rs = regions(key)
    ins = _inputs(rs, env)
    hooks, launched = oracle.numpy_device()
    got = device_run.run_regions(rs, ins, **hooks)
    want = playback(rs, ins)
    assert len(launched) == len(rs) and set(got) == set(want)
    for k in want:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape
        np.testing.assert_allclose(got[k].astype(np.float64), want[k].astype(np.float64), rtol=1e-3, atol=1e-3)


def test_region_runner_reshapes_size_one_dims_between_shapes():
    m = gemm_model([40, 24], [24, 56], bias=[40, 1])
    rs = Compilation(m).regions
    assert gemm_binding(rs[0]).spec.epilogue[0].axis == "m"
    ins = _inputs(rs, {})
    hooks, _ = oracle.numpy_device()
    got = device_run.run_regions(rs, ins, **hooks)
    want = playback(rs, ins)
    for k in want:
        np.testing.assert_allclose(got[k].astype(np.float64), want[k].astype(np.float64), rtol=1e-3, atol=1e-3)


@pytest.mark.skipif(cuda_available(), reason="checks the diagnostic on a machine without a GPU")
def test_run_cuda_without_a_gpu_is_a_coded_diagnostic():
    rs = regions("gemm_bias_relu")
    with pytest.raises(PolysatError) as e:
        device_run.run_cuda(rs, _inputs(rs, {"M": 8, "N": 8, "K": 8}))
    assert e.value.diagnostics[0].code == "E1502" and "no CUDA GPU" in e.value.diagnostics[0].why


# ---- on a GPU: polysat run --target cuda == --target playback ----------------------------------------------

GPU_CASES = {
    # key: (model, env): every dimension has a tail w.r.t. every tile the search can pick
    "gemm_bias_relu": ("examples/gemm_bias_relu.json", {"M": 333, "N": 264, "K": 200}),
    "gemm_odd": (gemm_model(["M", "K"], ["K", "N"]), {"M": 77, "N": 93, "K": 101}),
    "batched": (gemm_model([3, 130, 88], [3, 88, 72]), {}),
    "bf16_symbolic": (gemm_model(["M", "K"], ["K", "N"], "bf16", bias=["N"]), {"M": 141, "N": 200, "K": 328}),
    "trans_b": (gemm_model([65, 136], [72, 136], trans_b=True), {}),
    "mlp": ("examples/mlp.json", {"T": 77}),
    "self_residual": (gemm_model([77, 136], [136, 136], bias="A"), {}),
}


def _ulp_close(got, want, dtype):
    got, want = got.astype(np.float64), want.astype(np.float64)
    ulp = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}.get(str(dtype), 0.0)  # output rounding may land 1 ulp apart
    tol = 1e-3 + 1e-3 * np.abs(want) + ulp * np.abs(want)
    bad = np.abs(got - want) > tol
    assert not bad.any(), f"{bad.sum()} of {bad.size} differ; max |diff| {np.abs(got - want).max()}"


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible")
@pytest.mark.parametrize("key", list(GPU_CASES))
def test_cli_run_target_cuda_equals_playback(key, tmp_path):
    model, env = GPU_CASES[key]
    if isinstance(model, dict):
        path = tmp_path / "model.json"
        path.write_text(json.dumps(model))
        model = str(path)
    rs = Compilation(model).regions
    ins = _inputs(rs, env)
    np.savez(tmp_path / "in.npz", **ins)
    outs = {}
    for target in ("cuda", "playback"):
        assert cli.main(["run", model, "--inputs", str(tmp_path / "in.npz"), "--out", str(tmp_path / f"{target}.npz"),
                         "--target", target]) == 0
        with np.load(tmp_path / f"{target}.npz") as z:
            outs[target] = {k: z[k] for k in z.files}
    assert set(outs["cuda"]) == set(outs["playback"]) and outs["cuda"]
    dtypes = {b.name: b.memref.dtype for r in rs for b in r.outputs}
    for k, want in outs["playback"].items():
        assert outs["cuda"][k].shape == want.shape
        _ulp_close(outs["cuda"][k], want, dtypes[k].np)


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible")
def test_run_cuda_keeps_intermediates_on_the_device_and_matches_playback():
    rs = regions("mlp")
    ins = _inputs(rs, {"T": 45})
    got = device_run.run_cuda(rs, ins)
    want = playback(rs, ins)
    assert set(got) == {"Y"} == set(want)  # the intermediate n34 never comes back to the host
    _ulp_close(got["Y"], want["Y"], want["Y"].dtype)
    assert got["Y"].dtype == want["Y"].dtype == np.float16
