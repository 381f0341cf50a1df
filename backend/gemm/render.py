"""CUDA text of a GEMM kernel from the jinja2 MMA template (`--dump=cu`).

``render(spec, plan)`` fills ``templates/gemm.cu.j2`` with the plan's parameters and the epilogue op
list; the skeleton itself is the hand-written ``polysat_gemm.cuh``, inlined. Arch and tail are the
template's only branches: the skeleton (sm80 / sm90) and the vector widths the operands' alignment allows.

The kernel ABI is ``KernelSource.params``, in order:
sm80: A, B, C, epilogue tensors..., M, N, K, batch, a_bstride, b_bstride (elements; 0 = broadcast),
      a_ld, b_ld (row strides; 0 = packed), c_ld, c_bstride (C's row and batch strides, elements)
sm90: tmA, tmB (CUtensorMap by value), C, epilogue tensors..., M, N, K, batch, c_ld, c_bstride
A strided operand's tensor map carries its row and batch strides (``TmaOperand.strides``), so the sm90
skeleton reads it in place; the batch is the map's outermost dim.
When an operand reads only a run of the batch dims (``spec.batch_map``), both skeletons take four more i32
arguments a_bdiv, a_bmod, b_bdiv, b_bmod last: the operand reads matrix (t / div) % mod of flat batch t
(mod 0: t); its tensor map's batch dim has mod matrices.
A B concatenated along N (``spec.b_pieces``) is passed as one pointer / tensor map per piece
(``B0, B1, ..`` / ``tmB0, tmB1, ..``) in place of B.
"""
from __future__ import annotations

from ...analyses.prologue_cone import producer_chunk
from ..common.epilogue_fn import c_lines
from ..common.gpu_ir import check_tokens
from ..common.layouts import sm90_operand
from ..common.mma_plan import SchedulePlan
from ..common.names import c_ident, unique_idents
from ..common.render import (CTYPE, KernelSource, Param, TmaOperand, cbool, epilogue_args, jinja_env, skeleton_header,
                             specialisation_hash)
from .gpu_ir import build_gpu_ir
from .prologue import in_loop
from .spec import GemmSpec, packed_dims, partial_batch, static_strides

BATCH_MAP = ("a_bdiv", "a_bmod", "b_bdiv", "b_bmod")  # the (div, mod) of each operand's batch index


def kernel_name(spec: GemmSpec, plan: SchedulePlan) -> str:
    """Named by every specialisation parameter, not by the sizes (runtime arguments): shapes that get
    the same plan share one kernel, and so one compiled cubin."""
    key = {**spec.to_json(), "m": None, "n": None, "k": None, "batch": len(spec.batch)}
    return c_ident(spec.name, "polysat_")[:48] + f"_{plan.skeleton}_{specialisation_hash(key, plan)}"


def render(spec: GemmSpec, plan: SchedulePlan) -> KernelSource:
    ir = build_gpu_ir(spec, plan)
    check_tokens(ir)
    kname = kernel_name(spec, plan)
    idents, tensors, ops = epilogue_args(spec.epilogue)
    bm, bn, bk = plan.tile
    wm, wn = plan.warps
    a_rank3 = bool(spec.batch) and not spec.a_broadcast
    b_rank3 = bool(spec.batch) and not spec.b_broadcast
    summary = (f"C[{'batch,' if spec.batch else ''}M,N] = "
               f"{'+'.join(o['kind'] for o in ops) or 'id'}(A({spec.a_layout}) @ B({spec.b_layout})), "
               f"{spec.in_dtype.value}->{spec.out_dtype.value}")
    has_map = partial_batch(spec, "a") or partial_batch(spec, "b")
    layouts = []
    if plan.skeleton == "sm90":
        layouts = [("la", sm90_operand(plan.a_kmajor, bm)), ("lb", sm90_operand(plan.b_kmajor, bn))]
    pro = _prologue_args(spec, plan) if spec.a_prologue is not None else None
    pair = c_lines(spec.pair, "v", ("u",)) if spec.pair else None
    src = jinja_env().get_template("gemm.cu.j2").render(layouts=layouts, pro=pro, pair=pair,
        kernel=kname, summary=summary, skeleton=plan.skeleton, plan_key=plan.key(), header=skeleton_header(),
        in_t=CTYPE[spec.in_dtype], out_t=CTYPE[spec.out_dtype], tensors=tensors, ops=ops, threads=plan.threads,
        bm=bm, bn=bn, bk=bk, wm=wm, wn=wn, stages=plan.stages, consumers=plan.warps[0],
        a_kmajor=cbool(plan.a_kmajor), b_kmajor=cbool(plan.b_kmajor), vec_a=plan.vec_a, vec_b=plan.vec_b,
        a_rank3=cbool(a_rank3), b_rank3=cbool(b_rank3), pieces=_pieces(spec),
        bmap_params="".join(f", int {x}" for x in BATCH_MAP) if has_map else "",
        bmap_args="".join(f", {x}" for x in BATCH_MAP) if has_map else "")
    bs = [f"B{j}" for j in range(len(spec.b_pieces))] or ["B"]  # B, or one parameter per piece of B
    if pro is not None:  # A computed from the prologue's tensors, passed in its place
        params = [Param(t["ident"], "ptr", t["tensor"]) for t in pro["tensors"]]
        params += [Param("tm" + b, "tmap", b) for b in bs] if plan.skeleton == "sm90" else [Param(b, "ptr", b) for b in bs]
    elif plan.skeleton == "sm90":
        params = [Param("tmA", "tmap", "A")] + [Param("tm" + b, "tmap", b) for b in bs]
    else:
        params = [Param("A", "ptr", "A")] + [Param(b, "ptr", b) for b in bs]
    params.append(Param("C", "ptr", "C"))
    params += [Param(ident, "ptr", n) for n, ident in idents.items()]
    params += [Param(x, "i32", x) for x in ("M", "N", "K", "batch")]
    if plan.skeleton == "sm80":
        params += [Param(x, "i64", x) for x in ("a_bstride", "b_bstride", "a_ld", "b_ld")]
    params += [Param(x, "i64", x) for x in ("c_ld", "c_bstride")]
    if has_map:
        params += [Param(x, "i32", x) for x in BATCH_MAP]
    tma: tuple[TmaOperand, ...] = ()
    if plan.skeleton == "sm90" and pro is not None:
        tma = tuple(_tma(b, layouts[1][1], "n", False) for b in bs)
    elif plan.skeleton == "sm90":
        tma = (_tma("A", layouts[0][1], "m", a_rank3, _tma_strides(spec, "a"), _batch_dim(spec, "a")),) + tuple(
            _tma(b, layouts[1][1], "n", b_rank3, _tma_strides(spec, "b"), _batch_dim(spec, "b")) for b in bs)
    return KernelSource(kname, plan.arch, plan.skeleton, src, plan.threads, plan.smem_bytes, tuple(params), tma, plan, spec)


