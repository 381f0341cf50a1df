"""Kernels priced as emitted (docs/DESIGN.md §Cost model): the symbols bound to sizes (``symbols.py``) and
a partition's kernels as Poly Core regions priced on the unit the bound kernel kind uses (``kernels.py``).
Above egraph/ (the RB-SSA synthesis) and backend/ (the kinds' binders), below the search, the pipeline,
the runtime, the pictures and ``--explain``, which all price with it.
"""
