"""rules/streaming.egg (docs/DESIGN.md §Streaming):
named rules with laws, opt-in (run by `--cost=model`, not by the default
schedule), sound on random attention-shaped programs, and the fp16 restriction of moving P's rounding is
needed: the same rewrite for bf16 P is caught by the checker."""
from __future__ import annotations

import json
import pathlib

import pytest

from polysat.checker import check_rules
from polysat.egraph import list_rules, saturate
from polysat.egraph.graph import export
from polysat.search.model import saturate_unfused
from polysat.egraph.rulefiles import RULES_DIR
from polysat.egraph.saturate import OPT_IN, StopReason
from polysat.frontend import load_model

EX = pathlib.Path(__file__).resolve().parent.parent / "examples"
STREAMING = RULES_DIR / "streaming.egg"
NAMES = {"softmax-normalizer-out", "softmax-sum-online", "softmax-sum-two-pass", "softmax-normalizer-out-fp32",
         "softmax-sum-online-fp32"}


def softmax_sums(st) -> list:
    view = export(st)
    return sorted(n.args for ns in view.classes.values() for n in ns if n.op == "SoftmaxSum")


def test_the_rules_are_named_filed_and_state_their_laws():
    rules = [r for r in list_rules() if pathlib.Path(r[0]) == STREAMING]
    assert {name for _, name, _, _ in rules} == NAMES
    assert all(rs == "streaming" and law.count("=") >= 1 for _, _, rs, law in rules)
    assert "streaming" in OPT_IN


def test_cost_model_saturation_finds_both_streamed_forms_and_cost_size_none():
    p = load_model(str(EX / "attention.json"))
    st, rep = saturate_unfused(p)
    assert rep.stop == StopReason.saturated and rep.nodes < 1000
    assert softmax_sums(st) == [("fp16", "1"), ("fp16", "2")]
    st2, _ = saturate(p)
    assert softmax_sums(st2) == []


@pytest.mark.parametrize("name", ["bert_encoder", "gpt2_block"])
def test_an_fp32_model_streams_its_attention_in_one_pass(name):
    """A model computed in fp32 (the ONNX BERT and GPT-2 layers: P is never rounded to 16 bits) gets the
    one-pass SoftmaxSum ("fp32", "1") from the fp32 rules, and the search takes it: the scores, softmax and
    P V are one kernel, P is never written (tests/test_onnx_models.py plays the partition back against
    onnxruntime)."""
    from polysat.examples.onnx_models import build
    from polysat.frontend.onnx import import_onnx
    from polysat.pipeline import Compilation
    c = Compilation(import_onnx(build(name)), cost="model")
    assert softmax_sums(c.saturated[0]) == [("fp32", "1")]
    s = c.search
    assert [x.passes for x in s.streamed] == [1]
    assert len(s.best.priced) == {"bert_encoder": 6, "gpt2_block": 5}[name]
    # the fused kernel lists the user's ops it computes, the Softmax between the two MatMuls included
    from polysat.commands.extract import run_extract
    (ops,) = [r["ops"] for r in run_extract(import_onnx(build(name)), cost="model")["regions"]
              if any(o.startswith("Softmax") for o in r["ops"])]
    assert sum(o.startswith("MatMul") for o in ops) == 2, ops


def test_bf16_p_only_streams_in_two_passes():
    doc = json.loads((EX / "attention.json").read_text().replace('"fp16"', '"bf16"'))
    st, _ = saturate_unfused(load_model(doc))
    assert softmax_sums(st) == [("bf16", "2")]


def test_streaming_rules_are_sound_on_random_programs():
    files = [str(RULES_DIR / "movement.egg"), str(RULES_DIR / "fusion.egg"), str(STREAMING)]
    rep = check_rules(files, cases=2, builtin=False, seed=5)
    assert not rep.errors, rep.format()
    mine = {v.rule.name: v for v in rep.verdicts if v.rule.name in NAMES}
    assert set(mine) == NAMES
    assert not [v for v in rep.verdicts if v.unsound], rep.format()
    assert all(v.fired and v.checked_pairs for v in mine.values()), rep.format()


BF16_OUT = (STREAMING.read_text().split("(ruleset streaming)")[0] + "(ruleset streaming-bf16)\n" + """
; law: (planted) sum_j f32(round_bf16(e_j / l)) v_j = (sum_j f32(round_bf16(e_j)) v_j) / l -- NOT within 1e-3
(rule ((= o (Reduce "SUM" ax "0" "fp32" (Binary "MUL" pb vb)))
       (= pb (BroadcastInDim pf sb dims)) (= pf (Cast "fp32" pr)) (sees pr p16) (= p16 (Cast "bf16" pn))
       (sees pn q) (= q (Binary "FDIV" e lb)) (= lb (BroadcastInDim lv sl dl)) (sees lv l)
       (sees e ex) (softmax-sum l ex s) (has-shape s ss) (has-shape vb sv)
       (= "yes" (py-to-string (py-call $pv-ok (py-from-string ss) (py-from-string sl) (py-from-string dl) (py-from-string sb)
                                               (py-from-string dims) (py-from-string ax) (py-from-string sv) (py-from-string "bf16")))))
      ((union o (Binary "FDIV" (Reduce "SUM" ax "0" "fp32" (Binary "MUL" (BroadcastInDim (Cast "fp32" (Cast "bf16" e)) sb dims) vb))
                               (BroadcastInDim lv (py-to-string (py-call $reduce-shape (py-from-string sv) (py-from-string ax)))
                                               (py-to-string (py-call $row-dims (py-from-string ss)))))))
      :ruleset streaming-bf16 :name "planted-bf16-normalizer-out")
""")


def test_moving_a_bf16_rounding_of_p_is_within_rounding(tmp_path):
    """Moving the bf16 rounding of P across the division by l moves one bf16 rounding within its kind: the
    checker's policy (docs/rules.md, rule 4) lets it pass, as it lets a bf16 reassociation pass."""
    (tmp_path / "bf16.egg").write_text(BF16_OUT)
    files = [str(RULES_DIR / "movement.egg"), str(tmp_path / "bf16.egg")]
    rep = check_rules(files, cases=3, builtin=False, seed=0, max_programs=120)
    (v,) = [v for v in rep.verdicts if v.rule.name == "planted-bf16-normalizer-out"]
    assert v.fired >= 3 and not v.unsound, rep.format()
