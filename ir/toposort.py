"""Topological orders: a stable one with cycle reporting (the Tiny IR and Frontend IR loaders) and a
post-order over graphs that may hold cycles (the e-graph printer and pictures)."""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

from .diagnostics import fail


def stable_topo(deps: Mapping[str, Sequence[str]], what: str = "nodes",
                name: Callable[[str], str] = str) -> list:
    """Keys of deps in document order where that is already topological, dependencies first
    otherwise; a cycle is E1106 naming its members."""
    order: list = []
    state: dict = {}  # 1 = on the DFS stack, 2 = done
    for root in deps:
        if state.get(root) == 2:
            continue
        state[root] = 1
        stack = [(root, iter(deps[root]))]
        while stack:
            nid, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                state[nid] = 2
                order.append(nid)
            elif state.get(nxt) == 1:
                cyc = [n for n, _ in stack]
                cyc = cyc[cyc.index(nxt):] + [nxt]
                fail("Cycle", name(nxt), f"the {what} form a cycle: " + " -> ".join(name(c) for c in cyc))
            elif state.get(nxt) is None:
                state[nxt] = 1
                stack.append((nxt, iter(deps[nxt])))
    return order


def postorder(roots: Iterable, children: Callable[[Any], Iterable]) -> list:
    """Every node reachable from roots, children before their parents, each once (iterative; a cycle,
    which an e-graph may hold, is broken where it is first met)."""
    seen: set = set()
    out: list = []
    for root in roots:
        stack = [(root, False)]
        while stack:
            k, done = stack.pop()
            if done:
                out.append(k)
                continue
            if k in seen:
                continue
            seen.add(k)
            stack.append((k, True))
            stack.extend((c, False) for c in children(k))
    return out
