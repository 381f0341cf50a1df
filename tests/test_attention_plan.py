"""The attention kind's Schedule Plan, search, GPU IR, CUDA text and registration (docs/DESIGN.md
§Schedule Plan, §GPU IR, §Cost model). No GPU needed.

Checked: the Schedule Plan fields of the plan JSON, the STOP conditions on every survivor, algo_choice.attention
(online by default, streaming_softmax_2pass on request, 1.5x the QK^T FLOPs), causal block skipping in
the estimate, the async tokens of every GPU IR variant (and that a broken one is rejected), the kernel
text (standalone, deterministic, ABI, scale constants, TMA boxes), the kind table entry, and coded
diagnostics for bad requests.
"""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polysat.backend import kinds as kinds_mod
from polysat.backend.attention.render import LOG2E, render, scale_constants
from polysat.backend.attention.gpu_ir import build_gpu_ir as build_attention_gpu_ir
from polysat.backend.attention.plan import AttentionPlan
from polysat.backend.attention.plan import key_blocks, search
from polysat.backend.common.plan_search import SMEM_FRACTION
from polysat.backend.attention.reference import reference as attention_reference
from polysat.backend.attention.spec import AttentionSpec
from polysat.backend.common.gpu_ir import check_tokens, GpuIR
from polysat.analyses.devices import device
from polysat.ir.diagnostics import PolysatError
from polysat.ir.dtypes import DType

SPEC = AttentionSpec("attn", "M", "N", 128, 128, batch=("B", "H"), causal=True, scale=128 ** -0.5)
ENV = {"M": 4096, "N": 4096, "B": 2, "H": 16}


def _code(fn) -> tuple[str, str]:
    with pytest.raises(PolysatError) as e:
        fn()
    d = e.value.diagnostics[0]
    return d.code, d.kind


@pytest.mark.parametrize("arch", ["sm80", "sm90"])
def test_plan_json_has_the_schedule_plan_fields(arch):
    res = search(SPEC, arch, ENV)
    j = json.loads(json.dumps(res.to_json(SPEC)))
    chosen = j["chosen"]
    for field in ("tile", "stages", "bind", "warp_tile", "cache", "vectorize", "predicate_tail", "arch", "layout_hints",
                  "algo_choice", "local_edges", "async", "barrier_model", "smem_bytes"):
        assert field in chosen, field
    assert chosen["arch"] == arch and chosen["tile"][2] == 128 and chosen["algo_choice"]["attention"] == "online_softmax"
    assert [c["tensor"] for c in chosen["cache"]] == ["Q", "K", "V"]
    assert chosen["barrier_model"] == ("mbarrier" if chosen["skeleton"] == "sm90" else "cp_async_group")
    assert chosen["causal"]["skip_blocks_above_diagonal"] is True
    times = [r["time_s"] for r in j["ranked"]]
    assert times == sorted(times) and 3 <= len(times) + len(j["pruned"]) <= 60
    assert all(p["why"] for p in j["pruned"])
    if arch == "sm90":
        assert chosen["skeleton"] == "sm90"  # wgmma beats mma.sync on Hopper in the estimate


@pytest.mark.parametrize("arch", ["sm80", "sm90"])
@pytest.mark.parametrize("d, dv", [(64, 64), (128, 128), (64, 128)])
def test_every_survivor_honours_the_stop_conditions(arch, d, dv):
    spec = dataclasses.replace(SPEC, d=d, dv=dv)
    res = search(spec, arch, ENV)
    tgt = device(arch)
    for p in res.ranked:
        assert p.smem_bytes <= SMEM_FRACTION * tgt.smem_per_cta
        assert p.regs_estimate <= (240 if p.skeleton == "sm90" and p.warps[0] >= 2 else 255)
        if p.skeleton == "sm90":
            assert arch == "sm90" and p.block_m in (64, 128) and p.block_n in (64, 128)
        assert p.threads == (128 * (p.warps[0] + 1) if p.skeleton == "sm90" else 32 * p.warps[0])
    if (d, dv) == (128, 128):  # the big tiles with deep rings do not fit
        assert any("smem" in x.reason for x in res.pruned)


