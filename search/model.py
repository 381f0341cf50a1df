"""The ``model`` cost: extraction that picks kernel boundaries by Poly Core's modelled time
(docs/DESIGN.md §Cost model, §Fusion).

Kernel boundaries are terms: a *site* is a materialized value, ``Mat(x)``, some read
``Read(Mat(x), s, m)`` of which has a fused alternative from ``rules/fusion.egg`` (``View(x, s, m)``
or forms derived from it). A partition is a decision per site (cut | fuse: every read of x fused);
extraction under a decision prices the other kind of e-node there out and takes the smallest terms
elsewhere (the greedy DAG extractor, so a shared subterm is paid once). Its price is the sum of the
kernels' ``analyses/price.py price`` (time_est_us on the shapes ``params`` binds), each cached by
region content (pricing/kernels.py: tensor and statement names canonicalized), so a kernel met again, in another
candidate or another identical layer, is priced once.

The search: two complete partitions are realized and priced first, one kernel per op (every site cut)
and the loaded default partition's decisions (search/sites.py, what ``--cost size`` keeps), the cheaper
one the incumbent (one kernel per op only where the default partition is not below its admissible floor,
merge.partition_floor; otherwise on demand); the global merge search (search/merge.py: a bounded
branch and bound over the groupings of the one-kernel-per-op kernels, exact when its stop reason is
"exhausted") chooses the kernels by the sum of their prices; its decisions are realized in the e-graph
and priced whole, and replace the incumbent only when cheaper, so the search never ends above one kernel
per op or ``--cost size``, whichever limit stops it.
With at most EXACT_SITES sites a descent then polishes: each round prices fusing every site still cut
(and, once that gains nothing, cutting every fused site again), takes the best move, then the other
improving ones while they still improve, until none improves; it may cut a merge search fusion again
(the merge search prices each group alone, a whole partition prices its kernels together). A larger program instead tries streaming every softmax-weighted sum at once,
then at most FUSE_ROUNDS rounds of the descent's fuse moves alone, taken as soon as they lower the total, in
batches that double while taken (first improvement: where most moves improve, a round prices a few batches instead
of one partition per move; a partition priced only until its kernels add up to more than the incumbent's,
search/reprice.py), over the sites whose value computes no reduction (a value read by several kernels, outside the
merge search's space, recomputed in each where that prices lower) and, in a round where those gain nothing, over
the sites whose value computes one (a row reduction into its normalization, the scores into the attention). Before
the descent, every materialization
that holds several values (``sites.alternatives``: the sibling GEMMs' concatenation, rules/siblings.egg;
its GEMMs are separate kernels in the merge search's space) is priced taken and kept where cheaper, in batches
alike. A cut site whose read composes to the value itself (an identity read) is materialized by the partition
(totiny.to_tiny), not by the extraction. A program of repeated blocks (search/segment.py) is searched
once per distinct segment and stitched (search/stitch.py, ``saturate_unfused`` and ``search``); a segment of
the structure of one searched before (the same block at other extents) takes its decisions where they are legal
and priced at or below both baselines (search/transfer.py).
Legality is the rules' (rules/fusion.egg ``fusion-facts``, ``fusion-conflicts``): a candidate, or a group
of the merge search, that fuses every site of one of their conflicts (a reduction read many-to-many,
GEMM -> GEMM) on a path its extraction holds is illegal (search/legality.py ``violations``).

Streaming (docs/DESIGN.md §Streaming, rules/streaming.egg) adds a second kind of decision: a value whose class holds a
``SoftmaxSum`` is either streamed (one kernel walks the keys: its other spellings are ruled out) or
not (the SoftmaxSum is ruled out, the two-kernel softmax -> P V stays). The search prices both like
any fusion; streamed kernels are priced per key block (``mark_streams``, analyses/price.py), and
``search(stream=False)`` gives the best partition without streaming (for --explain).
"""
from __future__ import annotations

import dataclasses
import math
import time

