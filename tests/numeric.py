"""Random inputs and output comparison for the e-graph tests (rtol = atol = 1e-3, docs/DESIGN.md
§Verification); the soundness checker draws and compares its own (``checker/numerics.py``)."""
from __future__ import annotations

import numpy as np

from polysat.ir.dtypes import DType
from polysat.ir.evaluate import evaluate
from polysat.ir.shapes import bind
from polysat.ir.tiny import Program

RTOL = ATOL = 1e-3


def bind_env(program: Program, rng: np.random.Generator, lo: int = 2, hi: int = 5) -> dict:
    """A small random size for every symbol of the program's inputs (plain symbols only)."""
    env: dict = {}
    for s in sorted(program.symbols()):
        env[s] = int(rng.integers(lo, hi + 1))
    return env


def random_inputs(program: Program, rng: np.random.Generator, env: dict) -> dict:
    out = {}
    for n in program.inputs:
        shape = bind(n.shape, env)
        if n.dtype == DType.bool:
            out[n.arg["tensor_id"]] = rng.random(shape) < 0.5
        elif n.dtype == DType.i32:
            out[n.arg["tensor_id"]] = rng.integers(-4, 5, shape).astype(np.int32)
        else:
            out[n.arg["tensor_id"]] = rng.uniform(-1.0, 1.0, shape).astype(np.float32)
    return out


def close(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype == np.bool_ or b.dtype == np.bool_:
        return bool(np.array_equal(a, b))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return bool(np.allclose(a64, b64, rtol=RTOL, atol=ATOL, equal_nan=True))


def max_error(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = np.asarray(a).astype(np.float64), np.asarray(b).astype(np.float64)
    with np.errstate(all="ignore"):
        d = np.abs(a64 - b64)
        d[np.isnan(a64) & np.isnan(b64)] = 0
        d[(a64 == b64)] = 0
    return float(np.nanmax(d)) if d.size else 0.0


def same_outputs(p: Program, q: Program, inputs: dict, env: dict | None = None) -> tuple:
    """(ok, name of the first differing output or None, its max abs error)."""
    ra, rb = evaluate(p, inputs), evaluate(q, inputs)
    for name in ra:
        if not close(ra[name], rb[name]):
            return False, name, max_error(ra[name], rb[name])
    return True, None, 0.0


def partition_plays_back(c, seed: int) -> bool:
    """Whether the kernels of compilation ``c``'s extracted partition, played back on random inputs, equal the
    reference evaluator of the program it compiled."""
    from polysat.egraph.region_synth import synthesize
    from polysat.ir.playback import playback
    x, p = c.extraction, c.program
    rng = np.random.default_rng(seed)
    inputs = random_inputs(p, rng, bind_env(p, rng))
    ref, got = evaluate(p, inputs), playback(synthesize(x.program, x.partition), inputs)
    return ref.keys() == got.keys() and all(close(ref[k], got[k]) for k in ref)
