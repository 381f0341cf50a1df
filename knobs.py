"""Every knob of polysat in one place: environment variables with defaults (read at use)."""
from __future__ import annotations

import os


def _int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def debug() -> int:
    """POLYSAT_DEBUG=1: show Python tracebacks of internal errors (never for diagnostics)."""
    return _int("POLYSAT_DEBUG", 0)


def default_symbol_size() -> int:
    """POLYSAT_SYMBOL_SIZE: size given to unbound symbols by `polysat demo` (odd, to exercise tails)."""
    return _int("POLYSAT_SYMBOL_SIZE", 37)


def seed() -> int:
    """POLYSAT_SEED: seed of the random inputs `polysat demo` draws."""
    return _int("POLYSAT_SEED", 0)


def eval_max_elements() -> int:
    """POLYSAT_EVAL_MAX_ELEMENTS: largest tensor the numpy evaluators materialise (default 2**31)."""
    return _int("POLYSAT_EVAL_MAX_ELEMENTS", 2 ** 31)


def max_pieces() -> int:
    """POLYSAT_MAX_PIECES: most guarded (piecewise) pieces a read may carry before W2101 ExcessivePiecewise."""
    return _int("POLYSAT_MAX_PIECES", 8)