from ..egraph.api import Extraction
from ..egraph.boundaries import all_cuts
from ..egraph.cost import Needs, SearchingCost, SizeCost, register
from ..egraph.extract import solve
from ..egraph.graph import export
from ..egraph.region_synth import synthesize
from ..egraph.saturate import OPT_IN, StopReason, default_limits, default_schedule, rule_files, run
from ..egraph.state import EGraphState, new_state, pooled_state
from ..egraph.totiny import to_tiny
from ..ir import progress
from ..ir.diagnostics import PolysatError, fail
from ..ir.tiny import Program
from ..ir.user_names import original_ids
from ..knobs import streaming
from ..pricing.kernels import price_kernels, total_us
from ..pricing.symbols import bind_params, program_symbols
from .branches import in_program, parts
from .legality import violates, violations
from .merge import MergeResult, SearchLimits, merge_phase, partition_floor
from .reprice import Repricer
from .result import Candidate, Rejection, Search, Streamed
from .size_cut import halve
from .sites import (Masked, alternatives, apply, chosen_terms, computes_reduction, default_fused, masks, moves, site_values, sites,
                    stream_sites, streamed_terms)
from .stitch import SegmentedState, merge_reports, stitch
from .transfer import carried

MAX_ROUNDS = 64  # rounds of the exact boundary search
EXACT_SITES = 24  # a program with at most this many sites is polished by the descent after the merge search
FUSE_ROUNDS = 4  # rounds of the fuse-only descent that polishes a larger program (recomputed values)
GROWTH = 2  # a batch of the descent's moves grows by this factor each time it is taken (1: one move at a time)
CARRIED = "the decisions of the segment of the same structure searched before"  # the stop reason then


