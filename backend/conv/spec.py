"""Conv2D as an implicit GEMM: the problem description (its numpy meaning: :mod:`.reference`).

``Y[n, co, ho, wo] = epilogue(sum_{c, r, s} W[co, c, r, s] * X[n, g*Cg + c, stride_h*ho + dil_h*r - pad_t,
stride_w*wo + dil_w*s - pad_l])`` with g = co // Cog, Cg = C / groups input and Cog = Co / groups output
channels per group; NCHW input, OIHW weights ([Co, Cg, Kh, Kw]) and NCHW output; out-of-bounds input
reads are zero. Each group is its own GEMM (the groups are the GEMM's batch; depthwise is Cg = 1):
M = N*Ho*Wo (row m = (n, ho, wo), wo fastest), N_gemm = Cog, K = Cg*Kh*Kw (column k = (c, r, s), s
fastest), so B is W viewed as [Cog, K] per group (a ``col`` operand, no copy) and the A operand is an
im2col view of X computed per element (``polysat::Im2col`` in polysat_conv.cuh), never materialized.
The epilogue reuses :class:`EpilogueOp`: bias along Co (``axis`` "n"), residual an NCHW tensor of Y's
shape, scale, cast and the activations.

The spec also answers the kernel-kind protocol (backend/kinds.py): ``c``, ``inputs``, ``shapes``,
``dtypes``, ``to_json``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ...ir.diagnostics import fail
from ...ir.dtypes import DType
from ..common.spec import IN_DTYPES, OUT_DTYPES, EpilogueOp, epilogue_dtypes, epilogue_tensors
from ..gemm.spec import GemmSpec


@dataclass(frozen=True)
class ConvSpec:
    name: str
    n: int
    cin: int
    h: int
    w: int
    co: int
    kh: int
    kw: int
    stride: tuple[int, int] = (1, 1)
    pad: tuple[int, int, int, int] = (0, 0, 0, 0)   # top, bottom, left, right
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    in_dtype: DType = DType.fp16
    out_dtype: DType = DType.fp16
    epilogue: tuple[EpilogueOp, ...] = ()
    x: str = "X"
    wt: str = "W"
    y: str = "Y"

    def __post_init__(self):
        at = f"conv {self.name!r}"
        for v, what in ((self.n, "N"), (self.cin, "C"), (self.h, "H"), (self.w, "W"), (self.co, "Co"),
                        (self.kh, "Kh"), (self.kw, "Kw"), (self.groups, "groups")):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                fail("UnaddressableShape", at, f"{what} = {v!r}; conv sizes are positive ints")
        if len(self.stride) != 2 or len(self.dilation) != 2 or len(self.pad) != 4:
            fail("InvalidAttribute", at, "stride and dilation take 2 ints, pad 4 (top, bottom, left, right)")
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in (*self.stride, *self.dilation)):
            fail("InvalidAttribute", at, f"stride {self.stride} / dilation {self.dilation} must be positive ints")
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in self.pad):
            fail("InvalidAttribute", at, f"pad {self.pad} must be non-negative ints")
        if self.cin % self.groups or self.co % self.groups:
            fail("ConvChannelMismatch", at, f"groups = {self.groups} must divide C = {self.cin} and Co = {self.co}")
        if self.in_dtype not in IN_DTYPES or self.out_dtype not in OUT_DTYPES:
            fail("DtypeMismatch", at, "conv inputs must be fp16|bf16 and the output fp16|bf16|fp32")
        ho, wo = self.out_hw
        if ho < 1 or wo < 1:
            fail("UnaddressableShape", at, f"the output would be {ho}x{wo}: the window does not fit the padded input")
        self.as_gemm()  # validates the epilogue with the GEMM rules
        for op in self.epilogue:
            if op.kind == "bias" and op.axis != "n":
                fail("InvalidAttribute", at, "a conv bias is along the output channels (axis \"n\")")

    @property
    def out_hw(self) -> tuple[int, int]:
        (sh, sw), (dh, dw), (pt, pb, pl, pr) = self.stride, self.dilation, self.pad
        ho = (self.h + pt + pb - dh * (self.kh - 1) - 1) // sh + 1
        wo = (self.w + pl + pr - dw * (self.kw - 1) - 1) // sw + 1
        return ho, wo

    @property
    def cg(self) -> int:
        """Input channels per group."""
        return self.cin // self.groups

    @property
    def cog(self) -> int:
        """Output channels per group."""
        return self.co // self.groups

    def gemm_sizes(self) -> dict[str, int]:
        """The implicit GEMM of one group (``batch`` = the number of groups)."""
        ho, wo = self.out_hw
        return {"batch": self.groups, "m": self.n * ho * wo, "n": self.cog, "k": self.cg * self.kh * self.kw}

    def as_gemm(self) -> GemmSpec:
        """The GEMM each group is implicitly: A = im2col(X) [M, K] row, B = W as [Cog, K] (``col``), the
        groups as the batch."""
        s = self.gemm_sizes()
        return GemmSpec(name=self.name, m=s["m"], n=s["n"], k=s["k"], batch=(self.groups,) if self.groups > 1 else (),
                        in_dtype=self.in_dtype, out_dtype=self.out_dtype, a_layout="row", b_layout="col",
                        epilogue=self.epilogue, a=self.x, b=self.wt, c=self.y)

    # ---- the kernel-kind protocol (backend/kinds.py) ----------------------------------------------
    @property
    def c(self) -> str:
        """The output tensor (kernel-kind protocol; the input channel count is ``cin``)."""
        return self.y

    @property
    def inputs(self) -> tuple[str, ...]:
        """Tensor names the kernel reads, in kernel-parameter order."""
        return (self.x, self.wt) + epilogue_tensors(self.epilogue)

    def shapes(self, env: Mapping[str, int] | None = None) -> dict[str, tuple[int, ...]]:
        ho, wo = self.out_hw
        out = {self.x: (self.n, self.cin, self.h, self.w), self.wt: (self.co, self.cg, self.kh, self.kw),
               self.y: (self.n, self.co, ho, wo)}
        for op in self.epilogue:
            if op.kind == "bias":
                out[op.tensor] = (self.co,)
            elif op.kind == "residual":
                out[op.tensor] = out[self.y]
        return out

    def dtypes(self) -> dict[str, DType]:
        return {self.x: self.in_dtype, self.wt: self.in_dtype, self.y: self.out_dtype, **epilogue_dtypes(self.epilogue)}

    def flops(self) -> int:
        s = self.gemm_sizes()
        return 2 * s["batch"] * s["m"] * s["n"] * s["k"]

    def geometry(self) -> tuple[int, ...]:
        """The ints polysat::ConvGeom is built from, in its field order (groups == 1)."""
        ho, wo = self.out_hw
        return (self.cin, self.h, self.w, self.kh, self.kw, ho, wo, *self.stride, self.pad[0], self.pad[2], *self.dilation)

    def window(self) -> tuple[int, ...]:
        """The template arguments of polysat::ConvWin: KH, KW, SH, SW, DH, DW, PT, PL."""
        return (self.kh, self.kw, *self.stride, *self.dilation, self.pad[0], self.pad[2])

    def to_json(self) -> dict[str, Any]:
        ho, wo = self.out_hw
        return {"name": self.name, "x": self.x, "w": self.wt, "y": self.y, "n": self.n, "c": self.cin, "h": self.h,
                "w_": self.w, "co": self.co, "kh": self.kh, "kw": self.kw, "ho": ho, "wo": wo,
                "stride": list(self.stride), "pad": list(self.pad), "dilation": list(self.dilation),
                "groups": self.groups, "in_dtype": self.in_dtype.value, "acc_dtype": "fp32",
                "out_dtype": self.out_dtype.value, "layout": "NCHW", "gemm": self.gemm_sizes(),
                "epilogue": [op.to_json() for op in self.epilogue]}
