"""Benchmarks (``python -m polysat.bench.<name>``): compile time, the fusion search beside tinygrad's
scheduler, pricing, the rule checker, and on a GPU the kernels against cuBLAS, cuDNN, SDPA and torch."""
