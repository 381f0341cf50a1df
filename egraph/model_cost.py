"""The ``model`` cost: extraction that picks kernel boundaries by Poly Core's modelled time
(docs/DESIGN.md §Cost model, §Fusion).

Kernel boundaries are terms: a *site* is a materialized value, ``Mat(x)``, some read
``Read(Mat(x), s, m)`` of which has a fused alternative from ``rules/fusion.egg`` (``View(x, s, m)``
or forms derived from it). A partition is a decision per site (cut | fuse: every read of x fused);
extraction under a decision prices the other kind of e-node there out and takes the smallest terms
elsewhere (the greedy DAG extractor, so a shared subterm is paid once). Its price is the sum of the
kernels' ``analyses.cost_model.price`` (time_est_us on the shapes ``params`` binds), each cached by
region content (tensor and statement names canonicalized), so a kernel met again, in another
candidate or another identical layer, is priced once.

The search: the loaded default partition's decisions (egraph/partition_search.py, what ``--cost
size`` keeps) are realized and priced; the global merge search (egraph/merge_search.py: a bounded
branch and bound over the groupings of the one-kernel-per-op kernels, exact when its stop reason is
"exhausted") chooses the kernels by the sum of their prices; its decisions are realized in the e-graph
and priced whole, and the cheaper of the two is kept, so the search never ends above ``--cost size``.
With at most EXACT_SITES sites a descent then polishes: each round prices fusing every site still cut
(and, once that gains nothing, cutting every fused site again), takes the best move, then the other
improving ones while they still improve, until none improves; it may cut a merge search fusion again
(the merge search prices each group alone, a whole partition prices its kernels together). A larger program instead tries streaming every softmax-weighted sum at once,
then at most FUSE_ROUNDS rounds of the descent's fuse moves alone, over the sites whose value computes no
reduction (a value read by several kernels, outside the merge search's space, recomputed in each where that
prices lower). A cut site
whose read composes to the value itself (an identity read) is materialized by the partition
(totiny.to_tiny), not by the extraction. A program of repeated blocks (egraph/segment.py) is searched
once per distinct segment and stitched (egraph/segment_stitch.py, ``saturate_unfused`` and ``search``).
Legality is the rules' (rules/fusion.egg ``fusion-facts``, ``fusion-conflicts``): a candidate, or a group
of the merge search, that fuses every site of one of their conflicts (a reduction read many-to-many,
GEMM -> GEMM) on a path its extraction holds is illegal (egraph/legality.py ``violations``).

Streaming (docs/DESIGN.md §Streaming, rules/streaming.egg) adds a second kind of decision: a value whose class holds a
``SoftmaxSum`` is either streamed (one kernel walks the keys: its other spellings are ruled out) or
not (the SoftmaxSum is ruled out, the two-kernel softmax -> P V stays). The search prices both like
any fusion; streamed kernels are priced per key block (``mark_streams``, analyses/cost_model.py), and
``search(stream=False)`` gives the best partition without streaming (for --explain).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import re
from dataclasses import dataclass, field
from typing import Callable

from ..analyses.cost_model import Cost, price
from ..analyses.isl_util import isl_name
from ..analyses.poly_from_view import regions_from_partition
from ..analyses.poly_region import Access, PolyRegion, Statement, TensorInfo
from ..ir.diagnostics import fail
from ..ir.expr import Expr
from ..ir.tiny import GroupOp, Ops, Program
from ..ir.user_names import original_ids
from .api import Extraction
from .boundaries import operand_reads
from .cost import Needs, SearchingCost, SizeCost, register
from .extract import solve
from .graph import EGraphView, export
from ..knobs import price_symbol_size
from .legality import violations
from .merge_search import Limits, merge_phase
from .partition_search import apply, default_fused, masks, moves, site_values
from .state import EGraphState
from .stream import BLOCK, groups
from .segment import segment
from .segment_stitch import SegmentedState, merge_reports, stitch
from .totiny import to_tiny

MAX_ROUNDS = 64  # rounds of the exact boundary search
EXACT_SITES = 24  # a program with at most this many sites is polished by the descent after the merge search
FUSE_ROUNDS = 4  # rounds of the fuse-only descent that polishes a larger program (recomputed values)


def default_symbol_size() -> int:
    """Size of a symbol --bind leaves unbound, for pricing (knob POLYSAT_PRICE_SYMBOL_SIZE, default 256)."""
    return price_symbol_size()


def program_symbols(program: Program) -> list:
    out: dict = {}
    for n in program.nodes:
        for d in n.shape:
            if isinstance(d, Expr):
                for v in sorted(d.variables(), key=str):
                    out[str(v)] = None
    return list(out)


def bind_params(program: Program, bind: "dict | None" = None) -> dict:
    """Every symbol of program bound: from bind, else default_symbol_size()."""
    bind = dict(bind or {})
    syms = program_symbols(program)
    for k in bind:
        if k not in syms:
            fail("InvalidAttribute", "--bind", f"symbol {k!r} is not used by the model (symbols: {', '.join(syms) or 'none'})",
                 "Bind only the model's symbols.")
    params = {s: int(bind.get(s, default_symbol_size())) for s in syms}
    check_addressable(program, params)
    return params


def check_addressable(program: Program, params: dict) -> None:
    """Every tensor's size under the binding stays below 2**62 elements (int64 indices; isl takes
    64-bit values), else E1007 at the user's name for it."""
    from ..ir.infer import MAX_ELEMENTS
    from ..ir.shapes import bind as bind_shape, fmt_shape
    for n in program.nodes:
        shape = bind_shape(n.shape, params)
        if math.prod(shape) >= MAX_ELEMENTS:
            fail("UnaddressableShape", n.tag or n.id, f"shape {fmt_shape(n.shape)} is {list(shape)} with "
                 f"{', '.join(f'{k}={v}' for k, v in sorted(params.items()))}: beyond 64-bit addressing (< 2**62)",
                 "Use smaller symbolic coefficients, or bind smaller sizes with --bind.")


