"""Conv2D + epilogue + MaxPool2D as one kernel by compute-at: the problem (its numpy meaning: :mod:`.reference`).

``P[n, co, ph, pw] = max_{i, j} Z[n, co, ph*psh + i*pdh - ppt, pw*psw + j*pdw - ppl]`` over the window
positions inside Z's [Ho, Wo] (outside is -inf: MaxPool2D's padding, as the frontend lowers it), where
``Z = epilogue(conv(X, W))`` is the conv of :class:`ConvSpec` restricted to its first ``conv_hw`` rows
and columns (the pixels the pool reads). Z never reaches device memory: a CTA owns a tile of pool
outputs and computes the conv pixels of its pre-image under the pool window (halo recomputed).

The conv's epilogue (bias, activations, scale, cast) runs on the accumulators; its output dtype is
the pooled output's (rounding is monotone, so max of rounded values = rounded max: the kernel keeps
the conv tile in the output type). A residual over Z has no template (Z is not materialized).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ...ir.diagnostics import fail
from ...ir.dtypes import DType
from ..conv.spec import ConvSpec


@dataclass(frozen=True)
class ConvPoolSpec:
    conv: ConvSpec
    conv_hw: tuple[int, int]             # Ho, Wo: the conv pixels the pool sees
    kernel: tuple[int, int]              # pool window PKH, PKW
    stride: tuple[int, int]              # PSH, PSW
    pad: tuple[int, int] = (0, 0)        # PPT, PPL (top, left; -inf)
    dilation: tuple[int, int] = (1, 1)   # PDH, PDW
    out_hw: tuple[int, int] = (0, 0)     # Hp, Wp (0: MaxPool2D's size without bottom/right padding)

    def __post_init__(self):
        at = f"conv_pool {self.conv.name!r}"
        for t, what in ((self.conv_hw, "conv_hw"), (self.kernel, "kernel"), (self.stride, "stride"),
                        (self.pad, "pad"), (self.dilation, "dilation"), (self.out_hw, "out_hw")):
            if len(t) != 2 or any(isinstance(v, bool) or not isinstance(v, int) for v in t):
                fail("InvalidAttribute", at, f"{what} {t!r} must be two ints")
        if min(*self.kernel, *self.stride, *self.dilation, *self.conv_hw) < 1 or min(self.pad) < 0:
            fail("InvalidAttribute", at, "pool kernel, stride, dilation and the conv size are positive, the pad >= 0")
        if self.out_hw == (0, 0):
            hp, wp = ((self.conv_hw[a] + self.pad[a] - self.dilation[a] * (self.kernel[a] - 1) - 1) // self.stride[a] + 1
                      for a in (0, 1))
            object.__setattr__(self, "out_hw", (hp, wp))
        hp, wp = self.out_hw
        if hp < 1 or wp < 1:
            fail("UnaddressableShape", at, f"the pool output would be {hp}x{wp}")
        ho, wo = self.conv.out_hw
        if self.conv_hw[0] > ho or self.conv_hw[1] > wo:
            fail("InvalidAttribute", at, f"the pool reads {self.conv_hw} conv pixels, the conv has {ho}x{wo}")
        for a, (size, n) in enumerate(((self.conv_hw[0], hp), (self.conv_hw[1], wp))):
            first = (n - 1) * self.stride[a] - self.pad[a]  # the last window's first position
            if first + self.dilation[a] * (self.kernel[a] - 1) < 0 or first > size - 1 + self.dilation[a] * (self.kernel[a] - 1):
                fail("UnaddressableShape", at, "a pool window lies entirely outside the conv output")
        if any(op.kind == "residual" for op in self.conv.epilogue):
            fail("NoKernelTemplate", at, "a residual over the conv output needs the conv materialized; "
                 "conv + pool fuses bias, scale, cast and activations only")

    # ---- the kernel-kind protocol (backend/kinds.py) ----------------------------------------------
    @property
    def name(self) -> str:
        return self.conv.name

    @property
    def c(self) -> str:
        return self.conv.y

    @property
    def inputs(self) -> tuple[str, ...]:
        return self.conv.inputs

    def shapes(self, env: Mapping[str, int] | None = None) -> dict[str, tuple[int, ...]]:
        out = self.conv.shapes()
        out[self.conv.y] = (self.conv.n, self.conv.co, *self.out_hw)
        return out

    def dtypes(self) -> dict[str, DType]:
        return self.conv.dtypes()

    def halo(self) -> tuple[int, int]:
        """Conv rows / columns a pool tile reads beyond its own stride (recomputed by the neighbour)."""
        return tuple(max(0, self.dilation[a] * (self.kernel[a] - 1) + 1 - self.stride[a]) for a in (0, 1))

    def pre_image(self, tile: tuple[int, int]) -> tuple[int, int]:
        """Conv pixels (rows, columns) of the pre-image of a TPH x TPW pool tile under the pool window."""
        return tuple((tile[a] - 1) * self.stride[a] + (self.kernel[a] - 1) * self.dilation[a] + 1 for a in (0, 1))

    def flops(self) -> int:
        return self.conv.flops()

    def to_json(self) -> dict[str, Any]:
        return {**self.conv.to_json(), "conv_hw": list(self.conv_hw),
                "pool": {"op": "max", "kernel": list(self.kernel), "stride": list(self.stride), "pad": list(self.pad),
                         "dilation": list(self.dilation), "out_hw": list(self.out_hw), "pad_value": "-inf",
                         "halo": list(self.halo())}}
