"""Backend: extracted RB-SSA regions -> Schedule Plan -> GPU IR -> CUDA text, and the CUDA runtime
(docs/DESIGN.md §Backend).

Layout, in data-flow order:
  ``kinds``     the kernel-kind table: which template family computes a region (``kinds.bind``);
  ``stages``    the pipeline's backend stages: ``plan_json`` / ``gpu_json`` / ``write_cu`` / ``run_cuda``;
  ``common/``   what every kind shares: spec base, region matching, epilogue peeling, plan search, the MMA
                skeleton's plan space, GPU IR, rendering (jinja2 over ``templates/``), names, layouts, nvcc
                checks, the kernel cache, the CUDA driver, device tensors and launches;
  ``gemm/``, ``attention/``, ``scores/``, ``conv/``, ``conv_pool/``: one package per kind, with the same
                files: ``spec``, ``bind``, ``plan``, ``gpu_ir``, ``render``, ``launch``, ``reference`` and
                ``kind`` (its table entry); a kind without one of them says so in its ``__init__``.
Nothing here needs a GPU except ``launch``, which imports cuda-python lazily.
"""