# ---- cuts and legality on Tiny IR ----------------------------------------------------------------

_reads = operand_reads


def _contraction_muls(p: Program) -> set:
    """MUL nodes that a REDUCE(SUM) reads: with the REDUCE (and widening casts of their operands)
    they are one contraction (CONTRACT = MUL -> REDUCE(SUM), docs/DESIGN.md §Tiny IR; one Poly-View block)."""
    out = set()
    for c in p.nodes:
        if c.op == Ops.REDUCE and str(c.arg["op"]).upper() == "SUM":
            q = _reads(p, c)[0][1]
            if q.op == Ops.MUL:
                out.add(q.id)
    return out


def _widens(p: Program, n) -> bool:
    return n.op == Ops.CAST and n.dtype.is_float and p[n.src[0]].dtype.is_float and \
        p[n.src[0]].dtype.itemsize < n.dtype.itemsize


def all_cuts(p: Program) -> set:
    """Every edge from a compute producer to a compute consumer, except inside a contraction (its
    MUL, and the widening casts of its operands, stay with the REDUCE): one kernel per op."""
    cuts, muls = set(), _contraction_muls(p)
    for c in p.nodes:
        if c.op in GroupOp.Movement or c.op in GroupOp.Leaf:
            continue
        for edge, node, _, _ in _reads(p, c):
            if node.op in GroupOp.Leaf or node.op in GroupOp.Movement:
                continue
            if node.id in muls and c.op == Ops.REDUCE or c.id in muls and _widens(p, node):
                continue
            cuts.add(edge)
    return cuts


# ---- pricing, cached by region content ------------------------------------------------------------

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?=\s*\[)")  # tuple names only: a symbol may share a tensor's name


