"""The conv + epilogue + max-pool kernel kind (compute-at): the pool tile drives the conv tile, the conv's halo
rows are recomputed and its result never reaches device memory.

Its own files: spec (ConvPoolSpec), bind, reference. It has no plan, gpu_ir, render or launch of its own:
those of :mod:`..conv` take a ConvPoolSpec too (one template, the pool as the conv's epilogue stage).
"""
