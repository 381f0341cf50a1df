"""What every kernel kind shares, under public names (docs/DESIGN.md §Backend).

In data-flow order: ``spec`` (sizes, dtypes, the elementwise epilogue), ``region_match`` (reading a region;
``NoBind``, the typed "no" of a recogniser), ``epilogue`` (peeling an epilogue off an accumulator),
``score_match`` (the QK^T score part of attention regions), ``plan_search`` (the search result, STOP
conditions, pruning and ranking), ``mma_plan`` / ``mma_search`` (the MMA skeleton's plan, its candidates and
estimate, shared by GEMM and conv), ``gpu_ir`` (statements with async tokens), ``render`` (jinja2 over
``templates/``, the kernel ABI records), ``names``, ``layouts``, ``nvcc`` (compile checks), and the CUDA side:
``kernel_cache``, ``cuda_driver``, ``gpu`` (the visible GPU), ``device_tensors``, ``launch``.
"""
