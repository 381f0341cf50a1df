"""The GEMM problem one region lowers to: a contraction with an elementwise epilogue.

``C[*batch, m, n] = epilogue(sum_k A[*batch, m, k] * B[*batch, k, n])`` with fp16|bf16 inputs, fp32
accumulation and the epilogue applied to the fp32 accumulator in order. Transposes are absorbed by
the operand layouts: A is ``row`` ([M, K], K contiguous) or ``col`` (stored [K, M]);
B is ``row`` ([K, N], N contiguous) or ``col`` (stored [N, K]). By default every operand is packed
(its leading dimension is its contiguous extent): a batched operand advances by one matrix per batch
index; a ``broadcast`` operand has batch stride 0 (one matrix shared by every batch).

B may be a concatenation along N (``b_pieces``: (tensor, width) in order, widths summing to N, no
batch): sibling GEMMs that read one A merged into one (rules/siblings.egg). Each piece is its own
packed tensor ([K, width] row, [width, K] col); a CTA's N tile lies inside one piece (the plan's BN
divides every width) and reads that piece's pointer; the output is the one [M, N] tensor, whose
column ranges are the original GEMMs' outputs.

A, B and C may also be stored with their dims in another order (``a_dims``, ``b_dims``, ``c_dims``: the
storage order of the labels ``m``/``n``/``k`` and ``b0``, ``b1``, .. for the batch dims; () = the packed
order above), as a transposed or permuted tensor is: the heads of attention interleaved in [S, heads, d].
Such a tensor is still whole and row-major in its own order; its innermost dim is its layout's contiguous
matrix dim (unit stride: the copies stay vectorised) and its batch dims are adjacent and in order (one
batch stride). The kernel reads it through its row stride and batch stride (:func:`strides`).

An operand may also read only a consecutive run of the batch dims (``a_dims`` holds b_i..b_j, in order):
it is broadcast along the others. Flat batch index t (over C's batch dims) reads its matrix
(t / div) % mod (:func:`batch_map`): an operand reading the trailing batch dims has div 1, one reading
the leading ones has div = the product of the trailing ones.

A may instead be computed as its tile is filled (``a_prologue``, :mod:`.prologue`): an elementwise function of
[M, K]-shaped, per-K and per-M reads (SiLU(gate) x up read from the sibling GEMMs' output), never written out;
then ``a`` names no tensor, the kernel reads the prologue's tensors in its place, and there is no batch.

Sizes are ints or symbol names (runtime parameters, bound by ``env`` at launch).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from ...ir.diagnostics import fail
from ...ir.dtypes import DType
from ..common import epilogue_fn
from . import prologue as pro_
from ..common.spec import (EPILOGUE_KINDS, IN_DTYPES, OUT_DTYPES, EpilogueOp, Size, check_sizes, epilogue_dtypes,
                           epilogue_tensors, parse_spec_dtype, resolve_size, symbols_of)


@dataclass(frozen=True)
class GemmSpec:
    name: str
    m: Size
    n: Size
    k: Size
    batch: tuple[Size, ...] = ()
    in_dtype: DType = DType.fp16
    out_dtype: DType = DType.fp16
    a_layout: str = "row"
    b_layout: str = "row"
    a_broadcast: bool = False
    b_broadcast: bool = False
    epilogue: tuple[EpilogueOp, ...] = ()
    a: str = "A"
    b: str = "B"
    c: str = "C"
    acc_dtype: DType = field(default=DType.fp32)
    b_pieces: tuple[tuple[str, int], ...] = ()  # B = concat_N of these (tensor, width); () = B is one tensor
    a_dims: tuple[str, ...] = ()  # storage order of A's dims (labels b0.., m, k); () = packed
    b_dims: tuple[str, ...] = ()
    c_dims: tuple[str, ...] = ()
    a_prologue: "pro_.Prologue | None" = None  # A computed from these reads (no A tensor)
    pair: tuple = ()  # C[m, j] = this fn program of (acc[m, j], acc[m, W + j]), B = [B_0 | B_1] (backend/gemm/paired.py)

    def dims(self, role: str) -> tuple[str, ...]:
        """Storage order of role's dims ("a", "b" or "c"): the labels b0.. (batch), m, n, k."""
        return getattr(self, f"{role}_dims") or packed_dims(self, role)

    @property
    def strided(self) -> bool:
        """Whether some operand is stored in an order other than the packed one."""
        return any(self.dims(r) != packed_dims(self, r) for r in "abc")

    @property
    def b_names(self) -> tuple[str, ...]:
        """The tensors B is read from: its pieces, or B itself."""
        return tuple(p for p, _ in self.b_pieces) or (self.b,)

    @property
    def piece_starts(self) -> tuple[int, ...]:
        """The first column (along N) of each piece of B."""
        out, at = [], 0
        for _, w in self.b_pieces:
            out.append(at)
            at += w
        return tuple(out)

    def __post_init__(self):
        validate(self)

    # ---- sizes ---------------------------------------------------------------------------------
    @property
    def symbols(self) -> tuple[str, ...]:
        return symbols_of((*self.batch, self.m, self.n, self.k))

    @property
    def is_static(self) -> bool:
        return not self.symbols

    def sizes(self, env: Mapping[str, int] | None = None) -> dict[str, int]:
        """Concrete {batch, m, n, k} (batch = product of the batch dims) under env."""
        env, at = env or {}, f"gemm {self.name!r}"

        def get(d: Size, what: str) -> int:
            return resolve_size(d, env, what, at)

        return {"batch": math.prod(get(d, "a batch dim") for d in self.batch),
                "m": get(self.m, "M"), "n": get(self.n, "N"), "k": get(self.k, "K")}

    def shapes(self, env: Mapping[str, int] | None = None) -> dict[str, tuple[int, ...]]:
        """The shape of every tensor the kernel reads or writes, by tensor name."""
        s = self.sizes(env)
        env = env or {}
        bdims = tuple(d if isinstance(d, int) else env[d] for d in self.batch)
        size = {"m": s["m"], "n": s["n"], "k": s["k"], **{f"b{i}": d for i, d in enumerate(bdims)}}
        out = {t: tuple(size[x] for x in self.dims(r)) for t, r in ((self.a, "a"), (self.b, "b"), (self.c, "c"))}
        m, n, k = s["m"], s["n"], s["k"]
        if self.pair:
            out[self.c] = (m, n // 2)
        if self.a_prologue is not None:
            del out[self.a]
            out.update(pro_.shapes(self.a_prologue, m, k))
        for p, w in self.b_pieces:
            out[p] = (k, w) if self.b_layout == "row" else (w, k)
        for op in self.epilogue:
            if op.kind == "bias":
                out[op.tensor] = (n,) if op.axis == "n" else (m,)
            elif op.kind == "residual":
                out[op.tensor] = out[self.c]  # read over the output's axes: stored as C is
        return out

    def dtypes(self) -> dict[str, DType]:
        a = {s.tensor: s.dtype for s in self.a_prologue.sources} if self.a_prologue else {self.a: self.in_dtype}
        return {**a, self.b: self.in_dtype, self.c: self.out_dtype,
                **{p: self.in_dtype for p, _ in self.b_pieces}, **epilogue_dtypes(self.epilogue)}

    @property
    def a_names(self) -> tuple[str, ...]:
        """The tensors A is read from: A itself, or its prologue's tensors."""
        return self.a_prologue.tensors if self.a_prologue else (self.a,)

    @property
    def inputs(self) -> tuple[str, ...]:
        """Tensor names the kernel reads, in kernel-parameter order."""
        return (*self.a_names, *self.b_names) + epilogue_tensors(self.epilogue)

    def flops(self, env: Mapping[str, int] | None = None) -> int:
        s = self.sizes(env)
        return 2 * s["batch"] * s["m"] * s["n"] * s["k"]

    def to_json(self) -> dict:
        return {"name": self.name, "m": self.m, "n": self.n, "k": self.k, "batch": list(self.batch),
                "in_dtype": self.in_dtype.value, "acc_dtype": self.acc_dtype.value, "out_dtype": self.out_dtype.value,
                "a_layout": self.a_layout, "b_layout": self.b_layout,
                "a_broadcast": self.a_broadcast, "b_broadcast": self.b_broadcast,
                "epilogue": [op.to_json() for op in self.epilogue], "a": self.a, "b": self.b, "c": self.c,
                **({"b_pieces": [list(p) for p in self.b_pieces]} if self.b_pieces else {}),
                **({"a_prologue": self.a_prologue.to_json()} if self.a_prologue else {}),
                **({"pair": epilogue_fn.to_json(self.pair)} if self.pair else {}),
                **{f"{r}_dims": list(getattr(self, f"{r}_dims")) for r in "abc" if getattr(self, f"{r}_dims")}}

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> "GemmSpec":
        at = f"gemm {d.get('name', '?')!r}" if isinstance(d, Mapping) else "gemm"
        if not isinstance(d, Mapping):
            fail("MalformedStructure", at, "a GEMM spec is a JSON object")
        try:
            ops = tuple(EpilogueOp(kind=o["op"], tensor=o.get("tensor"), axis=o.get("axis", "n"),
                                   dtype=parse_spec_dtype(o.get("dtype"), at) if o.get("dtype") is not None else None,
                                   value=float(o.get("value", 1.0)), steps=epilogue_fn.from_json(o.get("steps")))
                        for o in d.get("epilogue", ()))
            return GemmSpec(name=d["name"], m=d["m"], n=d["n"], k=d["k"], batch=tuple(d.get("batch", ())),
                            in_dtype=parse_spec_dtype(d.get("in_dtype", "fp16"), at), out_dtype=parse_spec_dtype(d.get("out_dtype", "fp16"), at),
                            a_layout=d.get("a_layout", "row"), b_layout=d.get("b_layout", "row"),
                            a_broadcast=bool(d.get("a_broadcast", False)), b_broadcast=bool(d.get("b_broadcast", False)),
                            epilogue=ops, a=d.get("a", "A"), b=d.get("b", "B"), c=d.get("c", "C"),
                            b_pieces=tuple((str(p), int(w)) for p, w in d.get("b_pieces", ())),
                            a_prologue=pro_.Prologue.from_json(d["a_prologue"], lambda x: parse_spec_dtype(x, at))
                            if d.get("a_prologue") else None, pair=epilogue_fn.from_json(d.get("pair")),
                            **{f"{r}_dims": tuple(map(str, d.get(f"{r}_dims", ()))) for r in "abc"})
        except (KeyError, TypeError, ValueError) as e:
            fail("MalformedStructure", at, f"GEMM spec field missing or malformed: {e}")


def packed_dims(s: GemmSpec, role: str) -> tuple[str, ...]:
    """The packed storage order of role's dims: batch dims leading (none if broadcast), then the matrix."""
    batch = tuple(f"b{i}" for i in range(len(s.batch)))
    if role == "c":
        return batch + ("m", "n")
    if role == "a":
        return (() if s.a_broadcast else batch) + (("m", "k") if s.a_layout == "row" else ("k", "m"))
    return (() if s.b_broadcast else batch) + (("k", "n") if s.b_layout == "row" else ("n", "k"))


def strides(s: GemmSpec, role: str, env: Mapping[str, int] | None = None) -> tuple[int, int]:
    """(row stride, batch stride) of role's tensor in elements: the stride of its outer matrix dim and of
    its innermost batch dim (0 without batch dims: a broadcast operand)."""
    return _strides(s.dims(role), s.shapes(env)[{"a": s.a, "b": s.b, "c": s.c}[role]])


def static_strides(s: GemmSpec, role: str) -> "tuple[int, int] | None":
    """:func:`strides` when they do not depend on a symbol size (the dims after each are static), else None."""
    size = {"m": s.m, "n": s.n, "k": s.k, **{f"b{i}": d for i, d in enumerate(s.batch)}}
    return _strides(s.dims(role), tuple(size[d] for d in s.dims(role)))


def _strides(dims: tuple[str, ...], shape: tuple) -> "tuple[int, int] | None":
    """(row stride, batch stride) of a row-major tensor of that shape stored in that dim order; None when a
    stride is a product with a symbol in it."""
    def step(d: str) -> "int | None":
        after = shape[dims.index(d) + 1:]
        return math.prod(after) if all(isinstance(x, int) for x in after) else None
    batch = [d for d in dims if d.startswith("b")]
    ld, bs = step(next(d for d in dims if not d.startswith("b"))), (step(batch[-1]) if batch else 0)
    return None if ld is None or bs is None else (ld, bs)


def _check_dims(s: GemmSpec, at: str) -> None:
    for role in "abc":
        got = getattr(s, f"{role}_dims")
        if not got:
            continue
        want = packed_dims(s, role)
        run = [d for d in got if d.startswith("b")]
        labels = [d for d in want if d.startswith("b")]
        if role != "c" and run and _is_run(run, labels):
            want = tuple(run) + want[len(labels):]  # an operand reading a run of the batch dims
        if sorted(got) != sorted(want):
            fail("InvalidAttribute", at, f"{role}_dims {list(got)} must order the labels {list(want)}")
        if tuple(d for d in got if not d.startswith("b")) != want[-2:] or got[-1] != want[-1]:
            fail("InvalidAttribute", at, f"{role}_dims {list(got)}: the matrix dims must keep the layout's order "
                                         f"({', '.join(want[-2:])}), the contiguous one innermost (unit stride)")
        pos = [i for i, d in enumerate(got) if d.startswith("b")]
        if [got[i] for i in pos] != list(want[:-2]) or (pos and pos[-1] - pos[0] != len(pos) - 1):
            fail("InvalidAttribute", at, f"{role}_dims {list(got)}: the batch dims must be adjacent and in order")


def _is_run(run: list, labels: list) -> bool:
    """Whether run is labels[i:j] for some i < j (a consecutive run of the batch labels, in order)."""
    return bool(run) and run[0] in labels and labels[labels.index(run[0]):labels.index(run[0]) + len(run)] == run


def batch_map(s: GemmSpec, role: str, env: Mapping[str, int] | None = None) -> tuple[int, int]:
    """(div, mod) taking the flat batch index t (over all of C's batch dims, row-major) to role's own batch
    index (t / div) % mod: role reads the run b_i..b_j of the batch dims, mod is their product, div the
    product of the batch dims after b_j. (1, batch) for an operand reading every batch dim; (1, 1) for a
    broadcast one (it reads none)."""
    env = env or {}
    size = [d if isinstance(d, int) else env[d] for d in s.batch]
    run = [int(d[1:]) for d in s.dims(role) if d.startswith("b")]
    if not run:
        return 1, 1
    return math.prod(size[run[-1] + 1:]), math.prod(size[run[0]:run[-1] + 1])


def partial_batch(s: GemmSpec, role: str) -> bool:
    """Whether role reads some of the batch dims, not all and not none (a broadcast along the others)."""
    n = sum(d.startswith("b") for d in s.dims(role))
    return 0 < n < len(s.batch)


def validate(s: GemmSpec) -> None:
    at = f"gemm {s.name!r}"
    if not isinstance(s.name, str) or not s.name:
        fail("InvalidAttribute", "gemm", "a GEMM needs a non-empty name")
    check_sizes(((s.m, "M"), (s.n, "N"), (s.k, "K")), s.batch, at)
    if s.in_dtype not in (*IN_DTYPES, DType.fp32):
        fail("DtypeMismatch", at, f"inputs must be fp16, bf16 or fp32, got {s.in_dtype.value}",
             "Cast the operands to fp16, bf16 or fp32 before the contraction.")
    if s.out_dtype not in OUT_DTYPES:
        fail("DtypeMismatch", at, f"the output must be fp16, bf16 or fp32, got {s.out_dtype.value}")
    if s.acc_dtype != DType.fp32:
        fail("DtypeMismatch", at, "accumulation is fp32", "Give the REDUCE \"dtype\": \"fp32\".")
    for lay, what in ((s.a_layout, "a_layout"), (s.b_layout, "b_layout")):
        if lay not in ("row", "col"):
            fail("InvalidAttribute", at, f"{what} = {lay!r}; use \"row\" or \"col\"")
    if (s.a_broadcast or s.b_broadcast) and not s.batch:
        fail("InvalidAttribute", at, "a broadcast operand needs batch dims")
    _check_dims(s, at)
    if s.b_pieces and s.strided:
        fail("InvalidAttribute", at, "b_pieces take packed operands")
    names = [*s.a_names, *s.b_names, s.c]
    if s.pair:
        why = epilogue_fn.check(s.pair, 1)
        if why is None and (len(s.b_pieces) != 2 or s.b_pieces[0][1] != s.b_pieces[1][1] or s.b_layout != "row"
                            or s.epilogue):
            why = "a pair epilogue combines two row-major pieces of B of one width, with no other epilogue"
        if why is not None:
            fail("InvalidAttribute", at, f"pair: {why}")
    if s.a_prologue is not None:
        why = pro_.check(s.a_prologue, s.m, s.k, s.in_dtype)
        if why is None and (s.batch or s.strided or s.a_layout != "row"):
            why = "a prologue GEMM has no batch and a packed row-major A"
        if why is not None:
            fail("InvalidAttribute", at, why)
    if s.b_pieces:
        if s.batch or any(not isinstance(w, int) or w < 1 for _, w in s.b_pieces) or len(s.b_pieces) < 2:
            fail("InvalidAttribute", at, "b_pieces: two or more (tensor, width) pieces with positive int widths, no batch")
        if s.n != sum(w for _, w in s.b_pieces):
            fail("AxisSizeMismatch", at, f"b_pieces widths sum to {sum(w for _, w in s.b_pieces)}, N is {s.n}")
    for op in s.epilogue:
        if not isinstance(op, EpilogueOp) or op.kind not in EPILOGUE_KINDS:
            fail("InvalidAttribute", at, f"unknown epilogue op {getattr(op, 'kind', op)!r}; ops: {', '.join(EPILOGUE_KINDS)}")
        if op.kind in ("bias", "residual"):
            if not isinstance(op.tensor, str) or not op.tensor:
                fail("InvalidAttribute", at, f"epilogue {op.kind} needs a tensor name")
            if op.dtype not in OUT_DTYPES:
                fail("DtypeMismatch", at, f"epilogue {op.kind} tensor {op.tensor!r} must be fp16, bf16 or fp32")
            names.append(op.tensor)
        elif op.tensor is not None:
            fail("InvalidAttribute", at, f"epilogue {op.kind} takes no tensor")
        if op.kind == "bias" and op.axis not in ("m", "n"):
            fail("InvalidAttribute", at, f"bias axis {op.axis!r}; use \"n\" (per column) or \"m\" (per row)")
        if op.kind == "cast" and op.dtype not in OUT_DTYPES:
            fail("InvalidAttribute", at, "cast needs a float dtype (fp16, bf16, fp32)")
        if op.kind == "scale" and not math.isfinite(op.value):
            fail("InvalidAttribute", at, f"scale {op.value!r} is not finite")
        why = epilogue_fn.check(op.steps) if op.kind == "fn" else None
        if why is not None:
            fail("InvalidAttribute", at, why)
    for nm in names:
        if not isinstance(nm, str) or not nm:
            fail("InvalidAttribute", at, "tensor names are non-empty strings")
    dup = sorted({x for x in names if names.count(x) > 1})
    if dup:
        fail("DuplicateDefinition", at, f"tensor name(s) {', '.join(map(repr, dup))} used twice")
