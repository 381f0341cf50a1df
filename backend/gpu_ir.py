"""GPU IR: the fixed skeleton as statements with async tokens (seed 000 §9; `--dump=gpu`).

sm80: cp.async -> commit/wait -> ldmatrix -> mma.sync -> epilogue -> st.global.v2
sm90: TMA -> mbarrier arrive/wait -> wgmma -> epilogue -> st.global.v2 (producer / consumer roles)

Tokens (§9.2): ``TokLoad`` (global -> smem landed), ``TokCompute`` (MMA done), ``TokEpilogue``
(epilogue done). A token is written ``base[index]``; an index with a minus sign (``tC[it-1]``) refers
to an earlier iteration (loop-carried, possibly produced by another role). :func:`check_tokens`
enforces the rules: every consumed token is produced (earlier in program order unless loop-carried),
each MMA waits on a TokLoad in its loop body, the epilogue consumes a TokCompute, every store (and
the pool of conv + pool) a TokEpilogue, and each Wait lowers to the plan's barrier model (commit/wait_group or mbarrier parity).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..ir.diagnostics import fail
from ..ir.dtypes import DType
from .gemm_spec import EpilogueOp, GemmSpec
from .plan import SchedulePlan

TOKEN_KINDS = ("TokLoad", "TokCompute", "TokEpilogue")
MMA_OPS = ("MmaSync", "Wgmma")
STORE_OPS = ("StGlobalVec", "StGlobal", "StShared", "MaxPool")  # what the epilogue's results flow into


@dataclass(frozen=True)
class Stmt:
    op: str
    args: tuple[tuple[str, Any], ...] = ()
    in_tokens: tuple[str, ...] = ()
    out_token: str | None = None
    token_kind: str | None = None
    body: tuple["Stmt", ...] = ()

    def arg(self, name: str, default: Any = None) -> Any:
        return dict(self.args).get(name, default)

    def to_json(self) -> dict:
        d: dict[str, Any] = dict(self.args)
        if self.in_tokens:
            d["in_token"] = list(self.in_tokens)
        if self.out_token:
            d["out_token"] = self.out_token
            d["token_kind"] = self.token_kind
        if self.body:
            d["body"] = [s.to_json() for s in self.body]
        return {self.op: d}


@dataclass(frozen=True)
class GpuIR:
    arch: str
    skeleton: str
    barrier_model: str
    stmts: tuple[Stmt, ...]
    meta: tuple[tuple[str, Any], ...] = field(default=())

    def to_json(self) -> dict:
        return {"gpu_ir": {"arch": self.arch, "skeleton": self.skeleton, "barrier_model": self.barrier_model,
                           **dict(self.meta), "stmts": [s.to_json() for s in self.stmts]}}


def S(op: str, *, ins: tuple[str, ...] = (), out: str | None = None, kind: str | None = None,
      body: tuple[Stmt, ...] = (), **args: Any) -> Stmt:
    return Stmt(op, tuple(args.items()), tuple(ins), out, kind, tuple(body))


def epilogue_stmt(epilogue: tuple[EpilogueOp, ...], out_dtype: DType, plan: SchedulePlan, tc: str) -> Stmt:
    """The fused epilogue on the fp32 accumulators after TokCompute tc: its ops, then the final cast."""
    ops = [op.to_json() for op in epilogue] + [{"op": "cast", "dtype": out_dtype.value, "final": True}]
    return S("Epilogue", acc="acc", ops=ops, ins=(tc,), out="tE", kind="TokEpilogue", where="registers",
             **{"async": plan.async_enable and plan.epilogue_overlap})


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
        return (S("CpAsync", tensor=spec.a, dst=f"smA[{slot}]", coords=f"(m0, {kt}*{bk})", bytes=2 * plan.vec_a,
                  pred="row < M && col < K (zero-fill)"),
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
                S("MBarrierArriveExpectTx", mbarrier="full[it%S]", bytes=(bm + bn) * bk * 2),
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


def sm90_consumer(bn: int, bk: int, in_dtype: DType, major: str, output: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
    """The consumer warpgroups of the sm90 GEMM skeleton, persistent over tiles: wgmma on each landed ring
    slot (wait full, release the previous slot once its wgmma retired), then output (epilogue and stores)."""
    return (
        S("Loop", var="tile", range="blockIdx.x..tiles step gridDim.x", role="persistent", body=(
            S("ZeroAcc", acc="acc", shape=f"64x{bn} per warpgroup"),
            S("Loop", var="kt", range="0..ceil(K/64)-1", role="mainloop", body=(
                S("Wait", ins=("tL[it]",), lowering="mbarrier.try_wait.parity full[it%S]"),
                S("WgmmaFence"),
                S("Wgmma", acc="acc", a_desc="smA[it%S] + 64*wg rows", b_desc="smB[it%S]", shape=f"64x{bn}x{bk}",
                  instr=f"m64n{bn}k16 x {bk // 16}", dtype=f"{in_dtype.value}_fp32acc", major=major, swizzle="128B",
                  out="tC[it]", kind="TokCompute"),
                S("WgmmaCommit"),
                S("Wait", ins=("tC[it-1]",), lowering="wgmma.wait_group 1"),
                S("MBarrierArrive", mbarrier="empty[(it-1)%S]", ins=("tC[it-1]",)),
            )),
            S("Wait", ins=("tC[it]",), lowering="wgmma.wait_group 0"),
            *output,
        )),
    )


def build_gpu_ir(spec: GemmSpec, plan: SchedulePlan) -> GpuIR:
    stmts = _sm90(spec, plan) if plan.skeleton == "sm90" else _sm80(spec, plan)
    meta = (("tile", list(plan.tile)), ("threads", plan.threads), ("stages", plan.stages),
            ("epilogue_overlap", plan.epilogue_overlap))
    return GpuIR(plan.arch, plan.skeleton, plan.barrier_model, stmts, meta)


def _flatten(stmts, depth=0, loop=None):
    for s in stmts:
        yield s, loop
        if s.body:
            yield from _flatten(s.body, depth + 1, s if s.op == "Loop" else loop)


def _base(tok: str) -> str:
    return tok.split("[", 1)[0]


def check_tokens(ir: GpuIR) -> None:
    """Raise InternalError naming the statement when the token rules are broken."""
    at = f"GPU IR ({ir.skeleton})"
    flat = list(_flatten(ir.stmts))
    kinds: dict[str, str] = {}
    for s, _ in flat:
        if s.out_token:
            if s.token_kind not in TOKEN_KINDS:
                fail("InternalError", at, f"{s.op} produces {s.out_token} of unknown kind {s.token_kind!r}")
            prev = kinds.setdefault(_base(s.out_token), s.token_kind)
            if prev != s.token_kind:
                fail("InternalError", at, f"token {_base(s.out_token)} is both {prev} and {s.token_kind}")
    seen: set[str] = set()
    waited_in_loop: dict[int, bool] = {}
    want = "cp.async" if ir.barrier_model == "cp_async_group" else ("mbarrier", "wgmma.wait_group")
    for s, loop in flat:
        for tok in s.in_tokens:
            base = _base(tok)
            if base not in kinds:
                fail("InternalError", at, f"{s.op} consumes {tok}, which nothing produces")
            if "-" not in tok and base not in seen:
                fail("InternalError", at, f"{s.op} consumes {tok} before it is produced")
        if s.op == "Wait":
            low = s.arg("lowering", "")
            if not low.startswith(want):
                fail("InternalError", at, f"Wait lowers to {low!r}, not the {ir.barrier_model} model")
            if any(kinds.get(_base(t)) == "TokLoad" for t in s.in_tokens):
                waited_in_loop[id(loop)] = True
        if s.op in MMA_OPS and not waited_in_loop.get(id(loop)):
            fail("InternalError", at, f"{s.op} reads smem without a Wait(TokLoad) in its loop")
        if s.op == "Epilogue" and not any(kinds.get(_base(t)) == "TokCompute" for t in s.in_tokens):
            fail("InternalError", at, "the epilogue does not depend on a TokCompute")
        if s.op in STORE_OPS and not any(kinds.get(_base(t)) == "TokEpilogue" for t in s.in_tokens):
            fail("InternalError", at, f"{s.op} does not depend on a TokEpilogue")
        if s.out_token:
            seen.add(_base(s.out_token))
