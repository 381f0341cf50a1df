"""The SIMT kernel kind: every region without a tensor-core contraction (elementwise chains, casts,
broadcasts, row reductions on any axis, pooling windows, small or skinny contractions, gathers by run-time
indices) as one kernel generated from its RB-SSA ops.

Its files: spec (the region seen as rows), bind, plan (plan, its search and roofline), access (the passes
and their global accesses, which plan and render both read), emit (RB-SSA ops -> C), render, gpu_ir,
launch, reference; kind registers it in the kernel-kind table.
"""
