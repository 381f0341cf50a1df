"""``polysat extract --explain``: the user's op names everywhere (never a node id or an e-class), one line per
rejected fusion saying the rule or the price that decided it (each reason once), and the hand-style partition
(search/hand_partition.py) priced with the same cost beside the chosen one (docs/DESIGN.md §Cost model)."""
import glob
import os
import re

import pytest

from polysat.commands.explain import explain_lines, explain_model, explain_size, hand_style
from polysat.commands.extract import extract_command, extract_result
from polysat.pipeline import Compilation

EX = os.path.join(os.path.dirname(__file__), "..", "examples")
EXAMPLES = sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(EX, "*.json")))
INTERNAL = re.compile(r"(?<!\u00b7)\b[ne]\d+\b|e-class|softmax_sum:")
HAND = re.compile(r"^hand-style partition: (\d+) kernels?, ([0-9.]+) µs \(chosen: (\d+) kernels?, ([0-9.]+) µs\)$")
_CACHE: dict = {}


def explained(name: str, cost: str = "model"):
    """(rejected entries, hand-style dict, the explain text lines) of an example or the bench transformer."""
    if (name, cost) not in _CACHE:
        if name == "transformer_1":
            from polysat.bench.models import transformer
            model = transformer(1)
        else:
            model = os.path.join(EX, f"{name}.json")
        c = Compilation(model, cost=cost)
        result = extract_result(c)
        rejected = explain_model(result) if result["_search"] is not None else explain_size(result, c.arch)
        hand = hand_style(result, c.program)
        _CACHE[name, cost] = (rejected, hand, explain_lines(rejected, hand))
    return _CACHE[name, cost]


@pytest.mark.parametrize("name", ["mlp", "attention", "transformer_1"])
def test_explain_names_the_users_ops(name):
    _, _, lines = explained(name)
    assert not [x for x in lines if INTERNAL.search(x)], lines


def test_explain_cli_prints_the_hand_style_line(capsys):
    extract_command(Compilation(os.path.join(EX, "mlp.json"), cost="model"), explain=True)
    out = capsys.readouterr().out.splitlines()
    assert any(HAND.match(x) for x in out), out[-6:]
    assert "gelu: rule — fused into the reduction fc2, the reduction fc1 would be read by broadcast inside one " \
           "kernel (many-to-many): never legal (rule many-to-many, rules/fusion.egg) (separate" in "\n".join(out)


@pytest.mark.parametrize("name, cost", [("mlp", "model"), ("mlp", "size"), ("transformer_1", "model")])
def test_each_rejection_says_once_what_decided_it(name, cost):
    rejected, _, lines = explained(name, cost)
    assert rejected
    for r in rejected:
        assert r["decided_by"] in ("rule", "price", "segment")
        if r["verdict"] == "priced higher":
            assert r["decided_by"] == "price" and r["fused_us"] >= r["separate_us"] - 1e-9
        if r["verdict"] == "illegal":
            assert r["decided_by"] == "rule"
    body = [x for x in lines if x.startswith("  ") and (" rule — " in x or " price — " in x or " segment — " in x)]
    assert len(body) == len([r for r in rejected if r["verdict"] != "streamed"])
    for x in body:
        clauses = x.split(" — ", 1)[1].split("; ")
        assert len(clauses) == len(set(clauses)), x  # a reason is said once


def test_hand_style_transformer_block_is_seven_to_nine_kernels():
    _, hand, _ = explained("transformer_1")
    assert 7 <= hand["kernels"] <= 9, hand["ops"]
    assert hand["illegal"] == []
    flat = [op for ops in hand["ops"] for op in ops]
    assert len(flat) == len(set(flat))  # every op in one kernel
    ln = [ops for ops in hand["ops"] if any(o.endswith("_ln1") for o in ops)]
    assert ln == [["b0_ln1"]]  # a row reduction is a kernel of its own
    assert any({"b0_ff1", "b0_ff1b", "b0_gelu"} <= set(ops) for ops in hand["ops"])  # GEMM + bias + GELU


def test_hand_style_mlp_fuses_each_gemm_with_its_epilogue():
    _, hand, _ = explained("mlp")
    assert [set(ops) - {"fc1"} for ops in hand["ops"]] == [{"bias1", "gelu"}, {"bias2", "fc2", "residual"}]


