"""Conv and conv + pool regions through the backend stages, compile-checked without a GPU.

`polysat compile MODEL --dump=plan,gpu,cu` writes a Schedule Plan (tile, halo, predicate_tail, layout_hints,
algo_choice {"conv": "implicit_gemm"}), the GPU IR (the im2col gather as the A producer) and one .cu
per region. Every region kernel of the conv models (the seed's conv3x3_s2_silu, groups 2, depthwise,
dilated, bf16 with a residual, odd sizes, Conv+ReLU+MaxPool) builds with -arch=sm_80 and with
-gencode=arch=compute_90a,code=sm_90a; ptxas reports 0 spill bytes and no stack; the PTX holds
mma.sync + ldmatrix + cp.async (sm80 skeleton) or wgmma.mma_async + mbarrier + cp.async.bulk.tensor
(sm90 skeleton: W by TMA, X gathered). Padded pools (which the extraction does not fuse today) are
compile-checked from their ConvPoolSpec.
"""
from __future__ import annotations

import importlib.util
import pathlib

import json
import os
import re

import pytest

from polysat import cli
from polysat.backend import kinds, stages
from polysat.backend.conv.render import render as render_conv
from polysat.backend.conv.plan import search as conv_search
from polysat.backend.conv_pool.spec import ConvPoolSpec
from polysat.backend.conv.spec import ConvSpec
from polysat.backend.common.spec import EpilogueOp
from polysat.backend.common.nvcc import missing_instructions
from polysat.ir.dtypes import DType
from polysat.pipeline import Compilation

HERE = os.path.dirname(__file__)
EX = os.path.join(HERE, "..", "examples")


_oracle_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_oracle_spec)
_oracle_spec.loader.exec_module(oracle)
conv_model = oracle.conv_model


MODELS = {
    "conv3x3_s2_silu": os.path.join(EX, "conv3x3_s2_silu.json"),
    "conv_relu_maxpool": os.path.join(EX, "conv_relu_maxpool.json"),
    "grouped2": conv_model([2, 16, 14, 14], [32, 8, 3, 3], {"stride": 1, "pad": 1, "groups": 2}, bias=True, act="relu"),
    "depthwise": conv_model([1, 32, 15, 15], [32, 1, 3, 3], {"stride": 2, "pad": 1, "groups": 32}, bias=True, act="relu"),
    "dilated": conv_model([1, 16, 20, 20], [24, 16, 3, 3], {"stride": 1, "pad": 2, "dilation": 2}),
    "bf16_residual": conv_model([2, 8, 17, 13], [16, 8, 3, 3], {"stride": 1, "pad": 1}, dt="bf16", act="silu",
                                residual=True),
    "odd": conv_model([3, 5, 13, 11], [7, 5, 3, 2], {"stride": [2, 1], "pad": [1, 0, 0, 1]}),
    "conv_s2_bias_relu_pool": conv_model([2, 8, 33, 31], [16, 8, 3, 3], {"stride": 2, "pad": 1}, bias=True, act="relu",
                                         pool={"kernel": [2, 2], "stride": [2, 2]}),
}
KINDS = {"conv_relu_maxpool": "conv_pool", "conv_s2_bias_relu_pool": "conv_pool"}
_REGIONS: dict = {}


def regions(key):
    if key not in _REGIONS:
        _REGIONS[key] = Compilation(MODELS[key], cost="model").regions
    return _REGIONS[key]


F16 = DType.fp16
SPECS = {  # padded pools: the ResNet stem's 3x3/2 pad-1 max-pool after a 7x7/2 conv, and a dilated 3x2 pool
    "stem_pool": ConvPoolSpec(ConvSpec("stem", 2, 8, 45, 45, 64, 7, 7, stride=(2, 2), pad=(3, 3, 3, 3),
                                       epilogue=(EpilogueOp("bias", "b", dtype=F16), EpilogueOp("relu"))),
                              (23, 23), (3, 3), (2, 2), (1, 1)),
    "dilated_pool": ConvPoolSpec(ConvSpec("dp", 1, 16, 20, 19, 24, 3, 3, pad=(1, 1, 1, 1), in_dtype=DType.bf16,
                                          out_dtype=DType.bf16, epilogue=(EpilogueOp("silu"),)),
                                 (20, 19), (3, 2), (2, 1), (1, 1), (2, 1)),
}


