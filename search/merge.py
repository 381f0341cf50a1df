"""The global merge search of the ``--cost model`` boundary search (docs/DESIGN.md §Fusion, §Cost model).

The space: partitions of the one-kernel-per-op extraction's kernels into groups (one group = one
kernel). A group has one *root*, whose outputs it writes; every other member is a kernel whose single
value is a site (it may be fused away) and whose readers all lie in the same group, so it is computed
inside the group and never materialized. A group must be legal (the legality check of the kernel's
terms; monotone: a group holding an illegal one is illegal too). The price of a partition is the sum of
its groups' prices (Poly Core's ``price`` of the group's region as the kind the backend binds the
group's kernel to, cached by content).

The search is exact: a dynamic program over the kernels in dependency order whose state is the set of
*pending* kernels (absorbed, waiting for the root of their group), each decision "absorb" (pending) or
"root" (the kernel closes its group: itself and the pending kernels all of whose readers are in it, priced
then), with branch and bound inside: a subproblem is solved under a budget (the best total found so far
minus what the prefix costs) and its result memoized as exact, or as a lower bound when the budget cut it
off; a root is priced only when an admissible lower bound of its group (``lower``: launch time plus the
bytes of the root's outputs at full bandwidth; the roofline's time is never below it) plus that of the
kernels left that can only be roots does not already exceed the budget. Bounded by ``SearchLimits`` (subproblems
visited, groups priced, CPU seconds); ``stop`` says which limit ended it ("exhausted": the partition
returned is the optimum of the space under the same prices; otherwise the best one found, which
``merge_phase`` then polishes by joining groups while that lowers the total).
"""
from __future__ import annotations

import dataclasses
import heapq
import math
import time
from dataclasses import dataclass, field
from typing import Callable

from .. import knobs
from ..analyses.devices import device
from ..analyses.price import price_floor
from ..analyses.poly_from_view import program_view, region_from_polyview
from ..egraph.partition import Kernel, Partition
from ..egraph.totiny import converted
from ..ir.shapes import bind as bind_shape
from ..ir.tiny import GroupOp
from ..ir.user_names import original_ids
from ..pricing import kernels as pricing  # its ``price`` (bench/pricing.py times the calls there)


@dataclass(frozen=True)
class Item:
    """One kernel of the one-kernel-per-op partition (``producers``/``readers``: names of the kernels it
    reads / that read its value; ``candidate``: its value is a site that may be fused away)."""
    name: str
    candidate: bool
    producers: tuple
    readers: tuple


@dataclass(frozen=True)
class SearchLimits:
    """Bounds of the merge search. The limits on prices and time stop only the search for a better
    partition once a first one is complete (the preferred decisions, tried first)."""
    nodes: int = 200000  # subproblems visited
    prices: int = 16  # groups priced (12 until 2026-11-30: LLaMA-7B L1 then kept SiLU x up apart, 727.2 µs, 1.3 s)
    seconds: float = 2.0  # CPU seconds
    total: float = 30.0  # CPU seconds of one program's (or segment's) whole search: the polish and descent stop there
    first: float = 10.0  # CPU seconds to find a first complete partition; past them the search stops with none (and the
    #                      polish starts from one kernel per op)

    @classmethod
    def from_knobs(cls) -> "SearchLimits":
        """The limits POLYSAT_SEARCH_PRICES, _SECONDS and _TOTAL_SECONDS set (knobs.py); a third of the total to find
        a first partition."""
        total = knobs.search_total_seconds()
        return cls(prices=knobs.search_prices(), seconds=knobs.search_seconds(), total=total, first=total / 3)

    @classmethod
    def lifted(cls) -> "SearchLimits":
        """No limit that a search of a real program reaches: the search runs to ``exhausted``."""
        return cls(nodes=10 ** 8, prices=10 ** 8, seconds=1e9, total=1e9, first=1e9)


@dataclass
class MergeResult:
    groups: dict  # root name -> frozenset of member names (the root included); {} when a limit hit
    total: float  # priced sum (inf: none found)
    stop: str  # "exhausted" or the limit that ended the search
    nodes: int
    priced: int  # groups priced by this search (new keys of ``price``)
    absorbed: frozenset = field(default_factory=frozenset)  # names of the non-root members


