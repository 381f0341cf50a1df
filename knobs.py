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


# ---- backend: the CUDA toolchain and the kernel caches ---------------------------------------------

def nvcc() -> str | None:
    """POLYSAT_NVCC: the nvcc the backend runs (default: the first nvcc on PATH; None when there is none)."""
    import shutil
    return os.environ.get("POLYSAT_NVCC") or shutil.which("nvcc")


def nvcc_cache_dir() -> str:
    """POLYSAT_NVCC_CACHE: where nvcc compile checks (ptxas reports) are cached (default <tmp>/polysat-nvcc)."""
    import tempfile
    return os.environ.get("POLYSAT_NVCC_CACHE") or os.path.join(tempfile.gettempdir(), "polysat-nvcc")


def kernel_cache_dir() -> str:
    """POLYSAT_KERNEL_CACHE: where compiled cubins are cached by source hash and arch (default ~/.cache/polysat/kernels)."""
    return os.environ.get("POLYSAT_KERNEL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "polysat", "kernels")


def cuda_roots() -> list[str]:
    """CUDA_HOME, then CUDA_PATH: the CUDA toolkits whose include/ NVRTC compiles against (default /usr/local/cuda,
    always tried last)."""
    return [d for d in (os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda") if d]
