"""Every flash-attention kernel builds with nvcc for sm_80 / sm_90a, spills nothing, and its PTX holds the
skeleton's instructions (docs/DESIGN.md §GPU IR). No GPU needed: ptxas -v and the PTX decide.

The matrix: head dims 64 and 128 x fp16 / bf16 x causal or not x online / streaming_softmax_2pass x
sm80 (-arch=sm_80) / sm90 (-gencode=arch=compute_90a,code=sm_90a), symbolic M and N (the tail branch
is always compiled in), each with the plan the search picks; plus the other tiles the search can pick
(one consumer warpgroup, BLOCK_N 64, D != Dv, fp32 output, negative and zero scales, the sm80 skeleton
on sm_90a) and a hostile kernel name; plus the other head dims (8, 32, 96, 160, 256, and 4, 20, 100 padded, D != Dv,
odd 7 / 5) for both targets, each with the plan the search picks. Builds are cached by source hash
(POLYSAT_NVCC_CACHE).
"""
from __future__ import annotations

import importlib.util
import itertools
import pathlib
import re
import subprocess

import pytest

from polysat.backend.attention.render import render
from polysat.backend.attention.plan import AttentionPlan
from polysat.backend.attention.plan import search
from polysat.backend.attention.spec import AttentionSpec
from polysat.backend.common.nvcc import ARCH_FLAGS, missing_instructions, nvcc_path
from polysat.ir.dtypes import DType

_oracle_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_oracle_spec)
_oracle_spec.loader.exec_module(oracle)

F16, BF16, F32 = DType.fp16, DType.bf16, DType.fp32
ALGOS = ("online_softmax", "streaming_softmax_2pass")
EVIL = 'h"); } __global__ void pwn(){ /*'


def _spec(d, dt, causal, name=None, **kw):
    return AttentionSpec(name or f"attn_d{d}", "M", "N", d, kw.pop("dv", d), batch=("B", "H"), causal=causal,
                         scale=kw.pop("scale", d ** -0.5), in_dtype=dt, p_dtype=dt, out_dtype=kw.pop("out", dt), **kw)


def _kernels():
    """(label, kernel, build arch) for the full matrix (best plan per cell) and the extra tiles."""
    out = []
    for d, dt, causal, algo, arch in itertools.product((64, 128), (F16, BF16), (False, True), ALGOS, ("sm80", "sm90")):
        spec = _spec(d, dt, causal)
        plan = search(spec, arch, algos=(algo,)).best
        assert plan.skeleton == arch
        out.append((f"d{d}/{dt.value}/{'causal' if causal else 'full'}/{algo}/{arch}", render(spec, plan), arch))
    extra = [
        ("sm90 one consumer, BN 64, D!=Dv, fp32 out", _spec(64, F16, True, dv=128, out=F32),
         AttentionPlan("sm90", "sm90", (64, 64, 64), 128, 3, (1, 1), "online_softmax", True), "sm90"),
        ("sm90 one consumer, BN 128, 2-pass, negative scale", _spec(128, BF16, False, scale=-0.3),
         AttentionPlan("sm90", "sm90", (64, 128, 128), 128, 2, (1, 1), "streaming_softmax_2pass", False), "sm90"),
        ("sm90 two consumers, BN 64, zero scale", _spec(128, F16, True, dv=64, scale=0.0),
         AttentionPlan("sm90", "sm90", (128, 64, 128), 64, 4, (2, 1), "online_softmax", True), "sm90"),
        ("sm80 BM 128 (8 warps), stages 3, fp32 out", _spec(64, BF16, True, out=F32),
         AttentionPlan("sm80", "sm80", (128, 64, 64), 64, 3, (8, 1), "online_softmax", True), "sm80"),
        ("sm80 skeleton on sm_90a", _spec(128, F16, True),
         search(_spec(128, F16, True), "sm90", skeletons=("sm80",)).best, "sm90"),
        ("hostile name", _spec(64, F16, False, name=EVIL), None, "sm80"),
    ]
    for label, spec, plan, arch in extra:
        plan = plan or search(spec, "sm80").best
        out.append((label, render(spec, plan), arch))
    for (d, dv), arch in itertools.product(OTHER_HEAD_DIMS, ("sm80", "sm90")):
        spec = _spec(d, F16 if d < 160 else BF16, d % 2 == 0, dv=dv)
        out.append((f"head dims {d}/{dv}/{arch}", render(spec, search(spec, arch).best), arch))
    return out


OTHER_HEAD_DIMS = [(8, 8), (32, 32), (96, 96), (160, 160), (256, 256), (4, 4), (20, 20), (100, 100), (96, 160), (7, 5)]


@pytest.fixture(scope="module")
def builds():
    """(label, kernel, build arch, nvcc report) for every kernel of the matrix."""
    built = oracle.nvcc_builds([(label, arch, ks) for label, ks, arch in _kernels()], "attention builds")
    return [(label, ks, arch, rep) for label, arch, ks, rep in built]


def test_every_kernel_builds_without_spills(builds):
    assert len(builds) == 32 + 6 + 2 * len(OTHER_HEAD_DIMS)
    for label, ks, arch, rep in builds:
        assert rep.ok, f"{label} for {arch}:\n{rep.log[-3000:]}"
        assert rep.spills == 0 and rep.stack_frame == 0, f"{label} for {arch} spills:\n{rep.log}"
        assert rep.registers <= 255, label
        assert "warning" not in rep.log.lower(), f"{label}: {rep.log}"


