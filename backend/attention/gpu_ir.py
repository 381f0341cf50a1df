"""GPU IR of the flash-attention skeleton: statements with async tokens (`--dump=gpu`).

sm80: cp.async (Q once, K/V ring) -> commit/wait -> ldmatrix -> mma.sync S = Q K^T -> mask (diagonal and
      tail blocks only) -> online softmax on the accumulators -> P packed into A fragments -> ldmatrix.trans
      V -> mma.sync O += P V -> epilogue O / l -> st.global
sm90: producer warpgroup: TMA Q once, TMA K/V into the mbarrier ring; consumer warpgroups: wait full ->
      wgmma SS S = Q K^T -> softmax -> wgmma RS O += P V -> arrive empty -> epilogue -> st.global

Tokens are gpu_ir's (``TokLoad``, ``TokCompute``, ``TokEpilogue``) and :func:`gpu_ir.check_tokens`
checks them; ``streaming_softmax_2pass`` has two key loops (pass 1: K only, row max and sum; pass 2:
K and V, normalised P V). A ScoresPlan (softmax_scores, sm80 only) has no V at all: pass 2 stores the
normalised P, and a last loop stores the key blocks past the CTA's diagonal.
"""
from __future__ import annotations

from ..common.gpu_ir import GpuIR, S, Stmt
from .plan import AttentionPlan
from .spec import AttentionSpec


def _key_loop_range(spec: AttentionSpec, plan: AttentionPlan) -> str:
    bm, bn, _ = plan.tile
    if spec.causal:
        return f"0..min(ceil(N/{bn}), (min(m0+{bm},M)-1+N-M)/{bn}+1)-1 (blocks above the diagonal skipped)"
    return f"0..ceil(N/{bn})-1"


def _softmax(spec: AttentionSpec, plan: AttentionPlan, tok: str, pass_: int, where: str) -> tuple[Stmt, ...]:
    bm, bn, _ = plan.tile
    mask = S("Mask", when=f"jb >= first_masked = max(0, min(floor((m0+N-M+1)/{bn}), floor(N/{bn})))",
             pred=("j < N && j <= i + (N - M)" if spec.causal else "j < N"), value="-inf", where=where)
    if plan.two_pass and pass_ == 0:
        return (mask, S("RowStats", ins=(tok,), m="max", l="sum exp2(c t - c m)", reduce="quad shfl.xor 1,2",
                        where=where))
    if plan.store_p:  # softmax_scores: the normalised P leaves the registers for device memory
        return (mask, S("NormalizedP", ins=(tok,), p="exp2(c t - c m) / l", where=where),
                S("Epilogue", acc="S", ops=[{"op": "cast", "dtype": spec.p_dtype.value, "final": True}], ins=(tok,),
                  out="tE[jb]", kind="TokEpilogue", where=where, **{"async": False}),
                _store_p(spec, plan, "tE[jb]", "jb"))
    if plan.two_pass:
        body = S("NormalizedP", ins=(tok,), p="exp2(c t - c m) / l", round=spec.p_dtype.value, where=where)
    else:
        body = S("OnlineSoftmax", ins=(tok,), max="running, quad shfl.xor 1,2", p="exp2(c t - c m_new)",
                 rescale="O *= exp2(c m_old - c m_new), l likewise", round=spec.p_dtype.value, where=where)
    return (mask, body, S("PackP", src="S accumulators (m16n8 C layout)", dst="A fragments (m16k16)", where=where,
                          smem_round_trip=False))


def _store_p(spec, plan: AttentionPlan, tok: str, jb: str) -> Stmt:
    return S("StGlobalVec", ptr=f"{spec.c} + (b*M + m)*N + {jb}*{plan.block_n} + n", regs="P pair (S accumulator layout)",
             width=2, pred="m < M && n < N (pairs when N is even)", ins=(tok,))