# ---- dumps ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("model, kind", [("conv3x3_s2_silu", "conv"), ("conv_relu_maxpool", "conv_pool")])
def test_cli_dumps_plan_gpu_and_cu_for_conv_regions(tmp_path, model, kind):
    rc = cli.main(["compile", MODELS[model], "--cost", "model", "--dump=plan,gpu,cu", "--out", str(tmp_path)])
    assert rc == 0
    (plan,) = json.load(open(tmp_path / "plan.json"))["plans"]
    assert plan["kind"] == kind
    chosen = plan["chosen"]
    for f in ("tile", "stages", "bind", "cache", "vectorize", "predicate_tail", "epilogue", "arch", "layout_hints",
              "algo_choice", "local_edges", "async", "barrier_model", "halo"):
        assert f in chosen, f
    assert chosen["algo_choice"]["conv"] == "implicit_gemm"
    assert chosen["layout_hints"]["X"] == "NCHW" and chosen["cache"][0]["producer"] == "im2col_gather"
    assert "pad" in chosen["predicate_tail"] and chosen["halo"]["pad"]["top"] == 1
    assert plan["ranked"] and len(plan["ranked"]) + len(plan["pruned"]) >= 10
    if kind == "conv_pool":
        ca = chosen["compute_at"]
        assert chosen["algo_choice"]["pool"] == "compute_at" and not ca["conv_in_gmem"]
        assert ca["conv_rows"] <= ca["rows_per_cta"] and ca["conv_tile"] == [2 * ca["pool_tile"][0], 2 * ca["pool_tile"][1]]
    (k,) = json.load(open(tmp_path / "gpu.json"))["kernels"]
    text = json.dumps(k)
    stmts = set(re.findall(r'\{"([A-Z]\w+)": \{', text))
    if k["gpu_ir"]["skeleton"] == "sm90":
        assert {"TmaLoad", "Im2colGather", "FenceProxyAsync", "MBarrierArrive", "Wgmma"} <= stmts, stmts
    else:
        assert {"Im2colFetch", "Im2colLand", "CpAsync", "LdMatrix", "MmaSync"} <= stmts, stmts
    assert ({"StShared", "MaxPool"} <= stmts) == (kind == "conv_pool")
    cu = json.load(open(tmp_path / "cu.json"))["files"]
    assert len(cu) == 1 and "__global__" in open(cu[0]).read()


def test_plan_search_prunes_with_conv_reasons():
    (r,) = regions("depthwise")
    doc = stages.plan_json([r], "sm90")
    (p,) = doc["plans"]
    reasons = " ".join(x["why"] for x in p["pruned"])
    assert "TMA of W needs 16-byte rows" in reasons  # K = 9: the sm90 skeleton cannot load W by TMA
    assert p["chosen"]["skeleton"] == "sm80" and p["chosen"]["arch"] == "sm90"


# ---- compile checks -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def builds():
    index = []
    for key in MODELS:
        for arch in ("sm80", "sm90"):
            rs = regions(key)
            index += [(f"{key}/{r.name}", arch, ks) for r, ks in zip(rs, stages.kernel_sources(rs, arch))]
    for key, spec in SPECS.items():
        for arch in ("sm80", "sm90"):
            for skel in (("sm80",) if arch == "sm80" else ("sm90", "sm80")):
                index.append((f"{key}/{skel}", arch, render_conv(spec, conv_search(spec, arch, skeletons=(skel,)).best)))
    return oracle.nvcc_builds(index, "conv kernels")


def test_every_conv_region_binds_to_its_kind():
    for key in MODELS:
        (r,) = regions(key)
        kind, _ = kinds.bind(r)
        assert kind.name == KINDS.get(key, "conv"), key


def test_every_conv_kernel_builds_for_sm80_and_sm90a_without_spills(builds):
    assert len(builds) == 2 * len(MODELS) + 3 * len(SPECS)
    for label, arch, ks, rep in builds:
        assert rep.ok, f"{label} for {arch}:\n{rep.log[-3000:]}"
        assert rep.spills == 0 and rep.stack_frame == 0, f"{label} for {arch} spills:\n{rep.log}"
        assert rep.registers <= 255
        assert "serialized" not in rep.log and "C7508" not in rep.log, rep.log  # wgmma serialized (C7510, C7515, ...) / setmaxnreg ignored