def test_algo_choice_selects_the_softmax_algorithm():
    default = search(SPEC, "sm90", ENV)
    assert default.best.algo == "online_softmax"
    assert {p.algo for p in default.ranked} == {"online_softmax", "streaming_softmax_2pass"}
    forced = search(SPEC, "sm90", ENV, hints={"algo_choice": {"attention": "streaming_softmax_2pass"}})
    assert forced.best.algo == "streaming_softmax_2pass" and {p.algo for p in forced.ranked} == {"streaming_softmax_2pass"}
    assert forced.to_json(SPEC)["chosen"]["algo_choice"]["attention"] == "streaming_softmax_2pass"
    # same tile: 2-pass issues (2 D + Dv) / (D + Dv) = 1.5x the FLOPs and ranks behind
    on = {p.key().replace("_on", ""): dict(p.est) for p in default.ranked if p.algo == "online_softmax"}
    for p in default.ranked:
        if p.algo == "streaming_softmax_2pass":
            o = on.get(p.key().replace("_2p", ""))
            if o:
                assert dict(p.est)["flops_issued"] == pytest.approx(1.5 * o["flops_issued"])
                assert dict(p.est)["time_s"] > o["time_s"]


def test_bad_requests_are_coded_diagnostics():
    assert _code(lambda: search(SPEC, "sm90", ENV, algos=("magic",))) == ("E1008", "InvalidAttribute")
    assert _code(lambda: search(dataclasses.replace(SPEC, d=264), "sm90", ENV))[1] == "NoKernelTemplate"
    assert _code(lambda: search(SPEC, "sm70", ENV))[1] == "UnknownTarget"
    other_p = DType.bf16 if SPEC.in_dtype == DType.fp16 else DType.fp16  # P V takes P and V in one type
    assert _code(lambda: search(dataclasses.replace(SPEC, p_dtype=other_p), "sm90", ENV))[1] == "NoKernelTemplate"


