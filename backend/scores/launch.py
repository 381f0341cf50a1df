"""Run generated softmax_scores kernels on a CUDA GPU through cuda-python (`polysat[cuda]`).

The attention runtime's pieces, without V or tensor maps (the kernel is the sm80 skeleton on every
target): ``run(spec, inputs, env=None)``: numpy arrays in -> numpy P out; device tensors in -> a
device tensor (or the ``out=`` tensor) out. ``prepare`` resolves everything once; calling the
result launches again. The plan is specialised to the concrete shape of each call and cached per shape.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Mapping

from ..attention.launch import concrete_spec, launch
from ..attention.reference import check_inputs
from ..attention.render import AttentionKernelSource
from ..common.gpu import Device, device
from ..common.launch import Launch, run_on_gpu
from .plan import ScoresPlan, choose_plan
from .render import render
from .spec import ScoresSpec


@lru_cache(maxsize=256)
def _plan_and_source(spec: ScoresSpec, arch: str) -> AttentionKernelSource:
    return render(spec, choose_plan(spec, arch))


def prepare(spec: ScoresSpec, tensors: Mapping[str, Any], env: Mapping[str, int] | None = None,
                   plan: ScoresPlan | None = None, dev: Device | None = None) -> Launch:
    """tensors: device tensors for Q, K and the output P, by the spec's names."""
    dev = dev or device()
    cspec = concrete_spec(spec, env)
    ks = render(cspec, plan) if plan is not None else _plan_and_source(cspec, dev.arch)
    need = {cspec.q: 16, cspec.k: 16, cspec.p: 2 * cspec.p_dtype.itemsize}  # cp.async 16 B; paired stores
    return launch("softmax_scores launch", ks, cspec, tensors, need, {"Q": cspec.q, "K": cspec.k, "P": cspec.p}, dev)


def run(spec: ScoresSpec, inputs: Mapping[str, Any], env: Mapping[str, int] | None = None, *,
               out: Any = None, plan: ScoresPlan | None = None, stream: int = 0):
    """Compute P on the GPU. numpy in -> numpy out; device tensors in -> device tensor out."""
    dev = device()
    cspec = concrete_spec(spec, env)
    return run_on_gpu(cspec, inputs, lambda x: check_inputs(cspec, x),
                      lambda tensors: prepare(cspec, tensors, None, plan, dev), out, stream)
