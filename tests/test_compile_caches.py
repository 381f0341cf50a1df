"""The compile-time caches and fast paths (docs/DESIGN.md §Cost model) give what the plain computation gives:
each is checked against it here, on the cases where a careless key would merge two different answers."""
from __future__ import annotations

import dataclasses
import random

import pytest

from polysat.analyses.indexbook import build_indexbook
from polysat.egraph.extract import _bit_sum, _Weights, solve
from polysat.egraph.graph import EGraphView, ENode
from polysat.egraph.rulefiles import parse_file
from polysat.egraph.totiny import _make
from polysat.ir.builder import Builder
from polysat.ir.dtypes import DType
from polysat.ir.shapes import dim, numel
from polysat.ir.tiny import Ops
from polysat.search.sites import AVOID, AVOID_STREAM, Masked


def test_weights_sum_is_the_bit_by_bit_sum():
    """Integer prices: the popcount sum equals the float sum bit by bit; fractional or huge ones take that sum."""
    rng = random.Random(0)
    for prices in ((0.0, 1.0, AVOID, AVOID_STREAM), (0.0, 1.0, 0.1, 2.5), (1.0, 2.0 ** 60)):
        w = _Weights()
        for c in range(300):
            w.set(c, rng.choice(prices))
        for c in rng.sample(range(300), 60):  # a class re-chosen at another price leaves its old bitset
            w.set(c, rng.choice(prices))
        for _ in range(50):
            bits = rng.getrandbits(300)
            assert w.sum(bits) == _bit_sum(bits, w.weight)


def _view() -> EGraphView:
    t = ENode("Tensor", ('"t"',), (), 0, 0)
    u = ENode("Unary", ("EXP2",), (0,), 1, 1)
    m = ENode("Mat", (), (1,), 2, 2)
    r = ENode("Read", ("[4]", "(i0)"), (2,), 3, 3)
    v = ENode("View", ("[4]", "(i0)"), (1,), 3, 4)
    b = ENode("Binary", ("ADD",), (3, 3), 4, 5)
    return EGraphView({0: [t], 1: [u], 2: [m], 3: [r, v], 4: [b]}, {}, {}, {}, 6)


def test_masked_prices_match_per_enode_prices_and_do_not_leak_between_masks():
    view = _view()
    nodes = [n for ns in view.classes.values() for n in ns]
    read, fused = view.classes[3]
    for excl, hard in ((frozenset({read}), frozenset()), (frozenset({fused}), frozenset({fused})), (frozenset(), frozenset())):
        m = Masked(excl, hard)
        assert m.enode_costs(view) == {n: float(m.enode_cost(n, view)) for n in nodes}
    best, _ = solve(view, Masked(frozenset({read})))
    assert best[3].node is fused and best[4].total == 3.0  # the shared class 3 counted once under ADD
    best, _ = solve(view, Masked(frozenset({fused})))
    assert best[3].node is read and best[4].total == 4.0  # Mat and Read: one more e-node


def test_rule_file_parse_follows_the_text(tmp_path):
    f = tmp_path / "r.egg"
    head = "(ruleset mine)\n"
    rule = '; law: x = x\n(rewrite (Unary "NEG" (Unary "NEG" x)) x :ruleset mine :name "{}")\n'
    f.write_text(head + rule.format("a"))
    assert [r.name for r in parse_file(str(f)).rules] == ["a"]
    f.write_text(head + rule.format("a") + rule.format("b"))
    assert [r.name for r in parse_file(str(f)).rules] == ["a", "b"]


def test_checked_nodes_keep_the_sign_of_zero():
    neg = _make("x", Ops.CONST, [], {"value": -0.0, "dtype": DType.fp32, "shape": (2,)}, None, 0)
    pos = _make("y", Ops.CONST, [], {"value": 0.0, "dtype": DType.fp32, "shape": (2,)}, None, 0)
    assert repr(neg.arg["value"]) == "-0.0" and repr(pos.arg["value"]) == "0.0"
    assert (neg.id, pos.id) == ("x", "y") and neg.shape == (2,)


def _padded(value: float):
    b = Builder()
    x = b.input("X", DType.fp32, (4, 6), at="X")
    xp = b.pad(x, ((1, 1), (0, 0)), value, at="pad")
    xv = b.view(xp, (5, 6), ("i0", "i1"), at="view")  # row 0 is padding
    r = b.alu(Ops.RELU, xv, at="use")
    return b.program([("Y", r)]), r