def _prologue_args(spec: GemmSpec, plan: SchedulePlan) -> dict:
    """The template arguments of an A prologue (backend/gemm/prologue.py): its tensors (kernel parameters), the
    chunked sources (16-byte loads: mk and k), the per-row ones, the fp32 program's C lines and, on sm90, the
    passes a producer thread loads at once (analyses/prologue_cone.py :func:`producer_chunk`)."""
    p = spec.a_prologue
    idents = dict(zip(p.tensors, unique_idents(p.tensors, "p_"), strict=True))
    dts = spec.dtypes()
    chunked = [s for s in p.sources if s.role in ("mk", "k")]
    stats = list(p.stats)
    lin = in_loop(p, spec.in_dtype) if plan.skeleton == "sm80" else -1  # the statistic summed in the main loop
    inputs = tuple(f"x[{chunked.index(s)}]" if s.role in ("mk", "k") else ("1.0f" if lin >= 0 else f"st[{stats.index(s)}]")
                   if s.role == "stat" else f"polysat::to_f32({idents[s.tensor]}[m])" for s in p.sources)
    rows = list(dict.fromkeys(s.tensor for s in p.sources if s.role == "m"))
    chunk = producer_chunk(plan.tile[0] * (plan.tile[2] // 8) // 128, plan.warps[0], len(chunked))
    return {"tensors": [{"ident": idents[t], "tensor": t, "ctype": CTYPE[dts[t]]} for t in p.tensors],
            "chunked": [{"ident": idents[s.tensor], "ld": s.ld if s.role == "mk" else 0, "col": s.col} for s in chunked],
            "rows": [{"ident": idents[t], "ctype": CTYPE[dts[t]]} for t in rows],
            "stats": [{"ident": idents[s.tensor], "ld": s.ld, "col": s.col, "pre": c_lines(s.pre, "v"),
                       "post": c_lines(s.post, "v")} for s in stats],
            "lines": c_lines(p.steps, "v", inputs), "chunk": chunk, "lin": lin}


def _pieces(spec: GemmSpec) -> list:
    """The pieces of a B concatenated along N (first column, width), for the template."""
    return [{"start": st, "width": w} for st, (_, w) in zip(spec.piece_starts, spec.b_pieces)]


def _tma_strides(spec: GemmSpec, role: str) -> tuple[int, ...]:
    """A strided operand's tensor map strides (elements; () = packed): its row stride, then its batch stride."""
    if spec.dims(role) == packed_dims(spec, role):
        return ()
    ld, bs = static_strides(spec, role)  # the sm90 plan search keeps only static ones
    return (ld, bs) if bs else (ld,)


def _batch_dim(spec: GemmSpec, role: str) -> str:
    """The size name of role's tensor-map batch dim: ``batch``, or ``a_bmod`` / ``b_bmod`` (the product of the
    run of batch dims it reads) for an operand reading only some."""
    return f"{role}_bmod" if partial_batch(spec, role) else "batch"


def _tma(role: str, lay, mn: str, rank3: bool, strides: tuple[int, ...] = (), batch: str = "batch") -> TmaOperand:
    dims = ("k", mn) if lay.kmajor else (mn, "k")
    box = lay.box
    if rank3:
        dims, box = dims + (batch,), box + (1,)
    return TmaOperand(role, dims, box, strides)
