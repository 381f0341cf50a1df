"""The merge search (search/merge.py) finds the optimum that an exhaustive enumeration of the
same space finds, priced by the same cost, on small random kernel graphs; and says which limit stopped it."""
import dataclasses
import itertools
import math
import random

import pytest

from polysat.search.merge import Item, SearchLimits, merge_search


def random_graph(rng: random.Random, n: int) -> list:
    prods = {i: sorted(rng.sample(range(i), k=min(i, rng.choice((0, 1, 1, 2))))) for i in range(n)}
    readers = {i: sorted(j for j in range(n) if i in prods[j]) for i in range(n)}
    return [Item(f"k{i}", bool(readers[i]) and rng.random() < 0.85, tuple(f"k{p}" for p in prods[i]),
                 tuple(f"k{r}" for r in readers[i])) for i in range(n)]


def pricing(rng: random.Random, items: list):
    lows = {it.name: rng.uniform(1.0, 3.0) for it in items}
    work = {it.name: rng.uniform(0.0, 4.0) for it in items}
    bad = {frozenset(rng.sample([it.name for it in items], 2))} if len(items) > 2 else set()

    def lower(root):
        return lows[root]

    def price(root, members):  # not additive: a group is cheaper or dearer than its parts
        h = random.Random(hash((root, tuple(sorted(members)))) & 0xFFFF).uniform(-1.0, 2.5)
        return lows[root] + max(0.0, sum(work[m] for m in members) * 0.6 + h)

    def legal(members):  # monotone: a group holding an illegal pair is illegal
        return not any(b <= members for b in bad)
    return price, lower, legal


def partitions(names: list):
    if not names:
        yield []
        return
    first, rest = names[0], names[1:]
    for p in partitions(rest):
        for i in range(len(p)):
            yield p[:i] + [p[i] | {first}] + p[i + 1:]
        yield p + [{first}]


def exhaustive(items: list, price, legal) -> float:
    """Every set partition of the kernels; a group is valid when it is legal and one root r holds it:
    every other member is a candidate whose readers all lie in the group."""
    by = {it.name: it for it in items}
    best = math.inf
    for part in partitions([it.name for it in items]):
        total = 0.0
        for g in part:
            ok_roots = [r for r in g if all(by[m].candidate and by[m].readers and set(by[m].readers) <= g
                                            for m in g - {r})]
            if len(ok_roots) != 1 or not legal(frozenset(g)):
                total = math.inf
                break
            total += price(ok_roots[0], frozenset(g))
        best = min(best, total)
    return best


@pytest.mark.parametrize("seed", range(40))
def test_finds_the_exhaustive_optimum(seed):
    rng = random.Random(seed)
    items = random_graph(rng, rng.randint(2, 7))
    price, lower, legal = pricing(rng, items)
    res = merge_search(items, price, lower, legal)
    assert res.stop == "exhausted"
    want = exhaustive(items, price, legal)
    assert res.total == pytest.approx(want, abs=1e-9)
    assert sum(price(r, g) for r, g in res.groups.items()) == pytest.approx(want, abs=1e-9)
    assert sorted(m for g in res.groups.values() for m in g) == sorted(it.name for it in items)


def test_a_limit_is_the_stop_reason():
    rng = random.Random(7)
    items = random_graph(rng, 9)
    price, lower, legal = pricing(rng, items)
    full = merge_search(items, price, lower, legal)
    assert full.stop == "exhausted" and full.priced > 2
    res = merge_search(items, price, lower, legal, SearchLimits(prices=2))
    assert res.stop == "price limit (2 groups priced)"
    # anytime: the first partition is completed before the price limit may stop the search; it is a
    # valid partition priced by the same cost, never below the optimum
    assert sorted(m for g in res.groups.values() for m in g) == sorted(it.name for it in items)
    assert res.total == pytest.approx(sum(price(r, g) for r, g in res.groups.items()))
    assert res.total >= full.total - 1e-9
    res = merge_search(items, price, lower, legal, SearchLimits(nodes=3))  # hard: stops before any partition
    assert res.stop == "node limit (3 subproblems)" and res.groups == {} and res.total == math.inf


