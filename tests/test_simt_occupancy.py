"""The SIMT plan model's occupancy against ptxas, and the loads an unrolled plan issues ahead.

The H200 run (bench/results/nvidia-h200.json) measured the elementwise chain's plan b1024_g1024_v2 at 23% of
the copy bandwidth: 37 registers a thread let one 1024-thread CTA on an SM, 12 bytes a lane in flight, far
below bandwidth x latency. Here ptxas (``-Xptxas -v``, sm_90a) is the oracle for the registers: the model's
estimate must be near its count, and the chosen plans of the bench's three SIMT cases must keep, at the
occupancy ptxas's registers allow, the bytes in flight the model credits them with. No GPU needed.
"""
from __future__ import annotations

import math
import re

import pytest

from polysat.analyses.devices import device
from polysat.backend.common.nvcc import check_many, nvcc_path
from polysat.backend.simt.access import passes, vector_reads
from polysat.backend.simt.plan import DRAM_LATENCY_NS, SimtPlan, registers, roofline, search, stop_reason
from polysat.backend.simt.render import render
from polysat.bench import simt
from polysat.ir.region import R

ARCH = "sm90"


@pytest.fixture(scope="module")
def cases() -> list:
    return [(c["name"], *simt._region(c)) for c in simt.cases()]


def _ptxas_registers(jobs: list) -> list[int]:
    assert nvcc_path(), "nvcc is required for the compile checks"
    out = []
    for rep in check_many([(render(spec, plan).source, ARCH) for spec, plan in jobs]):
        assert rep.ok and not rep.spills, rep.log[-2000:]
        (regs,) = {int(x) for x in re.findall(r"Used (\d+) registers", rep.log)}
        out.append(regs)
    return out


def _in_flight(spec, plan, regs: int, env: dict) -> float:
    """Bytes an SM has in flight in the first pass that reads, at the occupancy regs allow."""
    dev = device(ARCH)
    ctas = min(dev.max_threads_per_sm // plan.block, dev.max_ctas_per_sm,
               dev.regs_per_sm // (plan.block * 8 * math.ceil(regs / 8)))
    first = next(p for p in passes(spec) if vector_reads(spec, p))
    length = math.prod(spec.axis_size(a, spec.env(env)) for a in first.axes)
    ahead = min(plan.unroll, math.ceil(length / (plan.group * plan.vec)))
    loads = {(n.arg, n.dtype): n.dtype.itemsize * plan.vec for n in vector_reads(spec, first) if n.op == R.READ}
    return ctas * plan.block * ahead * sum(loads.values())


def test_register_estimate_is_near_ptxas(cases):
    """Within 25% of ptxas's count for the plans the search admits among one, two and four steps issued
    ahead, vectors of 2, 4 and 8, groups of 16 to 1024 lanes."""
    shapes = ((128, 128, 8, 1), (128, 128, 8, 2), (128, 128, 4, 4), (128, 128, 8, 4), (128, 32, 8, 4),
              (128, 16, 8, 2), (128, 16, 2, 4), (256, 256, 2, 1), (1024, 1024, 2, 1))
    jobs = [(spec, p) for _n, _r, spec, env in cases for b, g, v, u in shapes
            if stop_reason(spec, p := SimtPlan(ARCH, b, g, v, unroll=u), env) is None]
    assert len(jobs) >= 20
    for (spec, plan), regs in zip(jobs, _ptxas_registers(jobs), strict=True):
        assert abs(registers(spec, plan) - regs) <= 0.25 * regs, (spec.name, plan.key(), registers(spec, plan), regs)


def test_chosen_plans_keep_what_the_model_credits_in_flight(cases):
    """Each case's best plan: at ptxas's registers, its first reading pass keeps at least the bytes per SM the
    device needs in flight (bandwidth x latency), as its estimate (mem_eff 1) assumes. The plan the H200
    measured for the elementwise chain keeps under half of it at ptxas's registers, and is not chosen."""
    dev = device(ARCH)
    need = dev.dram_tbps * 1e12 * DRAM_LATENCY_NS * 1e-9 / dev.sms
    best = [(spec, search(spec, ARCH, env).best, env) for _n, _r, spec, env in cases]
    for (spec, plan, env), regs in zip(best, _ptxas_registers([(s, p) for s, p, _e in best]), strict=True):
        assert dict(plan.est)["mem_eff"] == 1.0, plan.key()
        assert _in_flight(spec, plan, regs, env) >= need, (spec.name, plan.key(), regs)
    (_n, _r, spec, env) = next(c for c in cases if c[0] == "elementwise")
    old = SimtPlan(ARCH, 1024, 1024, 2)
    (regs,) = _ptxas_registers([(spec, old)])
    assert _in_flight(spec, old, regs, env) < need / 2
    assert roofline(spec, old, env, dev)["mem_eff"] < 1.0 and search(spec, ARCH, env).best.key() != old.key()


def test_an_unrolled_step_issues_its_loads_before_the_first_use(tmp_path, cases):
    """PTX of the elementwise chain (two fp16 inputs, X read twice at the same place) at 8 elements x 4
    steps: the loop body holds 4 x 2 vector loads (X's second read shares the first's) before its first
    store; one step at a time, one load of each input comes before each store."""
    import subprocess

    from polysat.backend.common.nvcc import ARCH_FLAGS
    (_n, _r, spec, _e) = next(c for c in cases if c[0] == "elementwise")
    counts = {}
    for u in (1, 4):
        plan = SimtPlan(ARCH, 128, 128, 8, unroll=u)
        src = tmp_path / f"{plan.key()}.cu"
        src.write_text(render(spec, plan).source)
        ptx = tmp_path / f"{plan.key()}.ptx"
        p = subprocess.run([nvcc_path(), "-ptx", "-std=c++17", *ARCH_FLAGS[ARCH], "-o", str(ptx), str(src)],
                           capture_output=True, text=True, check=False)
        assert p.returncode == 0, p.stderr[-3000:]
        text = ptx.read_text().replace(".nc", "")
        first_store = text.index("st.global.v4.u32")
        counts[u] = text[:first_store].count("ld.global.v4.u32")
    assert counts == {1: 2, 4: 8}, counts
