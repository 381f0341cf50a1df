"""The softmax_scores kernel kind: P = softmax(scale * Q K^T, masked) written to device memory, the first
region of the two-region form of attention (seed 000 §15.3: "P materialize deferred, 2 regions connected;
attention = streaming_softmax_2pass"); P V is the second region, a GEMM kernel.

Regions are recognised by ``scores_from_region.scores_binding``; plans (``scores_search``) always use
``algo_choice.attention = streaming_softmax_2pass`` and the sm80 flash skeleton in its STORE_P mode.
"""
from __future__ import annotations

from .attention_gpu_ir import build_attention_gpu_ir
from .kinds import KernelKind
from .scores_codegen import render_scores
from .scores_from_region import scores_binding
from .scores_search import search
from .scores_spec import scores_reference


def _launch(spec, tensors, env, out) -> None:
    from .scores_runtime import run_scores
    run_scores(spec, tensors, env, out=out)


KIND = KernelKind("softmax_scores", bind=scores_binding, search=search, render=render_scores,
                  gpu_ir=build_attention_gpu_ir, launch=_launch, reference=scores_reference)
