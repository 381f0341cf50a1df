"""The numpy meaning of a ScoresSpec: the attention reference's row softmax, rounded to P's type."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ..attention.reference import check_inputs, softmax_probs
from .spec import ScoresSpec


def reference(spec: ScoresSpec, inputs: Mapping[str, np.ndarray],
                     env: Mapping[str, int] | None = None) -> np.ndarray:
    """The numpy meaning (what CPU playback of the region and every generated kernel are compared with)."""
    check_inputs(spec, inputs, env)
    if spec.cols:  # each head's column windows -> [H, rows, d]
        inputs = {x: spec.heads_of(np.asarray(inputs[x]), k, spec.d) for k, x in enumerate(spec.inputs)}
    return softmax_probs(spec, inputs).astype(spec.p_dtype.np)
