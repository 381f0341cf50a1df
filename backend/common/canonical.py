"""A region in canonical names, so identical kernels are bound, planned and rendered once (docs/DESIGN.md
§Backend, "Identical kernels").

Two regions that differ only in the names of their tensors, their lets and themselves (a model's repeated
layer) are the same kernel. :func:`canonical` renames a region positionally — the region ``R0``, its inputs
then its outputs ``T0``, ``T1`` ..., its lets ``L0``, ``L1`` ... in SSA order — so that such regions are
equal values and one cache entry serves them all. Axes and size symbols keep their names (they are the
kernel's structure and its run-time parameters). :class:`Names` keeps the canonical name -> the user's name
outside the cached value: the runtime binds the user's buffers through it, and diagnostics and dumps are
told in the user's names again (:meth:`Names.told`).
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any, Mapping

from ...ir.diagnostics import Diagnostic, PolysatError
from ...ir.region import R, Region, RNode, walk

@dataclass(frozen=True)
class Names:
    """Canonical name -> the user's name, for one region: its own name, its tensors (inputs then outputs) and
    its lets, each as ((canonical, user), ...) in canonical order."""
    region: tuple
    tensors: tuple
    lets: tuple

    @cached_property
    def to_user(self) -> dict:
        return {c: u for c, u in (self.region, *self.tensors, *self.lets) if c != u}

    def user(self, name: str) -> str:
        """The user's name of a canonical name (any other name unchanged)."""
        return self.to_user.get(name, name)

    def told(self, text: str) -> str:
        """text with every canonical name (a whole word) replaced by the user's."""
        ren = self.to_user
        return _word(tuple(ren)).sub(lambda m: ren[m.group(0)], text) if ren else text

    def told_json(self, doc: Any) -> Any:
        """A JSON document with every string that is a canonical name replaced by the user's name."""
        ren = self.to_user
        if isinstance(doc, str):
            return ren.get(doc, doc)
        if isinstance(doc, dict):
            return {k: self.told_json(v) for k, v in doc.items()}
        if isinstance(doc, (list, tuple)):
            return [self.told_json(v) for v in doc]
        return doc

    def told_error(self, e: PolysatError) -> PolysatError:
        return PolysatError([self.told_diagnostic(d) for d in e.diagnostics])

    def told_diagnostic(self, d: Diagnostic) -> Diagnostic:
        return dataclasses.replace(d, at=self.told(d.at), why=self.told(d.why), suggestion=self.told(d.suggestion))


@lru_cache(maxsize=4096)
def _word(names: tuple) -> re.Pattern:
    alts = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    return re.compile(rf"(?<![A-Za-z0-9_])(?:{alts})(?![A-Za-z0-9_])")


def _taken(region: Region) -> set:
    """The names a canonical name must not take: axes and size symbols."""
    out = {a for a, _ in (*region.iters, *region.reduce_axes)}
    for b in (*region.inputs, *region.outputs):
        out.update(str(d) for d in b.memref.shape if not isinstance(d, int))
    for _, d in (*region.iters, *region.reduce_axes):
        if not isinstance(d, int):
            out.add(str(d))
    return out


def _fresh(stem: str, k: int, taken: set) -> str:
    name = f"{stem}{k}"
    while name in taken:
        name += "_"
    return name


def canonical(region: Region) -> tuple[Region, Names]:
    """The region in canonical names and the way back to the user's (see the module docstring)."""
    taken = _taken(region)
    ren: dict = {}
    for b in (*region.inputs, *region.outputs):
        ren.setdefault(b.name, _fresh("T", len(ren), taken))
    lets: dict = {}
    for let in region.lets:
        lets[let.name] = _fresh("L", len(lets), taken | set(ren.values()))
    region_name = _fresh("R", 0, taken | set(ren.values()) | set(lets.values()))
    new: dict = {}  # id(node) -> its renamed node (subtrees shared across lets stay shared)
    out_lets = []
    for let in region.lets:
        for n in walk(let.expr):
            if id(n) not in new:
                new[id(n)] = _renamed(n, tuple(new[id(s)] for s in n.src), ren, lets)
        out_lets.append(dataclasses.replace(let, name=lets[let.name], expr=new[id(let.expr)]))
    c = dataclasses.replace(
        region, name=region_name,
        inputs=tuple(dataclasses.replace(b, name=ren[b.name]) for b in region.inputs),
        outputs=tuple(dataclasses.replace(b, name=ren[b.name]) for b in region.outputs),
        lets=tuple(out_lets),
        yields=tuple(dataclasses.replace(y, src=lets.get(y.src, y.src), dst=ren.get(y.dst, y.dst)) for y in region.yields))
    return c, Names((region_name, region.name), tuple((v, k) for k, v in ren.items()),
                    tuple((v, k) for k, v in lets.items()))


def _renamed(n: RNode, src: tuple, ren: Mapping[str, str], lets: Mapping[str, str]) -> RNode:
    arg = n.arg
    if n.op == R.READ:
        arg = (ren.get(arg[0], arg[0]), *arg[1:])
    elif n.op == R.GATHER:
        arg = (ren.get(arg[0], arg[0]), *arg[1:])
    elif n.op == R.REF:
        arg = lets.get(arg, arg)
    if arg is n.arg and src == n.src:
        return n
    return RNode(n.op, src, arg, n.dtype, n.axes)
