"""Every e-graph knob: an environment variable with a default, read at use (STYLE.md habit 11)."""
from __future__ import annotations

import os
from dataclasses import dataclass


def _num(name: str, default, cast=int):
    try:
        return cast(os.environ.get(name, default))
    except ValueError:
        return default


@dataclass(frozen=True)
class Limits:
    """Bounds on one saturation, enforced between iterations (egglog has none built in)."""
    nodes: int  # POLYSAT_EGRAPH_NODES: stop (and roll back the last iteration) past this many e-nodes
    iterations: int  # POLYSAT_EGRAPH_ITERS: iterations over all phases together
    seconds: float  # POLYSAT_EGRAPH_SECONDS: wall-clock budget of the whole saturation


def limits(**override) -> Limits:
    base = dict(nodes=_num("POLYSAT_EGRAPH_NODES", 20000), iterations=_num("POLYSAT_EGRAPH_ITERS", 30),
                seconds=_num("POLYSAT_EGRAPH_SECONDS", 20.0, float))
    base.update({k: v for k, v in override.items() if v is not None})
    return Limits(**base)


def check_cases() -> int:
    """POLYSAT_RULE_CASES: programs each rule must fire on in ``polysat rules --check`` (default 3)."""
    return _num("POLYSAT_RULE_CASES", 3)


def check_seed() -> int:
    """POLYSAT_RULE_SEED: seed of the soundness checker's random programs and inputs."""
    return _num("POLYSAT_RULE_SEED", 0)


def load_chunk() -> int:
    """POLYSAT_EGRAPH_CHUNK: loader commands per egglog program (flat loading, probe §4c)."""
    return max(1, _num("POLYSAT_EGRAPH_CHUNK", 200))


def price_symbol_size() -> int:
    """POLYSAT_PRICE_SYMBOL_SIZE: size the `model` cost gives to symbols `--bind` leaves unbound (default 256)."""
    return max(1, _num("POLYSAT_PRICE_SYMBOL_SIZE", 256))


def streaming() -> bool:
    """POLYSAT_STREAMING: 0 keeps `--cost=model` from running rules/streaming.egg (attention's softmax and
    P V stay two kernels, as under `--cost=size`); default 1."""
    return _num("POLYSAT_STREAMING", 1) != 0
