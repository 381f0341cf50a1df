"""Every generated kernel builds with nvcc for sm_80 / sm_90a, spills nothing, and its PTX holds the
skeleton's instructions (docs/DESIGN.md §GPU IR). No GPU needed: ptxas -v and the kept PTX decide.

All builds run once per session in a small thread pool and are cached by source hash
(POLYSAT_NVCC_CACHE); the fixture prints the nvcc wall time.
"""
import time
from dataclasses import replace

import pytest

from polysat.backend.common.spec import EpilogueOp
from polysat.backend.gemm.spec import GemmSpec
from polysat.backend.common.nvcc import TF32_MMA, check_many, missing_instructions
from polysat.backend.gemm.plan import search
from polysat.backend.gemm.prologue import Prologue, Source
from polysat.backend.gemm.render import render
from polysat.ir.dtypes import DType

F16, BF16, F32 = DType.fp16, DType.bf16, DType.fp32
SWIGLU = Prologue((Source("gu", "mk", F16, 2048, 0), Source("gu", "mk", F16, 2048, 1024)), (
    ("mul", (("x", 0), ("c", -1.4426950408889634))), ("exp2", (("s", 0),)), ("add", (("s", 1), ("c", 1.0))),
    ("reciprocal", (("s", 2),)), ("round_fp16", (("s", 3),)), ("mul", (("x", 0), ("s", 4))),
    ("round_fp16", (("s", 5),)), ("mul", (("s", 6), ("x", 1))), ("round_fp16", (("s", 7),))))
PAIR = (("round_fp16", (("v",),)), ("mul", (("s", 0), ("c", -1.4426950408889634))), ("exp2", (("s", 1),)),
        ("add", (("s", 2), ("c", 1.0))), ("reciprocal", (("s", 3),)), ("round_fp16", (("s", 4),)),
        ("mul", (("s", 0), ("s", 5))), ("round_fp16", (("s", 6),)), ("round_fp16", (("x", 0),)),
        ("mul", (("s", 7), ("s", 8))), ("round_fp16", (("s", 9),)))
RMS = Prologue((Source("x", "mk", F16, 264), Source("x", "stat", F16, 264, 0, (("mul", (("v",), ("v",))),), (
    ("div", (("v",), ("c", 264.0))), ("add", (("s", 0), ("c", 1e-6))), ("sqrt", (("s", 1),)), ("reciprocal", (("s", 2),)))),
    Source("g", "k", F16)), (("mul", (("x", 0), ("x", 1))), ("round_fp16", (("s", 0),)), ("mul", (("s", 1), ("x", 2))),
                            ("round_fp16", (("s", 2),))))
PAIR32 = (("mul", (("v",), ("c", -1.4426950408889634))), ("exp2", (("s", 0),)), ("add", (("s", 1), ("c", 1.0))),
          ("reciprocal", (("s", 2),)), ("mul", (("v",), ("s", 3))), ("mul", (("s", 4), ("x", 0))))
EVIL = 'b"); } __global__ void pwn(){ /*'

