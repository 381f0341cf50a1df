"""GPU IR of a SIMT kernel (`--dump=gpu`): the skeleton's statements for one row group.

Per row: a pass per row statistic (``LdGlobalVec`` of the vectorizable reads, the element ops, the lane
partial, then ``GroupReduce``: warp shuffle, plus shared memory for a group wider than a warp), then the
final pass (element ops, ``StGlobalVec`` or ``StGlobal``). No tensor cores, no async copies: the tokens
are the reductions' results, each consumed by the passes after it.
"""
from __future__ import annotations

# shared pieces, at their current homes
from ..common.gpu_ir import GpuIR, S
from .access import passes, tiled_reduces, vector_reads, vector_store
from .plan import SimtPlan
from .spec import SimtSpec


def _extra_stores(spec: SimtSpec) -> list:
    """The other outputs' stores: computed and written where the walked axes each lacks are 0."""
    return [S("StGlobal", tensor=y.dst, width=1,
              pred=" && ".join([f"{a} == 0" for a in spec.yield_.axes
                                if a not in y.axes and a not in spec.walk_of(y).values() and a not in spec.units])
              or "active && e < L") for y in spec.extras]


def build_gpu_ir(spec: SimtSpec, plan: SimtPlan) -> GpuIR:
    stmts, toks = [], []
    tiled = tiled_reduces(spec)
    if tiled:  # the final pass as TM x TN micro-tiles: a register accumulator per point and tiled Reduce
        acc = [S("MicroTileReduce", reduce=n.arg[0], over=list(n.arg[1]), tile=f"{plan.tm}x{plan.vec}",
                 operands="LdGlobal once per distinct row / column of the tile", accumulate="fp32") for n in tiled]
        body = (*acc, S("Compute", ops="epilogue at each point of the tile"),
                S("StGlobal", tensor=spec.c, width=1, pred="row < rows && e < L"), *_extra_stores(spec))
        stmts.append(S("ForLaneStep", walks=list(spec.loop), step=f"{plan.group}*{plan.vec}", ins=(), body=body))
        return GpuIR(plan.arch, "simt", "none", (S("ForRow", per="group", rows_per_block=plan.rows_per_block,
                                                     rows_per_thread=plan.tm, outer=list(spec.outer),
                                                     body=tuple(stmts)),),
                     (("threads", plan.threads), ("plan", plan.key())))
    for k, p in enumerate(passes(spec)):
        v = plan.vec if len(p.axes) == 1 else 1
        body = [S("LdGlobalVec", tensor=n.arg[0], width=v, pred="e < L (scalar tail)")
                for n in (vector_reads(spec, p) if v > 1 else [])]
        body.append(S("Compute", ops="region RB-SSA ops at the element", accumulate="fp32"))
        if p.stat is None:
            store = "StGlobalVec" if v > 1 and vector_store(spec) else "StGlobal"
            body.append(S(store, tensor=spec.c, width=v if store == "StGlobalVec" else 1, pred="active && e < L"))
            body.extend(_extra_stores(spec))
            stmts.append(S("ForLaneStep", walks=list(p.axes), step=f"{plan.group}*{v}", ins=tuple(toks), body=tuple(body)))
        else:
            op = p.stat.arg[0]
            stmts.append(S("ForLaneStep", walks=list(p.axes), step=f"{plan.group}*{v}", ins=tuple(toks),
                           body=tuple(body + [S("Combine", reduce=op, into="part")])))
            tok = f"tR[{k}]"
            stmts.append(S("GroupReduce", reduce=op, lanes=plan.group,
                           via="shfl.xor" + ("+smem" if plan.group > 32 else ""), out=tok, kind="TokCompute"))
            toks.append(tok)
    return GpuIR(plan.arch, "simt", "none", (S("ForRow", per="group", rows_per_block=plan.rows_per_block,
                                                 outer=list(spec.outer), body=tuple(stmts)),),
                 (("threads", plan.threads), ("plan", plan.key())))
