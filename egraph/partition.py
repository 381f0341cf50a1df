"""The kernel partition that extraction hands to region synthesis (docs/DESIGN.md §RB-SSA,
synthesis step 8).

Extraction (``egraph.extract``) returns the rewritten Tiny IR :class:`~polysat.ir.tiny.Program` and a
:class:`Partition` of that program's nodes into kernels: one :class:`Kernel` per RB-SSA region
(one region = one kernel). The partition comes from the kernel-boundary terms (``Mat``) that the
extracted term contains, so a cost model that prices boundaries chooses it.

Contract (checked by :meth:`Partition.check`):

* ``Kernel.nodes`` are ids of the rewritten program that the kernel evaluates; INPUT nodes are never
  listed (they are memory, read through ``Kernel.inputs``).
* Every compute node (elementwise, CAST, REDUCE, CONTRACT) belongs to exactly one kernel.
  CONST and movement nodes (views: RESHAPE, PERMUTE, EXPAND, PAD, SHRINK, FLIP, VIEW) cost nothing
  and may be listed in several kernels (each kernel re-derives the view / constant it needs).
* ``Kernel.outputs`` are the nodes the kernel materializes (writes to global memory), in the order
  the kernel yields them; every program output node is materialized by some kernel, unless it is a
  program INPUT or a pure view/CONST of inputs (then it appears in a kernel of its own).
* ``Kernel.inputs`` are the ids a kernel reads from memory: program INPUT nodes and nodes
  materialized by earlier kernels. ``kernels`` are in dependency order.
* A node of kernel k that is also used by kernel j != k is one of k's outputs and one of j's inputs
  (values cross kernels only through memory), except CONST/movement nodes, which are recomputed.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.diagnostics import fail
from ..ir.tiny import GroupOp, Ops, Program

FREE_OPS = GroupOp.Movement | {Ops.CONST}  # views and constants: recomputed by every kernel that uses them


@dataclass(frozen=True)
class Kernel:
    name: str
    nodes: frozenset  # node ids evaluated by this kernel (no INPUT nodes)
    outputs: tuple  # node ids materialized (written to gmem), yield order
    inputs: tuple  # node ids read from memory: program INPUTs and earlier kernels' outputs


@dataclass(frozen=True)
class Partition:
    kernels: tuple  # Kernel, in dependency order

    @property
    def materialized(self) -> frozenset:
        """Every node id some kernel writes to memory."""
        return frozenset(o for k in self.kernels for o in k.outputs)

    def kernel_of(self, node_id: str) -> "Kernel | None":
        """The kernel that computes node_id (the first one, for a free node listed in several)."""
        for k in self.kernels:
            if node_id in k.nodes:
                return k
        return None

    def to_json(self) -> dict:
        return {"kernels": [{"name": k.name, "nodes": sorted(k.nodes), "outputs": list(k.outputs),
                             "inputs": list(k.inputs)} for k in self.kernels]}

    def check(self, program: Program) -> None:
        """Raise E1999 InternalError when the partition breaks the contract above for program."""
        owner: dict = {}
        for k in self.kernels:
            for nid in k.nodes:
                if nid not in program:
                    _bad(k, f"lists node {nid!r}, which the program does not define")
                n = program[nid]
                if n.op == Ops.INPUT:
                    _bad(k, f"lists INPUT node {nid!r}")
                if n.op not in FREE_OPS:
                    if nid in owner:
                        _bad(k, f"computes {nid!r}, already computed by kernel {owner[nid]!r}")
                    owner[nid] = k.name
            for o in k.outputs:
                if o not in k.nodes:
                    _bad(k, f"materializes {o!r} without computing it")
        done: set = {n.id for n in program.inputs}
        for k in self.kernels:
            for i in k.inputs:
                if i not in done:
                    _bad(k, f"reads {i!r} before any kernel materializes it")
            for nid in k.nodes:
                for s in program[nid].src:
                    if s in k.nodes or program[s].op in FREE_OPS and _free_cone_ok(program, s, k, done):
                        continue
                    if s not in done or s not in k.inputs:
                        _bad(k, f"node {nid!r} uses {s!r}, which is neither in the kernel nor one of its inputs")
            done |= set(k.outputs)
        for name, nid in program.outputs:
            if program[nid].op != Ops.INPUT and nid not in done:
                fail("InternalError", "partition", f"program output {name!r} ({nid}) is never materialized")
        missing = [n.id for n in program.nodes if n.op not in FREE_OPS | {Ops.INPUT} and n.id not in owner]
        if missing:
            fail("InternalError", "partition", f"compute nodes in no kernel: {', '.join(missing[:8])}")


def _free_cone_ok(program: Program, nid: str, k: Kernel, done: set) -> bool:
    """A free node outside k's list is fine if it only views memory k reads (or other free nodes). (A walk with
    its own stack: a chain of views is as long as the model makes it.)"""
    stack, seen = [nid], {nid}
    while stack:
        n = program[stack.pop()]
        if n.op == Ops.CONST:
            continue
        for s in n.src:
            if (s in done and s in k.inputs) or s in k.nodes or s in seen:
                continue
            if program[s].op not in FREE_OPS:
                return False
            seen.add(s)
            stack.append(s)
    return True


def free_cone(program: Program, k: Kernel) -> frozenset:
    """The free nodes (views, constants) outside k's list that k's nodes read, and those they read in turn, down
    to memory k reads: what k computes besides its own nodes."""
    stack = [s for i in k.nodes for s in program[i].src if s not in k.nodes and s not in k.inputs]
    seen: set = set()
    while stack:
        s = stack.pop()
        if s in seen or s in k.nodes or s in k.inputs or program[s].op not in FREE_OPS:
            continue
        seen.add(s)
        stack.extend(program[s].src)
    return frozenset(seen)


def _bad(k: Kernel, why: str):
    fail("InternalError", f"partition kernel {k.name}", why)
