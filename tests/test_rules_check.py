"""Rules as files: the catalogue, soundness of every shipped rule, the checker catching planted
unsound rules, and rule-file errors as E1403 diagnostics."""
from __future__ import annotations

import pathlib

import pytest

from polysat.egraph import check_rules, list_rules, saturate
from polysat.egraph.rulefiles import RULES_DIR
from polysat.frontend import load_model
from polysat.ir.diagnostics import PolysatError

HERE = pathlib.Path(__file__).resolve().parent
GEMM = str(HERE.parent / "examples" / "gemm_bias_relu.json")


def test_every_shipped_rule_is_named_filed_and_states_its_law():
    rules = list_rules()
    assert len(rules) >= 10
    families = {pathlib.Path(f).stem for f, *_ in rules}
    assert {"movement", "contraction", "srnf", "algebra", "fusion"} <= families
    for f, name, ruleset, law in rules:
        assert pathlib.Path(f).parent == RULES_DIR and name and ruleset and law


def test_every_shipped_rule_is_sound_on_random_programs():
    rep = check_rules(cases=1, seed=3)
    assert not rep.errors
    bad = [v.rule.name for v in rep.verdicts if v.unsound]
    assert not bad, rep.format()
    fired = [v for v in rep.verdicts if v.fired]
    assert len(fired) >= 0.9 * len(rep.verdicts), [v.rule.name for v in rep.verdicts if not v.fired]
    assert rep.ok


def test_the_checker_names_planted_unsound_rules_with_file_and_counterexample():
    rep = check_rules([str(HERE / "bad_rules")], cases=2, builtin=False, seed=1)
    assert not rep.ok
    unsound = {v.rule.name: v for v in rep.verdicts if v.unsound}
    assert set(unsound) == {"bad-sub-swap", "bad-merge-max-sum"}
    assert unsound["bad-sub-swap"].rule.file.endswith("sub_swap.egg")
    assert "SUB" in unsound["bad-sub-swap"].counterexample
    text = rep.format()
    assert "UNSOUND rule 'bad-merge-max-sum'" in text and "reduce_merge_ops.egg" in text


def test_a_rule_file_with_an_error_is_e1403_with_file_line_and_rule(tmp_path):
    bad = tmp_path / "broken.egg"
    bad.write_text('(ruleset mine)\n\n; law: x = x\n(rewrite (Unary "NEG" x)\n  (Nope x) :ruleset mine :name "uses-nope")\n')
    with pytest.raises(PolysatError) as e:
        saturate(load_model(GEMM), rules_dirs=[str(tmp_path)])
    d = e.value.diagnostics[0]
    assert d.code == "E1403" and f"{bad}:" in d.at and "uses-nope" in d.at
    assert dict(d.details)["line"] in (4, 5)


@pytest.mark.parametrize("text,why", [
    ('(ruleset r)\n; law: x\n(rewrite (Unary "NEG" x) x :ruleset r)\n', "no :name"),
    ('(ruleset r)\n(rewrite (Unary "NEG" x) x :ruleset r :name "n")\n', "no law"),
    ('(ruleset r)\n; law: x\n(rewrite (Unary "NEG" x) x :ruleset r :name "n"\n', "unclosed"),
])
def test_malformed_rule_files_are_diagnostics(tmp_path, text, why):
    (tmp_path / "r.egg").write_text(text)
    with pytest.raises(PolysatError) as e:
        list_rules([str(tmp_path)], builtin=False)
    assert e.value.diagnostics[0].code == "E1403" and why in e.value.diagnostics[0].why


def test_the_checker_reports_a_broken_file_and_still_checks_the_others(tmp_path):
    (tmp_path / "a_broken.egg").write_text('(ruleset r)\n; law: x\n(rewrite (Frob x) x :ruleset r :name "frob")\n')
    (tmp_path / "b_ok.egg").write_text('(ruleset s)\n; law: --x = x\n(rewrite (Unary "NEG" (Unary "NEG" x)) x :ruleset s :name "nn")\n')
    rep = check_rules([str(tmp_path)], cases=1, builtin=False, seed=0)
    assert rep.errors and rep.errors[0].code == "E1403" and "a_broken.egg" in rep.errors[0].at
    assert [v.rule.name for v in rep.verdicts] == ["nn"] and rep.verdicts[0].fired and not rep.verdicts[0].unsound
    assert not rep.ok


def test_a_user_rules_folder_adds_rules_to_a_run(tmp_path):
    (tmp_path / "mine.egg").write_text('(ruleset mine)\n; law: relu(relu(x)) = relu(x)\n'
                                       '(rewrite (Unary "RELU" (Unary "RELU" x)) (Unary "RELU" x) :ruleset mine :name "relu-idem")\n')
    st, rep = saturate(load_model(GEMM), rules_dirs=[str(tmp_path)])
    assert "relu-idem" in rep.rules and rep.rules["relu-idem"].ruleset == "mine"


def test_the_rules_command_lists_and_checks_with_an_exit_status(capsys):
    from polysat.commands.rules import rules_command
    assert rules_command() == 0
    assert "read-pad" in capsys.readouterr().out
    assert rules_command(check=True, rules_dirs=[str(HERE / "bad_rules")], cases=1) == 1
    out = capsys.readouterr().out
    assert "UNSOUND rule 'bad-sub-swap'" in out