def test_a_limit_keeps_a_partition_completed_by_a_solved_suffix():
    """A chain a -> b -> c, absorbing first: the first path prices {a, b, c}; the next closes {a, b} and then c
    alone, whose subproblem after c ((3, {}) in memo) was solved on the first path, so the partition completes
    without reaching the end again. The price limit stops the search at its next price: it returns
    {a, b} + {c}, the best partition it completed, not the first one."""
    items = [Item("a", True, (), ("b",)), Item("b", True, ("a",), ("c",)), Item("c", False, ("b",), ())]
    prices = {frozenset("abc"): 10.0, frozenset("ab"): 3.0, frozenset("c"): 3.0}
    res = merge_search(items, lambda root, members: prices.get(members, 1.0), lambda root: 0.5, lambda members: True,
                       SearchLimits(prices=3))
    assert res.stop == "price limit (3 groups priced)"
    assert res.groups == {"b": frozenset("ab"), "c": frozenset("c")} and res.total == pytest.approx(6.0)


def test_a_graph_wider_and_deeper_than_the_recursion_limit_is_searched():
    """One subproblem level per kernel, driven from an explicit stack: a chain of 1,100 kernels feeding
    a 300-wide fan-in (an MoE's experts) is searched past Python's recursion limit."""
    import sys
    n, w = 1100, 300
    last = f"c{n - 1}"
    chain = [Item(f"c{i}", True, (f"c{i - 1}",) if i else (), (f"c{i + 1}",)) for i in range(n)]
    wide = [Item(f"e{i}", True, (last,), ("sum",)) for i in range(w)]
    chain[-1] = dataclasses.replace(chain[-1], readers=("sum",) + tuple(f"e{i}" for i in range(w)))
    items = chain + wide + [Item("sum", False, (last,) + tuple(f"e{i}" for i in range(w)), ())]
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(min(old, 1000))  # (another test may have raised it)
    try:
        res = merge_search(items, lambda root, members: 1.0 + 0.001 * len(members), lambda root: 1.0,
                           lambda members: True, SearchLimits(prices=4))
    finally:
        sys.setrecursionlimit(old)
    assert res.total < math.inf and "limit" in res.stop
    assert sorted(m for g in res.groups.values() for m in g) == sorted(it.name for it in items)


def _space(prog):
    """The merge search's space of prog's one-kernel-per-op extraction, priced by Poly Core."""
    from polysat.egraph.graph import export
    from polysat.search.merge import merge_space
    from polysat.search.legality import violations
    from polysat.pricing.symbols import bind_params
    from polysat.search.model import ModelCost, saturate_unfused
    from polysat.search.sites import sites
    state, _ = saturate_unfused(prog)
    params = bind_params(prog, {})
    base = ModelCost(params).search(state).baseline
    view = export(state)
    roots = [view.by_index[state.index[nid]] for _, nid in prog.outputs]
    return merge_space(state, view, sites(view), roots, base, params, "sm90", lambda s: violations(view, s))


def _programs():
    import json
    import pathlib

    import numpy as np

    from polysat.checker.randprog import motif_programs, random_program
    from polysat.frontend import program_from_doc
    ex = pathlib.Path(__file__).resolve().parent.parent / "examples"
    motifs = motif_programs(np.random.default_rng(0))
    return {"motif2": lambda: motifs[2], "motif4": lambda: motifs[4], "motif6": lambda: motifs[6],
            "random3": lambda: random_program(np.random.default_rng(3), size=10),
            **{e: (lambda e=e: program_from_doc(json.loads((ex / f"{e}.json").read_text()), "model"))
               for e in ("softmax", "gemm_bias_relu", "conv_relu_maxpool")}}


@pytest.mark.parametrize("name", sorted(_programs()))
def test_a_kernel_alone_is_priced_as_in_one_kernel_per_op(name):
    """The group of one kernel alone prices as that kernel does in the one-kernel-per-op partition (the same
    region, its kind asked with the same neighbours), so the merge phase takes that price once the partition is
    priced (``merge_phase(alone=)``) instead of building the group again."""
    from polysat.pricing.symbols import bind_params
    from polysat.search.model import ModelCost, saturate_unfused
    prog = _programs()[name]()
    base = ModelCost(bind_params(prog, {})).search(saturate_unfused(prog)[0]).baseline
    sp = _space(prog)
    assert {p.kernel.name for p in base.priced} == set(sp.kernels)
    for p in base.priced:
        assert sp.price(p.kernel.name, frozenset({p.kernel.name})) == pytest.approx(p.cost.time_est_us, rel=1e-12)