@register
class ModelCost(SearchingCost):
    """Poly Core priced extraction (see the module docstring). ``params`` binds symbols (missing ones
    get POLYSAT_PRICE_SYMBOL_SIZE), ``arch`` picks the device table; both come from the pipeline's --bind
    and --arch (``needs``)."""
    name = "model"
    needs = Needs(arch=True, params=True, search=True)

    def __init__(self, params: "dict | None" = None, arch: str = "sm90", max_rounds: int = MAX_ROUNDS,
                 exact_sites: int = EXACT_SITES, limits: "SearchLimits | None" = None):
        self.params, self.arch, self.max_rounds, self.exact_sites = dict(params or {}), arch, max_rounds, exact_sites
        self.limits = limits if limits is not None else SearchLimits.from_knobs()  # POLYSAT_SEARCH_PRICES, _SECONDS

    @classmethod
    def saturate(cls, program: Program, rules_dirs=None, limits=None) -> tuple:
        """One kernel per op with the opt-in fusion rules (``saturate_unfused``)."""
        return saturate_unfused(program, rules_dirs, limits)

    def enode_cost(self, node, view) -> float:
        return SizeCost().enode_cost(node, view)

    def for_program(self, program: Program, params: dict, exact_sites: "int | None" = None) -> "ModelCost":
        """This model for a part of the program (a segment): params restricted to its symbols."""
        mine = {k: v for k, v in params.items() if k in program_symbols(program)}
        return type(self)(mine, self.arch, self.max_rounds, self.exact_sites if exact_sites is None else exact_sites,
                          self.limits)

    # the search proper
    def search(self, state: "EGraphState | SegmentedState", stream: bool = True, like: "tuple | None" = None) -> Search:
        """The boundary search; with stream=False no value is streamed (the two-pass partition). A
        segmented program is searched once per distinct segment and stitched (search/stitch.py); a segment of
        the structure of one searched before (``like``: its EGraphState and decisions) takes those decisions
        where they are legal and priced at or below both baselines here (search/transfer.py)."""
        if isinstance(state, SegmentedState):
            params = bind_params(state.program, self.params)
            found: dict = {}
            structure = {sg.key: sg.structure for sg in state.segments}
            first: dict = {}  # structure -> (the first segment of it searched, its decisions)
            # the exact descent polishes a segment only where it would polish the whole program: its segments'
            # sites together (the whole program's, but for the boundaries) at most exact_sites
            n = sum(len(sites(export(state.states[sg.key]))) for sg in state.segments)
            exact = self.exact_sites if n <= self.exact_sites else 0
            for j, (k, st) in enumerate(state.states.items()):
                with progress.stage(f"segment {j + 1} of {len(state.states)} distinct ({len(st.program.nodes)} nodes)"):
                    found[k] = self.for_program(st.program, params, exact).search(st, stream, first.get(structure[k]))
                    first.setdefault(structure[k], (st, found[k].best.fused))
            out = stitch(state, found, lambda prog, part: price_kernels(prog, part, params, self.arch, by_kernel=True))
            if state.halved:
                out.stop += (f"; {state.halved} part(s) halved by size: their saturation stopped at a limit before "
                             f"the fusion legality facts (search/size_cut.py)")
            return out
        deadline = time.process_time() + self.limits.total  # the polish and the descent stop there
        view = export(state)
        roots = [view.by_index[state.index[nid]] for _, nid in state.program.outputs]
        params = bind_params(state.program, self.params)
        st = sites(view)
        streams = frozenset(stream_sites(view))
        memo: dict = {}
        reprice = Repricer(params, self.arch)  # each distinct kernel priced once (search/reprice.py)

        extracted: dict = {}
        terms_of: dict = {}

        def terms(fused: frozenset) -> "dict | None":
            """The terms a decision set's extraction chooses (None: no complete term), before any Tiny IR."""
            if fused not in terms_of:
                excl, hard, _ = masks(view, st, streams, fused)
                best, _ = solve(view, Masked(excl, hard))
                terms_of[fused] = chosen_terms(best, roots) if all(r in best and best[r].total < math.inf
                                                                   for r in roots) else None
            return terms_of[fused]

        def extract(fused: frozenset) -> Candidate:
            """The candidate of a decision set, its terms chosen and converted, not yet checked or priced."""
            if fused not in extracted:
                cand, chosen = Candidate(fused, None), terms(fused)
                if chosen is not None:
                    prog, part = to_tiny(state, view, chosen, roots, masks(view, st, streams, fused)[2])
                    cand.extraction = Extraction(prog, part, 0.0, chosen, tuple(roots))
                extracted[fused] = cand
            return extracted[fused]

        def evaluate(fused: frozenset, price_illegal: bool = False, above: float = math.inf,
                     priced: "list | None" = None) -> Candidate:
            """The candidate checked and priced (an illegal one is priced, and converted to Tiny IR, only when
            asked: --explain). ``above``: a price the caller needs it below; where its kernels add up to more (some
            priced, the rest at their floors), pricing stops and the candidate is left unpriced, its total inf (it is
            priced whole when asked again without). ``priced``: its kernels already priced (``price_kernels``), kept by the repricer."""
            if fused not in memo and fused not in extracted and not price_illegal and terms(fused) is not None:
                bad = violations(view, fused, terms(fused))  # the rules' conflicts (rules/fusion.egg)
                if bad:  # judged on its terms alone: no Tiny IR is built for a partition the search never takes
                    memo[fused] = Candidate(fused, None, illegal=bad)
                    return memo[fused]
            cand = extract(fused)
            if memo.get(fused) is not cand and cand.extraction is not None:
                cand.illegal = violations(view, fused, cand.extraction.chosen)
            memo[fused] = cand
            if cand.extraction is not None and not cand.priced and (price_illegal or not cand.illegal):
                if above <= cand.above:  # known to be priced above it
                    return cand
                priced = reprice(cand.extraction.program, cand.extraction.partition, above, priced)
                if priced is None:
                    cand.above = above
                    return cand
                cand.priced = priced
                t = total_us(cand.priced)
                cand.extraction = dataclasses.replace(cand.extraction, cost=t)
                cand.total = math.inf if cand.illegal else t
            return cand

        base = extract(frozenset())  # every site cut; priced on demand (Search.baseline)
        if base.extraction is None:
            fail("InternalError", "extraction", "no term with every kernel boundary cut")
        # the two complete partitions priced first, the cheaper one the incumbent: one kernel per op (every
        # site cut: legal, since no conflict fuses nothing) and the loaded default partition (what --cost
        # size keeps); every later step replaces the incumbent only by a cheaper one, so the search never
        # returns a partition priced above either, whichever limit stops it
        # one kernel per op is priced only where the default partition is not below its admissible lower bound
        # (merge.partition_floor: a mixture of 32 experts has 1,048 kernels of one op, their floor alone far above the
        # default partition), and only until its kernels add up to more than both the default partition and a carried
        # one (below: a ResNet block at other extents), so the incumbent is the same either way; so too where the
        # polish asks whether it prices below the merge search's answer
        seed = evaluate(default_fused(state, view, st, streams))
        floor = partition_floor(base.extraction.program, base.extraction.partition, params, self.arch)
        # a segment of the structure of one searched before: its decisions, where legal and not priced above either
        # baseline here, are the answer (the blocks of a ResNet's stages at other extents)
        given = None if state.no_facts or like is None or not like[1] else \
            carried(like, view, state, st, streams if stream else frozenset())

        def unfused_below(price: float) -> bool:
            """Whether one kernel per op prices below ``price``: its kernels priced only until they add up to more
            (prices are never negative), the whole partition evaluated where they do not."""
            got = None
            if frozenset() not in memo:
                got = price_kernels(base.extraction.program, base.extraction.partition, params, self.arch, above=price)
                if got is None:
                    return False
            return evaluate(frozenset(), priced=got).total < price  # (priced whole by then: not again)

        by_name: dict = {}

        def alone(name: str) -> "float | None":
            """Kernel ``name``'s price in one kernel per op, where that partition is priced already."""
            b = memo.get(frozenset())
            if b is None or not b.priced:
                return None
            if not by_name:
                by_name.update((p.kernel.name, p.cost.time_est_us) for p in b.priced)
            return by_name.get(name)
        known = min(seed.total, evaluate(given).total if given is not None else math.inf)
        if seed.total <= floor or not unfused_below(known):
            cur = seed
        else:
            cur = min(seed, evaluate(frozenset()), key=lambda c: (c.total, c is not seed))
        progress.note(f"{len(st)} sites; default partition {seed.total:.1f} µs, one kernel per op "
                      + (f"{evaluate(frozenset()).total:.1f} µs" if frozenset() in memo else f"above {floor:.1f} µs"))
        if state.no_facts:  # no rule said which fusions are illegal: only the two partitions legal by construction
            return Search(buildable(cur, (), lambda: evaluate(frozenset())), lambda: evaluate(frozenset()), lambda: [],
                          len(memo), st, [], f"not searched: {state.no_facts}", 0, 0)
        if given is not None and evaluate(given).total <= cur.total:
            cur = evaluate(given)
            merged, merge, merge_rejected = frozenset(), MergeResult({}, cur.total, CARRIED, 0, 0), lambda: {}
        else:
            # a group is judged as it is realized: its softmax-weighted sums streamed (the realized partition
            # is checked again on its own extraction below)
            grouped = streamed_terms(view, base.extraction.chosen, roots) if stream else base.extraction.chosen
            # the global merge search over the one-kernel-per-op partition (search/merge.py), its first path
            # the default partition's decisions; its polish starts from one kernel per op instead where the search
            # stopped above that price
            merged, merge, merge_rejected = merge_phase(state, view, st, roots, base, params, self.arch,
                                                        lambda sites: violations(view, sites, grouped), self.limits,
                                                        seed.fused, deadline, unfused_below, alone)
        progress.note(f"merge search: {merge.stop}, {merge.priced} groups priced")
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
        value_of = site_values(view, st)  # Mat site -> the class of the value it materializes

        def live(cand: Candidate) -> list:  # sites whose cut the extraction actually uses
            ch = cand.extraction.chosen
            return [m for m in st if (m in ch or value_of.get(m) in ch) and m not in cand.fused
                    and (stream or m not in streams)]
        # a few sites left: a descent over them in the e-graph (recomputed values, streams) polishes
        exact = not big and len(live(cur)) <= self.exact_sites
        done = merge.stop == CARRIED  # no polish: the decisions were searched in the segment they came from
        if stream and not exact and streams and not streams <= cur.fused and not done:
            cand = evaluate(cur.fused | streams)  # stream every softmax-weighted sum at once
            if cand.total < cur.total:
                cur = cand
        late = False  # the search's total CPU time ran out: the descent keeps what it has

        def taken(todo: list, step, usable) -> list:
            """First improvement in batches over ``todo`` (each item a change ``step(fused, item)`` of a decision
            set): the next ``size`` items ``usable`` from the incumbent are priced together (only until they add up
            to more than the incumbent) and taken together where they lower the total; ``size`` grows by ``GROWTH``
            after a batch is taken and halves after one is not, and a single item not taken is dropped, as is one
            not usable. Where most improve (a DenseNet's concatenations, a MobileViT's layers, its attentions' Q/K/V:
            the same change in every block) that prices a few candidates instead of one per item; where few do, a
            failed batch costs one candidate more than its items. Returns the (candidate, items) priced, best
            first."""
            nonlocal late, cur
            out, size = [], 1
            while todo:
                if time.process_time() > deadline:
                    late = True
                    break
                batch, fused, k = [], cur.fused, 0
                while k < len(todo) and len(batch) < size:
                    if not usable(fused, todo[k]):
                        del todo[k]
                        continue
                    batch.append(todo[k])
                    fused = step(fused, todo[k])
                    k += 1
                if not batch:
                    break
                cand = evaluate(fused, above=cur.total)
                out.append((cand, tuple(batch)))
                if cand.total < cur.total:
                    cur, size = cand, GROWTH * size
                    del todo[:len(batch)]
                elif len(batch) == 1:
                    del todo[0]
                else:
                    size = len(batch) // 2
            return sorted(out, key=lambda km: km[0].total)
        # a materialization that holds several values (the sibling GEMMs' concatenation) lies outside the merge
        # search's space (its kernels are the separate GEMMs): each is priced taken, its pieces' own
        # materializations fused away, and kept where cheaper
        alts = alternatives(view, st) if not done else {}
        taken(sorted(alts), lambda fused, c: (fused | alts[c]) - {c}, lambda fused, c: c not in fused and alts[c] - fused)
        # on a small program the descent may cut a merge search fusion again (the merge search prices a
        # group on its Poly-View, the whole partition is priced as the backend binds it); on a large one it
        # only fuses values that compute no reduction (elementwise, movement, casts), for at most FUSE_ROUNDS
        # rounds: a value whose readers end in different kernels is outside the merge search's space (a
        # member's readers all lie in its group), and recomputing it in each reader's kernel (one-to-many)
        # is priced here
        kept = frozenset()

        def open_sites(cand: Candidate, heavy: bool = False) -> list:
            """The sites the descent moves: on a large program, values that compute no reduction, or (heavy)
            those that do, tried once the cheap ones gain nothing."""
            return live(cand) if exact else [m for m in live(cand) if m not in streams and heavy ==
                                             computes_reduction(view, cand.extraction.chosen, value_of.get(m))]
        rounds = 0 if done else self.max_rounds if exact else FUSE_ROUNDS
        # a move is extracted only when its decision set breaks no conflict on the incumbent's own terms: the
        # path walk crosses a fused read (View) as it crosses a cut one (Read(Mat)), and a move changes the
        # extraction at its site's reads, so a conflict whose path the incumbent holds with every site fused is
        # taken as one the move's own extraction holds too (a heuristic, not a proof: on LLaMA-7B L1 and MoE-16
        # all 25 moves it skips were illegal on their own extraction, and all 51 others legal; a mixture's
        # experts give one such move each); --explain still extracts and checks each fusion it reports. On a large
        # program the descent takes the first improvement, in batches (``taken``)
        def priced_moves(kind: str, greedy: bool) -> list:
            """The moves of one kind from the incumbent, priced, best first (greedy, a large program: ``taken``)."""
            nonlocal late
            out = []
            heavy = kind == "fuse-heavy"
            todo = [mv for mv in moves(cur.fused, open_sites(cur, heavy), streams, kept) if mv[0] == kind.split("-")[0]]
            if greedy:  # illegal on the incumbent's own terms: not extracted (see above)
                return taken(todo, apply, lambda _, mv: not violates(view, apply(cur.fused, mv), cur.extraction.chosen,
                                                                      (mv[1],)))
            for mv in todo:
                if time.process_time() > deadline:
                    late = True
                    break
                if violates(view, apply(cur.fused, mv), cur.extraction.chosen, (mv[1],)):
                    continue  # illegal on the incumbent's own terms: not extracted (see above)
                out.append((evaluate(apply(cur.fused, mv)), mv))
            return sorted(out, key=lambda km: km[0].total)
        for _ in range(rounds):
            gain, start = [], cur
            # cutting again is tried once fusing gains nothing; on a large program, fusing a reduction's value
            for kind in ("fuse", "cut") if exact else ("fuse", "fuse-heavy"):
                gain = [(k, mv) for k, mv in priced_moves(kind, not exact) if k.total < start.total]
                if gain or late:
                    break
            if not gain:
                break
            if exact:  # the best move, then the other improving ones while each still improves
                cur = gain[0][0]
                for _, mv in gain[1:]:
                    nxt = evaluate(apply(cur.fused, mv))
                    if nxt.total < cur.total:
                        cur = nxt
            if late:
                break
        streamed = [Streamed(c, cur.total, len(cur.priced), int(cur.extraction.chosen[c].args[1]))
                    for c in sorted(streams & cur.fused) if cur.extraction.chosen.get(c) is not None
                    and cur.extraction.chosen[c].op == "SoftmaxSum"]
        cur = final = buildable(cur, memo.values(), lambda: evaluate(frozenset()))

        def rejections() -> list:  # priced on demand (--explain): the search does not need them
            out, deltas = [], merge_rejected() if not exact else {}
            moved = set(open_sites(final)) | set(open_sites(final, True))
            for c in live(final):
                if c in deltas:
                    sep, fused, why, n = deltas[c]
                    out.append(Rejection(c, why, sep, fused, n, n - 1, local=True))
                    continue
                cand = evaluate(final.fused | {c}, price_illegal=True)
                bad = "; ".join(b[3] for b in cand.illegal)
                why = ("illegal: " + original_ids(bad, state.program, cand.extraction.program)) if cand.illegal else \
                    ("no fused term" if cand.extraction is None else "priced higher" if cand.total >= final.total
                     else f"not tried: {CARRIED} were taken" if done
                     else f"not reached: the descent stopped after its {rounds} rounds" if c in moved and not late
                     else "not reached: the descent stopped at its time limit" if c in moved
                     else "not tried: a stream decision, taken for every softmax-weighted sum at once on a large "
                          "program")
                fused = total_us(cand.priced) if cand.extraction is not None else None
                out.append(Rejection(c, why, final.total, fused, len(final.priced), len(cand.priced)))
            return out
        stop = merge.stop + (f"; the descent stopped at the time limit ({self.limits.total:g} s CPU)" if late else "")
        return Search(cur, lambda: evaluate(frozenset(), price_illegal=True), rejections, len(memo), st, streamed,
                      stop, merge.nodes, merge.priced)


