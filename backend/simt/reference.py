"""The numpy meaning of a SIMT kernel: its region played back on the CPU (ir/playback.py), which agrees
with the reference evaluator of the program (rtol = atol = 1e-3). Kernels are checked against it."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ...ir.playback import playback
from .spec import SimtSpec


def simt_reference(spec: SimtSpec, inputs: Mapping[str, Any], env: Mapping[str, int] | None = None) -> np.ndarray:
    """The output of spec's region on inputs (by region tensor name); symbols come from the input shapes."""
    out = playback([spec.region], {k: np.asarray(v) for k, v in inputs.items()}, keep_all=True)
    return np.asarray(out[spec.c]).reshape(spec.shapes(env)[spec.c])
