"""A program too large to saturate within the e-graph's node limit is halved by size and each half searched
(search/size_cut.py), instead of being left one kernel per op; a program that saturates is never cut."""
from __future__ import annotations

import pytest

from polysat.frontend import program_from_doc
from polysat.ir.tiny import GroupOp, Ops
from polysat.pipeline import Compilation
from polysat.search.segment import _free
from polysat.search.size_cut import MIDDLE, halve
from polysat.search.stitch import SegmentedState
from polysat.tests.numeric import partition_plays_back


def dense_net(blocks: int = 2, layers: int = 3, growth: int = 4, channels: int = 8, size: int = 8) -> dict:
    """DenseNet's shape (torchvision's densenet, without downloads): in each block every layer reads the
    concatenation of the block's input and every earlier layer's output through batch norm (per-channel scale and
    shift), ReLU, a 1x1 and a 3x3 convolution; between blocks a transition (norm, ReLU, 1x1 conv, 2x2 average pool)."""
    tensors: dict = {"X": {"dtype": "fp32", "shape": [1, channels, size, size]}}
    inputs, graph = [{"tensor": "X"}], []

    def param(name: str, shape: list) -> str:
        tensors[name] = {"dtype": "fp32", "shape": shape}
        inputs.append({"tensor": name, "role": "param"})
        return name

    def op(kind: str, name: str, ins: list, **extra) -> str:
        tensors[name] = {"dtype": "fp32"}
        graph.append({"op": kind, "name": name, "inputs": ins, "outputs": [name], **extra})
        return name

    def norm_relu(name: str, x: str, c: int) -> str:
        s = op("Elementwise", f"{name}_s", [x, param(f"{name}_g", [1, c, 1, 1])], fn="mul")
        return op("Elementwise", f"{name}_r", [op("Elementwise", f"{name}_b", [s, param(f"{name}_h", [1, c, 1, 1])],
                                                 fn="add")], fn="relu")
    x, c = "X", channels
    for b in range(blocks):
        feats = [x]
        for i in range(layers):
            n = f"b{b}l{i}"
            cat = op("Concat", f"{n}_cat", list(feats), attrs={"axis": 1}) if len(feats) > 1 else feats[0]
            h = op("Conv2D", f"{n}_c1", [norm_relu(f"{n}_n1", cat, c + i * growth),
                                          param(f"{n}_w1", [2 * growth, c + i * growth, 1, 1])])
            feats.append(op("Conv2D", f"{n}_c3", [norm_relu(f"{n}_n2", h, 2 * growth),
                                                  param(f"{n}_w3", [growth, 2 * growth, 3, 3])],
                            attrs={"pad": [1, 1, 1, 1]}))
        x, c = op("Concat", f"b{b}_out", feats, attrs={"axis": 1}), c + layers * growth
        if b + 1 < blocks:
            t = op("Conv2D", f"t{b}_c", [norm_relu(f"t{b}_n", x, c), param(f"t{b}_w", [c // 2, c, 1, 1])])
            x, c = op("AvgPool2D", f"t{b}_p", [t], attrs={"kernel": 2}), c // 2
    return {"signature": {"inputs": inputs, "outputs": [{"tensor": x}]}, "tensors": tensors, "graph": graph}


def skip_net(layers: int = 6, channels: int = 4, size: int = 6) -> dict:
    """A stack of 3x3 convolutions and ReLUs whose first output, flattened by a reshape written right after it, is
    added to the last one's: every cut in the middle holds that view live (GLPN's decoder reads each encoder stage
    through a reshape, RWKV its state)."""
    c, s = channels, size
    tensors: dict = {"X": {"dtype": "fp32", "shape": [1, c, s, s]}}
    inputs, graph = [{"tensor": "X"}], []

    def op(kind: str, name: str, ins: list, **extra) -> str:
        tensors[name] = {"dtype": "fp32"}
        graph.append({"op": kind, "name": name, "inputs": ins, "outputs": [name], **extra})
        return name
    x = "X"
    for i in range(layers):
        tensors[f"w{i}"] = {"dtype": "fp32", "shape": [c, c, 3, 3]}
        inputs.append({"tensor": f"w{i}", "role": "param"})
        x = op("Elementwise", f"r{i}", [op("Conv2D", f"c{i}", [x, f"w{i}"], attrs={"pad": [1, 1, 1, 1]})], fn="relu")
        if i == 0:
            skip = op("Reshape", "flat0", [x], attrs={"shape": [1, c * s * s]})
    y = op("Elementwise", "out", [op("Reshape", "flat", [x], attrs={"shape": [1, c * s * s]}), skip], fn="add")
    return {"signature": {"inputs": inputs, "outputs": [{"tensor": y}]}, "tensors": tensors, "graph": graph}


def test_a_view_live_at_the_cut_is_written_as_its_base_and_viewed_again_after():
    p = program_from_doc(skip_net(), "model")
    first, second = halve(p)
    assert all(p[v].op not in GroupOp.Movement for v in first.exits)  # the reshape's base is written, not the reshape
    assert any(p[v].op == Ops.RELU for v in first.exits) and {v for _, v in second.entries} <= set(first.exits)
    assert any(n.op == Ops.RESHAPE for n in second.program.nodes)  # viewed again in the second half
    limit = int(Compilation(skip_net(), cost="model").saturated[1].nodes * 0.7)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("POLYSAT_EGRAPH_NODES", str(limit))
        c = Compilation(skip_net(), cost="model")
        assert c.saturated[0].halved >= 1 and "halved by size" in c.search.stop
        assert partition_plays_back(c, 4)


@pytest.fixture(scope="module")
def whole():
    return Compilation(dense_net(), cost="model")


@pytest.fixture(scope="module")
def halved(whole):
    """The same program under a node limit below what its whole saturation reaches (each half stays under it)."""
    limit = int(whole.saturated[1].nodes * 0.7)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("POLYSAT_EGRAPH_NODES", str(limit))
        c = Compilation(dense_net(), cost="model")
        c.search  # the saturation and the search read the limit now
    return c, limit


def test_a_program_that_saturates_is_not_cut(whole):
    st, rep = whole.saturated
    assert rep.stop.value == "saturated" and not isinstance(st, SegmentedState)
    assert "halved" not in whole.search.stop


def test_halve_cuts_in_the_middle_at_values_that_can_be_written():
    p = program_from_doc(dense_net(), "model")
    first, second = halve(p)
    free = _free(p)
    heavy = [n.id for n in p.nodes if n.id not in free and n.op not in GroupOp.Movement]
    mine = [i for i in first.origin.values() if i in set(heavy)]
    assert MIDDLE[0] * len(heavy) <= len(mine) <= MIDDLE[1] * len(heavy)
    # the second half reads what the first writes, and nothing the first writes is a view of a value
    exits = set(first.exits)
    assert exits and all(p[v].op not in GroupOp.Movement for v in exits)
    assert {v for _, v in second.entries} <= exits
    assert {second.origin[o] for _, o in second.program.outputs} == {o for _, o in p.outputs}


def test_a_program_over_the_node_limit_is_halved_and_searched(whole, halved):
    c, limit = halved
    st, rep = c.saturated
    assert isinstance(st, SegmentedState) and st.halved >= 1 and len(st.segments) >= 2
    assert all(r.stop.value == "saturated" and r.nodes <= limit for r in st.reports.values())
    s = c.search
    assert "halved by size" in s.stop
    # searched, not left one kernel per op: fewer kernels, priced at or below one kernel per op
    assert len(s.best.priced) < len(s.baseline.priced) and s.best.total <= s.baseline.total + 1e-9
    # and near what the whole program's own search finds (the cut writes what it must; 28.5 against 26.5 µs,
    # against 134.7 µs one kernel per op)
    best, base = whole.search.best.total, whole.search.baseline.total
    assert s.best.total <= best + 0.1 * (base - best)


def test_the_halved_partition_plays_back_equal_to_the_reference(halved):
    c, _ = halved
    assert partition_plays_back(c, 3)


def test_a_halved_part_saturates_within_its_share_of_the_limits():
    """A half's time and row limits are its share of what the part it was cut from had (in proportion to its nodes,
    at least PART_SECONDS and PART_ROWS): a part that stops at a limit is given up in its share of the time."""
    from polysat.egraph.saturate import default_limits
    from polysat.search.model import PART_ROWS, PART_SECONDS, _share
    whole = program_from_doc(dense_net(blocks=3), "model")
    first, _ = halve(whole)
    lim = default_limits(seconds=40.0, rows=4_000_000)
    got = _share(lim, first.program, whole)
    f = len(first.program.nodes) / len(whole.nodes)
    assert 0.2 < f < 0.8 and got.nodes == lim.nodes and got.iterations == lim.iterations
    assert got.seconds == pytest.approx(40.0 * f) and got.rows == int(4_000_000 * f)
    tiny = _share(default_limits(seconds=40.0, rows=1_000_000), first.program,
                  program_from_doc(dense_net(blocks=3, layers=40), "model"))
    assert (tiny.seconds, tiny.rows) == (PART_SECONDS, PART_ROWS)