BUILD_TRIES = 8  # candidates the search tries to build, best first, before one kernel per op


def buildable(best: Candidate, priced, base) -> Candidate:
    """``best``, or where region synthesis refuses one of its kernels (E1505: a chain of resizes and convolutions
    recomputing its values at more index tuples than a kernel may, which Poly Core's price does not see: UperNet's
    head), the cheapest other legal candidate priced whose kernels it builds (of the BUILD_TRIES cheapest), else one
    kernel per op (``base()``, priced only then). Built once: the backend's synthesis meets the same kernels again
    (region_synth's kernel cache)."""
    if _builds(best):
        return best
    ranked = sorted((c for c in priced if c is not best and c.priced and not c.illegal and c.total < math.inf
                     and c.fused), key=lambda c: c.total)
    built = next((c for c in ranked[:BUILD_TRIES] if _builds(c)), None)
    return base() if built is None else built


def _builds(cand: Candidate) -> bool:
    """Whether region synthesis builds every kernel of the candidate (False only for E1505, its recompute bound)."""
    try:
        synthesize(cand.extraction.program, cand.extraction.partition)
        return True
    except PolysatError as e:
        if e.diagnostics[0].code != "E1505":
            raise
        progress.note(f"the partition at {cand.total:.3f} µs is not built: {e.diagnostics[0].why}")
        return False