CASES = {
    "gemm": GemmSpec("gemm", 1024, 1024, 1024),
    "gemm_bias_relu": GemmSpec("gemm_bias_relu", 1000, 1000, 1000, epilogue=(EpilogueOp("bias", "bias", dtype=F16), EpilogueOp("relu"))),
    "batched": GemmSpec("bmm", 384, 256, 320, batch=(4, 2), a_layout="col", b_layout="col", b_broadcast=True, out_dtype=F32),
    "bf16_symbolic": GemmSpec("bf16_sym", "M", "N", "K", in_dtype=BF16, out_dtype=BF16,
                              epilogue=(EpilogueOp("bias", "bias_m", "m", BF16), EpilogueOp("silu"))),
    "mlp_up": GemmSpec("mlp.up", "T", 4096, 1024, in_dtype=BF16, out_dtype=BF16,
                       epilogue=(EpilogueOp("bias", "b1", dtype=F32), EpilogueOp("gelu_tanh"))),
    "mlp_down": GemmSpec("mlp.down", "T", 1024, 4096, in_dtype=BF16, out_dtype=BF16, b_layout="col",
                         epilogue=(EpilogueOp("bias", "b2", dtype=F32), EpilogueOp("residual", "x", dtype=BF16))),
    "all_epilogues": GemmSpec(EVIL, 200, 72, 136, out_dtype=F32, epilogue=(
        EpilogueOp("scale", value=0.125), EpilogueOp("gelu_erf"), EpilogueOp("sigmoid"), EpilogueOp("cast", dtype=BF16),
        EpilogueOp("residual", EVIL + "r", dtype=F16), EpilogueOp("bias", "bb", dtype=F16))),
    "odd_tails": GemmSpec("odd", 77, 93, 101, a_layout="col"),  # no dim aligned: the sm80 tail branch
    "vec2_vec4": GemmSpec("vec24", 96, 100, 98, out_dtype=F32),  # 4- and 8-byte cp.async (K % 2, N % 4)
    "skinny": GemmSpec("skinny", 48, 4096, 1024, a_layout="col"),  # one consumer warpgroup (BM = 64)
    # a half-precision model's SiLU computed in fp16 (each op rounded), then squared in bf16: an fn epilogue
    # with rounding steps reading the accumulator more than once
    "half_fn": GemmSpec("half_fn", 256, 192, 128, epilogue=(
        EpilogueOp("cast", dtype=F16), EpilogueOp("bias", "bias", dtype=F16), EpilogueOp("fn", steps=(
            ("mul", (("v",), ("c", -1.4426950216293335))), ("exp2", (("s", 0),)), ("add", (("s", 1), ("c", 1.0))),
            ("reciprocal", (("s", 2),)), ("round_fp16", (("s", 3),)), ("mul", (("v",), ("s", 4))),
            ("round_fp16", (("s", 5),)), ("mul", (("s", 6), ("s", 6))), ("round_bf16", (("s", 7),)))))),
    # A computed as its tile is filled (backend/gemm/prologue.py): SiLU(gate) x up from the two halves of the
    # sibling GEMMs' [M, 2F] output, each fp16 step rounded; and an RMSNorm-like x * r[m] * g[k]
    "prologue_swiglu": GemmSpec("pro_swiglu", 128, 512, 1024, a_prologue=SWIGLU),
    "prologue_rows": GemmSpec("pro_rows", 200, 136, 264, b_layout="col", out_dtype=F32, a_prologue=Prologue((
        Source("x", "mk", F16, 264), Source("r", "m", F32), Source("g", "k", F16)), (
        ("mul", (("x", 0), ("x", 1))), ("round_fp16", (("s", 0),)), ("mul", (("s", 1), ("x", 2))),
        ("round_fp16", (("s", 2),))))),
    # two sibling GEMMs combined column by column: SiLU(x @ W_gate) * (x @ W_up), each fp16 step rounded
    "pair_swiglu": GemmSpec("pair_swiglu", 200, 1024, 256, b_pieces=(("wg", 512), ("wu", 512)), pair=PAIR),
    # RMSNorm computed in the prologue, its row statistic by the kernel (PrologueStats): alone, over the Q/K/V pieces,
    # and under the gate/up pair (M tails)
    "prologue_stat": GemmSpec("pro_stat", 200, 136, 264, b_layout="col", out_dtype=F32, a_prologue=RMS),
    "prologue_stat_pieces": GemmSpec("pro_stat_qkv", 77, 768, 256, b_pieces=(("wq", 256), ("wk", 256), ("wv", 256)),
                                     a_prologue=replace(RMS, sources=tuple(replace(x, ld=256) for x in RMS.sources))),
    "prologue_stat_pair": GemmSpec("pro_stat_pair", 200, 1024, 256, b_pieces=(("wg", 512), ("wu", 512)), pair=PAIR,
                                   a_prologue=replace(RMS, sources=tuple(replace(x, ld=256) for x in RMS.sources))),
    # fp32 operands: 3xTF32 on the sm80 skeleton (both targets): a bias + GELU epilogue, odd tails with scalar copies,
    # the Q/K/V pieces of B, and the gate/up pair
    "fp32": GemmSpec("f32", 1000, 1024, 1000, in_dtype=F32, out_dtype=F32,
                     epilogue=(EpilogueOp("bias", "bias", dtype=F32), EpilogueOp("gelu_erf"))),
    "fp32_odd": GemmSpec("f32_odd", 77, 93, 101, in_dtype=F32, out_dtype=F32, a_layout="col"),
    "fp32_pieces": GemmSpec("f32_qkv", 128, 768, 256, in_dtype=F32, out_dtype=F32,
                            b_pieces=(("wq", 256), ("wk", 256), ("wv", 256))),
    "fp32_pair": GemmSpec("f32_pair", 200, 1024, 256, in_dtype=F32, out_dtype=F32, b_pieces=(("wg", 512), ("wu", 512)),
                          pair=PAIR32),
}


