"""The instances of a streamed region that its -inf score mask hides, left out of its price
(docs/DESIGN.md §Cost model, "Masked keys").

A streamed softmax-weighted sum whose scores are ``where(keep, s, -inf)``, ``keep`` an index guard (the causal
mask: key j visible to query i when j <= i + (N - M)), adds nothing for a hidden score: its exponential is 0, so
the running max, the running sum and the weighted sum each combine their identity there. The attention kind
skips the key blocks its causal mask hides (``backend/attention/plan.py key_blocks``); the region priced as it is
would count them. :func:`hide_masked` takes them out of the statements' domains:

- forward, from the select: the select keeps the instances ``visible`` holds, and each statement of the stream's key
  loop (``loop``: the softmax-weighted sum's own statements) keeps the instances whose read of a masked value reads
  a visible one; a statement that combines over the keys (a reduction) ends the walk (what it writes is whole);
- backward, dead instances: a statement writing an internal tensor keeps only the instances whose cells a kept
  instance of a later statement reads (the scores' contraction, their scaling), when something reads that tensor.

Access relations are cut to their statement's new domain. Poly Core then counts the work, footprints and traffic of
the visible (query, key) pairs only, in every tile (its middle tile has the mean count of a causal triangle).
"""
from __future__ import annotations

import dataclasses

import islpy as isl

from .poly_region import Access, PolyRegion


def hide_masked(region: PolyRegion, select: str, visible: str, loop: frozenset) -> PolyRegion:
    """region without the instances a -inf mask hides (the module docstring): ``select`` the statement of
    ``where(keep, s, -inf)``, ``visible`` the isl set of its instances ``keep`` holds, ``loop`` the names of the
    statements of the streamed sum's key loop."""
    stmts = list(region.statements)
    names = [s.name for s in stmts]
    if select not in names:
        return region
    k0 = names.index(select)
    doms = {s.name: isl.Set(s.domain) for s in stmts}
    vis = isl.Set(visible).align_params(doms[select].get_space())
    kept = doms[select].intersect(vis)
    if kept.is_equal(doms[select]):
        return region
    doms[select] = kept
    masked = {stmts[k0].write.tensor: _image(kept, stmts[k0].write.relation)}  # tensor -> its visible cells
    for s in stmts[k0 + 1:]:
        if s.name not in loop:
            continue
        reads = [a for a in s.reads if a.tensor in masked]
        if not reads:
            continue
        dom = doms[s.name]
        for a in reads:
            rel = isl.Map(a.relation).align_params(dom.get_space()).intersect_domain(dom)
            dom = dom.intersect(rel.intersect_range(masked[a.tensor].align_params(rel.get_space())).domain())
        doms[s.name] = dom
        if s.combine is None:  # elementwise: what it writes at a hidden pair is hidden too
            masked[s.write.tensor] = _image(dom, s.write.relation)
    internal = {t.name for t in region.tensors if t.role == "internal"}
    for k in range(len(stmts) - 1, -1, -1):  # dead instances, last statement first
        s = stmts[k]
        if s.write.tensor not in internal:
            continue
        read = None
        for r in stmts[k + 1:]:
            for a in r.reads:
                if a.tensor == s.write.tensor:
                    got = _image(doms[r.name], a.relation)
                    read = got if read is None else read.union(got)
        if read is None:
            continue  # read by no statement: left as it is
        rel = isl.Map(s.write.relation).align_params(doms[s.name].get_space())
        doms[s.name] = doms[s.name].intersect(rel.intersect_range(read.align_params(rel.get_space())).domain())
    out = []
    for s in stmts:
        dom = doms[s.name]
        if dom.is_equal(isl.Set(s.domain)):
            out.append(s)
            continue
        out.append(dataclasses.replace(s, domain=str(dom.coalesce()), reads=tuple(_cut(a, dom) for a in s.reads),
                                       write=_cut(s.write, dom)))
    return dataclasses.replace(region, statements=tuple(out))


def _image(dom: isl.Set, relation: str) -> isl.Set:
    rel = isl.Map(relation).align_params(dom.get_space())
    return dom.align_params(rel.get_space()).apply(rel).coalesce()


def _cut(a: Access, dom: isl.Set) -> Access:
    rel = isl.Map(a.relation).align_params(dom.get_space())
    return Access(a.tensor, str(rel.intersect_domain(dom.align_params(rel.get_space())).coalesce()))