DEAD_END = "the preferred decisions' first path ended with no partition"
DEAD_ENDS = 256  # subproblems with no partition below them, before a first partition, the hint's first path may meet: the
#                 GPT-2 block's and MLP-Mixer's meet fewer than 128 and then complete; fp16 Swin-T's meets 512 within 2 s


class _Stop(Exception):
    pass


def merge_search(items: list, price: Callable, lower: Callable, legal: Callable, limits: SearchLimits = SearchLimits(),
                 prefer: Callable = lambda name: True, dead_ends: "int | None" = None) -> MergeResult:
    """The cheapest partition of ``items`` (in dependency order) in the space of the module docstring.
    ``price(root, members)`` -> µs of a group, ``lower(root)`` -> an admissible lower bound of any group
    rooted at root, ``legal(members)`` -> whether a group may hold these members; ``prefer(name)``: try
    absorbing that kernel first (the order only changes how soon the bound bites). ``dead_ends``: stop with
    DEAD_END, and no partition, once more subproblems than that, before the first complete partition, had none
    below them (the preferred decisions lead nowhere: the caller tries another order rather than backtrack out)."""
    n = len(items)
    readers = {it.name: frozenset(it.readers) for it in items}
    producers: dict = {it.name: [] for it in items}  # the kernels each one reads, as ``readers`` says
    for it in items:
        for r in it.readers:
            producers.setdefault(r, []).append(it.name)
    order = {it.name: k for k, it in enumerate(items)}
    prices: dict = {}
    legal_memo: dict = {}

    def is_legal(members: frozenset) -> bool:
        if members not in legal_memo:
            legal_memo[members] = legal(members)
        return legal_memo[members]
    root_only = {it.name for it in items if not (it.candidate and it.readers)}  # no site: always a root
    forced = [0.0] * (n + 1)  # lower bound of the kernels from i on that can only be roots
    for i in range(n - 1, -1, -1):
        forced[i] = forced[i + 1] + (lower(items[i].name) if items[i].name in root_only else 0.0)
    incumbent = {"total": math.inf, "groups": None}
    path: list = []  # the groups closed on the way to the current subproblem
    memo: dict = {}  # (i, pending) -> (value, exact, (group or None, next pending))
    stats = {"nodes": 0, "priced": 0, "dead": 0, "stop": "exhausted"}
    t0 = time.process_time()

    def group_price(root: str, members: frozenset) -> float:
        key = (root, members)
        if key not in prices:
            if not is_legal(members):
                prices[key] = math.inf
                return math.inf
            if stats["priced"] >= limits.prices and incumbent["groups"] is not None:
                stats["stop"] = f"price limit ({limits.prices} groups priced)"
                raise _Stop
            stats["priced"] += 1
            prices[key] = price(root, members)
        return prices[key]

    def suffix(i: int, pending: frozenset) -> dict:
        """The groups of the solved subproblem (i, pending) (exact in memo), root name -> members."""
        groups = {}
        while i < n:
            _, _, (group, pending) = memo[(i, pending)]
            if group is not None:
                groups[items[i].name] = group
            i += 1
        return groups

    def close(i: int, pending: frozenset) -> "tuple | None":
        """(group, pending left) when items[i] is a root, None when a pending kernel it reads could
        then never join a group. The group: the pending kernels all of whose readers are in it, found from
        the root back along what its members read (a pending kernel has readers, so one of them is a member),
        readers before the kernels they read: the work follows the group, not the pending set (a mixture's
        experts all wait for their concatenation)."""
        name = items[i].name
        group = {name}
        heap = [(-order[p], p) for p in producers[name] if p in pending]
        heapq.heapify(heap)
        while heap:
            _, p = heapq.heappop(heap)
            if p in group or not readers[p] <= group:
                continue
            group.add(p)
            for q in producers[p]:
                if q in pending and q not in group:
                    heapq.heappush(heap, (-order[q], q))
        if any(p in pending and p not in group for m in group for p in producers[m]):
            return None  # a pending kernel a member reads stays out: it could never join a group
        g = frozenset(group)
        return g, pending - g

    def solve(i: int, pending: frozenset, budget: float, spent: float):
        """The subproblem's value, as a generator: it yields each sub-subproblem it needs, (i, pending,
        budget, spent), and is sent its value (``run`` drives them from an explicit stack, so the depth,
        one level per kernel, is no Python recursion)."""
        key = (i, pending)
        if key in memo:
            v, exact, _ = memo[key]
            if exact and spent + v < incumbent["total"]:  # a new prefix completed by a solved suffix
                incumbent["total"], incumbent["groups"] = spent + v, {**dict(path), **suffix(i, pending)}
            if exact or v >= budget:
                return v
        stats["nodes"] += 1
        if stats["nodes"] > limits.nodes:  # (also before a first partition: then none is returned)
            stats["stop"] = f"node limit ({limits.nodes} subproblems)"
            raise _Stop
        if stats["nodes"] % 64 == 0:
            if incumbent["groups"] is not None and time.process_time() - t0 > limits.seconds:
                stats["stop"] = f"time limit ({limits.seconds:g} s CPU)"
                raise _Stop
            if incumbent["groups"] is None and time.process_time() - t0 > limits.first:
                # paths that end with a kernel no group can close (DPT's neck reads four encoder layers) leave
                # the search no partition: the polish joins from one kernel per op in the time left
                stats["stop"] = f"no complete partition within {limits.first:g} s CPU"
                raise _Stop
        if i == n:
            v = 0.0 if not pending else math.inf
            memo[key] = (v, True, None)
            if v == 0.0 and spent < incumbent["total"]:  # the best partition so far, kept if a limit stops
                incumbent["total"], incumbent["groups"] = spent, dict(path)
            return v
        it = items[i]
        options = []
        if it.name not in root_only and is_legal(frozenset({it.name}) | readers[it.name]):
            # (absorbed, it shares a group with its readers: legality is monotone)
            options.append(("absorb", None, pending | {it.name}))
        closed = close(i, pending)
        if closed is not None:
            options.insert(0 if not prefer(it.name) else len(options), ("root",) + closed)
        best, choice, bound = math.inf, None, math.inf
        for kind, group, nxt in options:
            cut = min(budget, best)
            if kind == "root":
                low = lower(it.name) + forced[i + 1]
                if low >= cut:
                    bound = min(bound, low)
                    continue
                c = group_price(it.name, group)
            else:
                c = 0.0
            if c + forced[i + 1] >= cut:
                bound = min(bound, c + forced[i + 1])
                continue
            if group is not None:
                path.append((it.name, group))
            v = c + (yield i + 1, nxt, cut - c, spent + c)
            if group is not None:
                path.pop()
            if v < best:
                best, choice = v, (group, nxt)
            bound = min(bound, v)
        if best < budget:
            memo[key] = (best, True, choice)
            return best
        if dead_ends is not None and best == math.inf and incumbent["groups"] is None:
            stats["dead"] += 1
            if stats["dead"] > dead_ends:
                stats["stop"] = DEAD_END
                raise _Stop
        memo[key] = (bound, False, None)
        return bound

    def run() -> float:
        stack, value = [solve(0, frozenset(), math.inf, 0.0)], None
        while stack:
            try:
                sub = stack[-1].send(value)
            except StopIteration as done:
                stack.pop()
                value = done.value
                continue
            stack.append(solve(*sub))
            value = None
        return value

    try:
        total = run()
    except _Stop:  # the best partition found before the limit (none proven optimal)
        found = incumbent["groups"] or {}
        return MergeResult(found, incumbent["total"], stats["stop"], stats["nodes"], stats["priced"],
                           frozenset(m for r, ms in found.items() for m in ms if m != r))
    groups = suffix(0, frozenset()) if total < math.inf else {}
    absorbed = frozenset(m for r, ms in groups.items() for m in ms if m != r)
    return MergeResult(groups, total, stats["stop"], stats["nodes"], stats["priced"], absorbed)


