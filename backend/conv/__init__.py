"""The implicit-GEMM conv kernel kind: a Conv2D region (SUM over (c, r, s) of a guarded X read times W) with an
elementwise epilogue, on the MMA skeleton with the im2col producer (templates/polysat_conv.cuh).

spec (ConvSpec) -> bind -> plan (the MMA tile space, pruned and priced for the conv) -> gpu_ir -> render ->
launch; reference: the numpy meaning (im2col then the GEMM reference). The conv + max-pool kind
(:mod:`..conv_pool`) shares this kind's plan, GPU IR, renderer and launcher.

A conv is a per-group GEMM, and says so explicitly: its spec checks its epilogue as a ``gemm.spec.GemmSpec``
(``ConvSpec.as_gemm``), its plans tile that GEMM with the MMA skeleton's candidates of :mod:`..common.mma_search`,
and its reference runs ``gemm.reference.reference`` on the im2col matrix.
"""
