"""The GEMM kernel kind: a contraction ``C[*batch, m, n] = epilogue(sum_k A B)`` with an elementwise epilogue,
on the MMA skeleton (templates/polysat_gemm.cuh).

spec (GemmSpec) -> bind (Region -> GemmBinding | NoBind) -> plan (search over the MMA tiles of
:mod:`..common.mma_search`) -> gpu_ir -> render (CUDA text) -> launch (run, prepare); reference: the numpy meaning.
"""
