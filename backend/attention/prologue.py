"""Attention's Q / K operand prologue: each head's operand computed elementwise as its tile lands in shared
memory, never written out (rotary embeddings: ``x * cos + rotate_half(x) * sin``, rotate_half = concat(-x2, x1)).

``Q[h, i, c] = round_to_in_dtype(f(x_0, .., x_j))`` for head h, row i and head-dim column c, each input a
:class:`Src`:

* ``win``: the operand's own projection, a row-major [rows, ld] matrix read at column ``off + h*hs + c``
  (``off`` may point before head 0's window: a shifted read, rotate_half's other half); 0 outside the row
  (the binding checks, by evaluating f with NaN there, that such elements are only read under a guard that
  discards them);
* ``mk`` / ``k`` / ``m``: a table shared by every head, [rows, ld] read at (i, col + c), a vector along the
  head dim [c], or along the rows [i] (``backend/gemm/prologue.py source``: cos and sin);
* ``col``: an index guard on the head-dim column, ``a*c + b >= 0`` for every (a, b) of ``guards`` (a bool
  input, ``("p", j)``: the halves of rotate_half).

f is a :mod:`..common.epilogue_fn` program computed in fp32, each 16-bit step rounded as the reference
evaluator rounds it; its last step rounds to the operand type (the region's operand is ``cast:fp32(X)`` of a
16-bit X), so the tile the MMA reads holds exactly the reference's Q (K).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ...ir.dtypes import DType, round_to
from ...ir.region import R, Region, RNode
from ...ir.region_squeeze import linear_address
from ..common import epilogue_fn
from ..common.epilogue import HALF
from ..common.render import CTYPE
from ..gemm.prologue import source as table_source
from ..common.region_match import Lets
from ..common.score_match import head_share

ROLES = ("win", "mk", "k", "m", "col")


@dataclass(frozen=True)
class Src:
    tensor: str
    role: str
    dtype: DType
    off: int = 0        # win: element offset of head 0's column 0 within a row
    ld: int = 0         # win, mk: the row stride
    hs: int = 0         # win: the head stride
    col: int = 0        # mk: the column of c = 0
    guards: tuple = ()  # col: ((a, b), ...), each a*c + b >= 0
    rep: int = 1        # win: head h reads the window of head h // rep (grouped-query attention's K)

    def to_json(self) -> dict:
        return {"tensor": self.tensor, "role": self.role, "dtype": self.dtype.value, "off": self.off, "ld": self.ld,
                "hs": self.hs, "col": self.col, "guards": [list(g) for g in self.guards], "rep": self.rep}

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> "Src":
        return Src(str(d["tensor"]), str(d["role"]), DType(d["dtype"]), int(d.get("off", 0)), int(d.get("ld", 0)),
                   int(d.get("hs", 0)), int(d.get("col", 0)), tuple(tuple(int(x) for x in g) for g in d.get("guards", ())),
                   int(d.get("rep", 1)))


@dataclass(frozen=True)
class OperandPrologue:
    sources: tuple[Src, ...]
    steps: tuple  # an epilogue_fn program of the inputs ("x", j) / ("p", j), source j

    @property
    def tensors(self) -> tuple[str, ...]:
        """The tensors the prologue reads, each once, in source order."""
        return tuple(dict.fromkeys(s.tensor for s in self.sources if s.role != "col"))

    def to_json(self) -> dict:
        return {"sources": [s.to_json() for s in self.sources], "steps": epilogue_fn.to_json(self.steps)}

    @staticmethod
    def from_json(d: Mapping[str, Any] | None) -> "OperandPrologue | None":
        if d is None:
            return None
        return OperandPrologue(tuple(Src.from_json(s) for s in d["sources"]), epilogue_fn.from_json(d["steps"]))

    @property
    def rep(self) -> int:
        """Heads sharing one window of the projection (its ``win`` sources')."""
        return next(s.rep for s in self.sources if s.role == "win")

    def window(self) -> tuple[int, int, int]:
        """(off, ld, hs) of the first ``win`` source whose heads' windows all lie inside the row: the operand's
        window as ``AttentionSpec.cols`` records it."""
        return next((s.off, s.ld, s.hs) for s in self.sources if s.role == "win" and s.off >= 0)

    def shapes(self, rows: int, d: int) -> dict[str, tuple[int, ...]]:
        """The kernel's view of every tensor the prologue reads (a [rows, ld] window matrix or table, a vector)."""
        return {s.tensor: (rows, s.ld) if s.role in ("win", "mk") else (d,) if s.role == "k" else (rows,)
                for s in self.sources if s.role != "col"}


def check(p: OperandPrologue, heads: int, d: int, in_dtype: DType) -> str | None:
    """Why p is not a prologue the template computes for heads x [rows, d] of in_dtype, or None."""
    why = epilogue_fn.check(p.steps, len(p.sources))
    if why is not None:
        return f"prologue: {why}"
    if p.steps[-1][0] != epilogue_fn.ROUND.get(in_dtype):
        return f"the prologue's last step must round to the operand type {in_dtype.value}"
    wins = [s for s in p.sources if s.role == "win"]
    if not wins or len({(s.tensor, s.ld, s.hs, s.rep) for s in wins}) != 1 or heads % wins[0].rep:
        return "a prologue reads one projection's heads (win sources of one tensor, row and head stride)"
    if not any(s.off >= 0 and s.off + (heads // s.rep - 1) * s.hs + d <= s.ld for s in wins):
        return "no window of the prologue's projection lies inside its rows"
    for s in p.sources:
        if s.role not in ROLES:
            return f"prologue source {s.tensor!r}: role {s.role!r}; roles: {', '.join(ROLES)}"
        if s.role != "col" and s.dtype not in (*HALF, DType.fp32):
            return f"prologue source {s.tensor!r} is {s.dtype.value}; sources are fp16, bf16 or fp32"
        if s.role == "mk" and s.col + d > s.ld:
            return f"prologue source {s.tensor!r}: columns {s.col}..{s.col}+{d} exceed its row of {s.ld}"
    return None


def _inputs(p: OperandPrologue, arrays: Mapping[str, np.ndarray], rows: int, heads: int, d: int,
            fill: float = 0.0) -> tuple:
    """Each source as an array broadcasting against [heads, rows, d] (fp32; ``col`` sources bool)."""
    c = np.arange(d)
    out = []
    for s in p.sources:
        if s.role == "col":
            out.append(np.logical_and.reduce([a * c + b >= 0 for a, b in s.guards])[None, None, :])
            continue
        x = np.asarray(round_to(np.asarray(arrays[s.tensor]), s.dtype)).astype(np.float32)
        if s.role == "win":
            x = x.reshape(rows, s.ld)
            cols = s.off + s.hs * (np.arange(heads)[:, None] // s.rep) + c[None, :]  # [heads, d]
            inside = (cols >= 0) & (cols < s.ld)
            v = x[:, np.clip(cols, 0, s.ld - 1)]  # [rows, heads, d]
            out.append(np.where(inside[None], v, np.float32(fill)).transpose(1, 0, 2))
        elif s.role == "mk":
            out.append(x.reshape(rows, s.ld)[None, :, s.col:s.col + d])
        elif s.role == "k":
            out.append(x.reshape(d)[None, None, :])
        else:
            out.append(x.reshape(rows)[None, :, None])
    return tuple(out)


def evaluate(p: OperandPrologue, arrays: Mapping[str, np.ndarray], rows: int, heads: int, d: int,
             in_dtype: DType, fill: float = 0.0) -> np.ndarray:
    """The operand [heads, rows, d] the prologue computes, in fp32 (each value representable in in_dtype)."""
    xs = _inputs(p, arrays, rows, heads, d, fill)
    a = epilogue_fn.evaluate(p.steps, np.zeros((heads, rows, d), np.float32), xs)
    return np.asarray(round_to(a, in_dtype)).astype(np.float32)


def _reads_outside_unguarded(p: OperandPrologue, heads: int, d: int, in_dtype: DType) -> bool:
    """Whether an element outside a ``win`` source's row reaches the result: the program on one row of random
    inputs with those elements NaN gives a NaN where it gives a number with them 0. The inputs: distinct values in
    [0.5, 1), the fractional parts of the golden ratio's multiples (no generator built: numpy.random's first import
    alone is ~6 ms of a compile)."""
    arrays, start = {}, 1
    for s in p.sources:
        if s.role != "col":
            n = s.ld if s.role in ("win", "mk") else d
            arrays[s.tensor] = (0.5 + 0.5 * np.modf(np.arange(start, start + n) * 0.6180339887498949)[0]).astype(np.float32)
            start += n
    zero = evaluate(p, arrays, 1, heads, d, in_dtype, 0.0)
    nan = evaluate(p, arrays, 1, heads, d, in_dtype, float("nan"))
    return bool(np.any(np.isnan(nan) & ~np.isnan(zero)))


# ---- the region form ----------------------------------------------------------------------------

def from_operand(r: Region, lets: Lets, n: RNode, row_ax: str, head_ax: str, col_ax: str,
                 heads: int, d: int) -> "tuple[OperandPrologue, DType] | str":
    """The operand node n (over rows row_ax, heads head_ax, head-dim columns col_ax) as a prologue and the
    operand type, or why not: n is ``cast:fp32(X)``, X a 16-bit read-free function of win / table reads and
    column guards."""
    n = lets(n)
    if not (n.op == R.UNARY and n.arg == "cast" and n.dtype == DType.fp32):
        return "it is not a widened (-> fp32) 16-bit value"
    x = lets(n.src[0])
    if x.dtype not in HALF or x.op == R.READ:
        return f"it is a widened {x.dtype.value} {'read' if x.op == R.READ else 'value'}"
    sources: list[Src] = []
    bad: list[str] = []

    def add(s: Src, kind: str) -> tuple:
        if s not in sources:
            sources.append(s)
        return (kind, sources.index(s))

    def leaf(node: RNode):
        if node.op == R.PRED:
            g = _col_guards(node, col_ax)
            if g is None:
                bad.append(f"the guard {' and '.join(f'{e} >= 0' for e in node.arg)}")
                return None
            return add(Src("", "col", DType.bool, guards=g), "p")
        if node.op != R.READ:
            return None
        s = _window(r, node, row_ax, head_ax, col_ax) or _table(r, node, row_ax, col_ax)
        if s is None:
            bad.append(f"the read {node.arg[0]}[{', '.join(map(str, node.arg[1]))}]")
            return None
        return add(s, "x")

    steps = epilogue_fn.from_region(lets, x, None, leaf)
    if bad:
        return f"{bad[0]} is neither a head's column window, a table over rows and head dim, nor a head-dim guard"
    if steps is None or not sources or steps[-1][0] != epilogue_fn.ROUND[x.dtype]:
        return "it is not an elementwise function of reads the prologue takes"
    p = OperandPrologue(tuple(sources), steps)
    why = check(p, heads, d, x.dtype)
    if why is None and _reads_outside_unguarded(p, heads, d, x.dtype):
        why = "it reads outside its projection's rows where no guard discards the value"
    return why if why is not None else (p, x.dtype)


def _col_guards(node: RNode, col_ax: str) -> "tuple | None":
    out = []
    for e in node.arg:
        if not e.variables() <= {col_ax} or not e.is_affine:
            return None
        b = e.subs({col_ax: 0})
        a = e.subs({col_ax: 1}) - b
        if not (a.is_const and b.is_const):
            return None
        out.append((int(a.constant), int(b.constant)))
    return tuple(out)


def _window(r: Region, node: RNode, row_ax: str, head_ax: str, col_ax: str) -> "Src | None":
    """A read at row * ld + off + h * hs + c of a row-major tensor of rows x ld elements, as a ``win`` source."""
    tensor, index = node.arg
    buf = next((b for b in r.inputs if b.name == tensor), None)
    if buf is None or buf.memref.layout.kind != "row_major" or not all(isinstance(x, int) for x in buf.memref.shape):
        return None
    coef, rep = {}, 1
    for mono, c in linear_address(index, buf.memref.shape).terms:
        q = head_share(mono, head_ax)
        if q is not None:  # grouped-query attention: head h reads KV head h // q
            mono, rep = (head_ax,), q
        if len(mono) > 1 or (mono and mono[0] not in (row_ax, head_ax, col_ax)) or not isinstance(c, int):
            return None
        coef[mono[0] if mono else ""] = c
    rows, ld, hs = r.axis_sizes[row_ax], coef.get(row_ax, 0), coef.get(head_ax, 0)
    if coef.get(col_ax) != 1 or ld <= 0 or hs <= 0 or not isinstance(rows, int) \
            or int(np.prod(buf.memref.shape)) != rows * ld:
        return None
    return Src(tensor, "win", node.dtype, off=coef.get("", 0), ld=ld, hs=hs, rep=rep)


def _table(r: Region, node: RNode, row_ax: str, col_ax: str) -> "Src | None":
    s = table_source(r, node, row_ax, col_ax)
    if s is None:
        return None
    role = {"mk": "mk", "k": "k", "m": "m"}[s.role]
    return Src(s.tensor, role, s.dtype, ld=s.ld, col=s.col)


# ---- the kernel's text ----------------------------------------------------------------------------

def c_functor(p: OperandPrologue, name: str, in_dtype: DType) -> str:
    """A struct the skeleton calls as ``at(row, h, c)`` for the operand's value (fp32, exact in in_dtype), holding
    one pointer per tensor (members ``t0, t1, ..`` in ``tensors`` order)."""
    idx = {t: i for i, t in enumerate(p.tensors)}
    lines = [f"struct {name} {{", "  static constexpr bool on = true;"]
    lines += [f"  const {CTYPE[s.dtype]}* __restrict__ t{idx[s.tensor]};" for s in p.sources if s.role != "col"
              and s is next(x for x in p.sources if x.tensor == s.tensor)]
    lines += ["  __device__ __forceinline__ float at(int row, int h, int c) const {", "    (void)h;"]
    ins = []
    for j, s in enumerate(p.sources):
        if s.role == "col":
            lines.append(f"    const bool x{j} = {' && '.join(f'({a} * c + {b} >= 0)' for a, b in s.guards) or 'true'};")
        elif s.role == "win":
            lines.append(f"    const long long k{j} = {s.off}LL + (long long)(h / {s.rep}) * {s.hs}LL + c;")
            lines.append(f"    const float x{j} = (k{j} >= 0 && k{j} < {s.ld}LL) ? "
                         f"polysat::to_f32(t{idx[s.tensor]}[(long long)row * {s.ld}LL + k{j}]) : 0.0f;")
        else:
            at = f"(long long)row * {s.ld}LL + {s.col} + c" if s.role == "mk" else "c" if s.role == "k" else "row"
            lines.append(f"    const float x{j} = polysat::to_f32(t{idx[s.tensor]}[{at}]);")
        ins.append(f"x{j}")
    lines += ["    float v = 0.0f;", "    {"]
    lines += ["      " + x for x in epilogue_fn.c_lines(p.steps, "v", tuple(ins))]
    lines += ["    }", "    return v;", "  }", "};"]
    return "\n".join(lines)

