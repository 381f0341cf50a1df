"""Every softmax_scores kernel builds with nvcc for sm_80 and sm_90a (the sm80 skeleton in STORE_P mode on
both), spills nothing and its PTX holds mma.sync, ldmatrix and cp.async; NVRTC builds it too; a hostile
name never reaches the code; `polysat compile examples/attention.json` (default cost size) writes both
kernels of the two-region form. No GPU needed.
"""
from __future__ import annotations

import importlib.util
import itertools
import json
import os
import pathlib
import subprocess
import sys

import pytest

from polysat.backend.common.nvcc import check_many, missing_instructions
from polysat.backend.scores.render import render as render_scores
from polysat.backend.scores.plan import search
from polysat.backend.scores.spec import ScoresSpec
from polysat.ir.dtypes import DType

_oracle_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_oracle_spec)
_oracle_spec.loader.exec_module(oracle)

F16, BF16 = DType.fp16, DType.bf16
EVIL = 'h"); } __global__ void pwn(){ /*'
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _spec(d, dt, causal, name=None):
    return ScoresSpec(name or f"scores_d{d}", "M", "N", d, batch=("B", "H"), causal=causal, scale=d ** -0.5,
                      in_dtype=dt, p_dtype=dt)


def _kernels():
    out = []
    for d, dt, causal, arch in itertools.product((64, 128), (F16, BF16), (False, True), ("sm80", "sm90")):
        spec = _spec(d, dt, causal)
        plan = search(spec, arch).best
        assert plan.skeleton == "sm80" and plan.arch == arch
        out.append((f"d{d}/{dt.value}/{'causal' if causal else 'full'}/{arch}", render_scores(spec, plan), arch))
    for plan in search(_spec(64, F16, True), "sm80").ranked:  # every tile the search can rank
        out.append((f"tile {plan.key()}", render_scores(_spec(64, F16, True), plan), "sm80"))
    fp32 = ScoresSpec("fp32_p", 100, 77, 128, batch=(3,), causal=True, scale=-0.3, in_dtype=BF16, p_dtype=DType.fp32)
    out.append(("static sizes, fp32 P, negative scale", render_scores(fp32, search(fp32, "sm90").best), "sm90"))
    for d, arch in itertools.product((8, 20, 32, 96, 160, 256), ("sm80", "sm90")):  # other head dims (20: 8-byte copies)
        spec = _spec(d, BF16 if d >= 160 else F16, True)
        out.append((f"head dim {d}/{arch}", render_scores(spec, search(spec, arch).best), arch))
    evil = _spec(64, F16, False, name=EVIL)
    out.append(("hostile name", render_scores(evil, search(evil, "sm80").best), "sm80"))
    return out


@pytest.fixture(scope="module")
def builds():
    kernels = _kernels()
    reports = check_many([(ks.source, arch) for _, ks, arch in kernels], workers=2)
    for (label, ks, arch), rep in zip(kernels, reports, strict=True):
        print(f"{label:45s} {arch} {ks.plan.key():32s} regs {rep.registers} spills {rep.spills}")
    return [(label, ks, arch, rep) for (label, ks, arch), rep in zip(kernels, reports, strict=True)]


def test_every_kernel_builds_without_spills(builds):
    cells = {(ks.spec.d, ks.spec.in_dtype, ks.spec.causal, arch) for _, ks, arch, _ in builds}
    assert cells >= set(itertools.product((64, 128), (F16, BF16), (False, True), ("sm80", "sm90")))
    for label, ks, arch, rep in builds:
        assert rep.ok, f"{label} for {arch}:\n{rep.log[-3000:]}"
        assert rep.spills == 0 and rep.stack_frame == 0, f"{label} for {arch} spills:\n{rep.log}"
        assert "warning" not in rep.log.lower(), f"{label}: {rep.log}"


def test_ptx_holds_the_sm80_skeleton_and_no_v(builds):
    for label, ks, arch, rep in builds:
        assert missing_instructions(rep, "sm80") == [], (label, rep.ptx_counts)
        bm, bn, d = ks.plan.tile
        # S = Q K^T in both passes, masked and unmasked blocks (Q from smem: unrolled by two k16 steps): no P V
        kq = ks.plan.dp // 16 if ks.plan.q_regs else 2
        assert rep.count("mma.sync") >= 2 * kq * (bn // 8), (label, rep.ptx_counts)
        copy = "cp.async.cg" if ks.plan.vec == 8 else "cp.async.ca"
        assert rep.count("ldmatrix") > 0 and rep.count(copy) > 0 and rep.count("st.global") > 0, label
        assert rep.count("wgmma.mma_async") == 0 and rep.count("cp.async.bulk.tensor") == 0, label


def test_register_estimate_tracks_ptxas(builds):
    """The STOP conditions prune by ScoresPlan.regs_estimate; ptxas may take up to 255 (the launch bound
    allows one CTA of the block's threads) where it has room, e.g. BLOCK_N 128 with 3 stages."""
    for label, ks, arch, rep in builds:
        est = ks.plan.regs_estimate
        assert 0.75 * est <= rep.registers <= 1.3 * est, (label, est, rep.registers)


def test_user_names_never_reach_the_code(builds):
    (ks,) = [ks for label, ks, _, _ in builds if label == "hostile name"]
    assert EVIL not in ks.source and "__global__ void pwn" not in ks.source
    assert ks.name.startswith("polysat_scores_")


def test_nvrtc_compiles_the_kernels_the_runtime_loads():
    for arch, flag, dt, d in (("sm80", "sm_80", F16, 64), ("sm90", "sm_90a", BF16, 128)):
        spec = _spec(d, dt, True)
        cubin = oracle.nvrtc_cubin(render_scores(spec, search(spec, arch).best).source, flag)
        assert len(cubin) > 1000, (arch, dt)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "polysat", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=600, check=False)


def test_compile_writes_both_kernels_of_the_two_region_form(tmp_path):
    p = _cli("compile", "examples/attention.json", "--dump=plan,gpu,cu", "--cost", "size", "--out", str(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    cus = sorted(f for f in os.listdir(tmp_path) if f.endswith(".cu"))
    assert len(cus) == 2 and any(f.startswith("polysat_scores_") for f in cus), cus
    plan = json.loads((tmp_path / "plan.json").read_text())
    k0 = next(x for x in plan["plans"] if x["region"] == "k0")
    assert k0["kind"] == "softmax_scores"
    assert k0["chosen"]["algo_choice"]["attention"] == "streaming_softmax_2pass"
    assert [x["kind"] for x in plan["plans"]] == ["softmax_scores", "gemm"]


def test_run_on_cuda_without_a_gpu_is_a_coded_diagnostic(tmp_path):
    import numpy as np
    from polysat.backend.common.gpu import cuda_available
    if cuda_available():
        pytest.skip("a GPU is visible: tests/test_scores_gpu.py runs the kernels")
    x = {n: np.zeros((1, 2, 40 if n == "Q" else 50, 64), np.float32) for n in ("Q", "K", "V")}
    np.savez(tmp_path / "in.npz", **x)
    p = _cli("run", "examples/attention.json", "--target", "cuda", "--inputs", str(tmp_path / "in.npz"),
             "--out", str(tmp_path / "out.npz"))
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert "E1502" in p.stdout + p.stderr and "UnknownTarget" in p.stdout + p.stderr, p.stdout + p.stderr
