"""A GEMM's A-operand prologue: A[m, k] computed from reads as the CTA's A tile is filled, never written out.

``A[m, k] = round_to_in_dtype(f(x_0, .., x_j))`` where each input x_i is a read of a :class:`Source`:

* ``mk``: a 2-D packed tensor [M, ld] read at (m, k + col) (the gate and up halves of the sibling GEMMs'
  concatenation: ld = 2F, col = 0 and F);
* ``k``: a vector along K (a per-channel weight, RMSNorm's g);
* ``m``: a vector along M (a per-row scale);
* ``stat``: a per-row statistic the kernel computes before the row's first A tile (RMSNorm's
  ``rsqrt(mean(x^2) + eps)``): ``post(sum_k pre(x[m, col + k]))`` over the K columns of a packed [M, ld] tensor
  of the operand type, ``pre`` a program of the element (``("v",)``, widened to fp32) and ``post`` one of the
  fp32 sum, both :mod:`..common.epilogue_fn` programs rounded as the evaluator rounds. The sum's order is the
  kernel's own (a reduction may reassociate); what is summed and what is done to the sum are the graph's.

f is an :mod:`..common.epilogue_fn` program of the inputs (``("x", i)``), computed in fp32 with each 16-bit step
rounded as the reference evaluator rounds it; in a 16-bit GEMM its last step rounds to the operand type (the
region's operand is ``cast:fp32(X)`` of a 16-bit X), so the tile the MMA reads holds exactly the reference's A;
in an fp32 GEMM (3xTF32) the operand is the fp32 X itself. The ``mk`` and ``k`` sources are of the operand type
and read 16 bytes at a time (``chunk``: 8 16-bit or 4 fp32 elements): ld, col and K are multiples of it. Outside
the matrix (m >= M, k >= K) the tile holds 0, as a plain operand's zero-filled copy does.

The region form (``from_operand``): the contraction's A operand ``cast:fp32(X)``, X a read-free 16-bit function
of such reads, or such an fp32 X itself (backend/gemm/bind.py tries it when the operand is not a read).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from ...ir.dtypes import DType, round_to
from ...ir.expr import Expr
from ...ir.region import R, Region, RNode
from ..common import epilogue_fn
from ..common.epilogue import HALF
from ..common.region_match import Lets, axis_var, walk
from .concat import rebuild, uses_axis

ROLES = ("mk", "k", "m", "stat")


def chunk(dtype: DType) -> int:
    """Elements of one 16-byte load of an mk / k / stat source of the operand type."""
    return 16 // dtype.itemsize


@dataclass(frozen=True)
class Source:
    tensor: str
    role: str  # "mk", "k", "m" or "stat"
    dtype: DType
    ld: int = 0  # mk, stat: the row stride (the tensor is [M, ld])
    col: int = 0  # mk, stat: the column of k = 0
    pre: tuple = ()  # stat: the program of each element summed
    post: tuple = ()  # stat: the program of the row's sum

    def to_json(self) -> dict:
        stat = {"pre": epilogue_fn.to_json(self.pre), "post": epilogue_fn.to_json(self.post)} if self.role == "stat" else {}
        return {"tensor": self.tensor, "role": self.role, "dtype": self.dtype.value, "ld": self.ld, "col": self.col,
                **stat}


@dataclass(frozen=True)
class Prologue:
    sources: tuple[Source, ...]
    steps: tuple  # an epilogue_fn program of the inputs ("x", i), source i

    @property
    def stats(self) -> tuple[Source, ...]:
        """The per-row statistics the kernel computes (``stat`` sources), in source order."""
        return tuple(s for s in self.sources if s.role == "stat")

    @property
    def tensors(self) -> tuple[str, ...]:
        """The tensors the prologue reads, each once, in source order."""
        return tuple(dict.fromkeys(s.tensor for s in self.sources))

    def to_json(self) -> dict:
        return {"sources": [s.to_json() for s in self.sources], "steps": epilogue_fn.to_json(self.steps)}

    @staticmethod
    def from_json(d: Mapping[str, Any], parse_dtype: Callable[[Any], DType]) -> "Prologue":
        return Prologue(tuple(Source(str(s["tensor"]), str(s["role"]), parse_dtype(s["dtype"]), int(s.get("ld", 0)),
                                     int(s.get("col", 0)), epilogue_fn.from_json(s.get("pre")),
                                     epilogue_fn.from_json(s.get("post"))) for s in d["sources"]),
                        epilogue_fn.from_json(d["steps"]))


def check(p: Prologue, m: Any, k: Any, in_dtype: DType) -> str | None:
    """Why p is not a prologue the template computes for an [m, k] A of in_dtype, or None."""
    if not any(s.role in ("mk", "k") for s in p.sources):
        return "a prologue reads at least one source along K (mk or k)"
    why = epilogue_fn.check(p.steps, len(p.sources))
    if why is not None:
        return f"prologue: {why}"
    if in_dtype in HALF and p.steps[-1][0] != epilogue_fn.ROUND.get(in_dtype):
        return f"the prologue's last step must round to the operand type {in_dtype.value}"
    for s in p.sources:
        if s.role not in ROLES:
            return f"prologue source {s.tensor!r}: role {s.role!r}; roles: {', '.join(ROLES)}"
        if s.role == "m" and s.dtype not in (*HALF, DType.fp32):
            return f"prologue source {s.tensor!r} is {s.dtype.value}; a per-row source is fp16, bf16 or fp32"
        if s.role == "stat":
            why = epilogue_fn.check(s.pre) or epilogue_fn.check(s.post)
            if why is not None:
                return f"prologue statistic over {s.tensor!r}: {why}"
        if s.role != "m" and s.dtype != in_dtype:
            return (f"prologue source {s.tensor!r} is {s.dtype.value}; the template loads tiles of the operand "
                    f"type {in_dtype.value}")
        if s.role in ("mk", "stat") and not (isinstance(k, int) and s.ld >= s.col + k and s.col >= 0):
            return f"prologue source {s.tensor!r}: columns {s.col}..{s.col}+K exceed its row of {s.ld}"
        if s.role in ("mk", "stat") and (s.ld % chunk(in_dtype) or s.col % chunk(in_dtype)):
            return (f"prologue source {s.tensor!r}: row stride {s.ld} and column {s.col} must be multiples of "
                    f"{chunk(in_dtype)}")
    if not isinstance(k, int) or k % chunk(in_dtype):
        return f"a prologue needs K a multiple of {chunk(in_dtype)} (16-byte loads), got {k}"
    return None


def in_loop(p: Prologue, dtype: DType) -> int:
    """The index among the chunked (mk and k) sources of the one read the one statistic sums over, when A is fp32
    and that statistic times a function of the other sources (``epilogue_fn.linear_in``: RMSNorm's x * r * g) and
    x is read as an mk source at the statistic's columns; -1 otherwise. The sm80 skeleton then sums the statistic
    as A's tiles land and scales the accumulators' rows by it after its main loop, with no pass over K before it
    (polysat_gemm.cuh ``mainloop_sm80_prologue``): sum_k (r h) b = r sum_k h b, one product reassociated, within
    the sum's own error (the factor r is the same for the row's every term) except where h is subnormal and r h is
    not (|x g| < 2^-126). Not for a 16-bit A: its rounding of r h to the operand type would become a rounding of
    h, whose subnormal range (|h| < 6.1e-5 in fp16) small activations reach."""
    stats = p.stats
    if dtype != DType.fp32 or len(stats) != 1:
        return -1
    st = stats[0]
    chunked = [s for s in p.sources if s.role in ("mk", "k")]
    at = [i for i, s in enumerate(chunked) if s.role == "mk" and (s.tensor, s.ld, s.col, s.dtype) == (st.tensor, st.ld,
                                                                                                  st.col, st.dtype)]
    if not at or not epilogue_fn.linear_in(p.steps, p.sources.index(st)):
        return -1
    return at[0]


def shapes(p: Prologue, m: int, k: int) -> dict[str, tuple[int, ...]]:
    return {s.tensor: (m, s.ld) if s.role in ("mk", "stat") else (k,) if s.role == "k" else (m,) for s in p.sources}


def evaluate(p: Prologue, inputs: Mapping[str, np.ndarray], m: int, k: int, in_dtype: DType) -> np.ndarray:
    """The [m, k] A the prologue computes, in fp32 (each value representable in in_dtype)."""
    xs = []
    for s in p.sources:
        x = np.asarray(round_to(np.asarray(inputs[s.tensor]), s.dtype)).astype(np.float32)
        xs.append(x[:, s.col:s.col + k] if s.role == "mk" else x[None, :] if s.role == "k" else
                  statistic(s, x, k)[:, None] if s.role == "stat" else x[:, None])
    a = epilogue_fn.evaluate(p.steps, np.zeros((m, k), np.float32), tuple(xs))
    return np.asarray(round_to(a, in_dtype)).astype(np.float32)


def statistic(s: Source, x: np.ndarray, k: int) -> np.ndarray:
    """The [M] fp32 values of a ``stat`` source over x (fp32, [M, ld]): post of the sum over K of pre."""
    terms = epilogue_fn.evaluate(s.pre, np.ascontiguousarray(x[:, s.col:s.col + k], np.float32))
    return epilogue_fn.evaluate(s.post, terms.sum(axis=1, dtype=np.float32))


# ---- the region form ----------------------------------------------------------------------------

def from_operand(r: Region, lets: Lets, n: RNode, m_ax: str, k_ax: str) -> "tuple[Prologue, DType] | None":
    """The operand node n as a prologue over axes (m_ax, k_ax), and the operand type; None when n is neither
    ``cast:fp32(X)`` of a 16-bit read-free function X of mk / k / m reads nor such an fp32 function itself."""
    n = lets(n)
    if n.op == R.UNARY and n.arg == "cast" and n.dtype == DType.fp32 and lets(n.src[0]).dtype in HALF:
        x = lets(n.src[0])
    elif n.dtype == DType.fp32:
        x = n
    else:
        return None
    if x.op == R.READ:
        return None
    sources: list[Source] = []
    bad: list[str] = []

    def leaf(node: RNode):
        if node.op != R.READ:
            got = statistic_source(r, lets, node, m_ax, k_ax)
            if got is not None and got not in sources:
                sources.append(got)
            return None if got is None else ("x", sources.index(got))
        s = source(r, node, m_ax, k_ax)
        if s is None:
            bad.append(node.arg[0])
            return None
        if s not in sources:
            sources.append(s)
        return ("x", sources.index(s))

    steps = epilogue_fn.from_region(lets, x, None, leaf)
    if steps is None or bad or not sources:
        return None
    if x.dtype in HALF and steps[-1][0] != epilogue_fn.ROUND[x.dtype]:  # a 16-bit step's rounding ends the program
        return None
    return Prologue(tuple(sources), steps), x.dtype


def statistic_source(r: Region, lets: Lets, node: RNode, m_ax: str, k_ax: str) -> "Source | None":
    """node as a ``stat`` source: an fp32 value over [m] that is a program of one fp32 sum from 0 over an axis
    of K's extent of a program of one read x[m, r + c] of a packed tensor (16-bit or fp32); None otherwise."""
    if m_ax not in node.axes or node.dtype != DType.fp32 or not _only(lets, node, m_ax):
        return None
    node = _unbroadcast(lets, node)
    reds = [n for n in walk(lets, node) if n.op == R.REDUCE]
    if len(reds) != 1:
        return None
    red = reds[0]
    op, axes, init = red.arg
    if op != "sum" or init != 0 or red.dtype != DType.fp32 or len(axes) != 1:
        return None
    (r_ax,) = axes
    if r.axis_sizes.get(r_ax) != r.axis_sizes.get(k_ax):
        return None
    reads = {n.arg: n for n in walk(lets, red.src[0]) if n.op == R.READ}
    if len(reds) != 1 or len(reads) != 1:
        return None
    (x,) = reads.values()
    s = source(r, x, m_ax, r_ax)
    if s is None or s.role != "mk" or x.dtype not in (*HALF, DType.fp32):
        return None
    pre = epilogue_fn.from_region(lets, red.src[0], None, lambda n: ("v",) if n.op == R.READ and n.arg == x.arg else None)
    post = epilogue_fn.from_region(lets, node, None, lambda n: ("v",) if n.op == R.REDUCE else None)
    if pre is None or post is None:
        return None
    return Source(s.tensor, "stat", x.dtype, ld=s.ld, col=s.col, pre=pre, post=post)


