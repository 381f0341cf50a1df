"""Every knob of polysat in one place: environment variables, each read at use by one function here that
states its default and meaning (docs/knobs.md lists them all in one table). A malformed value, and one out
of the knob's range (nan, inf, a negative count or duration, a zero size), falls back to the default with a
warning on stderr."""
from __future__ import annotations

import math
import os
import sys

_WARNED: set = set()


def _num(name: str, default, cast=int, lo=None):
    """The variable as a number >= lo (when given), finite; anything else is the default, with a warning."""
    text = os.environ.get(name)
    if text is None or not text.strip():
        return default
    try:
        v = cast(text)
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError("not a finite number")
        if lo is not None and v < lo:
            raise ValueError(f"below {lo}")
    except (ValueError, OverflowError, TypeError) as e:
        if (name, text) not in _WARNED:
            _WARNED.add((name, text))
            print(f"polysat: warning: {name}={text!r} is ignored ({e}); using the default {default}", file=sys.stderr)
        return default
    return v


# The cost model every verb and the Python API extract under unless told otherwise (a fixed default, not an
# environment knob): `model`, the searched partition priced on the device table (docs/DESIGN.md §Cost model);
# `--cost size` keeps the smallest-term extraction.
DEFAULT_COST = "model"


# ---- the command and the evaluators -------------------------------------------------------------------

def debug() -> int:
    """POLYSAT_DEBUG=1: show Python tracebacks of internal errors (never for diagnostics); default 0."""
    return _num("POLYSAT_DEBUG", 0)


def demo_symbol_size() -> int:
    """POLYSAT_SYMBOL_SIZE: size given to unbound symbols by `polysat demo`'s random inputs (default 37,
    odd, to exercise tails)."""
    return _num("POLYSAT_SYMBOL_SIZE", 37, lo=1)


def seed() -> int:
    """POLYSAT_SEED: seed of the random inputs `polysat demo` draws (default 0)."""
    return _num("POLYSAT_SEED", 0, lo=0)


def eval_max_elements() -> int:
    """POLYSAT_EVAL_MAX_ELEMENTS: largest tensor the numpy evaluators (reference, playback), import-time folding and
    npz inputs materialise, intermediates included (default 2**27: 512 MiB of fp32, a few GiB with temporaries); a
    reduction whose product is larger is summed in blocks of output positions that fit."""
    return _num("POLYSAT_EVAL_MAX_ELEMENTS", 2 ** 27, lo=1)


def eval_contract_elements() -> int:
    """POLYSAT_EVAL_CONTRACT_ELEMENTS: a sum of fp32 products with more products than this (a convolution, a
    MatMul) is evaluated by the numpy evaluators as one BLAS contraction, in BLAS's summation order, not as the
    product tensor summed (default 2**20; smaller ones keep numpy's order, which the rule checker's node-by-node
    values equal bit for bit)."""
    return _num("POLYSAT_EVAL_CONTRACT_ELEMENTS", 2 ** 20, lo=0)


# ---- analyses ----------------------------------------------------------------------------------------

def max_pieces() -> int:
    """POLYSAT_MAX_PIECES: most guarded (piecewise) pieces a read may carry before W2101 ExcessivePiecewise
    (default 8)."""
    return _num("POLYSAT_MAX_PIECES", 8, lo=1)


def stage_seconds() -> float:
    """POLYSAT_STAGE_SECONDS: wall-clock bound of each stage after the search (pricing, regions, Poly Core
    analysis, plans, GPU IR, .cu rendering) in seconds (default 600); past it, E1505 ResourceLimit."""
    return _num("POLYSAT_STAGE_SECONDS", 600.0, float, lo=0)


# ---- the e-graph -------------------------------------------------------------------------------------

def egraph_nodes() -> int:
    """POLYSAT_EGRAPH_NODES: a saturation stops (rolling the last iteration back) past this many e-nodes
    (default 20000)."""
    return _num("POLYSAT_EGRAPH_NODES", 20000, lo=1)


def egraph_iters() -> int:
    """POLYSAT_EGRAPH_ITERS: iterations of one saturation, over all its phases together (default 60)."""
    return _num("POLYSAT_EGRAPH_ITERS", 60, lo=0)


def egraph_seconds() -> float:
    """POLYSAT_EGRAPH_SECONDS: CPU-second budget of one saturation; one egglog call still running at twice it
    (at least 1 s) and 2 s more ends a CLI command with E1505 (egraph/watchdog.py) (default 20)."""
    return _num("POLYSAT_EGRAPH_SECONDS", 20.0, float, lo=0)


def egraph_rows() -> int:
    """POLYSAT_EGRAPH_ROWS: a saturation stops (rolling the last iteration back) past this many rows of all its
    tables (e-nodes, relation and function rows, analysis facts) (default 1000000)."""
    return _num("POLYSAT_EGRAPH_ROWS", 1_000_000, lo=1)


def egraph_memory_mb() -> int:
    """POLYSAT_EGRAPH_MEMORY_MB: a saturation stops (rolling the last iteration back) when the process's resident
    memory has grown by this many MiB since it began; one egglog call crossing it ends a CLI command with E1505
    (egraph/watchdog.py) (default 4096)."""
    return _num("POLYSAT_EGRAPH_MEMORY_MB", 4096, lo=1)


