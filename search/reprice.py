"""A search's candidates priced kernel by kernel, each distinct kernel once (docs/DESIGN.md §Cost model, "Search").

The candidates of one search differ from each other in a few kernels (a move fuses or cuts one site), so most of a
candidate's kernels were priced in an earlier one. :class:`Repricer` keeps each kernel's price under a key that says
everything that price depends on, and prices with ``pricing.kernels.price_kernels`` only the kernels it has not met:

- the kernel's sub-program in local ids (``analyses/poly_from_view.kernel_program``: its nodes and what building
  its region reads of the rest of the program; the kernel's name is not in it, so a kernel that moved in the
  partition, as every later one does when an earlier kernel merges, is met again);
- the program ids and tensor names those local ids stand for (the kept region names them) and the kernel's inputs;
- the symbols' sizes and the architecture.

A kernel with a contraction is priced as the kind that binds it, which ``as_emitted`` asks of the kernel and the
writers and readers of its buffers (the MMA kinds take fp16, bf16 and, the GEMM kind, fp32 operands, 3xTF32 or the
FP32 pipes by price): its key holds what those neighbour kernels are too (their sub-programs, as above, streamed
or not), and it is priced within the whole candidate (``price_kernels(context=)``). A kernel with a node of a
streamed softmax-weighted sum is priced on every candidate (``mark_streams`` marks it by the program's groups). The
prices are the same either way: the kept ``Priced`` is given the kernel's object and name again.

A caller that needs a candidate only below a price (the descent's first improvement) passes it: pricing stops, as
``price_kernels(above=)`` does, once the kernels kept and priced and the floors of the rest add up to more.
"""
from __future__ import annotations

import dataclasses
import math
from functools import lru_cache

from ..analyses.poly_from_view import kernel_program, program_context
from ..egraph.partition import Partition
from ..ir.tiny import Ops
from ..pricing.kernels import Priced, price_kernels

KEPT = 20000  # kernel prices a repricer keeps; past it they are dropped and priced again when met


class Repricer:
    """The prices of the kernels one search has met (see the module docstring)."""

    def __init__(self, params: dict, arch: str):
        self.params, self.arch = params, arch
        self.bound = tuple(sorted(params.items()))
        self.kept: dict = {}  # kernel key -> {kernel name: its (region, cost) so named}
        self.keys: dict = {}  # (nodes, outputs, inputs) -> (what its key read of the program, the key)

    def __call__(self, prog, part, above: float = math.inf, priced: "list | None" = None) -> "list | None":
        """``price_kernels(prog, part, params, arch)``, the kernels met before not priced again; None (as
        ``price_kernels``) once the kernels' prices, and the floors of those not priced yet, add up to more than
        ``above`` by more than a rounding (so their total, summed in any order, is above it too). ``priced``: what
        ``price_kernels`` gave for it, kept as met and returned."""
        above = above * (1 + 1e-9) + 1e-9 if above < math.inf else above
        if len(self.kept) > KEPT:
            self.kept.clear()
            self.keys.clear()
        ctx = program_context(prog, None)
        contents = [self._content(ctx, prog, k) for k in part.kernels]
        keys = [None if any(prog[i].tag is not None for i in k.nodes) else c for k, c in zip(part.kernels, contents)]
        if _contracts(prog):
            keys = _with_neighbours(prog, part, keys, contents)
        new = [k for k, key in zip(part.kernels, keys, strict=True) if key is None or key not in self.kept]
        known = sum(self._kept_us(key) for key in keys if key is not None and key in self.kept)
        # the new kernels on the whole program's Poly-View (each from its own sub-program is slower where many are new)
        if priced is not None:
            got = priced
        else:
            got = price_kernels(prog, Partition(tuple(new)), self.params, self.arch, above=above - known,
                                context=part) if new else []
        if got is None:
            return None
        fresh = {p.kernel.name: p for p in got}
        out = []
        for k, key in zip(part.kernels, keys, strict=True):
            p = fresh.get(k.name)
            if p is None:
                named = self.kept[key]
                if k.name not in named:
                    named[k.name] = _renamed(*next(iter(named.values())), k.name)
                p = Priced(k, *named[k.name])
            elif key is not None:
                self.kept[key] = {k.name: (p.region, p.cost)}
            out.append(p)
        return out

    def _kept_us(self, key) -> float:
        """The modelled µs of the kernel kept under key (a copy of memory kept without a cost: 0)."""
        _, cost = next(iter(self.kept[key].values()))
        return cost.time_est_us if cost is not None else 0.0

    def _content(self, ctx, prog, k) -> tuple:
        """What kernel k is (see the module docstring): its price's key unless a node of it is streamed. The key of
        a kernel with the same node ids met before is kept with what it read of that program (each node's object,
        consumers, place, tensor name and whether it is an output), and is k's when all of it is unchanged here."""
        ids = (k.nodes, k.outputs, k.inputs)
        got = self.keys.get(ids)
        if got is not None and got[1][0][2] == ctx.symbols and _unchanged(got[0], prog, ctx):
            return got[1]
        sub, _, real = kernel_program(ctx, k)
        key = (sub, tuple((local, i, ctx.names[i]) for local, i in real.items()), k.inputs, self.bound, self.arch)
        extra = tuple(dict.fromkeys(c for i in k.nodes if prog[i].op == Ops.MUL for c in ctx.consumers[i]))
        self.keys[ids] = ((tuple(_read(prog, ctx, i) for i in real.values()), tuple(_read(prog, ctx, c) for c in extra)),
                          key)
        return key


