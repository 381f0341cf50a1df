"""The numpy meaning of a SIMT kernel: its region played back on the CPU (ir/playback.py), which agrees
with the reference evaluator of the program (rtol = atol = 1e-3). Kernels are checked against it."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ...ir.dtypes import round_to
from ...ir.playback import _RegionRun, bind_region_symbols
from .spec import SimtSpec


def references(spec: SimtSpec, inputs: Mapping[str, Any], env: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
    """Every output of spec's region on inputs (by region tensor name). Symbols come from env and the input
    shapes (a region may size an axis by a symbol none of its inputs carries: a broadcast)."""
    r = spec.region
    tensors = {b.name: round_to(np.asarray(inputs[b.name]), b.memref.dtype) for b in r.inputs}
    env = {**bind_region_symbols([r], tensors), **dict(env or {})}
    with np.errstate(all="ignore"):  # overflow to inf and nan propagate as in the reference evaluator
        out = _RegionRun(r, tensors, env).run()
    shapes = spec.shapes(env)
    return {name: np.asarray(out[name]).reshape(shapes[name]) for name in spec.outputs}


def reference(spec: SimtSpec, inputs: Mapping[str, Any], env: Mapping[str, int] | None = None) -> np.ndarray:
    """The primary output (``spec.c``) of spec's region on inputs."""
    return references(spec, inputs, env)[spec.c]


def random_inputs(spec: SimtSpec, env: Mapping[str, int] | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs of the region's shapes and dtypes: uniform in [-2, 2), rounded to each dtype (0/1 for
    bool, small integers for i32)."""
    rng = np.random.default_rng(seed)
    out = {}
    for b in spec.region.inputs:
        shape, dt = spec.shapes(env)[b.name], b.memref.dtype
        x = rng.uniform(-2.0, 2.0, size=shape).astype(np.float32)
        out[b.name] = np.asarray(round_to(np.round(x) if not dt.is_float else x, dt)).astype(dt.np)
    return out
