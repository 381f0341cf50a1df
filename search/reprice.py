"""A search's candidates priced kernel by kernel, each distinct kernel once (docs/DESIGN.md §Cost model, "Search").

The candidates of one search differ from each other in a few kernels (a move fuses or cuts one site), so most of a
candidate's kernels were priced in an earlier one. :class:`Repricer` keeps each kernel's price under a key that says
everything that price depends on, and prices with ``pricing.kernels.price_kernels`` only the kernels it has not met:

- the kernel's sub-program in local ids (``analyses/poly_from_view.kernel_program``: its nodes and what building
  its region reads of the rest of the program; the kernel's name is not in it, so a kernel that moved in the
  partition, as every later one does when an earlier kernel merges, is met again);
- the program ids and tensor names those local ids stand for (the kept region names them) and the kernel's inputs;
- the symbols' sizes and the architecture.

Two kinds of kernel are priced on every candidate instead, because their price reads more than the kernel: one with
a node of a streamed softmax-weighted sum (``mark_streams`` marks it by the program's groups), and every kernel of a
program with a 16-bit value (``as_emitted`` asks which kind binds a contraction from the kernel and the writers and
readers of its buffers). The prices are the same either way: the kept ``Priced`` is given the kernel's object and
name again.
"""
from __future__ import annotations

import dataclasses

from ..analyses.poly_from_view import _context, kernel_program
from ..backend.common.spec import IN_DTYPES
from ..egraph.partition import Partition
from ..pricing.kernels import Priced, price_kernels

KEPT = 20000  # kernel prices a repricer keeps; past it they are dropped and priced again when met


class Repricer:
    """The prices of the kernels one search has met (see the module docstring)."""

    def __init__(self, params: dict, arch: str):
        self.params, self.arch = params, arch
        self.bound = tuple(sorted(params.items()))
        self.kept: dict = {}  # kernel key -> its Priced (under the name it was first priced with)

    def __call__(self, prog, part) -> list:
        """``price_kernels(prog, part, params, arch)``, the kernels met before not priced again."""
        if any(n.dtype in IN_DTYPES for n in prog.nodes):
            return price_kernels(prog, part, self.params, self.arch)
        ctx = _context(prog, None)
        keys = [self._key(ctx, prog, k) for k in part.kernels]
        new = [k for k, key in zip(part.kernels, keys, strict=True) if key is None or key not in self.kept]
        fresh = {p.kernel.name: p for p in price_kernels(prog, Partition(tuple(new)), self.params, self.arch,
                                                                by_kernel=True)} \
            if new else {}
        if len(self.kept) > KEPT:
            self.kept.clear()
        out = []
        for k, key in zip(part.kernels, keys, strict=True):
            p = fresh.get(k.name)
            if p is None:
                p = _renamed(self.kept[key], k)
            elif key is not None:
                self.kept[key] = p
            out.append(p)
        return out

    def _key(self, ctx, prog, k) -> "tuple | None":
        """What kernel k's price depends on (see the module docstring); None: priced on every candidate."""
        if any(prog[i].tag is not None for i in k.nodes):
            return None
        sub, _, real = kernel_program(ctx, k)
        return (sub, tuple((local, i, ctx.names[i]) for local, i in real.items()), k.inputs, self.bound, self.arch)


def _renamed(p: Priced, k) -> Priced:
    """The kept price as kernel k's: its object and name."""
    if p.kernel.name == k.name:
        return Priced(k, p.region, p.cost)
    region = None if p.region is None else dataclasses.replace(p.region, name=k.name)
    return Priced(k, region, None if p.cost is None else dataclasses.replace(p.cost, region=k.name))