def _only(lets: Lets, node: RNode, m_ax: str) -> bool:
    """Whether node's value depends on no output axis but m_ax (its other axes are broadcasts: a statistic a
    piece of a concatenation computes over its columns, region synthesis spelling it over [m, n])."""
    return not any(uses_axis(lets, node, a) for a in node.axes if a != m_ax)


def _unbroadcast(lets: Lets, node: RNode) -> RNode:
    """node with its BroadcastInDims dropped (they only say where a value is read)."""
    def f(n: RNode) -> "RNode | None":
        return _unbroadcast(lets, n.src[0]) if n.op == R.BROADCAST else None
    return rebuild(node, lets, f)


def source(r: Region, node: RNode, m_ax: str, k_ax: str) -> "Source | None":
    """A read as a prologue source: [m, k + c] of a packed [M, ld] tensor, [k] or [m]; None otherwise."""
    tensor, index = node.arg
    buf = next((b for b in r.inputs if b.name == tensor), None)
    if buf is None or buf.memref.layout.kind != "row_major" or not all(isinstance(d, int) for d in buf.memref.shape):
        return None
    dims = [(e, d) for e, d in zip(index, buf.memref.shape, strict=True)
            if not (e.is_const and e.constant == 0 and d == 1)]  # size-1 dims read at 0: dropped
    sizes = r.axis_sizes
    if len(dims) == 1:
        (e, d), = dims
        v = axis_var(e)
        if v in (m_ax, k_ax) and d == sizes[v]:
            return Source(tensor, "m" if v == m_ax else "k", node.dtype)
        return None
    if len(dims) != 2:
        return None
    (em, dm), (ek, dk) = dims
    col = _offset(ek, k_ax)
    if axis_var(em) != m_ax or dm != sizes[m_ax] or col is None:
        return None
    return Source(tensor, "mk", node.dtype, ld=dk, col=col)


def _offset(e: Expr, axis: str) -> "int | None":
    """c when e is ``axis + c`` with a constant c >= 0, else None."""
    if e.variables() != {axis}:
        return None
    c = e - Expr.var(axis)
    return c.constant if c.is_const and c.constant >= 0 else None