# ---- the space of a base extraction ----------------------------------------------------------------

@dataclass
class Space:
    """The merge search's space over one base extraction: its kernels as Items, the group price, lower
    bounds and legality check, and the site (Mat class) of each kernel's value (``site_of``: value id)."""
    items: list
    price: Callable  # (root, members) -> µs
    lower: Callable  # root -> µs, of any group rooted there
    why_illegal: Callable  # members -> list of legality violations (of the sites the group fuses)
    kernels: dict  # name -> egraph.partition.Kernel
    site_of: dict  # value id -> Mat class
    floor: Callable = lambda root, members: 0.0  # (root, members) -> µs the group's price is never below

    def site(self, name: str):
        return self.site_of.get(self.kernels[name].outputs[0])


MADE = 4096  # groups a space keeps built between their floor and their price (the polish's moves of one round)


def merge_space(state, view, st: dict, roots: list, base, params: dict, arch: str, illegal: Callable) -> Space:
    """The space of the one-kernel-per-op partition of ``base`` (a Candidate of every site cut).
    ``illegal(sites)``: the legality violations of fusing those Mat sites into one kernel (the rules'
    conflicts, search/legality.py ``violations``)."""
    prog, part = base.extraction.program, base.extraction.partition
    made = converted(state, view, base.extraction.chosen, roots)  # the conversion to_tiny made of it
    site_of: dict = {}
    for m in st:
        for n in view.classes[m]:
            if n.op == "Mat" and n.children[0] in made:
                site_of[made[n.children[0]].id] = m
    pv = program_view(prog, None)  # the one the kernels of its partitions are priced on (pricing/kernels.py)
    with_blocks = {b.value_id for b in pv.blocks}
    outs = {nid for _, nid in prog.outputs}
    ks = {k.name: k for k in part.kernels}
    out_of = {o: k.name for k in part.kernels for o in k.outputs}

    def source(i: str) -> "str | None":  # the kernel materializing value i (through views)
        while i not in out_of and prog[i].op in GroupOp.Movement:
            i = prog[i].src[0]
        return out_of.get(i)
    prods = {k.name: sorted({p for i in k.nodes for s in prog[i].src if s not in k.nodes
                             for p in [source(s)] if p is not None and p != k.name}) for k in part.kernels}
    readers: dict = {k: set() for k in ks}
    for k, ps in prods.items():
        for p in ps:
            readers[p].add(k)
    items = [Item(k.name, len(k.outputs) == 1 and k.outputs[0] not in outs and k.outputs[0] in site_of
                  and bool(readers[k.name]), tuple(prods[k.name]), tuple(sorted(readers[k.name])))
             for k in part.kernels]
    dev = device(arch)

    def nodes_of(members) -> frozenset:
        return frozenset().union(*(ks[m].nodes for m in members))
    built: dict = {}  # (root, members) -> ``group``'s answer, for a group whose floor was asked and price not yet

    def made(root: str, members: frozenset) -> tuple:
        """(the group's Poly-View region, or None for a copy of memory; the copy's price; its kernel)."""
        got = built.pop((root, members), None)
        if got is not None:
            return got
        ns = nodes_of(members)
        r = region_from_polyview(pv, ns, ks[root].outputs, params, "g")
        g = Kernel("g", ns, ks[root].outputs, tuple(dict.fromkeys(s for i in ns for s in prog[i].src if s not in ns)))
        if not r.statements:  # a copy of memory, launched like any kernel
            return None, pricing.copy_cost(prog, g, params, arch).time_est_us, g
        return r, 0.0, g

    def group(root: str, members: frozenset) -> tuple:
        """(the group's region as priced, or None for a copy of memory; the copy's price)."""
        r, copy, g = made(root, members)
        if r is None:
            return None, copy

        def whole() -> Partition:  # the partition with the group joined (made only where its kernel's kind is asked)
            return Partition(tuple(g if k.name == root else k for k in part.kernels
                                   if k.name == root or k.name not in members))
        (r,) = pricing.as_emitted(prog, whole, [r], arch)  # priced as the kind the backend binds the group to
        return pricing.canonical(r), 0.0

    def price(root: str, members: frozenset) -> float:
        r, copy = group(root, members)
        return copy if r is None else pricing.price(r, arch).time_est_us

    def floor(root: str, members: frozenset) -> float:
        """A time ``price`` never returns below for the group (up to rounding; ``price_floor``'s bound,
        tests/test_price_floor.py), at a fraction of its cost: the group's region built, and kept until it is priced
        (``MADE`` at most), without asking which kind binds it: ``as_emitted`` leaves its contractions on tensor
        cores or moves them all to the FP32 pipes, so the lower of the two floors is one of the price it gets."""
        got = made(root, members)
        if len(built) >= MADE:
            built.pop(next(iter(built)))
        built[root, members] = got
        r, copy, _ = got
        if r is None:
            return copy
        low = price_floor(pricing.canonical(r), arch)
        simt = pricing.on_fp32_pipes(r)
        return low if simt is r else min(low, price_floor(pricing.canonical(simt), arch))

    def lower(root: str) -> float:
        return kernel_floor(prog, ks[root].outputs, params, dev) if ks[root].nodes & with_blocks else 0.0

    def why_illegal(members) -> list:  # the sites a group fuses: its members read only inside it
        return illegal(frozenset(site_of[ks[m].outputs[0]] for m in members
                                 if readers[m] and readers[m] <= members and ks[m].outputs[0] in site_of))
    return Space(items, price, lower, why_illegal, ks, site_of, floor)


