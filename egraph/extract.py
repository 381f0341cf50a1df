"""DAG-aware extraction over the exported e-graph (docs/DESIGN.md §E-graph: egglog's
extractor takes no Python cost callback and is quadratic on deep graphs).

Greedy-DAG worklist: an e-node is evaluated once all its child classes have a solution; a solution is
the set of e-classes its term uses (priced by the e-node chosen for each), so a shared subterm is
paid once. A class keeps the cheapest solution seen (ties: the e-node exported first, i.e. the
loaded term). A ``Mat`` e-node adds the cost model's ``region_cost`` of the kernel it closes. Cycles
are skipped (an e-node whose solution would contain its own class).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

from ..ir.diagnostics import fail
from .cost import CostModel, KernelClasses, make
from .graph import ENode, EGraphView


@dataclass
class Choice:
    total: float
    node: ENode
    bits: int  # the e-classes the term uses, as a bitset over class ids

    def contains(self, c: int) -> bool:
        return bool(self.bits >> c & 1)


def _bit_sum(bits: int, weight: dict) -> float:
    total = 0.0
    while bits:
        low = bits & -bits
        total += weight[low.bit_length() - 1]
        bits ^= low
    return total


EXACT = float(2 ** 53)  # integers below this add exactly in any order


class _Weights:
    """The price of each class's chosen e-node, and per distinct price the bitset of the classes at it: the
    sum over a bitset is then a popcount per price, where every price is an integer and the sum stays below
    2**53 (so it equals the bit-by-bit float sum exactly, whatever the order); otherwise bit by bit."""

    def __init__(self):
        self.weight: dict = {}  # class -> price
        self.bits: dict = {}  # price -> bitset of the classes at that price
        self.integral = True

    def set(self, c: int, price: float) -> None:
        old = self.weight.get(c)
        if old is not None:
            self.bits[old] &= ~(1 << c)
        self.weight[c] = price
        self.bits[price] = self.bits.get(price, 0) | (1 << c)
        self.integral = self.integral and price.is_integer()

    def sum(self, bits: int) -> float:
        if self.integral:
            counts = [(w, (bits & b).bit_count()) for w, b in self.bits.items() if b]
            if sum(abs(w) * k for w, k in counts) < EXACT:
                return float(sum(w * k for w, k in counts))
        return _bit_sum(bits, self.weight)


def solve(view: EGraphView, model: CostModel) -> tuple:
    """(best Choice per class, own cost per e-node): the greedy-DAG fixpoint. The class set of a term
    is a bitset, so a union costs machine words, and the price of the classes two children share is
    subtracted once (inclusion-exclusion over their overlap): linear-ish even on deep chains. E-nodes are
    handled by their position in export order (``order``), so the loop never hashes an e-node."""
    best: dict = {}
    at: dict = {}  # class -> the position of its chosen e-node
    weight = _Weights()  # class -> price of its currently chosen e-node (with its region cost)
    nodes, kids, readers = _layout(view)
    own = model.enode_costs(view)
    price_of = _in_export_order(own, view)
    heap: list = [(price_of[k], k) for k, n in enumerate(nodes) if not n.children]
    heapq.heapify(heap)
    waiting = [len(ks) for ks in kids]  # per e-node, its child classes still without a solution
    regions = type(model).region_cost is not CostModel.region_cost  # a model that prices a Mat's kernel whole
    budget = 64 * max(1, view.nodes) + 1000
    while heap and budget:
        budget -= 1
        _, k = heapq.heappop(heap)
        n = nodes[k]
        ks = kids[k]
        if waiting[k]:
            continue
        bits, total = 0, 0.0
        for c in ks:
            ch = best[c]
            overlap = bits & ch.bits
            total += ch.total - (weight.sum(overlap) if overlap else 0.0)
            bits |= ch.bits
        e = n.eclass
        if bits >> e & 1:
            continue  # cyclic through its own class
        price = price_of[k]
        if regions and n.op == "Mat":
            price += float(model.region_cost(_region(n, best), view))
        total += price
        cur = best.get(e)
        if cur is not None and (total, k) >= (cur.total, at[e]):
            continue
        best[e] = Choice(total, n, bits | (1 << e))
        at[e] = k
        weight.set(e, price)
        for p in readers.get(e, ()):
            if cur is None:  # e's first solution: one child class fewer to wait for
                waiting[p] -= 1
            if not waiting[p]:
                heapq.heappush(heap, (total, p))
    return best, own


def _in_export_order(own: dict, view: EGraphView) -> list:
    """own's prices in export order. A model's dict made in the view's class order (``CostModel.enode_costs`` and
    a copy of it) is read by position, its keys checked by identity, so no e-node is hashed."""
    listed, place = _class_order(view)
    if len(own) == len(listed) and all(a is b for a, b in zip(own, listed)):
        prices = list(own.values())
        return [prices[i] for i in place]
    return [own[n] for n in _layout(view)[0]]


def _class_order(view: EGraphView) -> tuple:
    """(the e-nodes in the view's class order, per export position its place in that order), once per view."""
    got = view.__dict__.get("_class_order")
    if got is None:
        listed = [n for ns in view.classes.values() for n in ns]
        at = {id(n): i for i, n in enumerate(listed)}
        got = view.__dict__["_class_order"] = (listed, [at[id(n)] for n in _layout(view)[0]])
    return got


def _layout(view: EGraphView) -> tuple:
    """(e-nodes in export order, each one's distinct child classes in order, class -> positions of the
    e-nodes that read it), built once per view."""
    got = view.__dict__.get("_layout")
    if got is None:
        nodes = sorted((n for ns in view.classes.values() for n in ns), key=lambda n: n.order)
        kids = [tuple(dict.fromkeys(n.children)) for n in nodes]
        readers: dict = {}
        for k, n in enumerate(nodes):
            for c in kids[k]:
                readers.setdefault(c, []).append(k)
        got = view.__dict__["_layout"] = (nodes, kids, readers)
    return got


def extract_classes(view: EGraphView, roots: list, cost: "str | CostModel" = "size") -> tuple:
    """({class: ENode} for every class the roots need, total cost)."""
    model = make(cost)
    best, own = solve(view, model)
    for r in roots:
        if r not in best:
            fail("InternalError", "extraction", f"e-class {r} has no finite term (every e-node is cyclic or unresolved)")
    chosen: dict = {}
    stack = list(roots)
    while stack:
        c = stack.pop()
        if c in chosen:
            continue
        chosen[c] = best[c].node
        stack.extend(best[c].node.children)
    parts = []
    for c, node in chosen.items():
        parts.append(own[node])
        if node.op == "Mat":
            parts.append(float(model.region_cost(_region(node, best), view)))
    return chosen, model.combine(parts)


def _region(mat: ENode, best: dict) -> KernelClasses:
    (x,) = mat.children
    inside: dict = {}
    stack = [x]
    while stack:
        c = stack.pop()
        if c in inside or c not in best:
            continue
        node = best[c].node
        if node.is_memory:
            continue
        inside[c] = node
        stack.extend(ch for ch in node.children)
    return KernelClasses(mat.eclass, x, inside)