def test_composed_reads_keep_each_padding_value():
    for value in (-0.0, 0.0, -0.0):  # the same read composed again, with another padding value
        prog, r = _padded(value)
        (acc,) = build_indexbook(prog)[r.id].inputs
        assert acc.pads and [repr(p.value) for p in acc.pads] == [repr(value)] * len(acc.pads)


def test_int_shapes_fast_path():
    assert numel((2, 3, 4)) == 24 and numel(()) == 1 and numel((5, 0)) == 0
    assert dim(7) == 7 and type(numel((2, 3))) is int
    assert str(numel((2, dim("N")))) == str(dim("2*N"))


def test_blocks_of_equal_ids_but_other_nodes_stay_apart():
    """Candidate programs reuse node ids for other nodes: a block (and its statement) is kept by the node itself."""
    from polysat.analyses.poly_from_view import region_from_program
    units = []
    for op in (Ops.RELU, Ops.EXP2, Ops.RELU):
        b = Builder()
        x = b.input("X", DType.fp32, (8, 8), at="X")
        y = b.alu(op, x, at="y")
        (st,) = region_from_program(b.program([("Y", y)])).statements
        units.append((y.id, st.unit))
    assert units[0][0] == units[1][0] and [u for _, u in units] == ["fp32", "sfu", "fp32"]


def test_the_kept_first_conversion_is_the_one_a_fresh_builder_makes():
    """``totiny.converted`` (the merge search's space reads the base extraction's conversion) gives, for the
    extraction ``to_tiny`` converted, its first pass, node for node what a fresh TermBuilder makes; for another
    extraction (a copy of the dict: kept by identity) it converts afresh, again equal."""
    from polysat.bench.models import mlp_stack
    from polysat.egraph.boundaries import all_cuts
    from polysat.egraph.graph import export
    from polysat.egraph.saturate import OPT_IN, default_schedule, rule_files, run
    from polysat.egraph.state import new_state
    from polysat.egraph.totiny import TermBuilder, converted, to_tiny
    from polysat.frontend import load_model
    from polysat.search.sites import chosen_terms, masks, sites, stream_sites
    prog = load_model(mlp_stack(2, 64))
    st = new_state(prog, rule_files(), cuts=all_cuts(prog))
    run(st, default_schedule(st.rulesets, OPT_IN))
    view = export(st)
    roots = [view.by_index[st.index[nid]] for _, nid in st.program.outputs]
    s, streams = sites(view), frozenset(stream_sites(view))
    excl, hard, mat = masks(view, s, streams, frozenset())
    best, _ = solve(view, Masked(excl, hard))
    chosen = chosen_terms(best, roots)
    to_tiny(st, view, chosen, roots, mat)
    fresh = TermBuilder(st, view, chosen)
    for r in roots:
        fresh.value(r)
    kept = converted(st, view, chosen, roots)
    assert kept is view.__dict__["_first_made"][id(chosen)][3]  # the first pass's own map, not made again
    assert {c: u for c, u in kept.items()} == fresh.made
    other = dict(chosen)
    assert converted(st, view, other, roots) is not kept and converted(st, view, other, roots) == fresh.made


def _saturated_mlp(layers: int = 2, width: int = 64, dtype: str = "fp16") -> tuple:
    """(EGraphState, view, roots, sites, streams) of a saturated MLP stack, loaded one kernel per op."""
    from polysat.bench.models import mlp_stack
    return _saturated(mlp_stack(layers, width, dtype=dtype))


def _saturated_chain() -> tuple:
    """The same of a program with no contraction: an fp32 softmax over its rows, then its rows' softmax again."""
    from polysat.bench.models import softmax_axis
    doc = softmax_axis([64, 96], 1, "fp32")
    doc["graph"].append({"op": "Softmax", "name": "again", "inputs": ["Y"], "outputs": ["Z"], "attrs": {"axis": 1}})
    doc["signature"]["outputs"] = [{"tensor": "Z"}]
    doc["tensors"]["Z"] = {"dtype": "fp32"}
    return _saturated(doc)


def _saturated(doc: dict) -> tuple:
    from polysat.egraph.boundaries import all_cuts
    from polysat.egraph.graph import export
    from polysat.egraph.saturate import OPT_IN, default_schedule, rule_files, run
    from polysat.egraph.state import new_state
    from polysat.frontend import load_model
    from polysat.search.sites import sites, stream_sites
    prog = load_model(doc)
    st = new_state(prog, rule_files(), cuts=all_cuts(prog))
    run(st, default_schedule(st.rulesets, OPT_IN))
    view = export(st)
    roots = [view.by_index[st.index[nid]] for _, nid in st.program.outputs]
    return st, view, roots, sites(view), frozenset(stream_sites(view))