def test_ptx_holds_the_skeleton_instructions(builds):
    for label, ks, arch, rep in builds:
        assert missing_instructions(rep, ks.skeleton) == [], (label, rep.ptx_counts)
        bm, bn, d = ks.plan.tile
        if ks.skeleton == "sm90":
            # S = Q K^T: D/16 wgmma; O += P V: BLOCK_N/16 wgmma; each for masked and unmasked blocks
            assert rep.count("wgmma.mma_async") >= 2 * (d // 16 + bn // 16), (label, rep.ptx_counts)
            assert rep.count("setmaxnreg") == (2 if ks.plan.warps[0] >= 2 else 0), label
            assert rep.count("cp.async.bulk.tensor") >= 3, label  # Q, K and V tiles
            assert "serialized" not in rep.log and "C7508" not in rep.log, rep.log  # wgmma serialized (C7510, C7515, ...) / setmaxnreg ignored
        else:  # the padded head dims; Q from smem: S = Q K^T unrolled by two k16 steps
            nt, no, kq = bn // 8, ks.plan.dvp // 8, ks.plan.dp // 16 if ks.plan.q_regs else 2
            assert rep.count("mma.sync") >= 2 * (kq * nt + bn // 16 * no), (label, rep.ptx_counts)
            copy = {8: "cp.async.cg", 4: "cp.async.ca", 2: "cp.async.ca", 1: "ld.global"}[ks.plan.vec]
            assert rep.count("ldmatrix") > 0 and (copy == "ld.global" or rep.count(copy) > 0), label


def test_the_matrix_is_covered(builds):
    cells = {(ks.spec.d, ks.spec.in_dtype, ks.spec.causal, ks.plan.algo, ks.skeleton, arch) for _, ks, arch, _ in builds}
    for cell in itertools.product((64, 128), (F16, BF16), (False, True), ALGOS, ("sm80", "sm90")):
        assert (*cell, cell[-1]) in cells, cell
    assert {ks.plan.warps[0] for _, ks, _, _ in builds if ks.skeleton == "sm90"} == {1, 2}
    assert {ks.plan.block_n for _, ks, _, _ in builds if ks.skeleton == "sm90"} == {64, 128}


def test_register_estimate_tracks_ptxas(builds):
    """The STOP conditions prune by AttentionPlan.regs_estimate: it must stay near what ptxas allocates
    for the sm80 skeleton (sm90 reports the launch cap, 65536 / threads, instead); copies narrower than 16
    bytes in a loop are over-estimated (a safe side: never more registers than estimated)."""
    for label, ks, arch, rep in builds:
        if ks.skeleton == "sm80" and ks.plan.vec < 8:
            assert rep.registers <= 1.15 * ks.plan.regs_estimate, (label, ks.plan.regs_estimate, rep.registers)
        elif ks.skeleton == "sm80":
            est = ks.plan.regs_estimate
            assert 0.75 * est <= rep.registers <= 1.15 * est, (label, est, rep.registers)


def test_user_names_never_reach_the_code(builds):
    for label, ks, _, _ in builds:
        if label == "hostile name":
            assert EVIL not in ks.source and "__global__ void pwn" not in ks.source


def _ptx(source: str, arch: str, tmp_path) -> str:
    src, out = tmp_path / f"k_{arch}.cu", tmp_path / f"k_{arch}.ptx"
    src.write_text(source)
    p = subprocess.run([nvcc_path(), "-ptx", "-std=c++17", *ARCH_FLAGS[arch], "-o", str(out), str(src)],
                       capture_output=True, text=True, check=False)
    assert p.returncode == 0, p.stderr[-3000:]
    return out.read_text()


def test_ptx_forms_of_the_two_mmas(tmp_path):
    """sm80: K through ldmatrix (B, K-major), V through ldmatrix.trans, exp2 on the SFU, quad shuffles.
    sm90: S from the SS form (two descriptors), O from the RS form (four A registers + V's descriptor,
    imm-trans-b = 1), TMA in 3-D boxes completing on mbarriers."""
    spec = _spec(128, F16, True)
    p80 = _ptx(render(spec, search(spec, "sm80").best).source, "sm80", tmp_path)
    assert re.search(r"ldmatrix\.sync\.aligned\.m8n8\.x4\.shared\.b16", p80)
    assert re.search(r"ldmatrix\.sync\.aligned\.m8n8\.x4\.trans\.shared\.b16", p80)
    assert "ex2.approx.ftz.f32" in p80 and "shfl.sync.bfly" in p80
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in p80
    p90 = _ptx(render(spec, search(spec, "sm90").best).source, "sm90", tmp_path)
    ss = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k16\.f32\.f16\.f16\s+\{[^}]*\},\s*%rd\d+,\s*%rd\d+,\s*p,\s*1,\s*1,\s*0,\s*0;", p90)
    rs = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k16\.f32\.f16\.f16\s+\{[^}]*\},\s*\{%r\d+,\s*%r\d+,\s*%r\d+,\s*%r\d+\},\s*%rd\d+,\s*p,\s*1,\s*1,\s*1;", p90)
    assert ss and rs, "the SS and RS wgmma forms"
    assert "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes" in p90
    assert "mbarrier.try_wait.parity" in p90 and "mbarrier.arrive.expect_tx" in p90


def test_nvrtc_compiles_the_kernels_the_runtime_loads():
    """The runtime compiles with NVRTC where it and the CUDA headers are installed (no C++ library, no
    compiler builtins): every skeleton / algorithm / dtype must build there too."""
    for arch, flag in (("sm80", "sm_80"), ("sm90", "sm_90a")):
        for dt in (F16, BF16):
            for algo in ALGOS:
                spec = _spec(64 if dt == F16 else 128, dt, True)
                cubin = oracle.nvrtc_cubin(render(spec, search(spec, arch, algos=(algo,)).best).source, flag)
                assert len(cubin) > 1000, (arch, dt, algo)
