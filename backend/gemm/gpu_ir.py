"""GPU IR of a GEMM kernel: the MMA skeleton as statements with async tokens (`--dump=gpu`).

sm80: cp.async -> commit/wait -> ldmatrix -> mma.sync -> epilogue -> st.global.v2
sm90: TMA -> mbarrier arrive/wait -> wgmma -> epilogue -> st.global.v2 (producer / consumer roles)
"""
from __future__ import annotations

from ..common.gpu_ir import GpuIR, S, Stmt, epilogue_stmt, sm90_consumer
from ..common.mma_plan import SchedulePlan
from .spec import GemmSpec


def _epilogue(spec: GemmSpec, plan: SchedulePlan, tc: str) -> tuple[Stmt, ...]:
    return (
        epilogue_stmt(spec.epilogue, spec.out_dtype, plan, tc),
        S("StGlobalVec", ptr=f"{spec.c} + (b*M + m)*N + n", regs="acc_pair", width=2, pred="m < M && n < N",
          ins=("tE",)),
    )


def _sm80(spec: GemmSpec, plan: SchedulePlan) -> tuple[Stmt, ...]:
    bm, bn, bk = plan.tile
    st = plan.stages
    wm, wn = plan.warp_tile

    def copies(slot: str, kt: str) -> tuple[Stmt, ...]:
        a = S("CpAsync", tensor=spec.a, dst=f"smA[{slot}]", coords=f"(m0, {kt}*{bk})", bytes=2 * plan.vec_a,
              pred="row < M && col < K (zero-fill)")
        if spec.a_prologue is not None:
            a = _prologue(spec, f"smA[{slot}]", f"(m0, {kt}*{bk})", "ld.global.nc.v4 before the MMAs, "
                          "fp32 fn + st.shared.v4 after them (register-staged)", token=False)
        return (a,
                S("CpAsync", tensor=spec.b, dst=f"smB[{slot}]", coords=f"({kt}*{bk}, n0)", bytes=2 * plan.vec_b,
                  pred="row < K && col < N (zero-fill)"))

    return (
        S("AllocShared", name="smA", shape=[st, bm, bk], swizzle="xor16B"),
        S("AllocShared", name="smB", shape=[st, bk, bn], swizzle="xor16B"),
        S("ZeroAcc", acc="acc", warp_tile=f"{wm}x{wn}", mma="m16n8k16"),
        S("Loop", var="s", range=f"0..{st - 2}", role="prologue",
          body=copies("s", "s") + (S("CommitGroup", out="tL[s]", kind="TokLoad"),)),
        S("Loop", var="kt", range="0..ceil(K/BK)-1", role="mainloop", body=(
            S("Wait", ins=("tL[kt]",), lowering=f"cp.async.wait_group {st - 2}"),
            S("Barrier", lowering="bar.sync 0"),
            *copies(f"(kt+{st - 1})%{st}", f"kt+{st - 1}"),
            S("CommitGroup", out=f"tL[kt+{st - 1}]", kind="TokLoad"),
            S("LdMatrix", src=f"smA[kt%{st}]", x4=True, trans=not plan.a_kmajor),
            S("LdMatrix", src=f"smB[kt%{st}]", x4=True, trans=not plan.b_kmajor),
            S("MmaSync", shape="m16n8k16", dtype=f"{spec.in_dtype.value}_fp32acc", acc="acc", steps=bk // 16,
              out="tC", kind="TokCompute"),
        )),
        S("Wait", ins=("tL[kt]",), lowering="cp.async.wait_group 0"),
        *_epilogue(spec, plan, "tC"),
    )


def _sm90(spec: GemmSpec, plan: SchedulePlan) -> tuple[Stmt, ...]:
    bm, bn, bk = plan.tile
    st, nc = plan.stages, plan.warps[0]
    a_box = "{64, %d}" % bm if plan.a_kmajor else "{64, 64} x %d" % (bm // 64)
    b_box = "{64, %d}" % bn if plan.b_kmajor else "{64, 64} x %d" % (bn // 64)
    producer = (
        S("Loop", var="tile", range="blockIdx.x..tiles step gridDim.x", role="persistent", body=(
            S("Loop", var="kt", range="0..ceil(K/64)-1", role="mainloop", body=(
                S("Wait", ins=(f"tC[it-{st}]",), lowering="mbarrier.try_wait.parity empty[it%S]", skip_first=st),
                S("MBarrierArriveExpectTx", mbarrier="full[it%S]",
                  bytes=(bn if spec.a_prologue is not None else bm + bn) * bk * 2),
                _prologue(spec, "smA[it%S]", "(m0, k0)", "128 producer threads: ld.global.nc.v4, fp32 fn, "
                          "st.shared.v4 (128B swizzle), fence.proxy.async, mbarrier.arrive full[it%S]")
                if spec.a_prologue is not None else
                S("TmaLoad", dst_smem="smA[it%S]", desc="tmA", coords="(k0, m0)" if plan.a_kmajor else "(m0, k0)",
                  box=a_box, mbarrier="full[it%S]", out="tL[it]", kind="TokLoad"),
                S("TmaLoad", dst_smem="smB[it%S]", desc="tmB", coords="(k0, n0)" if plan.b_kmajor else "(n0, k0)",
                  box=b_box, mbarrier="full[it%S]", out="tL[it]", kind="TokLoad"),
            )),
        )),
    )
    major = f"A:{'K' if plan.a_kmajor else 'M'} B:{'K' if plan.b_kmajor else 'N'}"
    consumer = sm90_consumer(bn, bk, spec.in_dtype, major, _epilogue(spec, plan, "tC[it]"))
    return (
        S("AllocShared", name="smA", shape=[st, bm, bk], swizzle="128B"),
        S("AllocShared", name="smB", shape=[st, bk, bn], swizzle="128B"),
        S("MBarrierInit", name="full", count=1, depth=st),
        S("MBarrierInit", name="empty", count=4 * nc, depth=st),
        S("Role", name="producer", warpgroups="0", setmaxnreg=40 if nc >= 2 else None, body=producer),
        S("Role", name="consumer", warpgroups=f"1..{nc}", setmaxnreg=232 if nc >= 2 else None, body=consumer),
    )


def _prologue(spec: GemmSpec, dst: str, coords: str, how: str, token: bool = True) -> Stmt:
    """The A tile computed from the prologue's sources (backend/gemm/prologue.py) in place of its copy."""
    p = spec.a_prologue
    return S("PrologueA", sources=[f"{s.tensor}:{s.role}" for s in p.sources], steps=len(p.steps), dst=dst,
             coords=coords, lowering=how, pred="row < M && col < K (else 0)", out="tL[it]" if token else None,
             kind="TokLoad" if token else None)


def build_gpu_ir(spec: GemmSpec, plan: SchedulePlan) -> GpuIR:
    stmts = _sm90(spec, plan) if plan.skeleton == "sm90" else _sm80(spec, plan)
    meta = (("tile", list(plan.tile)), ("threads", plan.threads), ("stages", plan.stages),
            ("epilogue_overlap", plan.epilogue_overlap))
    return GpuIR(plan.arch, plan.skeleton, plan.barrier_model, stmts, meta)