def _sm80(spec: AttentionSpec, plan: AttentionPlan) -> tuple[Stmt, ...]:
    bm, bn, d = plan.tile
    st, dv = plan.stages, plan.dv
    dt = f"{spec.in_dtype.value}_fp32acc"

    def copies(slot: str, jb: str, with_v: bool) -> tuple[Stmt, ...]:
        out = (S("CpAsync", tensor=spec.k, dst=f"sK[{slot}]", coords=f"({jb}*{bn}, 0)", bytes=16,
                 pred="key < N (zero-fill)"),)
        if with_v:
            out += (S("CpAsync", tensor=spec.v, dst=f"sV[{slot}]", coords=f"({jb}*{bn}, 0)", bytes=16,
                      pred="key < N (zero-fill)"),)
        return out

    def key_loop(pass_: int, with_v: bool) -> tuple[Stmt, ...]:
        tl, ts, tc = f"tL{pass_}", f"tS{pass_}", "tC"
        body: tuple[Stmt, ...] = (
            S("Wait", ins=(f"{tl}[jb]",), lowering=f"cp.async.wait_group {st - 2}"),
            S("Barrier", lowering="bar.sync 0"),
            *copies(f"(jb+{st - 1})%{st}", f"jb+{st - 1}", with_v),
            S("CommitGroup", out=f"{tl}[jb+{st - 1}]", kind="TokLoad"),
            S("LdMatrix", src=f"sK[jb%{st}]", x4=True, trans=False, operand="B (K-major)"),
            S("MmaSync", shape="m16n8k16", dtype=dt, a="Q fragments (registers)" if plan.q_regs else "Q fragments (ldmatrix of sQ)", b="K", acc="S", steps=plan.dp // 16,
              out=f"{ts}[jb]", kind="TokCompute"),
            *_softmax(spec, plan, f"{ts}[jb]", pass_, "registers"),
        )
        if with_v:
            body += (S("LdMatrix", src=f"sV[jb%{st}]", x4=True, trans=True, operand="B (N-major)"),
                     S("MmaSync", shape="m16n8k16", dtype=dt, a="P fragments (registers)", b="V", acc="O",
                       steps=bn // 16, out=f"{tc}[jb]", kind="TokCompute"))
        return (
            S("Loop", var="s", range=f"0..{st - 2}", role=f"prologue (pass {pass_ + 1})",
              body=copies("s", "s", with_v) + (S("CommitGroup", out=f"{tl}[s]", kind="TokLoad"),)),
            *((S("Wait", ins=(f"{tl}[0]",), lowering=f"cp.async.wait_group {st - 2}"),
               S("LdMatrix", src="sQ", x4=True, trans=False, operand="A (Q, kept in registers)", steps=plan.dp // 16))
              if pass_ == 0 else ()),
            S("Loop", var="jb", range=_key_loop_range(spec, plan), role=f"mainloop (pass {pass_ + 1})", body=body),
            S("Wait", ins=(f"{tl}[jb]",), lowering="cp.async.wait_group 0"),
        )

    if plan.store_p:
        return _sm80_store_p(spec, plan, key_loop)
    stmts: tuple[Stmt, ...] = (
        S("AllocShared", name="sQ", shape=[bm, plan.dp], swizzle="xor16B"),
        S("AllocShared", name="sK", shape=[st, bn, plan.dp], swizzle="xor16B"),
        S("AllocShared", name="sV", shape=[st, bn, plan.dvp], swizzle="xor16B"),
        S("ZeroAcc", acc="O", warp_tile=f"16x{dv}", mma="m16n8k16", m="-inf", l="0"),
        S("CpAsync", tensor=spec.q, dst="sQ", coords="(m0, 0)", bytes=16, pred="row < M (zero-fill)",
          group="with tL0[0]"),
    )
    if plan.two_pass:
        stmts += key_loop(0, False) + (S("RowReduce", what="l", reduce="quad shfl.xor 1,2", then="1 / l"),)
        stmts += key_loop(1, True)
        ops = [{"op": "cast", "dtype": spec.out_dtype.value, "final": True}]
    else:
        stmts += key_loop(0, True)
        ops = [{"op": "row_sum", "reduce": "quad shfl.xor 1,2"}, {"op": "mul", "by": "1 / l"},
               {"op": "cast", "dtype": spec.out_dtype.value, "final": True}]
    stmts += (
        S("Epilogue", acc="O", ops=ops, ins=("tC",), out="tE", kind="TokEpilogue", where="registers",
          **{"async": False}),
        S("StGlobalVec", ptr=f"{spec.o} + (b*M + m)*{dv} + n", regs="O pair", width=2, pred="m < M", ins=("tE",)),
    )
    return stmts


def _sm80_store_p(spec, plan: AttentionPlan, key_loop) -> tuple[Stmt, ...]:
    """softmax_scores (STORE_P): K streamed twice, no V and no O; pass 2 stores P block by block, then the
    blocks past the CTA's diagonal are stored as 0 (NaN for rows without a visible key)."""
    bm, bn, d = plan.tile
    fill = S("Loop", var="jb", range=f"count..ceil(N/{bn})-1 (blocks no stored row sees)", role="fill", body=(
        S("Epilogue", acc="zeros", ops=[{"op": "mul", "by": "1, or NaN for a row without a visible key"},
                                        {"op": "cast", "dtype": spec.p_dtype.value, "final": True}],
          ins=("tS1[count-1]",), out="tF[jb]", kind="TokEpilogue", where="registers", **{"async": False}),
        _store_p(spec, plan, "tF[jb]", "jb")))
    return (
        S("AllocShared", name="sQ", shape=[bm, plan.dp], swizzle="xor16B"),
        S("AllocShared", name="sK", shape=[plan.stages, bn, plan.dp], swizzle="xor16B"),
        S("ZeroAcc", acc="S", warp_tile=f"16x{bn}", mma="m16n8k16", m="-inf", l="0"),
        S("CpAsync", tensor=spec.q, dst="sQ", coords="(m0, 0)", bytes=16, pred="row < M (zero-fill)",
          group="with tL0[0]"),
        *key_loop(0, False),
        S("RowReduce", what="l", reduce="quad shfl.xor 1,2", then="1 / l"),
        *key_loop(1, False),
        fill,
    )


def _sm90(spec: AttentionSpec, plan: AttentionPlan) -> tuple[Stmt, ...]:
    bm, bn, d = plan.tile
    st, nc, dv = plan.stages, plan.warps[0], plan.dv
    dt = f"{spec.in_dtype.value}_fp32acc"
    rng = _key_loop_range(spec, plan)
    passes = (0, 1) if plan.two_pass else (0,)

    def producer_loop(pass_: int) -> Stmt:
        with_v = pass_ == passes[-1]
        tail = (S("MBarrierArriveExpectTx", mbarrier="full_v[it%S]", bytes=bn * dv * 2),
                S("TmaLoad", dst_smem="sV[it%S]", desc="tmV", coords="(0..Dv step 64, jb*BN, b)", box=f"{{64, {bn}}}",
                  mbarrier="full_v[it%S]", out="tV[it]", kind="TokLoad")) if with_v else (
                S("MBarrierArrive", mbarrier="full_v[it%S]", why="no V in pass 1: every slot's phase count stays uniform"),)
        return S("Loop", var="jb", range=rng, role=f"mainloop (pass {pass_ + 1}, it = ring position)", body=(
            S("Wait", ins=(f"tS[it-{st}]",), lowering="mbarrier.try_wait.parity empty_k[it%S]", skip_first=st),
            S("MBarrierArriveExpectTx", mbarrier="full_k[it%S]", bytes=bn * d * 2),
            S("TmaLoad", dst_smem="sK[it%S]", desc="tmK", coords="(0..D step 64, jb*BN, b)", box=f"{{64, {bn}}}",
              mbarrier="full_k[it%S]", out="tK[it]", kind="TokLoad"),
            S("Wait", ins=(f"tC[it-{st}]",), lowering="mbarrier.try_wait.parity empty_v[it%S]", skip_first=st),
            *tail))

    def issue(landed: str, full: str, out: str, **wgmma) -> tuple[Stmt, ...]:
        """Wait for the operand's TMA (token landed, mbarrier full), then one wgmma producing out."""
        return (S("Wait", ins=(landed,), lowering=f"mbarrier.try_wait.parity {full}[it%S]"),
                S("WgmmaFence"),
                S("Wgmma", **wgmma, dtype=dt, swizzle="128B", out=out, kind="TokCompute"),
                S("WgmmaCommit"))

    def issue_s(it: str) -> tuple[Stmt, ...]:
        return issue(f"tK[{it}]", "full_k", f"tS[{it}]", form="SS", acc="S", a_desc="sQ + 64*wg rows (K-major)",
                     b_desc="sK[it%S] (K-major)", shape=f"64x{bn}x{d}", instr=f"m64n{bn}k16 x {d // 16}")

    def issue_pv(it: str) -> tuple[Stmt, ...]:
        return issue(f"tV[{it}]", "full_v", f"tC[{it}]", form="RS", acc="O", a="P (registers)",
                     b_desc="sV[it%S] (N-major, imm-trans-b 1)", shape=f"64x{dv}x{bn}", instr=f"m64n{dv}k16 x {bn // 16}")

    def stats_loop() -> Stmt:  # pass 1 of the 2-pass algorithm, block by block
        return S("Loop", var="jb", range=rng, role="mainloop (pass 1, it = ring position)", body=(
            *issue_s("it"),
            S("Wait", ins=("tS[it]",), lowering="wgmma.wait_group 0"),
            S("MBarrierArrive", mbarrier="empty_k[it%S]", ins=("tS[it]",), per="consumer warp"),
            S("MBarrierArrive", mbarrier="empty_v[it%S]", ins=("tS[it]",), per="consumer warp", why="no V in pass 1"),
            *_softmax(spec, plan, "tS[it]", 0, "registers")))

    def accumulate() -> tuple[Stmt, ...]:  # the pass that accumulates O, S of block j overlapping P V of j-1
        last = passes[-1]
        rescale = () if plan.two_pass else (S("RescaleO", by="alpha_j", after="P V of block j-1 completed"),)
        return (
            *issue_s("it0"),
            S("Wait", ins=("tS[it0]",), lowering="wgmma.wait_group 0"),
            S("MBarrierArrive", mbarrier="empty_k[it%S]", ins=("tS[it0]",), per="consumer warp"),
            *_softmax(spec, plan, "tS[it0]", last, "registers"),
            S("Loop", var="jb", range=f"1..count-1 of {rng}", role=f"mainloop (pass {last + 1}, it = it0 + jb)",
              overlap="S = Q K_j^T and softmax_j run while O += P_{j-1} V_{j-1} does", body=(
                *issue_s("it"),
                *issue_pv("it-1"),
                S("Wait", ins=("tS[it]",), lowering="wgmma.wait_group 1"),
                S("MBarrierArrive", mbarrier="empty_k[it%S]", ins=("tS[it]",), per="consumer warp"),
                *[x for x in _softmax(spec, plan, "tS[it]", last, "registers") if x.op != "PackP"],
                S("Wait", ins=("tC[it-1]",), lowering="wgmma.wait_group 0"),
                S("MBarrierArrive", mbarrier="empty_v[(it-1)%S]", ins=("tC[it-1]",), per="consumer warp"),
                *rescale,
                S("PackP", src="S accumulators (wgmma D layout)", dst="A registers (wgmma RS)", where="registers",
                  smem_round_trip=False),
            )),
            *issue_pv("itn"),
            S("Wait", ins=("tC[itn]",), lowering="wgmma.wait_group 0"),
            S("MBarrierArrive", mbarrier="empty_v[itn%S]", ins=("tC[itn]",), per="consumer warp"),
        )

    producer = (
        S("MBarrierArriveExpectTx", mbarrier="full_q", bytes=bm * d * 2),
        S("TmaLoad", dst_smem="sQ", desc="tmQ", coords="(0..D step 64, m0, b)", box=f"{{64, {bm}}}", mbarrier="full_q",
          out="tQ", kind="TokLoad"),
        *(producer_loop(p) for p in passes),
    )
    consumer: tuple[Stmt, ...] = (
        S("ZeroAcc", acc="O", shape=f"64x{dv} per warpgroup", m="-inf", l="0"),
        S("Wait", ins=("tQ",), lowering="mbarrier.try_wait.parity full_q"),
    )
    if plan.two_pass:
        consumer += (stats_loop(), S("RowReduce", what="l", reduce="quad shfl.xor 1,2", then="1 / l"))
        ops = [{"op": "cast", "dtype": spec.out_dtype.value, "final": True}]
    else:
        ops = [{"op": "row_sum", "reduce": "quad shfl.xor 1,2"}, {"op": "mul", "by": "1 / l"},
               {"op": "cast", "dtype": spec.out_dtype.value, "final": True}]
    consumer += accumulate()
    consumer += (
        S("Epilogue", acc="O", ins=("tC[itn]",), out="tE", kind="TokEpilogue", where="registers", ops=ops,
          **{"async": False}),
        S("StGlobalVec", ptr=f"{spec.o} + (b*M + m)*{dv} + n", regs="O pair", width=2, pred="m < M", ins=("tE",)),
    )
    return (
        S("AllocShared", name="sQ", shape=[bm, d], swizzle="128B"),
        S("AllocShared", name="sK", shape=[st, bn, d], swizzle="128B"),
        S("AllocShared", name="sV", shape=[st, bn, dv], swizzle="128B"),
        S("MBarrierInit", name="full_q", count=1, depth=1),
        S("MBarrierInit", name="full_k", count=1, depth=st),
        S("MBarrierInit", name="full_v", count=1, depth=st),
        S("MBarrierInit", name="empty_k", count=4 * nc, depth=st),
        S("MBarrierInit", name="empty_v", count=4 * nc, depth=st),
        S("Role", name="producer", warpgroups="0", setmaxnreg=24 if nc >= 2 else None, body=producer),
        S("Role", name="consumer", warpgroups=f"1..{nc}", setmaxnreg=240 if nc >= 2 else None, body=consumer),
    )


def build_gpu_ir(spec: AttentionSpec, plan: AttentionPlan) -> GpuIR:
    stmts = _sm90(spec, plan) if plan.skeleton == "sm90" else _sm80(spec, plan)
    meta = (("kind", "softmax_scores" if plan.store_p else "attention"), ("tile", list(plan.tile)), ("dv", plan.dv),
            ("threads", plan.threads),
            ("stages", plan.stages), ("algo", plan.algo), ("causal", spec.causal))
    return GpuIR(plan.arch, plan.skeleton, plan.barrier_model, stmts, meta)