def test_conv_ptx_holds_the_skeleton_instructions(builds):
    skeletons = set()
    for label, arch, ks, rep in builds:
        skeletons.add((ks.skeleton, arch))
        assert missing_instructions(rep, ks.skeleton) == [], (label, arch, rep.ptx_counts)
        if ks.skeleton == "sm90":
            assert rep.count("wgmma.mma_async") >= 4 and rep.count("cp.async.bulk.tensor") >= 1, label
            assert rep.count("mbarrier.arrive") >= 2, label  # the gathering threads' arrive + the consumers'
            assert rep.count("fence.proxy.async") >= 1, label  # gathered generic-proxy stores before wgmma reads them
            assert f"m64n{ks.plan.tile[1]}k16" in ks.source
        else:
            assert rep.count("mma.sync") > 0 and rep.count("ldmatrix") > 0 and rep.count("cp.async") > 0, label
    assert skeletons == {("sm80", "sm80"), ("sm80", "sm90"), ("sm90", "sm90")}


def test_sm90_skeleton_is_chosen_where_w_is_tma_aligned(builds):
    by = {(label.split("/")[0], arch): ks for label, arch, ks, _ in builds}
    for key in ("conv3x3_s2_silu", "conv_relu_maxpool", "grouped2", "dilated", "bf16_residual", "conv_s2_bias_relu_pool"):
        assert by[(key, "sm90")].skeleton == "sm90", key
    for key in ("depthwise", "odd"):  # K = 9, 30: W's rows are not 16-byte aligned
        assert by[(key, "sm90")].skeleton == "sm80", key


@pytest.mark.parametrize("model", ["conv_relu_maxpool", "conv_s2_bias_relu_pool"])
def test_pool_tile_pre_image_is_poly_cores_compute_at_slice(model):
    """The conv rows a CTA computes for its pool tile (ConvPoolSpec.pre_image, the plan's conv_tile) and the
    X window it reads are what Poly Core's isl analysis finds for the same tile: the dependence pre-image
    of the pool tile (compute-at, docs/DESIGN.md §Fusion), and X's footprint of it."""
    from polysat.analyses.polycore import analyze
    from polysat.pricing.kernels import price_kernels
    from polysat.pricing.symbols import bind_params

    comp = Compilation(MODELS[model], cost="model")
    x = comp.extraction
    (priced,) = price_kernels(x.program, x.partition, bind_params(comp.program, None), "sm90")
    (r,) = regions(model)
    spec = kinds.bind(r)[1].spec
    tph, tpw = 3, 3  # Poly Core measures the middle tile: 3x3 keeps it off the image border in both models
    drv = priced.region.bind().driver
    ph, pw = drv.parallel_dims[-2:]
    rep = analyze(priced.region, "sm90", tile={ph: tph, pw: tpw}).to_json()["analysis"]
    rh, rw = spec.pre_image((tph, tpw))
    conv = spec.conv
    internal = max(f["tile_elems"] for f in rep["footprints"].values() if f["role"] == "internal")
    assert internal == rh * rw  # one output channel per tile along i1: the conv tile is the pre-image
    xh = conv.stride[0] * (rh - 1) + conv.dilation[0] * (conv.kh - 1) + 1
    xw = conv.stride[1] * (rw - 1) + conv.dilation[1] * (conv.kw - 1) + 1
    assert rep["footprints"][conv.x]["tile_elems"] == conv.cin * xh * xw


def test_sm90_producer_issues_a_chunk_of_taps_before_landing_them(tmp_path):
    """The sm90 gather is bound by the taps its producer keeps in flight (the H200 ran ResNet-50's 3x3 layers at
    about 2 taps a clock an SM with 2,048 in flight): the PTX of the producer issues 2 x SM90_CHUNK predicated
    16-bit loads before the first 32-bit shared store that lands them."""
    import subprocess

    from polysat.backend.common.nvcc import ARCH_FLAGS, nvcc_path
    from polysat.backend.conv.plan import SM90_CHUNK
    spec = ConvSpec("conv2_x", 32, 64, 56, 56, 64, 3, 3, stride=(1, 1), pad=(1, 1, 1, 1))
    plan = conv_search(spec, "sm90", skeletons=("sm90",)).best
    assert plan.a_passes >= SM90_CHUNK
    src = tmp_path / "conv.cu"
    src.write_text(render_conv(spec, plan).source)
    ptx = tmp_path / "conv.ptx"
    p = subprocess.run([nvcc_path(), "-ptx", "-std=c++17", *ARCH_FLAGS["sm90"], "-o", str(ptx), str(src)],
                       capture_output=True, text=True, check=False)
    assert p.returncode == 0, p.stderr[-3000:]
    text = ptx.read_text()
    first = text.index("ld.global.nc.u16")
    landed = text.index("st.shared.b32", first)
    assert text[first:landed].count("ld.global.nc.u16") == 2 * SM90_CHUNK