def _candidates(st, view, roots, s, streams) -> list:
    """(fused sites, chosen terms, materialized classes) of every site decision set of one site fused, and none."""
    from polysat.search.sites import chosen_terms, masks
    out = []
    for fused in [frozenset()] + [frozenset({c}) for c in sorted(s)]:
        excl, hard, mat = masks(view, s, streams, fused)
        best, _ = solve(view, Masked(excl, hard))
        if all(r in best for r in roots):
            out.append((fused, chosen_terms(best, roots), mat))
    return out


def test_the_kept_class_conversions_give_what_a_fresh_conversion_gives():
    """``to_tiny`` of a candidate after others (class conversions kept on the view, ``TermBuilder._converted``)
    equals, node for node and kernel for kernel, its conversion on a view that kept nothing; and the kept nodes
    are used: a candidate converted again after another gives the very same node objects where its terms agree."""
    from polysat.egraph.totiny import to_tiny
    st, view, roots, s, streams = _saturated_mlp()
    cands = _candidates(st, view, roots, s, streams)
    assert len(cands) >= 3
    kept = [to_tiny(st, view, chosen, roots, mat) for _, chosen, mat in cands]
    memo = view.__dict__["_totiny_facts"][4]
    assert memo
    for (_, chosen, mat), (prog, part) in zip(cands, kept, strict=True):
        view.__dict__.pop("_totiny_facts")  # nothing kept: every class converted afresh
        fresh_prog, fresh_part = to_tiny(st, view, chosen, roots, mat)
        assert prog == fresh_prog and part == fresh_part
    view.__dict__.pop("_totiny_facts")
    first, _ = to_tiny(st, view, cands[0][1], roots, cands[0][2])
    again, _ = to_tiny(st, view, cands[1][1], roots, cands[1][2])
    shared = {n.id for n in first.nodes} & {n.id for n in again.nodes}
    same = [i for i in shared if first[i] is again[i]]
    assert len(same) > len(st.program.inputs), (len(same), len(shared))


@pytest.mark.parametrize("program", ["chain", "fp32", "fp16"])
def test_a_repriced_candidate_prices_what_price_kernels_prices_and_each_kernel_once(monkeypatch, program):
    """``search/reprice.py``: every candidate's kernels priced by a Repricer equal ``price_kernels``'s (kernel,
    region and cost); the candidates together price fewer kernels than they hold, and a candidate priced again
    prices nothing, in an MLP too (a contraction's kernel is kept with the kernels around it, whose writers and
    readers decide which kind binds it, fp16 and fp32 alike: 3xTF32 or the FP32 pipes)."""
    from polysat.egraph.totiny import to_tiny
    from polysat.pricing.kernels import price_kernels
    from polysat.pricing.symbols import bind_params
    from polysat.search import reprice as reprice_mod
    st, view, roots, s, streams = _saturated_chain() if program == "chain" else _saturated_mlp(dtype=program)
    params = bind_params(st.program, {})
    rp = reprice_mod.Repricer(params, "sm90")
    asked = []

    def counted(prog, part, *a, **k):
        asked.append(len(part.kernels))
        return price_kernels(prog, part, *a, **k)
    monkeypatch.setattr(reprice_mod, "price_kernels", counted)
    made = [to_tiny(st, view, chosen, roots, mat) for _, chosen, mat in _candidates(st, view, roots, s, streams)]
    held = sum(len(part.kernels) for _, part in made)
    for prog, part in made:
        got, want = rp(prog, part), price_kernels(prog, part, params, "sm90")
        assert [(p.kernel, p.region, p.cost) for p in got] == [(p.kernel, p.region, p.cost) for p in want]
    first = sum(asked)
    asked.clear()
    for prog, part in made:
        rp(prog, part)
    assert first < held and sum(asked) == 0, (first, held, asked)


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_a_repricer_asked_below_a_price_stops_only_above_it(dtype):
    """``Repricer(prog, part, above)``: None only where the candidate's total is above ``above`` (the kernels it
    kept, those it priced and the floors of the rest add up to more); otherwise every kernel priced, as without it.
    A candidate it stopped on is priced whole when asked again without a bound."""
    from polysat.egraph.totiny import to_tiny
    from polysat.pricing.kernels import price_kernels, total_us
    from polysat.pricing.symbols import bind_params
    from polysat.search.reprice import Repricer
    st, view, roots, s, streams = _saturated_mlp(dtype=dtype)
    params = bind_params(st.program, {})
    made = [to_tiny(st, view, chosen, roots, mat) for _, chosen, mat in _candidates(st, view, roots, s, streams)]
    totals = [total_us(price_kernels(prog, part, params, "sm90")) for prog, part in made]
    rp = Repricer(params, "sm90")
    stopped = 0
    for (prog, part), t in zip(made, totals, strict=True):
        for above in (t * 0.5, t * 0.999, t, t * 1.5):
            got = rp(prog, part, above)
            if got is None:
                assert t > above, (t, above)
                stopped += 1
            else:
                assert total_us(got) == pytest.approx(t, rel=1e-12)
        assert total_us(rp(prog, part)) == pytest.approx(t, rel=1e-12)
    assert stopped  # the bound stopped some pricing