def canonical(region: PolyRegion) -> PolyRegion:
    """region with statements S0.. and tensors T0..: equal kernels from different extractions (or
    layers) compare equal, so the price caches hit."""
    ren: dict = {}
    for k, s in enumerate(region.statements):
        ren[s.name] = f"S{k}"
    j = 0
    for t in region.tensors:  # inputs too: the same layer over other weights is the same kernel
        if t.name not in ren:
            ren[t.name] = f"T{j}"
            j += 1

    def sub(text: str) -> str:
        return _NAME.sub(lambda mt: ren.get(mt.group(0), mt.group(0)), text)

    tensors = tuple(TensorInfo(ren[t.name], t.shape, t.dtype, t.role) for t in region.tensors)
    stmts = tuple(Statement(ren[s.name], sub(s.domain), tuple(Access(ren[a.tensor], sub(a.relation)) for a in s.reads),
                            Access(ren[s.write.tensor], sub(s.write.relation)), s.flops, s.unit, s.combine,
                            s.loop_order) for s in region.statements)
    return PolyRegion("kernel", tensors, stmts, region.params, tuple(ren[s] for s in region.stream), region.stream_block,
                      tuple(ren[s] for s in region.stream_recompute))


@dataclass
class Priced:
    """One kernel of a partition with its Poly Core region and price."""
    kernel: object  # egraph.partition.Kernel
    region: "PolyRegion | None"  # None: a kernel with no statement (a pure copy of memory)
    cost: "Cost | None"


def mark_streams(prog: Program, part, regions: list) -> list:
    """regions with the streamed softmax-weighted sums of each kernel marked (PolyRegion.stream: the
    statements of their running max, sum and weighted sum, advancing BLOCK keys at a time), so Poly
    Core prices their internal values per key block (analyses/cost_model.py)."""
    gs = list(groups(prog).values())
    if not gs:
        return regions
    kernels = {k.name: k for k in part.kernels}
    out = []
    for r in regions:
        k = kernels.get(r.name)
        names = {s.name for s in r.statements}
        mine = [g for g in gs if k is not None and g.nodes <= k.nodes]
        marks = tuple(s for s in (f"S_{isl_name(i)}" for g in mine for i in g.reduces) if s in names)
        again = tuple(s for s in (f"S_{isl_name(i)}" for g in mine if g.passes == 2 for i in _rewalked(prog, k, g))
                      if s in names)
        out.append(dataclasses.replace(r, stream=marks, stream_block=BLOCK, stream_recompute=again) if marks else r)
    return out


def _rewalked(prog: Program, k, g) -> list:
    """The compute nodes a two-pass stream evaluates in both passes: the scores (their cone inside
    kernel k) and the exponentials."""
    out, stack, seen = [g.roles[r] for r in ("shift", "scaled", "exp")], [g.s], set()
    while stack:
        i = stack.pop()
        if i in seen or i not in k.nodes or i in k.inputs:
            continue
        seen.add(i)
        if prog[i].op not in GroupOp.Movement and prog[i].op != Ops.CONST:
            out.append(i)
        stack.extend(prog[i].src)
    return out


def price_kernels(prog: Program, part, params: dict, arch: str) -> list:
    regions = {r.name: r for r in mark_streams(prog, part, regions_from_partition(prog, part, params))}
    out = []
    for k in part.kernels:
        r = regions.get(k.name)
        c = None if r is None else dataclasses.replace(price(canonical(r), arch), region=k.name)
        out.append(Priced(k, r, c))
    return out


def total_us(priced: list) -> float:
    return sum(p.cost.time_est_us for p in priced if p.cost is not None)


# ---- the boundary search ---------------------------------------------------------------------------

AVOID = 1e6  # size price of an e-node a site decision rules out (finite: a cycle may leave no other term)
AVOID_STREAM = 1e12  # ... and of one a stream decision rules out: above any chain of AVOIDs, so the other
# spelling wins even where the loaded term itself leans on a ruled-out node (a cycle through a cut)


