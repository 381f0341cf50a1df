"""GPU IR of the implicit-GEMM conv and of conv + pool (`--dump=gpu`): the GEMM skeleton's
statements with the im2col gather as the A producer and, for conv + pool, the conv tile handed to the
pool through smem (compute-at).

sm80: Im2colFetch (ld.global.nc pairs, pad predicate) before the MMAs, Im2colLand (st.shared) after them,
      W by cp.async; ldmatrix(.trans) -> mma.sync -> epilogue -> NCHW stores (or smem tile -> MaxPool).
sm90: producer warpgroup: TMA of W + Im2colGather by its 128 threads, fence.proxy.async, mbarrier arrive;
      consumers: wgmma on the ring -> epilogue -> NCHW stores (or smem tile -> named barrier -> MaxPool).
The token rules are gpu_ir.check_tokens'.
"""
from __future__ import annotations

from ..common.gpu_ir import S, GpuIR, Stmt, epilogue_stmt, sm90_consumer
from ..conv_pool.spec import ConvPoolSpec
from .plan import SM90_CHUNK, SM90_REGS, ConvPlan
from .spec import ConvSpec


def _conv(spec) -> ConvSpec:
    return spec.conv if isinstance(spec, ConvPoolSpec) else spec


def _output(spec, plan: ConvPlan, tc: str) -> tuple[Stmt, ...]:
    conv = _conv(spec)
    epi = epilogue_stmt(conv.epilogue, conv.out_dtype, plan.gemm, tc)
    if not isinstance(spec, ConvPoolSpec):
        return (epi, S("StGlobal", ptr=f"{conv.y} + ((n*Co + g*Cog + co)*Ho + ho)*Wo + wo", regs="acc", width=1,
                       layout="NCHW", pred="m < N*Ho*Wo && co < Cog", ins=("tE",)))
    tph, tpw = plan.pool_tile
    rh, rw = spec.pre_image(plan.pool_tile)
    sync = "named barrier 1 (consumers)" if plan.skeleton == "sm90" else "bar.sync 0"
    return (epi,
            S("StShared", name="conv_tile", shape=[plan.tile[1], plan.tile[0] + 8], dtype=conv.out_dtype.value,
              pred="co < Cog", ins=("tE",), out="tP", kind="TokEpilogue"),
            S("Barrier", lowering=sync),
            S("MaxPool", src="conv_tile", window=list(spec.kernel), stride=list(spec.stride), pad=list(spec.pad),
              dilation=list(spec.dilation), pool_tile=[tph, tpw], conv_tile=[rh, rw],
              pred="0 <= ho < Ho && 0 <= wo < Wo (else -inf)", ins=("tP",), out="tQ", kind="TokEpilogue"),
            S("StGlobal", ptr=f"{conv.y} + ((n*Co + g*Cog + co)*Hp + ph)*Wp + pw", width=1, layout="NCHW",
              pred="ph < Hp && pw < Wp && co < Cog", ins=("tQ",)))


def _rows(spec) -> str:
    if isinstance(spec, ConvPoolSpec):
        return "pool tile (n, ph0, pw0) -> conv pre-image rows q = (qh, qw): ho = ph0*psh - ppt + qh, wo = pw0*psw - ppl + qw"
    return "m = (n, ho, wo), wo fastest"


def _gather_args(spec, plan: ConvPlan, slot: str, kt: str) -> dict:
    conv = _conv(spec)
    (sh, sw), (dh, dw) = conv.stride, conv.dilation
    return dict(tensor=conv.x, dst=f"smA[{slot}]", k_tile=kt, elems_per_thread=2 * plan.a_passes,
                index=f"X[n, g*Cg + c, ho*{sh} + r*{dh} - {conv.pad[0]}, wo*{sw} + s*{dw} - {conv.pad[2]}]",
                pred="0 <= hi < H && 0 <= wi < W && row valid && k < K (else zero)", rows=_rows(spec))