def search_prices() -> int:
    """POLYSAT_SEARCH_PRICES: groups the ``--cost model`` merge search may price once it holds a first
    complete partition (default 16); a large value lets it run to ``exhausted`` (the optimum of its space)."""
    return _num("POLYSAT_SEARCH_PRICES", 16, lambda v: int(float(v)), lo=0)


def search_seconds() -> float:
    """POLYSAT_SEARCH_SECONDS: CPU seconds of one merge search, checked once it holds a first complete
    partition (default 2); with POLYSAT_SEARCH_PRICES set high, a large value lets it run to ``exhausted``."""
    return _num("POLYSAT_SEARCH_SECONDS", 2.0, float, lo=0)


def search_total_seconds() -> float:
    """POLYSAT_SEARCH_TOTAL_SECONDS: CPU seconds of the whole ``--cost model`` search of one program (one
    distinct segment), its merge search, polish and descent together (default 30); past it the polish and
    the descent stop with the best complete partition priced, and the stop reason says so. A third of it bounds the
    merge search's finding a first complete partition (search/merge.py SearchLimits.first)."""
    return _num("POLYSAT_SEARCH_TOTAL_SECONDS", 30.0, float, lo=0)


def load_chunk() -> int:
    """POLYSAT_EGRAPH_CHUNK: loader actions per rule when a model is loaded into the e-graph (flat loading,
    egraph/state.py load_program; default 16)."""
    return max(1, _num("POLYSAT_EGRAPH_CHUNK", 16, lo=1))


def check_cases() -> int:
    """POLYSAT_RULE_CASES: programs each rule must fire on in ``polysat rules --check`` (default 3)."""
    return _num("POLYSAT_RULE_CASES", 3, lo=0)


def check_seed() -> int:
    """POLYSAT_RULE_SEED: seed of the soundness checker's random programs and inputs (default 0)."""
    return _num("POLYSAT_RULE_SEED", 0, lo=0)


# ---- the cost model and the fusion search ------------------------------------------------------------

def price_symbol_size() -> int:
    """POLYSAT_PRICE_SYMBOL_SIZE: size the cost model and Poly Core's report (--dump=analysis) give to
    symbols `--bind` leaves unbound (default 256)."""
    return max(1, _num("POLYSAT_PRICE_SYMBOL_SIZE", 256, lo=1))


def segment_live(set_to: "int | None" = None) -> int:
    """POLYSAT_SEGMENT_LIVE: the most values live at a cut of the second segmenting pass, which cuts the parts that
    runs of identical blocks leave into runs of blocks of one structure where some boundary of the run holds two
    or more live values (a U-Net's levels, with its stream and skip tensors live: 8 takes up to 7 levels); only at
    cuts whose every live value a contraction reads by broadcast (search/segment.py). By default 0, no second pass: on
    U-Nets of 4 and 6 levels 8 gives the whole program's kernels and price in less memory but more CPU (1.2-1.3x;
    docs/DESIGN.md, Segments). ``set_to``: set it for the rest of this process first (a bench point's fresh
    process)."""
    if set_to is not None:
        os.environ["POLYSAT_SEGMENT_LIVE"] = str(set_to)
    return _num("POLYSAT_SEGMENT_LIVE", 0, lo=0)


def streaming() -> bool:
    """POLYSAT_STREAMING: 0 keeps `--cost=model` from running rules/streaming.egg (attention's softmax and
    P V stay two kernels, as under `--cost=size`); default 1."""
    return _num("POLYSAT_STREAMING", 1) != 0


def progress() -> "bool | None":
    """POLYSAT_PROGRESS: 1 shows a compile's stages and progress on stderr, 0 never; unset (the default): shown
    when stderr is a terminal and the command was not asked for --json."""
    text = os.environ.get("POLYSAT_PROGRESS")
    if text is None or not text.strip():
        return None
    return _num("POLYSAT_PROGRESS", 0, lo=0) != 0


# ---- pictures -----------------------------------------------------------------------------------------

def viz_max_classes() -> int:
    """POLYSAT_VIZ_MAX_CLASSES: most e-classes `--dump=egraph_svg` draws, nearest the outputs first
    (default 400; the picture's title says when it is cut)."""
    return max(1, _num("POLYSAT_VIZ_MAX_CLASSES", 400, lo=1))


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


def model_cache_dir() -> str:
    """POLYSAT_MODEL_CACHE: cache of compiled models for `run --target cuda` (regions, memory plans, cubins),
    keyed by model, input shapes, arch, options and polysat's source (default ~/.cache/polysat/models)."""
    return os.environ.get("POLYSAT_MODEL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "polysat", "models")


def measure_log() -> str | None:
    """POLYSAT_MEASURE_LOG: the CSV every `run --target cuda` and GPU bench appends a row per kernel to;
    ``off`` writes none (default ~/.cache/polysat/measurements.csv)."""
    v = os.environ.get("POLYSAT_MEASURE_LOG") or os.path.join(os.path.expanduser("~"), ".cache", "polysat",
                                                               "measurements.csv")
    return None if v.strip().lower() == "off" else v


def default_measure_log(path: str) -> None:
    """POLYSAT_MEASURE_LOG for this process and its children: path, unless the variable already names one
    (that stays the default); the GPU check writes its run's measurements beside its report."""
    if not os.environ.get("POLYSAT_MEASURE_LOG"):
        os.environ["POLYSAT_MEASURE_LOG"] = path