@pytest.mark.parametrize("name", sorted(_programs()))
def test_real_prices_the_exhaustive_optimum(name):
    """On small programs (3 to 8 kernels one per op), with Poly Core's prices, the search finds the
    optimum of the enumeration of every partition."""
    sp = _space(_programs()[name]())
    assert 3 <= len(sp.items) <= 8
    memo: dict = {}

    def price(root, members):
        if (root, members) not in memo:
            memo[root, members] = sp.price(root, members)
        return memo[root, members]

    def legal(ms):
        return not sp.why_illegal(ms)
    res = merge_search(sp.items, price, sp.lower, legal, SearchLimits(prices=10**6, seconds=600))
    assert res.stop == "exhausted"
    want = exhaustive(sp.items, price, legal)
    assert res.total == pytest.approx(want, rel=1e-12)
    assert len(res.groups) < len(sp.items)  # something was fused
    for (r, g), v in memo.items():  # the lower bound is admissible on every group priced
        assert sp.lower(r) <= v


@pytest.mark.parametrize("seed", range(12))
def test_polish_after_a_limit_only_lowers_the_total(seed):
    """After a limit stopped the search on its first partition (every kernel its own group), joining
    groups keeps a valid partition, never raises the total and never goes below the optimum."""
    from polysat.search.merge import _polish
    rng = random.Random(100 + seed)
    items = random_graph(rng, rng.randint(3, 7))
    price, lower, legal = pricing(rng, items)
    first = merge_search(items, price, lower, legal, SearchLimits(prices=0), prefer=lambda k: False)
    assert first.stop == "price limit (0 groups priced)" or first.stop == "exhausted"
    res = _polish(items, first, price, lower, legal)
    assert sorted(m for g in res.groups.values() for m in g) == sorted(it.name for it in items)
    assert res.total == pytest.approx(sum(price(r, g) for r, g in res.groups.items()))
    assert exhaustive(items, price, legal) - 1e-9 <= res.total <= first.total + 1e-9


def _limited_cases():
    import json
    import pathlib

    import onnx

    from polysat.bench.corpora.scale_models import swiglu_mlp
    from polysat.bench.models import transformer
    from polysat.frontend.onnx import import_onnx
    ex = pathlib.Path(__file__).resolve().parent.parent / "examples"
    # swiglu: the fp16 MLP on 32 tokens; its first path joins gate, up and SiLU x up (the paired GEMM), and the
    # partition the limit returns is completed later by a suffix solved on that first path (on 16 tokens the search
    # now exhausts, in 13 group prices, under the default limit of 16)
    return {"mlp": lambda: json.loads((ex / "mlp.json").read_text()),
            "swiglu": lambda: import_onnx(onnx.load_from_string(swiglu_mlp(1024, 2752, 32).SerializeToString()),
                                          origin="swiglu.onnx"),
            "attention": lambda: json.loads((ex / "attention.json").read_text()),
            "transformer_1": lambda: transformer(1)}


@pytest.mark.parametrize("name", sorted(_limited_cases()))
def test_the_bounded_search_returns_the_optimum_the_lifted_search_proves(name, monkeypatch):
    """The programs whose merge search stops at its price limit under the default knobs (bench/fusion.py):
    with the limits lifted the same search runs to ``exhausted``, so its total is the optimum of the space
    under the same prices, and the bounded search's partition (priced whole, as realized) is no worse."""
    from polysat.search.merge import SearchLimits
    from polysat.search.model import ModelCost
    from polysat.pipeline import Compilation
    monkeypatch.delenv("POLYSAT_SEARCH_PRICES", raising=False)  # the default price limit, and no time
    monkeypatch.setenv("POLYSAT_SEARCH_SECONDS", "600")  # limit that a slow machine could reach first
    model = _limited_cases()[name]()
    bounded = Compilation(model, cost="model")
    assert bounded.search.stop.startswith("price limit")  # else this case proves nothing
    lifted = Compilation(model, cost=ModelCost(bounded.params, "sm90", limits=SearchLimits.lifted()))
    assert lifted.search.stop == "exhausted"
    assert lifted.search.groups_priced > bounded.search.groups_priced
    assert bounded.search.best.total <= lifted.search.best.total * (1 + 1e-9)


def test_the_polish_stops_at_its_deadline_and_says_so():
    """Past its deadline the polish takes no further join; it keeps the partition it has and says why."""
    from polysat.search.merge import _polish
    stopped = 0
    for seed in range(12):
        rng = random.Random(100 + seed)
        items = random_graph(rng, rng.randint(3, 7))
        price, lower, legal = pricing(rng, items)
        first = merge_search(items, price, lower, legal, SearchLimits(prices=0), prefer=lambda k: False)
        if first.stop == "exhausted" or "join" not in _polish(items, first, price, lower, legal).stop:
            continue  # nothing to polish
        late = _polish(items, first, price, lower, legal, deadline=0.0, total=5.0)
        assert late.stop == "price limit (0 groups priced), then 0 join(s) (the polish stopped at the time limit: 5 s CPU)"
        assert late.groups == first.groups and late.total == first.total
        stopped += 1
    assert stopped