class _Masked(SizeCost):
    """Size, with the e-nodes a site decision rules out priced far above any term."""
    name = "masked"

    def __init__(self, excluded: frozenset, hard: frozenset = frozenset()):
        self.excluded, self.hard = excluded, hard

    def enode_cost(self, node, view) -> float:
        if node in self.hard:
            return AVOID_STREAM
        return AVOID if node in self.excluded else super().enode_cost(node, view)


def _computes_reduction(view: EGraphView, chosen: dict, value) -> bool:
    """Whether the chosen term of class ``value`` computes a reduction in its own kernel (a Reduce or a
    streamed SoftmaxSum reached before any cut read): such a value is no cheap value to recompute."""
    stack, seen = [value], set()
    while stack:
        c = stack.pop()
        if c is None or c in seen or c not in chosen:
            continue
        seen.add(c)
        n = chosen[c]
        if n.op in ("Reduce", "SoftmaxSum"):
            return True
        if not _is_cut(n, view):
            stack.extend(n.children)
    return False


def _is_cut(n, view: EGraphView) -> bool:
    return n.op == "Read" and any(m.op == "Mat" for m in view.classes[n.children[0]])


def stream_sites(view: EGraphView) -> dict:
    """class -> (its other e-nodes, its SoftmaxSum e-nodes) for each value rules/streaming.egg can
    stream: the decision unit is "is this softmax-weighted sum streamed" (taking it rules the other
    spellings of the value out, as fusing a site rules its cut reads out)."""
    out: dict = {}
    for c, ns in view.classes.items():
        ss = tuple(n for n in ns if n.op == "SoftmaxSum")
        # one pass (online) is the same work as two passes minus the second walk over the scores:
        # where the rules allow it, streaming takes it
        keep = tuple(n for n in ss if n.args[1] == "1") or ss
        rest = tuple(n for n in ns if n not in keep)
        if ss and any(n.op != "SoftmaxSum" for n in ns):
            out[c] = (rest, ss)
    return out


def streamed_terms(view: EGraphView, chosen: dict, roots: list) -> dict:
    """chosen with every softmax-weighted sum rules/streaming.egg can stream taken streamed (its
    SoftmaxSum e-node), restricted to the classes the roots then reach."""
    ch = dict(chosen)
    for c, (_, ss) in stream_sites(view).items():
        if c in ch:
            ch[c] = next((n for n in ss if n.args[1] == "1"), ss[0])
    out, stack = {}, [r for r in roots if r in ch]
    while stack:
        x = stack.pop()
        if x in out or x not in ch:
            continue
        out[x] = ch[x]
        stack.extend(ch[x].children)
    return out


def chosen_terms(best: dict, roots: list) -> dict:
    """class -> the e-node an extraction ``best`` (class -> choice) takes, for the classes the roots reach."""
    chosen, stack = {}, list(roots)
    while stack:
        c = stack.pop()
        if c not in chosen:
            chosen[c] = best[c].node
            stack.extend(best[c].node.children)
    return chosen


def sites(view: EGraphView) -> dict:
    """Mat class -> (cut e-nodes reading it, their classes' other e-nodes), for each Mat some read of
    which has a fused alternative: the decision unit is "is this value materialized"; and the stream
    decisions (stream_sites), in the same form."""
    out: dict = {}
    for c, ns in view.classes.items():
        cut = [n for n in ns if _is_cut(n, view)]
        other = [n for n in ns if not _is_cut(n, view)]
        if cut and other:
            for n in cut:
                cs, os_ = out.setdefault(n.children[0], ([], []))
                cs.append(n)
                os_.extend(o for o in other if o not in os_)
    return {m: (tuple(a), tuple(b)) for m, (a, b) in out.items()} | stream_sites(view)


@dataclass
class Candidate:
    fused: frozenset  # site classes decided "fuse"
    extraction: "Extraction | None"
    priced: list = field(default_factory=list)
    illegal: list = field(default_factory=list)
    total: float = math.inf  # modelled µs (inf: infeasible or illegal)