@pytest.mark.parametrize("arch", ["sm80", "sm90"])
def test_every_head_dim_up_to_256_has_a_plan_that_fits(arch):
    """Any head dim 1..256 (D and Dv, equal or not) is planned: the sm90 skeleton where wgmma / TMA take it
    (D a multiple of 64, Dv 64 or 128), else the sm80 skeleton on the dims padded to 16 (Q from smem where
    registers are short), within the smem and register budgets; the copy width divides every row."""
    dev = device(arch)
    pairs = [(d, d) for d in range(1, 257)] + [(64, 8), (8, 64), (96, 160), (256, 32), (20, 100), (128, 64)]
    for d, dv in pairs:
        spec = dataclasses.replace(SPEC, d=d, dv=dv)
        res = search(spec, arch, ENV)
        p = res.best
        assert p.smem_bytes <= SMEM_FRACTION * dev.smem_per_cta and p.regs_estimate <= 255, (d, dv, p.key())
        if p.skeleton == "sm90":
            assert d % 64 == 0 and dv in (64, 128), (d, dv)
        else:
            assert p.dp == -(-d // 16) * 16 and p.dvp == -(-dv // 16) * 16 and d % p.vec == 0 and dv % p.vec == 0
        if arch == "sm90" and (d % 64 or dv not in (64, 128)):
            assert any("the sm80 skeleton takes the other head dims" in x.reason for x in res.pruned), (d, dv)
        if arch == "sm90" and d % 64 == 0 and dv in (64, 128):
            assert p.skeleton == "sm90", (d, dv)


def test_causal_blocks_above_the_diagonal_are_not_issued():
    full = dataclasses.replace(SPEC, causal=False)
    for arch in ("sm80", "sm90"):
        c = dict(search(SPEC, arch, ENV).best.est)
        f = dict(search(full, arch, ENV).best.est)
        assert c["flops_useful"] == pytest.approx(SPEC.flops(ENV))
        assert 0.5 <= c["flops_issued"] / f["flops_issued"] <= 0.55  # only diagonal blocks are partly wasted
        assert c["time_s"] < 0.6 * f["time_s"]


def test_tail_axes_are_predicated():
    spec = AttentionSpec("t", 100, "N", 64, 64)
    for p in search(spec, "sm90").ranked:
        assert "m" in p.predicate_tail and "n" in p.predicate_tail  # 100 % 64 != 0; N symbolic
    spec = AttentionSpec("t", 256, 512, 64, 64)
    assert search(spec, "sm90").best.predicate_tail == ()


def _flat(stmts, loop=None):
    for s in stmts:
        yield s, loop
        yield from _flat(s.body, s if s.op == "Loop" else loop)


@pytest.mark.parametrize("arch", ["sm80", "sm90"])
@pytest.mark.parametrize("algo", ["online_softmax", "streaming_softmax_2pass"])
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_ir_tokens_and_structure(arch, algo, causal):
    spec = dataclasses.replace(SPEC, causal=causal)
    plan = search(spec, arch, ENV, algos=(algo,), skeletons=(arch,)).best
    ir = build_attention_gpu_ir(spec, plan)
    check_tokens(ir)
    json.dumps(ir.to_json())
    flat = list(_flat(ir.stmts))
    mainloops = [s for s, _ in flat if s.op == "Loop" and str(s.arg("role", "")).startswith("mainloop")]
    mma = "Wgmma" if arch == "sm90" else "MmaSync"
    passes = 2 if algo == "streaming_softmax_2pass" else 1
    consumer_loops = [lp for lp in mainloops if any(b.op == mma for b in lp.body)]
    assert len(consumer_loops) == passes
    # the last pass holds both MMAs (S = Q K^T, O += P V); pass 1 of the 2-pass algorithm only S
    assert [sum(b.op == mma for b in lp.body) for lp in consumer_loops] == [1] * (passes - 1) + [2]
    assert any(s.op == "Mask" for s, _ in flat) and any(s.op == "PackP" for s, _ in flat)
    assert any(s.op in ("OnlineSoftmax", "NormalizedP") for s, _ in flat)
    if causal:
        assert "diagonal" in mainloops[0].arg("range")
    if arch == "sm90":
        roles = [s.arg("name") for s in ir.stmts if s.op == "Role"]
        assert roles == ["producer", "consumer"]
        forms = {s.arg("form") for s, _ in flat if s.op == "Wgmma"}
        assert forms == {"SS", "RS"}
        assert ir.barrier_model == "mbarrier"


def test_a_broken_gpu_ir_is_rejected():
    plan = search(SPEC, "sm80", ENV).best
    ir = build_attention_gpu_ir(SPEC, plan)

    def drop_waits(stmts):
        return tuple(dataclasses.replace(s, body=drop_waits(s.body)) for s in stmts
                     if not (s.op == "Wait" and any(t.startswith("tL") for t in s.in_tokens)))

    broken = GpuIR(ir.arch, ir.skeleton, ir.barrier_model, drop_waits(ir.stmts), ir.meta)
    assert _code(lambda: check_tokens(broken))[1] == "InternalError"


def test_kernel_text_is_standalone_deterministic_and_parameterised():
    plan90 = search(SPEC, "sm90", ENV).best
    a, b = render(SPEC, plan90), render(SPEC, plan90)
    assert a.source == b.source and a.digest == b.digest
    assert '#include "' not in a.source and "polysat::attn::attention_sm90<" in a.source
    assert [p.ident for p in a.params] == ["tmQ", "tmK", "tmV", "O", "M", "N", "batch"]
    assert [(t.role, t.dims, t.box) for t in a.tma] == [("Q", ("d", "m", "batch"), (64, plan90.block_m, 1)),
                                                        ("K", ("d", "n", "batch"), (64, plan90.block_n, 1)),
                                                        ("V", ("dv", "n", "batch"), (64, plan90.block_n, 1))]
    assert a.grid({"m": 1000, "batch": 6}) == (math.ceil(1000 / plan90.block_m) * 6, 1, 1)
    c = render(SPEC, search(SPEC, "sm80", ENV).best)
    assert [p.kind for p in c.params] == ["ptr"] * 4 + ["i32"] * 3 and c.digest != a.digest
    assert "polysat::attn::attention_sm80<" in c.source and c.name.startswith("polysat_attn_attn_sm80_")
    # the scale is a compile-time constant in the log2 domain, its sign a template argument
    for scale, sign in ((0.125, 1), (-0.5, -1), (0.0, 0)):
        s, cst = scale_constants(scale)
        assert s == sign and cst == (abs(scale) * LOG2E if scale else 1.0)
        src = render(dataclasses.replace(SPEC, scale=scale), plan90).source
        assert f"static constexpr float c = {cst:.9e}f;" in src and f"static constexpr int sign = {sign};" in src
    # sizes are runtime arguments: one kernel per plan, whatever M and N are
    assert render(dataclasses.replace(SPEC, m=333, n=77), plan90).name == a.name


def test_the_kind_is_in_the_table():
    names = [k.name for k in kinds_mod.kinds()]
    assert names.index("attention") > names.index("gemm")
    kind = kinds_mod.kind_named("attention")
    assert kind.reference is attention_reference
    spec = AttentionSpec("k", 70, 90, 64, 64, causal=True)
    plan = kind.search(spec, "sm90", None).best
    assert kind.render(spec, plan).skeleton == plan.skeleton
    check_tokens(kind.gpu_ir(spec, plan))
    rng = np.random.default_rng(0)
    x = {n: rng.uniform(-1, 1, s).astype(np.float32) for n, s in spec.shapes().items() if n != "O"}
    assert kind.reference(spec, x, None).shape == (70, 64)


def test_a_region_no_kind_computes_names_every_kind():
    from polysat.pipeline import Compilation
    from polysat.ir.region import region_json
    from polysat.ir.region_load import region_from_json
    soft = Compilation("examples/softmax.json").regions
    doc = region_json(soft[0])  # softmax with a column-major output: no kind writes that layout
    doc["region"]["outputs"][0]["memref"]["layout"] = {"kind": "col_major"}
    with pytest.raises(PolysatError) as e:
        kinds_mod.bind(region_from_json(doc))
    d = e.value.diagnostics[0]
    assert (d.code, d.kind) == ("E1504", "NoKernelTemplate")
    assert len(d.why.split("; ")) >= len(kinds_mod.kinds())  # every kind's reason, the SIMT kind's too
    assert "not a SIMT region" in d.why


def test_running_without_a_gpu_is_a_coded_diagnostic():
    from polysat.backend.attention import launch as art
    from polysat.backend.common.gpu import cuda_available
    if cuda_available():
        pytest.skip("a GPU is visible: tests/test_attention_gpu.py runs the kernels")
    spec = AttentionSpec("k", 8, 8, 64, 64)
    x = {n: np.zeros(s, np.float16) for n, s in spec.shapes().items() if n != "O"}
    assert _code(lambda: art.run(spec, x))[1] == "UnknownTarget"


@settings(max_examples=30)
@given(st.integers(1, 20000), st.integers(1, 20000), st.integers(1, 64), st.sampled_from([64, 128]),
       st.sampled_from([64, 128]), st.booleans(), st.sampled_from(["sm80", "sm90"]),
       st.sampled_from([DType.fp16, DType.bf16]))
def test_search_on_generated_shapes(m, n, b, d, dv, causal, arch, dt):
    spec = AttentionSpec("g", m, n, d, dv, batch=(b,), causal=causal, in_dtype=dt, p_dtype=dt, out_dtype=dt)
    res = search(spec, arch)
    best = res.best
    est = dict(best.est)
    assert est["time_s"] > 0 and est["flops_issued"] >= est["flops_useful"] * 0.999
    tiles = math.ceil(m / best.block_m)
    blocks = sum(key_blocks(t * best.block_m, best.block_m, best.block_n, m, n, causal)[0] for t in range(tiles))
    assert est["flops_issued"] == pytest.approx(
        2.0 * b * blocks * best.block_m * best.block_n * (d * (2 if best.two_pass else 1) + dv))
    check_tokens(build_attention_gpu_ir(spec, best))
    assert isinstance(best, AttentionPlan)


def test_bench_runs_or_explains_why_not(tmp_path, capsys):
    """bench/attention.py imports everywhere; without a GPU it says so and exits 0 (it measures on a GPU)."""
    import importlib.util
    import os

    from polysat.backend.common.gpu import cuda_available
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "attention.py")
    spec = importlib.util.spec_from_file_location("bench_attention", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if cuda_available():
        pytest.skip("a GPU is visible: run bench/attention.py itself")
    assert mod.main(["--json", str(tmp_path / "a.json")]) == 0
    assert "no CUDA GPU" in capsys.readouterr().out


def test_the_estimate_tracks_the_h200s_measured_fp16_rows():
    """The sm90 plan's estimate against the attention rows an H200 measured (bench/results/nvidia-h200.json, fp16:
    the one-pass kernel, d 64/128, seq 1k-16k, causal and not): within the GPU check's +-25 %."""
    import pathlib

    from polysat.analyses.devices import device
    from polysat.backend.attention.plan import estimate
    from polysat.bench.attention import spec_of
    rows = json.loads((pathlib.Path(__file__).resolve().parent.parent / "bench/results/nvidia-h200.json").read_text())
    rows = [r for r in rows["rows"] if r["bench"] == "attention" and r["dtype"] == "fp16" and r["status"] == "ok"]
    assert len(rows) == 20
    for r in rows:
        case = {f: r[f] for f in ("dtype", "d", "seq", "causal", "batch", "heads")}
        spec = spec_of(case)
        plan = search(spec, "sm90", algos=("online_softmax",)).best
        assert plan.key() == r["plan"]  # the plan that was measured
        est = estimate(spec, plan, {"batch": r["batch"] * r["heads"], "m": r["seq"], "n": r["seq"]}, device("sm90"))
        assert 0.75 <= est["time_s"] / (r["polysat_ms"] * 1e-3) <= 1.25, (r["case"], est["time_s"], r["polysat_ms"])
