"""Softmax scores as one kernel: the problem description (its numpy meaning: :mod:`.reference`); the first
region of the two-region form of attention, where P is materialised and the attention is
streaming_softmax_2pass.

``P[*b, i, j] = cast_p( softmax_j( scale * sum_d Q[*b, i, d] K[*b, j, d]  (masked) ) )``: Q [*batch, m, d],
K [*batch, n, d] and P [*batch, m, n], all packed row-major; fp16|bf16 inputs, scores, max and sum in fp32,
P rounded to ``p_dtype``. The P V product is another region (a GEMM kernel). ``causal`` and the rows that
see no key (NaN) follow attention.spec: key j is visible to query i iff ``j <= i + (n - m)``.

Sizes are ints or symbol names (runtime parameters bound by ``env``); the head dim is a static int.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

from ...ir.diagnostics import fail
from ...ir.dtypes import DType
from ..attention.spec import QKSoftmaxSpec, check_cols, check_common, check_names, check_scale
from ..common.spec import IN_DTYPES, OUT_DTYPES, Size


@dataclass(frozen=True)
class ScoresSpec(QKSoftmaxSpec):
    """Sizes, symbols, visible pairs and the JSON form's common half: attention.spec.QKSoftmaxSpec."""
    KIND: ClassVar[str] = "softmax_scores"
    ARTICLE: ClassVar[str] = "a"
    name: str
    m: Size                         # queries
    n: Size                         # keys
    d: int                          # head dim of Q and K
    batch: tuple[Size, ...] = ()    # leading dims shared by Q, K, P
    causal: bool = False
    scale: float = 1.0
    in_dtype: DType = DType.fp16
    p_dtype: DType = DType.fp16
    q: str = "Q"
    k: str = "K"
    p: str = "P"
    cols: tuple = ()                # (): packed; else (offset, ld, head stride) of Q and K (attention.spec)

    def __post_init__(self):
        validate(self)

    @property
    def c(self) -> str:
        """The output tensor (the backend's common name for a kernel's output)."""
        return self.p

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.q, self.k)

    def shapes(self, env: Mapping[str, int] | None = None) -> dict[str, tuple[int, ...]]:
        s, bd = self.sizes(env), self.batch_dims(env)
        q = (s["m"], self.cols[0][1]) if self.cols else bd + (s["m"], self.d)
        k = (s["n"], self.cols[1][1]) if self.cols else bd + (s["n"], self.d)
        return {self.q: q, self.k: k, self.p: bd + (s["m"], s["n"])}

    def dtypes(self) -> dict[str, DType]:
        return {self.q: self.in_dtype, self.k: self.in_dtype, self.p: self.p_dtype}

    def flops(self, env: Mapping[str, int] | None = None) -> int:
        """Useful MMA FLOPs (2 per multiply-add of Q K^T) over the visible pairs."""
        return 2 * self.sizes(env)["batch"] * self.visible_pairs(env) * self.d

    def to_json(self) -> dict[str, Any]:
        return self._json({"p_dtype": self.p_dtype}, {"q": self.q, "k": self.k, "p": self.p},
                          **({"cols": [list(c) for c in self.cols]} if self.cols else {}))

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> "ScoresSpec":
        return ScoresSpec._from_json(d, lambda d, at: {"p": d.get("p", "P"),
                                                       "cols": tuple(tuple(c) for c in d.get("cols", ()))})


def validate(s: ScoresSpec) -> None:
    at = check_common(s, ((s.d, "head dim D"),))
    if s.in_dtype not in IN_DTYPES:
        fail("DtypeMismatch", at, f"Q and K must be fp16 or bf16, got {s.in_dtype.value}")
    if s.p_dtype not in OUT_DTYPES:
        fail("DtypeMismatch", at, f"P must be fp16, bf16 or fp32, got {s.p_dtype.value}")
    check_scale(s, at)
    check_names([s.q, s.k, s.p], at)
    check_cols(s, (s.d, s.d), at)


