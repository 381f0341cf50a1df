"""Streamed attention regions (``--cost=model``, rules/streaming.egg) through the backend stages: the
attention kind binds them, the plan's ``algo_choice.attention`` follows the region's walks over the keys
(one: online_softmax; two: streaming_softmax_2pass, where P is rounded as the reference rounds it), and
the region's kernel builds for sm_80 and sm_90a without spills (no GPU needed).
"""
from __future__ import annotations

import importlib.util
import json
import pathlib

import pytest

from polysat.backend import kinds, stages
from polysat.backend.attention.kind import region_algo
from polysat.backend.common.nvcc import check_many, missing_instructions
from polysat.pipeline import Compilation

_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)

ENV = {"M": 1000, "N": 1300, "B": 2, "H": 3}


def attention_regions(dt: str, causal: bool, d: int = 128):
    doc = oracle.model({"Q": (dt, ["B", "H", "M", d]), "K": (dt, ["B", "H", "N", d]), "V": (dt, ["B", "H", "N", d])},
                       [oracle.node("Attention", ["Q", "K", "V"], "O", causal=causal)], ["O"], {"O": {"dtype": dt}})
    return Compilation(doc, cost="model").regions


@pytest.fixture(scope="module")
def streamed():
    return {(dt, causal): attention_regions(dt, causal) for dt in ("fp16", "bf16") for causal in (False, True)}


def test_streamed_regions_bind_to_the_attention_kind(streamed):
    for (dt, causal), regions in streamed.items():
        bound = [kinds.bind(r) for r in regions]
        att = [(k, b) for k, b in bound if k.name == "attention"]
        assert len(att) == 1, (dt, causal, [k.name for k, _ in bound])
        kind, b = att[0]
        assert b.spec.causal == causal and b.spec.d == 128 and b.spec.in_dtype.value == dt
        assert region_algo(b.spec) == ("online_softmax" if b.passes == 1 else "streaming_softmax_2pass")


def test_plan_and_gpu_dumps_follow_the_region(streamed):
    for (dt, causal), regions in streamed.items():
        pj = json.loads(json.dumps(stages.plan_json(regions, "sm90", ENV)))
        gj = json.loads(json.dumps(stages.gpu_json(regions, "sm90", ENV)))
        plans = [p for p in pj["plans"] if p["kind"] == "attention"]
        assert len(plans) == 1
        b = next(b for k, b in map(kinds.bind, regions) if k.name == "attention")
        algo = plans[0]["chosen"]["algo_choice"]["attention"]
        assert algo == region_algo(b.spec)
        assert all(r["key"].endswith(("_2p", "_2p_c") if algo == "streaming_softmax_2pass" else ("_on", "_on_c"))
                   for r in plans[0]["ranked"])
        kernel = next(k for k in gj["kernels"] if k["kind"] == "attention")
        assert kernel["gpu_ir"]["algo"] == algo and kernel["gpu_ir"]["skeleton"] == "sm90"


def test_region_kernels_build_for_both_targets(streamed, tmp_path):
    jobs = []
    for (dt, causal), regions in streamed.items():
        for arch in ("sm80", "sm90"):
            for ks in stages.kernel_sources(regions, arch, ENV):
                if ks.name.startswith("polysat_attn_"):
                    jobs.append((ks, arch))
    assert len(jobs) == 8
    reports = check_many([(ks.source, arch) for ks, arch in jobs], workers=2)
    for (ks, arch), rep in zip(jobs, reports, strict=True):
        assert rep.ok and rep.spills == 0 and rep.stack_frame == 0, (ks.name, arch, rep.log[-2000:])
        assert missing_instructions(rep, ks.skeleton) == [], (ks.name, rep.ptx_counts)
    paths = stages.write_cu(streamed[("fp16", True)], "sm90", str(tmp_path), ENV)
    assert any("polysat_attn_" in p for p in paths)