def test_a_repricer_given_a_partitions_prices_keeps_them(monkeypatch):
    """``Repricer(prog, part, priced=price_kernels(...))`` returns those prices and keeps them: the partition asked
    again prices no kernel (the search's one-kernel-per-op partition, priced whole to compare it with a price)."""
    from polysat.egraph.totiny import to_tiny
    from polysat.pricing.kernels import price_kernels
    from polysat.pricing.symbols import bind_params
    from polysat.search import reprice as reprice_mod
    st, view, roots, s, streams = _saturated_chain()
    params = bind_params(st.program, {})
    (_, chosen, mat), *_ = _candidates(st, view, roots, s, streams)
    prog, part = to_tiny(st, view, chosen, roots, mat)
    want = price_kernels(prog, part, params, "sm90")
    rp = reprice_mod.Repricer(params, "sm90")
    assert rp(prog, part, priced=want) == want
    asked = []
    monkeypatch.setattr(reprice_mod, "price_kernels", lambda *a, **k: asked.append(a) or price_kernels(*a, **k))
    got = rp(prog, part)
    assert not asked and [(p.kernel, p.region, p.cost) for p in got] == [(p.kernel, p.region, p.cost) for p in want]


def test_a_kernel_synthesized_in_one_program_is_kept_for_another_holding_its_nodes(monkeypatch):
    """``egraph/region_synth.py``'s kernel cache is keyed by the kernel's node objects, tensor names and symbols, not
    its program: the same program rebuilt with one more node (another object, another id, as a search's next
    candidate) synthesizes none of its kernels again and gives the same regions."""
    from polysat.bench.models import mlp_stack
    from polysat.egraph import region_synth as rs
    from polysat.frontend import load_model
    from polysat.ir.tiny import Program
    prog = load_model(mlp_stack(2, 32, dtype="fp32"))
    part = rs.default_partition(prog)
    want = rs.synthesize(prog, part)
    spare = dataclasses.replace(next(n for n in prog.nodes if n.op == Ops.CONST), id="spare_const")
    again = Program(prog.nodes + (spare,), prog.outputs)
    made = []
    real = rs._KernelSynth.synthesize
    monkeypatch.setattr(rs._KernelSynth, "synthesize", lambda self: made.append(self.kernel.name) or real(self))
    assert rs.synthesize(again, part) == want and not made


def test_a_kernel_reading_a_free_node_outside_its_list_is_kept_by_that_node_too():
    """A kernel may read a constant or a view outside its node list (egraph/partition.py ``free_cone``): two programs
    whose kernel nodes are the same objects but whose constant read that way differs (the same id, another value)
    must not share the kernel cache's entry: each synthesizes what a fresh synthesis of it gives."""
    from polysat.bench.models import mlp_stack
    from polysat.egraph import region_synth as rs
    from polysat.egraph.partition import Partition, free_cone
    from polysat.frontend import load_model
    from polysat.ir.tiny import Arg, Program
    prog = load_model(mlp_stack(2, 32, dtype="fp32"))
    base = rs.default_partition(prog)
    k = base.kernels[-1]
    const = next(i for i in sorted(k.nodes) if prog[i].op == Ops.CONST)
    k_out = dataclasses.replace(k, nodes=k.nodes - {const})
    part = Partition(base.kernels[:-1] + (k_out,))
    part.check(prog)
    assert free_cone(prog, k_out) == {const}
    n = prog[const]
    other = dataclasses.replace(n, arg=Arg({**dict(n.arg), "value": n.arg["value"] * 3 + 1}))
    prog2 = Program(tuple(other if m.id == const else m for m in prog.nodes), prog.outputs)
    first = rs.synthesize(prog, part)
    second = rs.synthesize(prog2, part)
    rs._PARTS.clear()
    assert second == rs.synthesize(prog2, part)
    assert first != second
