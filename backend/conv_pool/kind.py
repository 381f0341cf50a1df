"""The conv_pool kind's entry in the kernel-kind table (:mod:`..kinds`)."""
from __future__ import annotations

from ..conv.kind import KIND as CONV
from ..kinds import KernelKind
from .bind import bind
from .reference import reference

KIND = KernelKind("conv_pool", bind=bind, search=CONV.search, render=CONV.render, gpu_ir=CONV.gpu_ir,
                  launch=CONV.launch, reference=reference, source=CONV.source, prepare=CONV.prepare)