@lru_cache(maxsize=64)
def _contracts(prog) -> bool:
    """Whether the program has a contraction (a CONTRACT, or a SUM of a product), whose kind ``as_emitted`` asks."""
    return any(_contraction(prog, n.id) for n in prog.nodes)


def _with_neighbours(prog, part, keys: list, contents: list) -> list:
    """The keys of a program with a contraction: a kernel with a contraction keyed with what the kernels are that
    write or read a value it reads or writes (as ``pricing.kernels._neighbours`` finds them)."""
    by_value: dict = {}
    for j, k in enumerate(part.kernels):
        for v in (*k.inputs, *k.outputs):
            by_value.setdefault(v, set()).add(j)
    out = []
    for k, key in zip(part.kernels, keys, strict=True):
        if key is not None and any(_contraction(prog, i) for i in k.nodes):
            near = {j for v in (*k.inputs, *k.outputs) for j in by_value[v]}
            key = (key, frozenset(contents[j] for j in near))
        out.append(key)
    return out


def _contraction(prog, i: str) -> bool:
    n = prog[i]
    return n.op == Ops.CONTRACT or n.op == Ops.REDUCE and prog[n.src[0]].op == Ops.MUL


def _read(prog, ctx, i: str) -> tuple:
    """What a kernel's sub-program reads of node i: its object, consumers, tensor name, whether it is an output."""
    return i, prog[i], tuple(ctx.consumers[i]), ctx.names[i], i in ctx.outputs


def _unchanged(read: tuple, prog, ctx) -> bool:
    """Whether every node ``_read`` read (the sub-program's, in their order, then the consumers of its MULs) reads
    the same here, the sub-program's in the same order (so under the same local ids)."""
    nodes, extra = read
    last = -1
    for i, node, cons, name, out in nodes + extra:
        if ctx.position.get(i) is None or prog[i] is not node or tuple(ctx.consumers[i]) != cons or \
                ctx.names[i] != name or (i in ctx.outputs) != out:
            return False
    for i, *_ in nodes:
        if ctx.position[i] <= last:
            return False
        last = ctx.position[i]
    return True


def _renamed(region, cost, name: str) -> tuple:
    """A kept (region, cost) as the kernel so named has them."""
    return (None if region is None else dataclasses.replace(region, name=name),
            None if cost is None else dataclasses.replace(cost, region=name))