def kernel_floor(prog, outputs: tuple, params: dict, dev) -> float:
    """An admissible lower bound of the price of any kernel writing ``outputs``: the launch plus their bytes at full
    bandwidth (the roofline adds the launch to its slowest limit, the store among them; a copy is priced so too)."""
    out_bytes = sum(math.prod(bind_shape(prog[o].shape, params)) * prog[o].dtype.itemsize for o in outputs)
    return (dev.launch_us + out_bytes / (dev.dram_tbps * 1e12) * 1e6) * (1 - 1e-9)


def partition_floor(prog, part, params: dict, arch: str) -> float:
    """An admissible lower bound of a partition's price: each kernel's ``kernel_floor``."""
    dev = device(arch)
    return sum(kernel_floor(prog, k.outputs, params, dev) for k in part.kernels)


def merge_phase(state, view, st: dict, roots: list, base, params: dict, arch: str, illegal: Callable,
                limits: SearchLimits = SearchLimits(), hint: "frozenset | None" = None,
                deadline: float = math.inf, unfused_below: Callable = lambda price: False,
                alone: Callable = lambda name: None) -> tuple:
    """The merge search over the one-kernel-per-op partition of ``base`` (a Candidate of every site
    cut). Returns (the Mat site classes fused, MergeResult, ``rejected()``: {Mat class: (separate µs,
    fused µs or None where a legality rule decided, why, groups)} for each site the best partition
    keeps whose readers share one group; priced on demand, for --explain). ``hint``: the Mat classes a
    known good partition fuses, absorbed first; where that path ends with no partition (``DEAD_END``), absorbed
    first only where the kernel has one reader: a kernel of several readers that the hint fuses, it recomputes in
    each, which no group of this space does (fp16 Swin-T: its first path ended with kernels no group could close,
    and the search found no partition in its 10 s; with the second order, 16 kernels at 33.2 µs in a 9.8 s
    extract, against 19 at 39.1 in 26 s). ``deadline`` (``time.process_time``): the polish stops there.
    ``unfused_below(price)``: whether the one-kernel-per-op partition prices below that; a search a limit stopped
    above it (its first path, the hint's, a bad one: LLaMA-7B L1's default partition, 2,591.7 µs against 1,470.9)
    is polished from every kernel its own group instead, where that prices lower in the search's own prices (no new price but the singletons').
    ``alone(name)``: kernel ``name``'s price in the one-kernel-per-op partition where that is priced already, else None:
    the price of the group of that kernel alone, which is the same region priced as the same kind (its neighbours
    are the partition's own), so it is not built again (tests/test_merge_search.py)."""
    sp = merge_space(state, view, st, roots, base, params, arch, illegal)
    prices: dict = {}
    verdicts: dict = {}

    def price(root: str, members: frozenset) -> float:
        if (root, members) not in prices:
            known = alone(root) if len(members) == 1 else None
            prices[root, members] = sp.price(root, members) if known is None else known
        return prices[root, members]

    def why_illegal(members: frozenset) -> list:
        if members not in verdicts:
            verdicts[members] = sp.why_illegal(members)
        return verdicts[members]

    def legal(members: frozenset) -> bool:
        return not why_illegal(members)
    res = merge_search(sp.items, price, sp.lower, legal, limits,
                       (lambda k: sp.site(k) in hint) if hint is not None else (lambda k: True), dead_ends=DEAD_ENDS)
    if res.stop == DEAD_END:  # the hint's kernels of several readers, which it recomputes in each, left to the search
        single = {it.name for it in sp.items if len(it.readers) == 1}
        res = merge_search(sp.items, price, sp.lower, legal, limits,
                           (lambda k: k in single and sp.site(k) in hint) if hint is not None else (lambda k: True))
    def floor(root: str, members: frozenset) -> float:  # the group's price where known, else its floor
        return prices[root, members] if (root, members) in prices else sp.floor(root, members)
    if res.stop != "exhausted":
        res = _polish(sp.items, res, price, sp.lower, legal, deadline=deadline, total=limits.total,
                      unfused_below=unfused_below, floor=floor)
    fused = frozenset(sp.site(m) for m in res.absorbed)
    rho = {m: r for r, ms in res.groups.items() for m in ms}

    def rejected() -> dict:
        out = {}
        for it in sp.items:
            if not it.candidate or it.name in res.absorbed or it.name not in rho:
                continue
            shared = {rho[r] for r in it.readers}
            if len(shared) != 1:
                continue
            (g,) = shared  # it is a root: its whole group joins its readers' group
            sep = price(it.name, res.groups[it.name]) + price(g, res.groups[g])
            merged = res.groups[g] | res.groups[it.name]
            bad = why_illegal(merged)
            fused_us = None if bad else price(g, merged)
            why = ("illegal: " + original_ids("; ".join(b[3] for b in bad), state.program, base.extraction.program)) \
                if bad else "priced higher" if fused_us >= sep else \
                f"not reached: the merge search stopped at its {res.stop}"
            out[sp.site(it.name)] = (sep, fused_us, why, len(res.groups))
        return out
    return fused, res, rejected


