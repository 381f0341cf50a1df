"""GPU IR: the fixed skeleton as statements with async tokens (`--dump=gpu`); what every kind's
GPU IR builder shares (statements, the sm90 consumer, the epilogue statement, the token rules).

sm80: cp.async -> commit/wait -> ldmatrix -> mma.sync -> epilogue -> st.global.v2
sm90: TMA -> mbarrier arrive/wait -> wgmma -> epilogue -> st.global.v2 (producer / consumer roles)

Tokens: ``TokLoad`` (global -> smem landed), ``TokCompute`` (MMA done), ``TokEpilogue``
(epilogue done). A token is written ``base[index]``; an index with a minus sign (``tC[it-1]``) refers
to an earlier iteration (loop-carried, possibly produced by another role). :func:`check_tokens`
enforces the rules: every consumed token is produced (earlier in program order unless loop-carried),
each MMA waits on a TokLoad in its loop body, the epilogue consumes a TokCompute, every store (and
the pool of conv + pool) a TokEpilogue, and each Wait lowers to the plan's barrier model (commit/wait_group or mbarrier parity).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...ir.diagnostics import fail
from ...ir.dtypes import DType
from .spec import EpilogueOp

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


def epilogue_stmt(epilogue: tuple[EpilogueOp, ...], out_dtype: DType, plan: Any, tc: str) -> Stmt:
    """The fused epilogue on the fp32 accumulators after TokCompute tc: its ops, then the final cast."""
    ops = [op.to_json() for op in epilogue] + [{"op": "cast", "dtype": out_dtype.value, "final": True}]
    return S("Epilogue", acc="acc", ops=ops, ins=(tc,), out="tE", kind="TokEpilogue", where="registers",
             **{"async": plan.async_enable and plan.epilogue_overlap})


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