@dataclass
class Search:
    """The boundary search's result: the chosen candidate, the baseline (every site cut) and the
    fusions tried and rejected (for --explain and the benches: ``baseline`` and ``rejected`` are priced
    on first access; the search itself does not need them)."""
    best: Candidate
    baselines: Callable  # () -> Candidate, every site cut
    rejections: Callable  # () -> list of Rejection
    evaluations: int  # partitions priced whole
    sites: dict = field(default_factory=dict)  # Mat class -> (cut e-nodes, fused e-nodes)
    streamed: list = field(default_factory=list)  # Streamed: the stream decisions taken, with both prices
    stop: str = "exhausted"  # why the merge search ended (egraph/merge_search.py)
    nodes: int = 0  # subproblems of the merge search
    groups_priced: int = 0  # candidate kernels the merge search priced

    @functools.cached_property
    def baseline(self) -> Candidate:
        return self.baselines()

    @functools.cached_property
    def rejected(self) -> list:
        return self.rejections()


class ModelCost(SearchingCost):
    """Poly Core priced extraction (see the module docstring). ``params`` binds symbols (missing ones
    get default_symbol_size()), ``arch`` picks the device table; both come from the pipeline's --bind
    and --arch (``needs``)."""
    name = "model"
    needs = Needs(arch=True, params=True, search=True)

    def __init__(self, params: "dict | None" = None, arch: str = "sm90", max_rounds: int = MAX_ROUNDS,
                 exact_sites: int = EXACT_SITES, limits: "Limits | None" = None):
        self.params, self.arch, self.max_rounds, self.exact_sites = dict(params or {}), arch, max_rounds, exact_sites
        self.limits = limits if limits is not None else Limits.from_knobs()  # POLYSAT_SEARCH_PRICES, _SECONDS

    def enode_cost(self, node, view) -> float:
        return SizeCost().enode_cost(node, view)

    def for_program(self, program: Program, params: dict) -> "ModelCost":
        """This model for a part of the program (a segment): params restricted to its symbols."""
        mine = {k: v for k, v in params.items() if k in program_symbols(program)}
        return type(self)(mine, self.arch, self.max_rounds, self.exact_sites, self.limits)

    # the search proper
    def search(self, state: "EGraphState | SegmentedState", stream: bool = True) -> Search:
        """The boundary search; with stream=False no value is streamed (the two-pass partition). A
        segmented program is searched once per distinct segment and stitched (egraph/segment_stitch.py)."""
        if isinstance(state, SegmentedState):
            params = bind_params(state.program, self.params)
            found = {k: self.for_program(st.program, params).search(st, stream) for k, st in state.states.items()}
            return stitch(state, found)
        view = export(state)
        roots = [view.by_index[state.index[nid]] for _, nid in state.program.outputs]
        params = bind_params(state.program, self.params)
        st = sites(view)
        streams = frozenset(stream_sites(view))
        memo: dict = {}

        extracted: dict = {}

        def extract(fused: frozenset) -> Candidate:
            """The candidate of a decision set, its terms chosen, not yet checked or priced."""
            if fused not in extracted:
                excl, hard, kept = masks(view, st, streams, fused)
                best, _ = solve(view, _Masked(excl, hard))
                cand = Candidate(fused, None)
                if all(r in best and best[r].total < math.inf for r in roots):
                    chosen = chosen_terms(best, roots)
                    prog, part = to_tiny(state, view, chosen, roots, kept)
                    cand.extraction = Extraction(prog, part, 0.0, chosen, tuple(roots))
                extracted[fused] = cand
            return extracted[fused]

        def evaluate(fused: frozenset, price_illegal: bool = False) -> Candidate:
            """The candidate checked and priced (an illegal one is priced only when asked: --explain)."""
            cand = extract(fused)
            if fused not in memo and cand.extraction is not None:
                cand.illegal = violations(view, fused, cand.extraction.chosen)  # the rules' conflicts (rules/fusion.egg)
            memo[fused] = cand
            if cand.extraction is not None and not cand.priced and (price_illegal or not cand.illegal):
                cand.priced = price_kernels(cand.extraction.program, cand.extraction.partition, params, self.arch)
                t = total_us(cand.priced)
                cand.extraction = dataclasses.replace(cand.extraction, cost=t)
                cand.total = math.inf if cand.illegal else t
            return cand

        base = extract(frozenset())  # every site cut; priced on demand (Search.baseline)
        if base.extraction is None:
            fail("InternalError", "extraction", "no term with every kernel boundary cut")
        seed = evaluate(default_fused(state, view, st, streams))  # the loaded default partition
        # a group is judged as it is realized: its softmax-weighted sums streamed (the realized partition
        # is checked again on its own extraction below)
        grouped = streamed_terms(view, base.extraction.chosen, roots) if stream else base.extraction.chosen
        cur = seed
        # the global merge search over the one-kernel-per-op partition (egraph/merge_search.py)
        merged, merge, merge_rejected = merge_phase(state, view, st, roots, base, params, self.arch,
                                                    lambda sites: violations(view, sites, grouped), self.limits, seed.fused)
        big = len(st) > self.exact_sites
        # realized: streaming every softmax-weighted sum at once first on a large program (the merge
        # search's space has no streams), then the merge search's decisions alone
        # (on a small one, streamed when the merge search's decisions alone are illegal)
        tries = ([merged | streams] if stream and big and streams else []) + [merged] + \
            ([merged | streams] if stream and not big and streams else [])
        for fused in tries if merged else []:
            cand = evaluate(frozenset(fused))
            if cand.total < cur.total:
                cur = cand
                break
        if cur.total == math.inf:  # neither is legal: every site cut
            cur = evaluate(frozenset())
        value_of = site_values(view, st)  # Mat site -> the class of the value it materializes

        def live(cand: Candidate) -> list:  # sites whose cut the extraction actually uses
            ch = cand.extraction.chosen
            return [m for m in st if (m in ch or value_of.get(m) in ch) and m not in cand.fused
                    and (stream or m not in streams)]
        # a few sites left: a descent over them in the e-graph (recomputed values, streams) polishes
        exact = not big and len(live(cur)) <= self.exact_sites
        if stream and not exact and streams and not streams <= cur.fused:
            cand = evaluate(cur.fused | streams)  # stream every softmax-weighted sum at once
            if cand.total < cur.total:
                cur = cand
        # on a small program the descent may cut a merge search fusion again (the merge search prices a
        # group on its Poly-View, the whole partition is priced as the backend binds it); on a large one it
        # only fuses values that compute no reduction (elementwise, movement, casts), for at most FUSE_ROUNDS
        # rounds: a value whose readers end in different kernels is outside the merge search's space (a
        # member's readers all lie in its group), and recomputing it in each reader's kernel (one-to-many)
        # is priced here
        kept = frozenset()

        def open_sites(cand: Candidate) -> list:  # the sites the descent moves: on a large program, cheap values
            return live(cand) if exact else [m for m in live(cand) if m not in streams
                                             and not _computes_reduction(view, cand.extraction.chosen, value_of.get(m))]
        rounds = self.max_rounds if exact else FUSE_ROUNDS
        for _ in range(rounds):
            gain = []
            for kind in ("fuse", "cut") if exact else ("fuse",):  # cutting again is tried once fusing gains nothing
                tried = sorted(((evaluate(apply(cur.fused, mv)), mv) for mv in moves(cur.fused, open_sites(cur), streams, kept)
                                if mv[0] == kind), key=lambda km: km[0].total)
                gain = [(k, mv) for k, mv in tried if k.total < cur.total]
                if gain:
                    break
            if not gain:
                break
            cur = gain[0][0]
            for _, mv in gain[1:]:  # apply the other improving moves too, while each still improves
                nxt = evaluate(apply(cur.fused, mv))
                if nxt.total < cur.total:
                    cur = nxt
        streamed = [Streamed(c, cur.total, len(cur.priced), int(cur.extraction.chosen[c].args[1]))
                    for c in sorted(streams & cur.fused) if cur.extraction.chosen.get(c) is not None
                    and cur.extraction.chosen[c].op == "SoftmaxSum"]
        final = cur

        def rejections() -> list:  # priced on demand (--explain): the search does not need them
            out, deltas = [], merge_rejected() if not exact else {}
            moved = open_sites(final)
            for c in live(final):
                if c in deltas:
                    sep, fused, why, n = deltas[c]
                    out.append(Rejection(c, why, sep, fused, n, n - 1, local=True))
                    continue
                cand = evaluate(final.fused | {c}, price_illegal=True)
                bad = "; ".join(b[3] for b in cand.illegal)
                why = ("illegal: " + original_ids(bad, state.program, cand.extraction.program)) if cand.illegal else \
                    ("no fused term" if cand.extraction is None else "priced higher" if cand.total >= final.total
                     else f"not reached: the descent stopped after its {rounds} rounds" if c in moved
                     else "not tried: its value computes a reduction, and a large program's descent fuses only "
                          "values that compute none")
                fused = total_us(cand.priced) if cand.extraction is not None else None
                out.append(Rejection(c, why, final.total, fused, len(final.priced), len(cand.priced)))
            return out
        return Search(cur, lambda: evaluate(frozenset(), price_illegal=True), rejections, len(memo), st, streamed,
                      merge.stop, merge.nodes, merge.priced)