def test_the_polish_starts_from_one_kernel_per_op_when_the_search_stopped_above_it():
    """A chain a -> b -> c whose first path (absorbing all) is a group priced far above the three kernels apart
    (LLaMA-7B L1's default partition: 2,591.7 µs against 1,470.9 one kernel per op): no join can lower a single
    group, so the polish would keep it; told one kernel per op's price (asked only above the kernels' lower
    bounds), it starts from every kernel its own group and joins a into b from there."""
    from polysat.search.merge import _polish
    items = [Item("a", True, (), ("b",)), Item("b", True, ("a",), ("c",)), Item("c", False, ("b",), ())]
    prices = {frozenset("abc"): 100.0, frozenset("ab"): 5.0}

    def price(root, members):
        return prices.get(members, 3.0 * len(members))
    first = merge_search(items, price, lambda r: 1.0, lambda m: True, SearchLimits(prices=0))
    assert first.total == pytest.approx(100.0) and first.stop == "price limit (0 groups priced)"
    assert _polish(items, first, price, lambda r: 1.0, lambda m: True).total == pytest.approx(100.0)
    res = _polish(items, first, price, lambda r: 1.0, lambda m: True, unfused_below=lambda price: 9.0 < price)
    assert res.groups == {"b": frozenset("ab"), "c": frozenset("c")} and res.total == pytest.approx(8.0), res
    assert res.stop == "price limit (0 groups priced), then 1 join(s)"


def test_a_search_with_no_complete_partition_in_its_first_seconds_stops_and_the_polish_joins_from_one_per_op():
    """Before its first complete partition no price or time limit stopped the search, only the node limit (DPT: 200,000
    subproblems and 6,712 groups priced, 232 s, ending with no partition, so one kernel per op: 487 kernels). Now
    ``first`` CPU seconds bound that phase too, and says so; the polish then starts from every kernel its own group."""
    from polysat.search.merge import _polish
    n = 200
    items = [Item(f"c{i}", i + 1 < n, (f"c{i - 1}",) if i else (), (f"c{i + 1}",) if i + 1 < n else ()) for i in range(n)]

    def price(root, members):
        return 1.0 + 0.5 * len(members) if len(members) <= 2 else math.inf
    res = merge_search(items, price, lambda r: 1.0, lambda m: len(m) <= 2, SearchLimits(first=0.0))
    assert res.stop == "no complete partition within 0 s CPU" and res.groups == {} and res.total == math.inf
    polished = _polish(items, res, price, lambda r: 1.0, lambda m: len(m) <= 2, unfused_below=lambda p: True)
    assert sorted(m for g in polished.groups.values() for m in g) == sorted(it.name for it in items)
    assert polished.total < n * 1.5 and polished.stop.startswith("no complete partition within 0 s CPU, then")


def test_a_first_path_with_no_partition_below_it_stops_at_its_dead_ends():
    """``x`` is read by ``r`` (which can only be a root: no site) and by ``z`` after it: absorbed, x waits for one group
    holding both, which no path closes (every subproblem below is a dead end). Absorbing first, ``dead_ends`` stops
    that path with no partition (the caller then tries another order); without it the search backtracks out."""
    from polysat.search.merge import DEAD_END
    items = [Item("x", True, (), ("r", "z")), Item("r", False, ("x",), ("z",)), Item("z", False, ("x", "r"), ())]
    price = lambda root, members: float(len(members))  # noqa: E731
    stuck = merge_search(items, price, lambda root: 0.0, lambda members: True, dead_ends=0)
    assert stuck.stop == DEAD_END and stuck.groups == {} and stuck.total == math.inf
    full = merge_search(items, price, lambda root: 0.0, lambda members: True)
    assert full.stop == "exhausted" and full.groups == {"x": {"x"}, "r": {"r"}, "z": {"z"}}
    assert merge_search(items, price, lambda root: 0.0, lambda members: True, dead_ends=8).groups == full.groups