def saturate_unfused(program: Program, rules_dirs=None, limits=None, builtin: bool = True) -> tuple:
    """(EGraphState, RunReport) with program loaded one kernel per op (every compute edge cut) and
    the rules run: the fused alternatives come from rules/fusion.egg, the streamed softmax-weighted sums
    from rules/streaming.egg (unless POLYSAT_STREAMING=0). A program of repeated segments
    (search/segment.py), or of identical blocks side by side (search/branches.py), gives a SegmentedState: each
    distinct segment saturated once. A segment (or the whole program) whose saturation stops at a limit before
    the fusion legality facts is halved (search/size_cut.py) and each half saturated in turn, within its share of
    the time and row limits (``_share``): a SegmentedState too, its report's seconds counting the saturations given
    up."""
    segs = parts(program)
    spent: list = []  # the reports of the saturations that stopped at a limit, their parts halved
    shares: dict = {}  # key of a part made by halving -> the limits it saturates within
    if len(segs) == 1:
        st, rep = _saturate_one(program, rules_dirs, limits, builtin)
        if not st.no_facts or (halves := halve(program)) is None:
            return st, rep
        segs, spent = [in_program(program, segs[0], h) for h in halves], [rep]
        shares = {h.key: _share(limits, h.program, program) for h in halves}
    done: dict = {}
    split: dict = {}  # segment key -> its halves
    files = rule_files(rules_dirs, builtin)  # read once for every segment
    todo, final = list(segs), []
    while todo:
        sg = todo.pop(0)
        if sg.key not in done and sg.key not in split:
            lim = shares.get(sg.key, limits)
            st, rep = _saturate_pooled(sg.program, rules_dirs, lim, builtin, files)
            halves = halve(sg.program) if st.no_facts else None
            if halves is None:
                done[sg.key] = (st, rep)
            else:
                split[sg.key], spent = halves, spent + [rep]
                shares.update((h.key, _share(lim, h.program, sg.program)) for h in halves)
        if sg.key in split:
            todo[:0] = [in_program(program, sg, h) for h in split[sg.key]]
        else:
            final.append(sg)
    states = {k: st for k, (st, _) in done.items()}
    rep = merge_reports([r for _, r in done.values()])
    rep = dataclasses.replace(rep, seconds=rep.seconds + sum(r.seconds for r in spent))
    return SegmentedState(program, final, states, {k: r for k, (_, r) in done.items()}, states[final[0].key].files,
                          halved=len(spent)), rep


