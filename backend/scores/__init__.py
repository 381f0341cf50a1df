"""The softmax_scores kernel kind: P = softmax(scale * Q K^T, masked) written to device memory, the first region
of the two-region form of attention (P materialised; P V is the second region, a GEMM kernel).

The kernel is the sm80 flash-attention skeleton in its P-store mode: plans always use
``algo_choice.attention = streaming_softmax_2pass``. Its files: spec, bind, plan, render, launch, reference;
it has no gpu_ir of its own: the attention kind's (:mod:`..attention.gpu_ir`) shows the P-store mode.
"""