def _kernels():
    """(label, kernel, archs): each case's best sm90 plan (built for sm_90a) and best sm80 plan (built for
    sm_80; for two cases also for sm_90a, where the sm80 skeleton is Hopper's tail branch)."""
    out = []
    for name, spec in CASES.items():
        p90 = search(spec, "sm90").best
        p80 = search(spec, "sm80").best
        if p90.skeleton == "sm90":
            out.append((f"{name}/sm90", render(spec, p90), ("sm90",)))
        else:
            out.append((f"{name}/sm80@sm90", render(spec, p90), ("sm90",)))
        out.append((f"{name}/sm80", render(spec, p80), ("sm80", "sm90") if name == "gemm" else ("sm80",)))
    return out


@pytest.fixture(scope="module")
def builds():
    kernels = _kernels()
    jobs, index = [], []
    for label, ks, archs in kernels:
        for arch in archs:
            jobs.append((ks.source, arch))
            index.append((label, ks, arch))
    t0 = time.perf_counter()
    reports = check_many(jobs, workers=2)
    wall = time.perf_counter() - t0
    fresh = [r for r in reports if not r.cached]
    print(f"\nnvcc: {len(jobs)} builds ({len(fresh)} uncached, {sum(r.seconds for r in fresh):.1f}s of nvcc) in {wall:.1f}s wall")
    return [(label, ks, arch, rep) for (label, ks, arch), rep in zip(index, reports, strict=True)]


def test_every_kernel_builds_without_spills(builds):
    assert len(builds) >= 2 * len(CASES)
    for label, ks, arch, rep in builds:
        assert rep.ok, f"{label} for {arch}:\n{rep.log[-3000:]}"
        assert rep.spills == 0 and rep.stack_frame == 0, f"{label} for {arch} spills:\n{rep.log}"
        assert rep.registers <= 255


def test_ptx_holds_the_skeleton_instructions(builds):
    for label, ks, arch, rep in builds:
        assert missing_instructions(rep, ks.skeleton) == [], (label, arch, rep.ptx_counts)
        if ks.skeleton == "sm90":
            bn = ks.plan.tile[1]
            assert rep.count("wgmma.mma_async") >= 4, label  # BK/16 k-steps, unrolled
            assert rep.count("setmaxnreg") == (2 if ks.plan.warps[0] >= 2 else 0), label
            assert f"m64n{bn}k16" in ks.source
            assert "serialized" not in rep.log and "C7508" not in rep.log, rep.log  # wgmma serialized (C7510, C7515, ...) / setmaxnreg ignored
        elif ks.plan.elem_bytes == 4:  # fp32: 4-byte fragment loads, split, three tf32 MMAs per product
            assert rep.count(TF32_MMA) > 0 and rep.count("cvt.rna.tf32.f32") > 0 and rep.count("ldmatrix") == 0, label
            assert rep.count(TF32_MMA) == rep.count("mma.sync") and rep.count(TF32_MMA) % 3 == 0, rep.ptx_counts
        else:
            assert rep.count("mma.sync") > 0 and rep.count("ldmatrix") > 0


def test_both_skeletons_are_covered(builds):
    skel = {(ks.skeleton, arch) for _, ks, arch, _ in builds}
    assert skel == {("sm80", "sm80"), ("sm80", "sm90"), ("sm90", "sm90")}
    tails = [ks for label, ks, _, _ in builds if label.startswith("odd_tails")]
    assert tails and all(ks.skeleton == "sm80" and ks.plan.vec_a < 8 for ks in tails)
    vecs = {(ks.plan.vec_a, ks.plan.vec_b) for label, ks, _, _ in builds if ks.skeleton == "sm80"}
    assert {(8, 8), (2, 4), (1, 1)} <= vecs


def test_user_names_never_reach_the_code(builds):
    for label, ks, _, _ in builds:
        if label.startswith("all_epilogues"):
            assert EVIL not in ks.source and "pwn" not in ks.source.replace("pwn_", "")
            assert "__global__ void pwn" not in ks.source