@dataclass(frozen=True)
class Rejection:
    """A fusion the search did not take: fusing away the materialization of the value of class
    ``mat`` (every read of it), with the prices of both partitions (``local``: the two kernels
    involved only, from the merge phase)."""
    mat: int
    why: str
    separate_us: float
    fused_us: "float | None"
    kernels_before: int
    kernels_after: int
    local: bool = False


@dataclass(frozen=True)
class Streamed:
    """A stream decision the search took: the value of class ``value`` as one pass over the keys
    (SoftmaxSum), in a partition of ``kernels`` kernels modelled at ``total_us``."""
    value: int
    total_us: float
    kernels: int
    passes: int  # walks over the keys: 1 online, 2 max and sum first


register(ModelCost)


def saturate_unfused(program: Program, rules_dirs=None, limits=None, builtin: bool = True) -> tuple:
    """(EGraphState, RunReport) with program loaded one kernel per op (every compute edge cut) and
    the rules run: the fused alternatives come from rules/fusion.egg, the streamed softmax-weighted sums
    from rules/streaming.egg (unless POLYSAT_STREAMING=0). A program of repeated segments
    (egraph/segment.py) gives a SegmentedState: each distinct segment saturated once."""
    segs = segment(program)
    if len(segs) > 1:
        done: dict = {}
        for sg in segs:
            if sg.key not in done:
                done[sg.key] = _saturate_one(sg.program, rules_dirs, limits, builtin)
        states = {k: st for k, (st, _) in done.items()}
        rep = merge_reports([r for _, r in done.values()])
        return SegmentedState(program, segs, states, {k: r for k, (_, r) in done.items()}, states[segs[0].key].files), rep
    return _saturate_one(program, rules_dirs, limits, builtin)


def _saturate_one(program: Program, rules_dirs, limits, builtin: bool) -> tuple:
    from ..knobs import streaming
    from .saturate import OPT_IN, default_schedule, rule_files, run
    from .state import new_state
    st = new_state(program, rule_files(rules_dirs, builtin), cuts=all_cuts(program))
    opt_in = tuple(r for r in OPT_IN if r != "streaming" or streaming())
    return st, run(st, default_schedule(st.rulesets, opt_in), limits)

