"""A view's index map where region synthesis demands it (egraph/region_synth.py): the index of the view's source and
the guards that are not always true, at a demanded index tuple, made once per view, tuple and the bounds of the
tuple's variables (docs/DESIGN.md §RB-SSA)."""
from __future__ import annotations

from functools import lru_cache

from ..analyses.isl_util import always_true, simplify
from ..ir.diagnostics import fail
from ..ir.movement import NonAffine, local_map
from ..ir.tiny import UOp


@lru_cache(maxsize=16384)
def _map(n: UOp, src: UOp):
    """The view's index map (ir/movement.py), or the NonAffine that says why it has none: made once per node."""
    try:
        return local_map(n, src)
    except NonAffine as e:
        return e


def affine(n: UOp, src: UOp) -> bool:
    """Whether the view has an index map."""
    return not isinstance(_map(n, src), NonAffine)


def local_map_of(n: UOp, src: UOp):
    """The view's index map; E NonAffineIndex when it has none."""
    lm = _map(n, src)
    if isinstance(lm, NonAffine):
        fail("NonAffineIndex", n.id, f"{n.op.name} cannot be folded into an index map: {lm}",
             "Materialize the view's source in its own region, or keep reshapes to static strides.")
    return lm


@lru_cache(maxsize=65536)
def through(n: UOp, src: UOp, index: tuple, bounds: tuple) -> tuple:
    """(the index of the view's source, the guards that are not always true) where view ``n`` is read at ``index``,
    its variables within ``bounds``: made once, as a chain of views is met again from each demand above it, in each
    pass and each candidate that holds the kernel (Longformer's windows: 3,713 distinct of 11,448)."""
    lm, box = local_map_of(n, src), dict(bounds)
    env = {f"i{k}": e for k, e in enumerate(index)}
    return (tuple(simplify(e.subs(env), box) for e in lm.exprs),
            tuple(g for g in (simplify(g.subs(env), box) for g in lm.guard) if not always_true(g, box)))