def test_a_hint_whose_first_path_leads_nowhere_is_retried_reading_one_reader_kernels_only():
    """torchvision's Swin-T (embed 32, one block a stage, 32 px) in fp16, through ONNX: the default partition fuses
    kernels of several readers (recomputing them in each), which no group of the merge search does; absorbed first,
    the search found no complete partition within its first 10 s and the polish joined from one kernel per op (19
    kernels, 39.1 µs, 26 s of extract). The hint's first path now stops at its dead ends and the search runs again
    absorbing first only one-reader kernels: a partition is found before any time limit (16 kernels, 33.2 µs)."""
    import io

    import numpy as np
    import onnx
    import torch
    from torchvision.models.swin_transformer import SwinTransformer

    from polysat.egraph.region_synth import synthesize
    from polysat.frontend.onnx import import_onnx
    from polysat.ir.evaluate import evaluate
    from polysat.ir.playback import playback
    from polysat.pipeline import Compilation
    from polysat.tests.numeric import bind_env, close, random_inputs
    torch.manual_seed(0)
    m = SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[1, 1], num_heads=[2, 2], window_size=[4, 4],
                        stochastic_depth_prob=0.0, num_classes=10).eval().half()
    buf = io.BytesIO()
    torch.onnx.export(m, (torch.randn(1, 3, 32, 32).half(),), buf, dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"])
    c = Compilation(import_onnx(onnx.load_from_string(buf.getvalue()), origin="swin_t_fp16.onnx"), cost="model")
    s = c.search
    assert "no complete partition" not in s.stop and s.stop.startswith("price limit"), s.stop
    assert len(s.best.priced) < len(s.baseline.priced) // 4 and s.best.total < s.baseline.total / 4
    x, p = c.extraction, c.program
    rng = np.random.default_rng(2)
    inputs = random_inputs(p, rng, bind_env(p, rng))
    # the kernels play back the extracted program; it is the model's within a few fp16 roundings of the output (the
    # rewrites move roundings; the rule checker bounds each: tests/test_rules_check*.py)
    ref, mine = evaluate(p, inputs)["y"], evaluate(x.program, inputs)["y"]
    assert close(playback(synthesize(x.program, x.partition), inputs)["y"], mine)
    assert np.abs(ref.astype(np.float64) - mine).max() <= 4 * 2.0 ** -10 * np.abs(ref.astype(np.float64)).max()


def test_the_polish_joins_independent_blocks_in_one_round():
    """Ten identical two-kernel blocks side by side (a mixture's experts), each cheaper fused: one round of
    the polish joins all ten (their joins touch disjoint groups, so their gains add up), not one a round."""
    from polysat.search.merge import _polish
    items = []
    for b in range(10):
        items += [Item(f"p{b}", True, (), (f"c{b}",)), Item(f"c{b}", False, (f"p{b}",), ())]

    def price(root, members):
        return 2.0 if len(members) == 2 else 1.5

    first = merge_search(items, price, lambda r: 1.0, lambda m: True, SearchLimits(prices=0), prefer=lambda k: False)
    assert first.total == pytest.approx(30.0)
    res = _polish(items, first, price, lambda r: 1.0, lambda m: True, rounds=1)
    assert res.total == pytest.approx(20.0) and len(res.groups) == 10, res.groups
    assert res.stop.endswith("then 10 join(s)"), res.stop


def test_the_polish_joins_every_improving_join_into_one_group_in_one_round():
    """Ten kernels all read by one concatenation (a mixture's experts), each cheaper computed inside it: their
    joins all go into one group, so no two of them are disjoint; joining them all at once is one move of the
    round, not one join a round, and since it gains more than any single join could (10 µs against at most
    1.5 + 1.5 - 1.0), it is the only join priced."""
    from polysat.search.merge import _polish
    items = [Item(f"p{b}", True, (), ("cat",)) for b in range(10)]
    items.append(Item("cat", False, tuple(f"p{b}" for b in range(10)), ()))
    priced = []

    def price(root, members):
        priced.append((root, members))
        return 1.0 + 0.5 * len(members)

    first = merge_search(items, price, lambda r: 1.0, lambda m: True, SearchLimits(prices=0), prefer=lambda k: False)
    assert first.total == pytest.approx(16.5)
    res = _polish(items, first, price, lambda r: 1.0, lambda m: True, rounds=1)
    assert res.total == pytest.approx(6.5) and list(res.groups) == ["cat"], res.groups
    assert res.stop.endswith("then 10 join(s)"), res.stop
    assert len(set(priced)) == 10 + 1 + 1  # each kernel alone, the concatenation alone, all joined


@pytest.mark.parametrize("seed", range(24))
def test_the_polish_with_floors_takes_the_joins_it_takes_pricing_every_one(seed):
    """Given a floor of each group's price, the polish prices the only join into a group when it is taken, best
    bound first, and never a join that touches a group a better move took: the same partition, total and stop as
    pricing every join, with no more joins priced (fewer on chains, whose every other join loses each round)."""
    from polysat.search.merge import _polish
    rng = random.Random(500 + seed)
    items = random_graph(rng, rng.randint(5, 12))
    price, lower, legal = pricing(rng, items)
    slack = {it.name: rng.choice((0.0, 0.0, 0.3, 1.0)) for it in items}

    def floor(root, members):  # exact on some groups, a lower bound on all
        return max(0.0, price(root, members) - slack[root])
    first = merge_search(items, price, lower, legal, SearchLimits(prices=0), prefer=lambda k: False)
    counts = []
    for fl in (None, floor):
        asked: set = set()

        def counted(root, members):
            asked.add((root, members))
            return price(root, members)
        counts.append((_polish(items, first, counted, lower, legal, floor=fl), len(asked)))
    (eager, n_eager), (lazy, n_lazy) = counts
    assert (lazy.groups, lazy.total, lazy.stop, lazy.priced) == (eager.groups, eager.total, eager.stop, eager.priced)
    assert n_lazy <= n_eager


def test_the_polish_with_floors_never_prices_a_join_a_better_one_excludes():
    """A chain a -> b -> c -> d whose joins gain 3, 2 and 3 µs, with exact floors: the first round takes a into b
    and c into d, and never prices b into c (its bound, 2, is below both joins that touch its groups)."""
    from polysat.search.merge import _polish
    names = "abcd"
    items = [Item(n, n != "d", tuple(names[i - 1:i]), tuple(names[i + 1:i + 2])) for i, n in enumerate(names)]
    prices = {frozenset("ab"): 7.0, frozenset("bc"): 8.0, frozenset("cd"): 7.0, frozenset("abcd"): 12.0}
    asked = []

    def price(root, members):
        asked.append(members)
        return prices.get(members, 5.0 * len(members))
    first = merge_search(items, price, lambda r: 1.0, lambda m: True, SearchLimits(prices=0), prefer=lambda k: False)
    res = _polish(items, first, price, lambda r: 1.0, lambda m: True, rounds=1, floor=price)
    assert res.groups == {"b": frozenset("ab"), "d": frozenset("cd")} and res.total == pytest.approx(14.0)
    assert frozenset("bc") in asked  # (its floor was asked: the floor here is the price)
    asked.clear()
    res = _polish(items, first, price, lambda r: 1.0, lambda m: True, rounds=1,
                  floor=lambda r, m: prices.get(m, 5.0 * len(m)))
    assert res.groups == {"b": frozenset("ab"), "d": frozenset("cd")} and frozenset("bc") not in asked


def test_a_partition_whose_synthesis_is_refused_is_not_returned(monkeypatch):
    """Region synthesis may refuse a kernel the price took (E1505: a chain of resizes and convolutions recomputing its
    values at too many index tuples, UperNet's head: it was E1999 after the search): the search returns the cheapest
    candidate it priced that builds, one kernel per op at worst, never the refused one."""
    import polysat.search.model as M
    from polysat.bench.models import transformer
    from polysat.frontend import program_from_doc
    from polysat.ir.diagnostics import fail
    from polysat.pricing.symbols import bind_params
    prog = program_from_doc(transformer(1, d_model=64, heads=4, d_ff=128), "model")
    free = M.ModelCost(bind_params(prog, {})).search(M.saturate_unfused(prog)[0])
    best, n0 = free.best, len(free.baseline.priced)
    assert len(best.priced) < n0
    real = M.synthesize
    for fewest in (len(best.priced) + 1, n0):  # refuse every partition of fewer kernels than that
        def refusing(p, part, fewest=fewest):
            if len(part.kernels) < fewest:
                fail("ResourceLimit", part.kernels[0].name, "kernel k0 recomputes values at more than 1 index tuples")
            return real(p, part)
        monkeypatch.setattr(M, "synthesize", refusing)
        got = M.ModelCost(bind_params(prog, {})).search(M.saturate_unfused(prog)[0]).best
        assert len(got.priced) >= fewest and got.total >= best.total
    assert got.total == pytest.approx(free.baseline.total)