PART_SECONDS, PART_ROWS = 2.0, 100_000  # the least share of the time and row limits a halved part saturates within


def _share(limits, part: Program, whole: Program):
    """The limits a part made by halving ``whole`` saturates within: whole's time and row limits in proportion to the
    part's nodes (at least PART_SECONDS and PART_ROWS), so a part that stops at a limit is given up in its share of the
    time (a half of a segment, in its share of the segment's). GLPN's
    halves stopped at the row limit in 12.6 and 14.4 s, a 207-node one at the 20 s time limit (731 e-nodes): 64 s of
    saturations given up, of 67."""
    lim = limits or default_limits()
    f = len(part.nodes) / len(whole.nodes)
    return dataclasses.replace(lim, seconds=max(PART_SECONDS, lim.seconds * f), rows=max(PART_ROWS, int(lim.rows * f)))


def _saturate_one(program: Program, rules_dirs, limits, builtin: bool) -> tuple:
    return _saturated(new_state(program, rule_files(rules_dirs, builtin), cuts=all_cuts(program)), limits)


def _saturate_pooled(program: Program, rules_dirs, limits, builtin: bool, files: "list | None" = None) -> tuple:
    """_saturate_one in the process's pooled e-graph (egraph/state.py pooled_state): the state keeps only its
    exported view, all a segment's search and stitch read. ``files``: the rule files, when already read."""
    files = rule_files(rules_dirs, builtin) if files is None else files
    with pooled_state(program, files, cuts=all_cuts(program)) as st:
        out = _saturated(st, limits)
        st.view = export(st)
    return out


def _saturated(st: EGraphState, limits) -> tuple:
    opt_in = tuple(r for r in OPT_IN if r != "streaming" or streaming())
    rep = run(st, default_schedule(st.rulesets, opt_in), limits)
    if rep.stop != StopReason.saturated:  # the legality facts and conflicts are the schedule's last phases
        st.no_facts = f"the saturation stopped at its {rep.stop.value.replace('_', ' ')} before the fusion legality facts"
    return st, rep