def _polish(items: list, res: MergeResult, price: Callable, lower: Callable, legal: Callable,
            rounds: int = 8, deadline: float = math.inf, total: float = math.inf,
            unfused_below: Callable = lambda price: False, floor: "Callable | None" = None) -> MergeResult:
    """After a search a limit stopped: while joining one group into the group all its root's readers
    share lowers the total, take the join that lowers it most, with every other join that lowers it and
    touches none of the groups taken, and search again from there (its first path is the joined partition;
    no further prices). Where several joins go into one group (a mixture's experts into their concatenation),
    joining them all at once is one more move, priced once (the one group they all join would otherwise take
    one join a round): first every legal one, and when that gains at least what any single join into the group
    could (its two groups' prices less the group's lower bound), no single join into it is priced; otherwise
    each is priced, and the improving ones at once are a move too. Past ``deadline`` (CPU, the search's ``total``
    seconds) it takes the best join found so far and stops, and its stop reason says so. When ``res`` is priced
    above one kernel per op's price (``unfused_below(res.total)``, asked only when ``res`` is above its lower bound, the
    kernels' ``lower``), it starts from every kernel its own group instead, where that prices lower (the search's first
    path, the hint's, was a bad one: LLaMA-7B L1's default partition).

    ``floor(root, members)``: a price the group is never priced below (``Space.floor``). With it, the only join into
    a group is priced only when the moves are taken, best first, and its gain bound (its two groups' prices less the
    joined group's floor) is the best left: one that touches a group a better move took is never priced (a chain's
    every other join, each round). The moves taken are the ones pricing every join gives (see ``_taken``)."""
    if res.total > sum(map(lower, (it.name for it in items))) and unfused_below(res.total):
        alone = merge_search(items, price, lower, legal, SearchLimits(prices=0), lambda k: False)
        if alone.total < res.total:  # every kernel its own group (a first path: complete whatever the limit)
            res = dataclasses.replace(alone, stop=res.stop, nodes=res.nodes + alone.nodes, priced=res.priced + alone.priced)
    done, stop, priced, late = 0, res.stop, res.priced, False
    for _ in range(rounds):
        if late:
            break
        rho = {m: r for r, ms in res.groups.items() for m in ms}
        legal_joins = []  # (group joined, the group it joins) for each legal join, in the items' order
        for it in items:
            if not it.candidate or it.name not in res.groups or any(r not in rho for r in it.readers):
                continue  # a reader absorbed into another's group (recomputed there) has no group of its own
            shared = {rho[r] for r in it.readers}
            if len(shared) == 1 and legal(res.groups[rho[it.readers[0]]] | res.groups[it.name]):
                legal_joins.append((it.name, rho[it.readers[0]]))
        by_target: dict = {}  # group joined into -> the groups whose join into it is legal
        for name, g in legal_joins:
            by_target.setdefault(g, []).append(name)
        gains = []  # (gain, exact: False where an upper bound of it, the groups joined, the group they join)
        whole = set()  # groups whose every join is taken at once, unpriced one by one

        def gain_of(g, names) -> float:
            return sum(price(n, res.groups[n]) for n in names) + price(g, res.groups[g]) - \
                price(g, res.groups[g].union(*(res.groups[n] for n in names)))
        for g, names in by_target.items():
            # every legal join into g at once, priced first: when it gains at least what any one of them could
            # (a join's gain is at most its two groups' prices less g's lower bound), no single join into g is
            # priced (a mixture's experts: one price, not one per expert)
            if len(names) < 2 or not legal(res.groups[g].union(*(res.groups[n] for n in names))):
                continue
            if time.process_time() > deadline:
                late = True
                break
            gain = gain_of(g, names)
            if gain > 1e-9 and all(price(n, res.groups[n]) + price(g, res.groups[g]) - lower(g) <= gain for n in names):
                gains.append((gain, True, tuple(names), g))
                whole.add(g)
        into: dict = {}  # group joined into -> the groups whose join into it lowers the total
        for name, g in legal_joins if not late else ():
            if g in whole:
                continue
            if floor is not None and len(by_target[g]) == 1:  # priced when taken, if ever (a bound now)
                bound = price(name, res.groups[name]) + price(g, res.groups[g]) - \
                    floor(g, res.groups[g] | res.groups[name]) * (1 - 1e-9) + 1e-9
                if bound > 1e-9:
                    gains.append((bound, False, (name,), g))
                continue
            if time.process_time() > deadline:
                late = True
                break
            gain = gain_of(g, [name])
            if gain > 1e-9:
                gains.append((gain, True, (name,), g))
                into.setdefault(g, []).append(name)
        for g, names in into.items():  # every improving join into one group at once
            if len(names) > 1 and not late and legal(res.groups[g].union(*(res.groups[n] for n in names))):
                gain = gain_of(g, names)
                if gain > 1e-9:
                    gains.append((gain, True, tuple(names), g))
        batch, late = _taken(gains, gain_of, deadline, late)
        if not batch:
            break
        nxt = None
        for joins in ([batch, batch[:1]] if len(batch) > 1 else [batch]):
            prefer = res.absorbed.union(*joins)
            nxt = merge_search(items, price, lower, legal, SearchLimits(prices=0), lambda k: k in prefer)
            if nxt.total < res.total:
                break
        if not nxt.total < res.total:
            break
        res, done, priced = nxt, done + sum(map(len, joins)), priced + nxt.priced
    if late:
        stop = f"{stop}, then {done} join(s) (the polish stopped at the time limit: {total:g} s CPU)"
    elif done:
        stop = f"{stop}, then {done} join(s)"
    return dataclasses.replace(res, stop=stop, priced=priced)