def _sm80(spec, plan: ConvPlan) -> tuple[Stmt, ...]:
    conv = _conv(spec)
    bm, bn, bk = plan.tile
    st = plan.stages
    wm, wn = plan.gemm.warp_tile

    def w_copy(slot: str, kt: str) -> Stmt:
        return S("CpAsync", tensor=conv.wt, dst=f"smB[{slot}]", coords=f"(n0, {kt}*{bk})", bytes=2 * plan.gemm.vec_b,
                 pred="co < Cog && k < K (zero-fill)")

    return (
        S("AllocShared", name="smA", shape=[st, bk, bm], swizzle="xor16B", major="M"),
        S("AllocShared", name="smB", shape=[st, bn, bk], swizzle="xor16B", major="K"),
        S("ZeroAcc", acc="acc", warp_tile=f"{wm}x{wn}", mma="m16n8k16"),
        S("Im2colSetup", rows=_rows(spec), per_thread="rows m, m+1: (n, ho*sh - pt, wo*sw - pl)"),
        S("Loop", var="s", range=f"0..{st - 2}", role="prologue", body=(
            S("Im2colFetch", **_gather_args(spec, plan, "s", "s")), w_copy("s", "s"),
            S("Im2colLand", dst="smA[s]", store="st.shared.b32 pair"),
            S("CommitGroup", out="tL[s]", kind="TokLoad"))),
        S("Loop", var="kt", range="0..ceil(K/BK)-1", role="mainloop", body=(
            S("Wait", ins=("tL[kt]",), lowering=f"cp.async.wait_group {st - 2}"),
            S("Barrier", lowering="bar.sync 0"),
            S("Im2colFetch", **_gather_args(spec, plan, f"(kt+{st - 1})%{st}", f"kt+{st - 1}"), into="registers"),
            w_copy(f"(kt+{st - 1})%{st}", f"kt+{st - 1}"),
            S("CommitGroup", out=f"tL[kt+{st - 1}]", kind="TokLoad"),
            S("LdMatrix", src=f"smA[kt%{st}]", x4=True, trans=True),
            S("LdMatrix", src=f"smB[kt%{st}]", x4=True, trans=False),
            S("MmaSync", shape="m16n8k16", dtype=f"{conv.in_dtype.value}_fp32acc", acc="acc", steps=bk // 16,
              out="tC", kind="TokCompute"),
            S("Im2colLand", dst=f"smA[(kt+{st - 1})%{st}]", store="st.shared.b32 pair", after="the MMAs (latency hidden)"),
        )),
        S("Wait", ins=("tL[kt]",), lowering="cp.async.wait_group 0"),
        *_output(spec, plan, "tC"),
    )


def _sm90(spec, plan: ConvPlan) -> tuple[Stmt, ...]:
    conv = _conv(spec)
    bm, bn, bk = plan.tile
    st, nc = plan.stages, plan.warps[0]
    producer = (
        S("Loop", var="tile", range="blockIdx.x..tiles step gridDim.x", role="persistent", body=(
            S("Im2colSetup", rows=_rows(spec), when="kt == 0"),
            S("Loop", var="kt", range="0..ceil(K/64)-1", role="mainloop", body=(
                S("Wait", ins=(f"tC[it-{st}]",), lowering="mbarrier.try_wait.parity empty[it%S]", skip_first=st),
                S("MBarrierArriveExpectTx", mbarrier="full[it%S]", bytes=bn * bk * 2, thread=0),
                S("TmaLoad", dst_smem="smB[it%S]", desc="tmW", coords="(k0, n0, g)" if conv.groups > 1 else "(k0, n0)",
                  box="{64, %d}" % bn, mbarrier="full[it%S]", out="tL[it]", kind="TokLoad"),
                S("Im2colGather", **_gather_args(spec, plan, "it%S", "kt"), threads=128, chunk=SM90_CHUNK,
                  layout="MN-major 128B swizzle, 64-row boxes (the TMA layout of a [K, M] operand)"),
                S("FenceProxyAsync", lowering="fence.proxy.async.shared::cta"),
                S("MBarrierArrive", mbarrier="full[it%S]", out="tL[it]", kind="TokLoad", per="thread"),
            )),
        )),
    )
    consumer = sm90_consumer(bn, bk, conv.in_dtype, "A:M B:K", _output(spec, plan, "tC[it]"))
    return (
        S("AllocShared", name="smA", shape=[st, bk, bm], swizzle="128B", major="M"),
        S("AllocShared", name="smB", shape=[st, bn, bk], swizzle="128B", major="K"),
        S("MBarrierInit", name="full", count=1 + 128, depth=st),
        S("MBarrierInit", name="empty", count=4 * nc, depth=st),
        S("Role", name="producer", warpgroups="0", setmaxnreg=SM90_REGS[0] if nc >= 2 else None, body=producer),
        S("Role", name="consumer", warpgroups=f"1..{nc}", setmaxnreg=SM90_REGS[1] if nc >= 2 else None, body=consumer),
    )


def build_gpu_ir(spec: "ConvSpec | ConvPoolSpec", plan: ConvPlan) -> GpuIR:
    stmts = _sm90(spec, plan) if plan.skeleton == "sm90" else _sm80(spec, plan)
    meta = (("kind", "conv_pool" if isinstance(spec, ConvPoolSpec) else "conv"), ("tile", list(plan.tile)),
            ("threads", plan.threads), ("stages", plan.stages), ("epilogue_overlap", plan.gemm.epilogue_overlap))
    if plan.pool_tile:
        meta += (("pool_tile", list(plan.pool_tile)),)
    return GpuIR(plan.arch, plan.skeleton, plan.gemm.barrier_model, stmts, meta)