@pytest.mark.parametrize("name", EXAMPLES + ["transformer_1"])
def test_chosen_partition_is_not_priced_above_the_hand_style_one(name):
    _, hand, lines = explained(name)
    m = next(HAND.match(x) for x in lines if HAND.match(x))
    assert int(m.group(1)) == hand["kernels"] and float(m.group(2)) == pytest.approx(hand["time_est_us"], abs=1e-3)
    assert hand["chosen"]["time_est_us"] <= hand["time_est_us"] + 1e-6, (hand["chosen"], hand)


def test_hand_style_groups_that_wait_on_each_other_are_one_kernel(tmp_path, monkeypatch):
    """LLaMA-2-7B's fp32 layer (bench/corpora/scale_models.py) as its search leaves it at one layer under a price
    limit of 12 groups (the default until 2026-11-30): SiLU x up is computed beside the gate/up concatenation, the
    gate's SiLU in a kernel of its own, so the op holding the concatenation and the product reads SiLU, which reads
    the concatenation. The hand-style groups that would wait on each other are made one kernel
    (search/hand_partition.py ``_merge_cycles``) and priced, never an error."""
    from polysat.bench.corpora.scale_models import build
    from polysat.search.hand_partition import hand_partition
    monkeypatch.setenv("POLYSAT_SEARCH_PRICES", "12")
    path = tmp_path / "llama_l1.onnx"
    path.write_bytes(build("llama2_7b", 1).SerializeToString())
    c = Compilation(str(path), cost="model")
    result = extract_result(c)
    prog, part = hand_partition(c.program, result["_extraction"].program)
    part.check(prog)
    hand = hand_style(result, c.program)
    assert hand["kernels"] == len(part.kernels) and hand["time_est_us"] > 0
    # each op its own group wherever any two groups waited on each other: 43 kernels once (search/hand_partition.py
    # ``_cyclic`` asks only about cycles through the group an op joins)
    assert hand["kernels"] == 8, hand["ops"]  # 7 a layer and the final norm, as a person writes them
    # sibling GEMMs one GEMM with the concatenation the extraction made of them (Q/K/V with RoPE, gate/up with
    # SiLU x up)
    assert any({"MatMul_24", "MatMul_59", "MatMul_94", "Add_56", "Add_91"} <= set(ops) for ops in hand["ops"])
    assert any({"MatMul_150", "MatMul_157", "Sigmoid_152", "Mul_159"} <= set(ops) for ops in hand["ops"])
    norms = [set(ops) for ops in hand["ops"] if any(o.startswith("ReduceMean") for o in ops)]
    assert len(norms) == 3 and all(len(n) == 7 for n in norms), norms  # x^2, mean, + eps, sqrt, 1 / .., x r, r g
    assert {"Mul_132", "ReduceMean_134", "Mul_147"} in [n & {"Mul_132", "ReduceMean_134", "Mul_147"} for n in norms]
    assert any({"MatMul_128", "Add_130"} == set(ops) for ops in hand["ops"])  # out-projection + residual


def test_hand_style_pairs_sibling_gemms_an_elementwise_value_combines(tmp_path):
    """LLaMA-2-7B's fp32 layer as the default search extracts it: gate and up as two GEMMs over the normed x (no
    concatenation) whose results SiLU(gate) x up combines. The hand-style partition makes them one kernel with that
    product (search/hand_partition.py ``_paired``), as a person writes the paired GEMM: 7 kernels a layer and the final
    norm, not the up projection alone."""
    from polysat.bench.corpora.scale_models import build
    path = tmp_path / "llama_l1.onnx"
    path.write_bytes(build("llama2_7b", 1).SerializeToString())
    c = Compilation(str(path), cost="model")
    hand = hand_style(extract_result(c), c.program)
    assert hand["kernels"] == 8, hand["ops"]
    assert any({"MatMul_150", "MatMul_157", "Sigmoid_152", "Mul_154", "Mul_159"} <= set(ops) for ops in hand["ops"])
    assert not any({"MatMul_150", "MatMul_157"} & set(ops) and {"MatMul_24", "MatMul_162"} & set(ops)
                   for ops in hand["ops"])  # not joined with the Q/K/V or the down projection
    assert hand["chosen"]["time_est_us"] <= hand["time_est_us"]