def _taken(gains: list, gain_of: Callable, deadline: float, late: bool) -> tuple:
    """(the moves a polish round takes, late): the best move, and with it every other that lowers the total and
    touches none of the groups already taken (their prices add up: each move changes its own groups only), so the
    identical blocks of a wide graph are joined together, not one a round; of equal gains, the one listed first.
    ``gains``: (gain, exact, the groups joined, the group they join), a move not exact listed with an upper bound
    of its gain. The moves are met best first from a heap: a bound met first is priced (``gain_of``) and put back
    with its gain where that lowers the total, unless its move touches a group taken, so it is never priced (it
    would come after the moves taken, every one of which it touches). Every move comes after all those before
    it in the order of exact gains, so the moves taken are the ones sorting every priced gain takes. Past
    ``deadline`` no bound is priced any more (late)."""
    heap = [(-v, k, exact, names, g) for k, (v, exact, names, g) in enumerate(gains)]
    heapq.heapify(heap)
    taken, batch = set(), []
    while heap:
        _, k, exact, names, g = heapq.heappop(heap)
        if taken & {g, *names}:
            continue
        if not exact:
            if late or time.process_time() > deadline:
                late = True
                continue
            gain = gain_of(g, names)
            if gain > 1e-9:
                heapq.heappush(heap, (-gain, k, True, names, g))
            continue
        taken |= {g, *names}
        batch.append(names)
    return batch, late
