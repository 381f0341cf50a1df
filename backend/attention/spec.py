"""Scaled dot-product attention as one kernel: the problem description (its numpy meaning:
:mod:`.reference`).

``O[*b, i, :] = cast_out( sum_j P[*b, i, j] * V[*b, j, :] )`` with
``P[*b, i, :] = cast_p( softmax_j( scale * sum_d Q[*b, i, d] K[*b, j, d]  (masked) ) )``:
Q [*batch, m, d], K [*batch, n, d], V [*batch, n, dv] and O [*batch, m, dv], all packed row-major, or, with
``cols`` (batch = (H,): the heads), column windows of row-major matrices: Q [m, ld_q] whose head h is the
columns [off_q + h*hs_q, off_q + h*hs_q + d), K and V alike over n rows, O [m, H*dv] with the heads
interleaved (``cols`` = ((off, ld, hs) of Q, K, V, O)): a [tokens, H * d] projection, or one piece of a
fused Q/K/V projection, read in place;
``fn`` (an epilogue_fn program of the fp32 sum, then ``scale`` is 1): the scores as an exporter computes them
(``cast:fp16(Q K^T) / sqrt(d)`` in fp16, each step rounded); ``mask`` (a bool tensor, gemm.prologue.Source over
(query, key): [m, ld] at (i, col + j), or a [n] key vector): key j is visible to query i only where it is true;
``q_pro`` / ``k_pro`` (:mod:`.prologue`, with ``cols``): Q / K computed per head from its projection and tables
(rotary embeddings) as its tile lands in shared memory.
fp16|bf16 inputs, scores, max and sum in fp32, P rounded to ``p_dtype`` (V's type: the type the second
MMA takes) before P V, fp32 accumulation, O rounded to ``out_dtype``. ``causal``: key j is visible to
query i iff ``j <= i + (n - m)`` (aligned bottom-right, as the frontend lowers it); a query row that
sees no key (causal with m > n) is NaN, as in the reference evaluator and torch.

Sizes are ints or symbol names (runtime parameters bound by ``env``); head dims are static ints.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from typing import Any, Callable, ClassVar, Mapping

from ...ir.diagnostics import fail
from ...ir.dtypes import DType
from ..common import epilogue_fn
from ..common.spec import IN_DTYPES, OUT_DTYPES, Size, check_sizes, parse_spec_dtype, resolve_size, symbols_of
from ..gemm.prologue import Source
from .prologue import OperandPrologue, check as check_prologue

MAX_HEAD_DIM = 256  # the flash skeletons take any head dim up to this (padded_dim in polysat_attention.cuh)


def padded_dim(d: int) -> int:
    """The head dim the sm80 skeleton's smem tiles and MMAs run on: d rounded up to 16 (the mma k16 step);
    Q's and K's padding columns are zero, V's give O columns that are never stored."""
    return -(-d // 16) * 16


def head_dims_reason(*dims: int) -> "str | None":
    """Why the flash skeletons cannot take these head dims (None: they can, any int in 1..MAX_HEAD_DIM)."""
    bad = [d for d in dims if not (1 <= d <= MAX_HEAD_DIM)]
    if bad:
        return (f"the head dim{'s are' if len(dims) > 1 else ' is'} {', '.join(map(str, dims))}; the flash "
                f"skeletons take head dims up to {MAX_HEAD_DIM}")
    return None


class QKSoftmaxSpec:
    """What attention and softmax_scores specs share (both are frozen dataclasses with name, m, n, d, batch,
    causal, scale, in_dtype, p_dtype, q and k): the symbols and concrete sizes, the visible pairs of the
    mask, the common half of the JSON form and of ``from_json``. ``KIND`` names the kind in diagnostics."""
    KIND: ClassVar[str]
    ARTICLE: ClassVar[str]

    @property
    def symbols(self) -> tuple[str, ...]:
        return symbols_of((*self.batch, self.m, self.n))

    def head_dims(self) -> dict[str, int]:
        return {"d": self.d}

    def sizes(self, env: Mapping[str, int] | None = None) -> dict[str, int]:
        """Concrete {batch (product), m, n} and the head dims under env."""
        env, at = env or {}, f"{self.KIND} {self.name!r}"

        def get(x: Size, what: str) -> int:
            return resolve_size(x, env, what, at)

        return {"batch": math.prod(get(x, "a batch dim") for x in self.batch), "m": get(self.m, "M"),
                "n": get(self.n, "N"), **self.head_dims()}

    def batch_dims(self, env: Mapping[str, int] | None = None) -> tuple[int, ...]:
        env = env or {}
        self.sizes(env)
        return tuple(x if isinstance(x, int) else env[x] for x in self.batch)

    def visible_pairs(self, env: Mapping[str, int] | None = None) -> int:
        """(query, key) pairs the mask keeps, per batch entry."""
        s = self.sizes(env)
        m, n = s["m"], s["n"]
        if not self.causal:
            return m * n
        # row i sees keys 0 .. min(n-1, i + n - m)
        return causal_pairs(m, n)

    def heads_of(self, x, k: int, dim: int):
        """[H, rows, dim]: the heads of tensor x (in its ``shapes`` shape), the k-th of the spec's ``cols``."""
        if not self.cols:
            return x
        off, _, hs = self.cols[k]
        rep = getattr(self, "kv_rep", 1) if k in (1, 2) else 1  # K and V of grouped-query attention
        return np.stack([x[:, off + (h // rep) * hs: off + (h // rep) * hs + dim] for h in range(self.batch[0])])

    def _json(self, dtypes: Mapping[str, DType], tensors: Mapping[str, str], **rest: Any) -> dict[str, Any]:
        return {"kind": self.KIND, "name": self.name, "m": self.m, "n": self.n, **self.head_dims(),
                "batch": list(self.batch), "causal": self.causal, "scale": self.scale,
                "in_dtype": self.in_dtype.value, "acc_dtype": "fp32", **{k: t.value for k, t in dtypes.items()},
                **tensors, **rest}

    @classmethod
    def _from_json(cls, d: Mapping[str, Any], extra: Callable[[Mapping[str, Any], str], dict[str, Any]]):
        """cls from its JSON form; extra(d, at) reads the kind's own fields."""
        at = f"{cls.KIND} {d.get('name', '?')!r}" if isinstance(d, Mapping) else cls.KIND
        if not isinstance(d, Mapping):
            fail("MalformedStructure", at, f"{cls.ARTICLE} {cls.KIND} spec is a JSON object")
        try:
            return cls(name=d["name"], m=d["m"], n=d["n"], d=d["d"], batch=tuple(d.get("batch", ())),
                       causal=bool(d.get("causal", False)), scale=float(d.get("scale", 1.0)),
                       in_dtype=parse_spec_dtype(d.get("in_dtype", "fp16"), at),
                       p_dtype=parse_spec_dtype(d.get("p_dtype", d.get("in_dtype", "fp16")), at),
                       q=d.get("q", "Q"), k=d.get("k", "K"), **extra(d, at))
        except (KeyError, TypeError, ValueError) as e:
            fail("MalformedStructure", at, f"{cls.KIND} spec field missing or malformed: {e}")


@dataclass(frozen=True)
class AttentionSpec(QKSoftmaxSpec):
    KIND: ClassVar[str] = "attention"
    ARTICLE: ClassVar[str] = "an"
    name: str
    m: Size                         # queries
    n: Size                         # keys
    d: int                          # head dim of Q and K
    dv: int                         # head dim of V and O
    batch: tuple[Size, ...] = ()    # leading dims shared by Q, K, V, O (e.g. B, H)
    causal: bool = False
    scale: float = 1.0
    in_dtype: DType = DType.fp16
    p_dtype: DType = DType.fp16
    out_dtype: DType = DType.fp16
    q: str = "Q"
    k: str = "K"
    v: str = "V"
    o: str = "O"
    passes: int | None = None       # walks over the keys a region prescribes (1: P rounded at the running
                                    # max, online; 2: P rounded after normalisation); None: the plan chooses
    cols: tuple = ()                # (): packed; else (offset, ld, head stride) of Q, K, V and O (module doc)
    fn: tuple = ()                  # the scores as a program of the fp32 sum (module doc)
    mask: Any = None                # a bool mask tensor (module doc)
    q_pro: Any = None               # Q's prologue (.prologue.OperandPrologue)
    k_pro: Any = None               # K's prologue
    kv_rep: int = 1                 # with cols: query head h reads K and V head h // kv_rep (grouped-query)

    def __post_init__(self):
        validate(self)

    @property
    def extra_inputs(self) -> tuple[str, ...]:
        """The tensors read besides Q, K and V: the prologues' tables and projections, the mask."""
        names = [t for p in (self.q_pro, self.k_pro) if p is not None for t in p.tensors]
        names += [self.mask.tensor] if self.mask is not None else []
        return tuple(t for t in dict.fromkeys(names) if t not in (self.q, self.k, self.v))

    @property
    def c(self) -> str:
        """The output tensor (the backend's common name for a kernel's output)."""
        return self.o

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.q, self.k, self.v, *self.extra_inputs)

    def head_dims(self) -> dict[str, int]:
        return {"d": self.d, "dv": self.dv}

    def shapes(self, env: Mapping[str, int] | None = None) -> dict[str, tuple[int, ...]]:
        s, bd = self.sizes(env), self.batch_dims(env)

        def shape(k: int, rows: int, dim: int) -> tuple[int, ...]:
            return (rows, self.cols[k][1]) if self.cols else bd + (rows, dim)

        out = {}
        for p, rows in ((self.k_pro, s["n"]), (self.q_pro, s["m"])):
            if p is not None:
                out.update(p.shapes(rows, self.d))
        if self.mask is not None:
            out[self.mask.tensor] = (s["m"], self.mask.ld) if self.mask.role == "mk" else (s["n"],)
        return {**out, self.q: shape(0, s["m"], self.d), self.k: shape(1, s["n"], self.d),
                self.v: shape(2, s["n"], self.dv), self.o: shape(3, s["m"], self.dv)}


    def dtypes(self) -> dict[str, DType]:
        out = {x.tensor: x.dtype for p in (self.q_pro, self.k_pro) if p is not None for x in p.sources if x.role != "col"}
        if self.mask is not None:
            out[self.mask.tensor] = DType.bool
        return {**out, self.q: self.in_dtype, self.k: self.in_dtype, self.v: self.in_dtype, self.o: self.out_dtype}

    def flops(self, env: Mapping[str, int] | None = None) -> int:
        """Useful MMA FLOPs (2 per multiply-add of QK^T and of PV) over the visible pairs."""
        s = self.sizes(env)
        return 2 * s["batch"] * self.visible_pairs(env) * (self.d + self.dv)

    def to_json(self) -> dict[str, Any]:
        return self._json({"p_dtype": self.p_dtype, "out_dtype": self.out_dtype},
                          {"q": self.q, "k": self.k, "v": self.v, "o": self.o}, passes=self.passes,
                          **({"cols": [list(c) for c in self.cols]} if self.cols else {}),
                          **({"fn": epilogue_fn.to_json(self.fn)} if self.fn else {}),
                          **({"mask": self.mask.to_json()} if self.mask is not None else {}),
                          **{k: p.to_json() for k, p in (("q_pro", self.q_pro), ("k_pro", self.k_pro)) if p is not None},
                          **({"kv_rep": self.kv_rep} if self.kv_rep != 1 else {}))

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> "AttentionSpec":
        return AttentionSpec._from_json(d, lambda d, at: {
            "dv": d.get("dv", d["d"]), "out_dtype": parse_spec_dtype(d.get("out_dtype", "fp16"), at),
            "v": d.get("v", "V"), "o": d.get("o", "O"), "passes": d.get("passes"),
            "cols": tuple(tuple(c) for c in d.get("cols", ())), "fn": epilogue_fn.from_json(d.get("fn", [])),
            "mask": None if d.get("mask") is None else Source(str(d["mask"]["tensor"]), str(d["mask"]["role"]),
                                                              DType.bool, int(d["mask"].get("ld", 0)),
                                                              int(d["mask"].get("col", 0))),
            "q_pro": OperandPrologue.from_json(d.get("q_pro")), "k_pro": OperandPrologue.from_json(d.get("k_pro")),
            "kv_rep": int(d.get("kv_rep", 1))})


def causal_pairs(m: int, n: int) -> int:
    """Closed form of sum_i max(0, min(n, i + n - m + 1)) for i in [0, m)."""
    total = 0
    off = n - m
    # rows where the count is clipped at n: i + off + 1 >= n  <=>  i >= m - 1
    lo = max(0, -off)            # first row that sees at least one key: i + off >= 0
    hi = m - 1                   # rows lo .. hi-1 see i + off + 1 keys; row m-1 sees n
    if hi > lo:
        total += (hi - lo) * (off + 1) + (lo + hi - 1) * (hi - lo) // 2
    if m - 1 >= lo:
        total += n
    return total


def check_common(s: QKSoftmaxSpec, heads: tuple[tuple[int, str], ...]) -> str:
    """The name, the sizes and the head dims of s (the first checks of every kind's validate); returns ``at``."""
    at = f"{s.KIND} {s.name!r}"
    if not isinstance(s.name, str) or not s.name:
        fail("InvalidAttribute", s.KIND, f"{s.ARTICLE} {s.KIND} kernel needs a non-empty name")
    check_sizes(((s.m, "M"), (s.n, "N")), s.batch, at)
    for x, what in heads:
        if isinstance(x, bool) or not isinstance(x, int) or x < 1:
            fail("UnaddressableShape", at, f"{what} = {x!r}; head dims are static positive ints")
    return at


def check_scale(s: QKSoftmaxSpec, at: str) -> None:
    if not isinstance(s.scale, float) or not math.isfinite(s.scale):
        fail("InvalidAttribute", at, f"scale {s.scale!r} is not a finite float")


def check_names(names: list, at: str) -> None:
    """The tensor names of a spec: non-empty strings, all distinct."""
    if any(not isinstance(x, str) or not x for x in names):
        fail("InvalidAttribute", at, "tensor names are non-empty strings")
    if len(set(names)) != len(names):
        fail("DuplicateDefinition", at, f"tensor names {names} must be distinct")


def validate(s: AttentionSpec) -> None:
    at = check_common(s, ((s.d, "head dim D"), (s.dv, "value head dim Dv")))
    if s.in_dtype not in IN_DTYPES or s.p_dtype not in IN_DTYPES:
        fail("DtypeMismatch", at, f"Q, K, V and P must be fp16 or bf16, got {s.in_dtype.value} / {s.p_dtype.value}")
    if s.out_dtype not in OUT_DTYPES:
        fail("DtypeMismatch", at, f"the output must be fp16, bf16 or fp32, got {s.out_dtype.value}")
    check_scale(s, at)
    if s.passes not in (None, 1, 2) or isinstance(s.passes, bool):
        fail("InvalidAttribute", at, f"passes = {s.passes!r}; the softmax walks the keys once (1) or twice (2)")
    check_names([s.q, s.k, s.v, s.o], at)
    if s.kv_rep != 1 and (isinstance(s.kv_rep, bool) or not isinstance(s.kv_rep, int) or s.kv_rep < 1 or not s.cols
                          or s.batch[0] % s.kv_rep):
        fail("InvalidAttribute", at, f"kv_rep = {s.kv_rep!r}: K and V heads shared by kv_rep query heads need "
                                     "column windows and a head count it divides")
    check_cols(s, (s.d, s.d, s.dv, s.dv), at, (1, s.kv_rep, s.kv_rep, 1))
    if s.cols and tuple(s.cols[3]) != (0, s.batch[0] * s.dv, s.dv):
        fail("InvalidAttribute", at, f"cols = {s.cols!r}: O is [m, H*dv], the heads interleaved")
    if s.fn and (epilogue_fn.check(s.fn) is not None or s.scale != 1.0):
        fail("InvalidAttribute", at, f"fn: {epilogue_fn.check(s.fn) or 'a score program takes scale 1.0'}")
    if s.mask is not None and (s.mask.role not in ("mk", "k") or s.mask.dtype != DType.bool):
        fail("InvalidAttribute", at, "mask: a bool [m, ld] tensor read at (i, col + j) or a [n] key vector")
    for name, p in (("q_pro", s.q_pro), ("k_pro", s.k_pro)):
        if p is not None and (not s.cols or (why := check_prologue(p, s.batch[0], s.d, s.in_dtype)) is not None):
            fail("InvalidAttribute", at, f"{name}: {why if s.cols else 'a prologue reads heads of a projection (cols)'}")


def check_cols(s: QKSoftmaxSpec, dims: tuple[int, ...], at: str, reps: tuple = (1, 1, 1, 1)) -> None:
    """s.cols, if any: one (offset, ld, head stride) per tensor of dims, one static batch dim (the heads), each
    head's window inside its row (the sm80 skeleton copies as many elements at once as they all allow; the
    sm90 skeleton's TMA needs multiples of 8: its plans check that)."""
    if not s.cols:
        return
    h = s.batch[0] if len(s.batch) == 1 else None
    ok = isinstance(h, int) and len(s.cols) == len(dims) and all(
        len(c) == 3 and all(isinstance(x, int) and not isinstance(x, bool) for x in c) and c[0] >= 0
        and c[2] >= dim and c[0] + (h // rep - 1) * c[2] + dim <= c[1]
        for c, dim, rep in zip(s.cols, dims, reps))
    if not ok:
        fail("InvalidAttribute", at, f"cols = {s.cols!r} with batch {list(s.batch)}: column windows need one "
                                     "static batch dim (the heads) and windows inside each row")
