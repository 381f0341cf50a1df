"""Rules as files: the catalogue, soundness of every shipped rule, the checker catching planted
unsound rules, and rule-file errors as E1403 diagnostics."""
from __future__ import annotations

import json
import pathlib

import pytest

from polysat.checker import check_rules
from polysat.egraph import list_rules, saturate
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


def test_every_shipped_rule_is_exercised_and_sound():
    rep = check_rules(cases=1, seed=3, budget=3)
    assert not rep.errors
    assert rep.exit_status == 0, rep.format()
    assert all(v.fired >= 1 and v.checked_pairs >= 0 for v in rep.verdicts)
    # rules that rewrite are compared, not merely matched
    rewriting = [v for v in rep.verdicts if not v.rule.law.startswith("bookkeeping only")]
    assert all(v.checked_pairs >= 1 for v in rewriting), [v.rule.name for v in rewriting if not v.checked_pairs]


def test_every_known_bad_rule_is_caught_and_named_with_a_counterexample():
    files = sorted((HERE / "bad_rules").glob("*.egg"))
    assert len(files) >= 20
    rep = check_rules([str(HERE / "bad_rules")], cases=2, only=[str(HERE / "bad_rules")], seed=1)
    assert rep.exit_status == 1
    names = {v.rule.name: v for v in rep.verdicts}
    assert len(names) == len(files)
    missed = [n for n, v in names.items() if not v.unsound]
    assert not missed, rep.format()
    for v in (v for v in names.values() if v.unsound):
        assert "counterexample" in v.counterexample and ("before:" in v.counterexample or "other:" in v.counterexample)
    text = rep.format()
    assert "UNSOUND rule 'bad-pad-off-by-one'" in text and "pad_off_by_one.egg" in text
    # the shipped rules were context only: none of them is blamed
    assert all(pathlib.Path(v.rule.file).parent.name == "bad_rules" for v in rep.verdicts)


def test_sound_but_unusual_rules_pass_and_are_exercised():
    files = sorted((HERE / "sound_rules").glob("*.egg"))
    assert len(files) >= 8
    rep = check_rules([str(HERE / "sound_rules")], cases=3, only=[str(HERE / "sound_rules")], seed=2)
    assert rep.exit_status == 0, rep.format()
    assert len(rep.verdicts) == len(files) and all(v.from_pattern >= 3 for v in rep.verdicts)


def test_a_rule_that_can_never_fire_exits_2_and_says_why(tmp_path):
    (tmp_path / "never.egg").write_text('(ruleset r)\n; law: -(SoftmaxSum) = -(SoftmaxSum)\n'
                                        '(rewrite (Unary "NEG" (SoftmaxSum "fp16" "1" s v)) (Unary "NEG" (SoftmaxSum "fp16" "1" s v))'
                                        ' :ruleset r :name "never-fires")\n')
    rep = check_rules([str(tmp_path)], cases=1, only=["never-fires"], seed=0, budget=2)
    assert rep.exit_status == 2 and [v.rule.name for v in rep.verdicts] == ["never-fires"]
    assert "no instance" in rep.verdicts[0].why_not and "UNEXERCISED rule 'never-fires'" in rep.format()


def test_only_checks_the_named_rules_with_the_shipped_ones_as_context():
    rep = check_rules(cases=2, only=["mul-one", "srnf.egg"], seed=4, budget=3)
    names = [v.rule.name for v in rep.verdicts]
    assert "mul-one" in names and "srnf-merge-sum" in names and "read-pad" not in names
    assert rep.exit_status == 0, rep.format()  # every shipped rule named passes
    rep = check_rules(cases=1, only=["no-such-rule"])
    assert rep.exit_status == 1 and rep.errors[0].code == "E1112" and not rep.verdicts


@pytest.mark.parametrize("text,code,line", [
    ('(ruleset r)\n; law: x\n(rewrite (Unary "RELUU" x)\n x :ruleset r :name "n")\n', "E1405", 3),
    ('(ruleset r)\n; law: x\n(rewrite (Reshape x "[2,3]") x :ruleset r :name "n")\n', "E1406", 3),
    ('(ruleset r)\n; law: x\n(rewrite (Cast "fp64" x) x :ruleset r :name "n")\n', "E1406", 3),
    ('(ruleset r)\n; law: x\n(rule ((= e (Binary f a b)) (= f "MULT")) ((union e a)) :ruleset r :name "n")\n', "E1405", 3),
    ('(ruleset Unary)\n; law: x\n(rewrite (Unary "NEG" x) x :ruleset Unary :name "n")\n', "E1408", 1),
])
def test_load_time_checks_are_coded_diagnostics_with_file_and_line(tmp_path, text, code, line):
    (tmp_path / "r.egg").write_text(text)
    with pytest.raises(PolysatError) as e:
        list_rules([str(tmp_path)], builtin=False)
    d = e.value.diagnostics[0]
    assert d.code == code and f"r.egg:{line}" in d.at, str(d)


def test_a_rule_name_used_twice_across_files_is_e1407(tmp_path):
    (tmp_path / "a.egg").write_text('(ruleset ra)\n; law: --x = x\n(rewrite (Unary "NEG" (Unary "NEG" x)) x :ruleset ra :name "mul-one")\n')
    with pytest.raises(PolysatError) as e:
        saturate(load_model(GEMM), rules_dirs=[str(tmp_path)])
    d = e.value.diagnostics[0]
    assert d.code == "E1407" and "a.egg:3" in d.at and "algebra.egg" in d.why
    rep = check_rules([str(tmp_path)], cases=1, only=["a.egg"])
    assert rep.exit_status == 1 and rep.errors[0].code == "E1407"


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
    assert rules_command(check=True, rules_dirs=[str(HERE / "bad_rules")], cases=1, only=["sub_swap.egg"]) == 1
    out = capsys.readouterr().out
    assert "UNSOUND rule 'bad-sub-swap'" in out and "exit status 1" in out
    assert rules_command(check=True, rules_dirs=[str(HERE / "sound_rules")], cases=2, only=["max_self.egg"]) == 0


# The term language users write rule files against: it may grow, but none of this may disappear or change
# meaning (a user's rule file keeps loading and checking across versions).
TODAY = {
    "constructors": {"Tensor": (), "Mat": (0,), "Read": (0,), "Const": (), "Reshape": (0,), "Permute": (0,),
                     "Expand": (0,), "Pad": (0,), "Shrink": (0,), "Flip": (0,), "View": (0,), "Transpose": (0,),
                     "BroadcastInDim": (0,), "Select": (1, 2), "Unary": (1,), "Binary": (1, 2), "Where": (0, 1, 2),
                     "Cast": (1,), "Reduce": (4,), "SoftmaxSum": (2, 3)},
    "unary": {"NEG", "RELU", "EXP2", "LOG2", "SQRT", "RSQRT", "RECIPROCAL"},
    "binary": {"ADD", "SUB", "MUL", "FDIV", "MAX", "MIN", "POW", "CMPLT", "CMPEQ", "CMPNE"},
    "helpers": {"fold-map", "shape-after", "pad-guard", "pad-map", "reduce-shape", "unit-dims", "iota", "merge-axes",
                "hoist-shape", "hoist-dims", "is-identity", "compose-perm", "compose-maps", "identity-map",
                "unit-reduce-shape", "read-kind"},
    "relations": {"has-shape", "has-dtype", "computed", "reduce-free", "sees"},
}


def test_the_term_language_of_todays_rule_files_is_still_there():
    from polysat.egraph.ixfns import HELPERS
    from polysat.egraph.schema import CHILDREN
    from polysat.egraph.rule_lint import BINARY_OPS, RELATIONS, UNARY_OPS
    for name, kids in TODAY["constructors"].items():
        assert CHILDREN.get(name) == kids, name
    assert TODAY["unary"] <= UNARY_OPS and TODAY["binary"] <= BINARY_OPS
    assert TODAY["helpers"] <= set(HELPERS) and TODAY["relations"] <= RELATIONS


def test_a_user_rule_file_written_against_todays_helpers_loads_and_checks():
    rep = check_rules([str(HERE / "sound_rules")], cases=2, only=["transpose_compose.egg"], seed=5, budget=6)
    assert rep.exit_status == 0 and rep.verdicts[0].from_pattern >= 2, rep.format()


def test_with_unsound_rules_loaded_the_sound_rules_they_touch_are_not_blamed():
    shipped = ["broadcast-sink-unary", "srnf-hoist-div-const", "read-flip", "split-reduce-before-broadcast", "fuse-halo"]
    bad = ["bad-read-flip-dropped", "bad-max-div-hoist", "bad-fuse-map-dropped"]
    rep = check_rules([str(HERE / "bad_rules")], cases=2, only=shipped + bad, seed=6, budget=6)
    status = {v.rule.name: v.status(2) for v in rep.verdicts}
    assert {n: status[n] for n in shipped} == {n: "ok" for n in shipped}, rep.format()
    assert {n: status[n] for n in bad} == {n: "UNSOUND" for n in bad}, rep.format()


def test_mutants_of_shipped_rules_are_caught_on_a_bounded_sample():
    """bench/rule_mutants.py on a seeded sample of the value-changing operators (the full run is the bench)."""
    from polysat.bench.rule_mutants import build, run
    rows = build(per_rule=1, seed=0, limit=6, files={"algebra.egg", "movement.egg", "srnf.egg", "contraction.egg"},
                 operators={"swap", "op", "cast", "rescale", "const", "axes"})
    summary = run(rows, seed=0, budget=6)
    assert summary["killed"] + summary["survived"] >= 3, rows
    assert summary["score"] >= 0.95, [r for r in rows if r["outcome"] == "survived"]
    assert all(r["equivalent"].startswith("operands of the commutative") for r in rows if r["outcome"] == "equivalent")


def test_special_values_integers_and_cancellation_reach_new_authors_rules():
    """A few of the rules written as a new author would (tests/bad_rules/), each caught at two seeds."""
    names = ["new-self-ne-false", "new-int-div-mul-cancel", "new-add-sub-cancel", "new-relu-pad-any-value",
             "new-square-transpose-noop"]
    for seed in (0, 1):
        rep = check_rules([str(HERE / "bad_rules")], cases=1, only=names, seed=seed)
        assert {v.rule.name: v.status(1) for v in rep.verdicts} == {n: "UNSOUND" for n in names}, rep.format()


def test_a_reassociation_within_rounding_passes_and_lost_digits_fail():
    import numpy as np
    from polysat.checker import bounds as B
    from polysat.checker.tolerance import agree
    x = np.array([1.5, 100.25, -3.0, 60.0], np.float32)
    one = np.ones(4, np.float32)
    lhs = B.unary("EXP2", B.binary("ADD", B.exact(x), B.exact(one), x + one), np.exp2(x + one))
    e = B.unary("EXP2", B.exact(x), np.exp2(x))
    rhs = B.binary("MUL", B.exact(2 * one), e, np.float32(2) * np.exp2(x))
    assert agree(lhs, rhs).all() and agree(rhs, lhs).all()
    a, b = np.array([1e4], np.float32), np.array([1e-4], np.float32)
    s = B.binary("ADD", B.exact(a), B.exact(b), a + b)
    lost = B.binary("SUB", s, B.exact(a), (a + b) - a)
    assert not agree(lost, B.exact(b)).any()
    nan = np.array([np.nan, 1.0], np.float32)
    assert list(agree(B.exact(nan), B.exact(np.array([0.0, 1.0], np.float32)))) == [False, True]


def test_an_undeclared_ruleset_is_e1403_at_polysat_rules(tmp_path, capsys):
    from polysat.cli import main
    (tmp_path / "a.egg").write_text('; law: --x = x\n(rewrite (Unary "NEG" (Unary "NEG" x)) x :ruleset mine :name "nn-undeclared")\n')
    with pytest.raises(PolysatError) as e:
        list_rules([str(tmp_path)])
    d = e.value.diagnostics[0]
    assert d.code == "E1403" and "a.egg:2" in d.at and "'mine' is declared by no rule file" in d.why
    assert main(["rules", "--rules", str(tmp_path)]) == 1
    assert "E1403" in capsys.readouterr().err


def test_a_user_ruleset_runs_with_the_fused_reads_under_the_model_schedule():
    from polysat.egraph.saturate import default_schedule
    phases = {ph.name: ph.rulesets for ph in default_schedule(["movement", "algebra", "mine", "fusion-search"],
                                                              opt_in=("fusion-search",))}
    assert "mine" in phases["rewrite"] and "mine" in phases["fusion-search"]
    assert "algebra" in phases["fusion-search"] and "mine" not in phases.get("fusion-facts", ())


def test_extract_reports_how_often_each_user_rule_matched(tmp_path):
    from polysat.commands.extract import run_extract
    (tmp_path / "m.egg").write_text('(ruleset mine)\n; law: a + b = b + a\n'
                                    '(rewrite (Binary "ADD" a b) (Binary "ADD" b a) :ruleset mine :name "my-add-comm")\n'
                                    '; law: --x = x\n(rewrite (Unary "NEG" (Unary "NEG" x)) x :ruleset mine :name "my-neg-neg")\n')
    got = {r["name"]: r for r in run_extract(GEMM, rules_dirs=[str(tmp_path)])["user_rules"]}
    assert set(got) == {"my-add-comm", "my-neg-neg"} and got["my-add-comm"]["ruleset"] == "mine"
    assert got["my-add-comm"]["matches"] >= 1 and got["my-neg-neg"]["matches"] == 0


def test_index_map_rules_are_proved_for_all_sizes_and_the_others_tested():
    """Rules whose law is an equality of index maps are proved with isl on symbolic instances; the rest tested."""
    rep = check_rules(cases=1, only=["read-permute", "read-pad", "read-flip", "mul-one"], seed=0, budget=3)
    got = {v.rule.name: v for v in rep.verdicts}
    assert {n: got[n].method for n in got} == {"read-permute": "proved", "read-pad": "proved", "read-flip": "proved",
                                               "mul-one": "tested"}, rep.format()
    assert all(got[n].proved >= 1 for n in ("read-permute", "read-pad", "read-flip"))
    rows = {r["name"]: r for r in rep.to_json()["rules"]}
    assert rows["read-pad"]["method"] == "proved" and rows["mul-one"]["method"] == "tested"
    assert "proved" in rep.format() and "tested" in rep.format()


def test_a_bad_index_map_rule_is_refuted_by_isl_as_well_as_by_testing():
    names = ["bad-read-flip-dropped", "bad-read-permute-unmapped", "bad-pad-value-zero"]
    rep = check_rules([str(HERE / "bad_rules")], cases=1, only=names, seed=0, budget=6)
    for v in rep.verdicts:
        assert v.unsound and "refuted by isl" in v.refuted and "->" in v.refuted, v.rule.name
        assert "counterexample" in v.counterexample  # the numeric one too


def test_isl_placements_compare_for_every_size():
    """The placement of Flip(Read(x, [n], (i0)), (0)) is x read at n - 1 - i, not at i, for every n >= 1 but n = 1."""
    from polysat.checker.isl_proof import Placer, Placement, differ
    from polysat.egraph.graph import EGraphView
    v = EGraphView(classes={}, shape={}, dtype={}, by_index={}, nodes=0)
    p = Placer(v, ["n"])
    from polysat.ir.expr import Expr
    same = Placement({"t_x": p.access((Expr.of("n"),), (Expr.of("i0"),), "t_x")})
    flipped = Placement({"t_x": p.access((Expr.of("n"),), (Expr.of("n - 1 - i0"),), "t_x")})
    assert differ(same, same) is None
    why = differ(same, flipped)
    assert why and "n = " in why and "t_x" in why


def test_guard_mutants_are_killed_or_equivalent_with_a_reason():
    """A weakened guard: srnf-merge-fused without its fp16/bf16, identity or shape guard, cast-roundtrip without its
    i32 guard are caught; the guards listed as redundant come with the argument and still pass when checked."""
    from polysat.bench.rule_mutants import build, run
    rows = [r for r in build(per_rule=100, seed=0, files={"srnf.egg", "algebra.egg"}, operators={"guard"})
            if r["rule"] in ("srnf-merge-fused", "cast-roundtrip")]
    summary = run(rows, seed=0, check_equivalent=True)
    assert summary["killed"] >= 5 and summary["survived"] == 0, [r for r in rows if r["outcome"] == "survived"]
    eq = [r for r in rows if r["outcome"] == "equivalent"]
    assert len(eq) == 2 and all(len(r["equivalent"]) > 40 and r["checked"] == "survived" for r in eq), eq
    assert not summary["contradictions"]


def test_extract_says_whether_the_chosen_partition_used_each_user_rule(tmp_path, capsys):
    """Used = the compilation without that rule chooses another program or other kernels: --x = x (no shipped
    rule states it) shortens the chosen term; a + b = b + a matches but the shipped add-comm makes the same
    e-graph without it, so the same program is chosen."""
    from polysat.commands.extract import extract_command
    from polysat.pipeline import Compilation
    (tmp_path / "m.egg").write_text('(ruleset mine)\n; law: a + b = b + a\n'
                                    '(rewrite (Binary "ADD" a b) (Binary "ADD" b a) :ruleset mine :name "my-add-comm")\n'
                                    '; law: --x = x\n(rewrite (Unary "NEG" (Unary "NEG" x)) x :ruleset mine :name "my-neg-neg")\n'
                                    '; law: relu(relu(x)) = relu(x)\n'
                                    '(rewrite (Unary "RELU" (Unary "RELU" x)) (Unary "RELU" x) :ruleset mine :name "my-relu2")\n')
    model = {"signature": {"inputs": [{"tensor": "X", "role": "data", "mutability": "immutable"}],
                           "outputs": [{"tensor": "Y"}]},
             "tensors": {"X": {"dtype": "fp32", "shape": [4, 8]}, "Y": {"dtype": "fp32", "shape": [4, 8]}},
             "graph": [{"op": "Elementwise", "name": "n1", "fn": "neg", "inputs": ["X"], "outputs": ["T1"]},
                       {"op": "Elementwise", "name": "n2", "fn": "neg", "inputs": ["T1"], "outputs": ["T2"]},
                       {"op": "Elementwise", "name": "sum", "fn": "add", "inputs": ["T2", "X"], "outputs": ["Y"]}]}
    c = Compilation(model, rules_dirs=(str(tmp_path),), cost="size")
    assert extract_command(c, as_json=True) == 0
    got = {r["name"]: r for r in json.loads(capsys.readouterr().out)["user_rules"]}
    assert got["my-neg-neg"]["matches"] >= 1 and got["my-neg-neg"]["used"] is True, got
    assert got["my-add-comm"]["matches"] >= 1 and got["my-add-comm"]["used"] is False, got
    assert got["my-relu2"]["matches"] == 0 and got["my-relu2"]["used"] is False, got
    assert extract_command(c, explain=True) == 0
    text = capsys.readouterr().out
    assert "user rule my-neg-neg" in text and "USED by the chosen partition" in text
    assert "my-add-comm (mine" in text and "not used by the chosen partition (without it the same" in text


def test_a_merge_a_rule_triggers_calls_its_helper_named_inline():
    """egglog 13 misreads a global ($helper) inside a :merge that a rule's action triggers (a panic, or another
    value called: the mutation bench's "'str' object is not callable"); the shipped merges name the helper
    inline, and a rule-triggered merge then calls it."""
    from egglog import EGraph
    merges = []
    for p in sorted(RULES_DIR.glob("*.egg")):
        text = p.read_text()
        for at in [k for k in range(len(text)) if text.startswith(":merge", k)]:
            k = at + len(":merge")
            k += len(text[k:]) - len(text[k:].lstrip())
            if text[k] != "(":  # an atom: old, new
                continue
            depth = 0
            for end in range(k, len(text)):
                depth += {"(": 1, ")": -1}.get(text[end], 0)
                if depth == 0:
                    break
            merges.append((p.name, text[k:end + 1]))
    assert any("name-union" in m for _, m in merges), merges
    assert all("$" not in m for _, m in merges), merges
    g = EGraph()._egraph
    g.run_program(*g.parse_program(
        '(datatype T (K String))\n(function names (T) String :merge (py-to-string (py-call (py-eval '
        '"__import__(\'polysat.egraph.ixfns\', fromlist=[\'_\']).HELPERS[\'name-union\']" (py-dict) (py-dict)) '
        '(py-from-string old) (py-from-string new))))\n(ruleset r)\n'
        '(rule ((= n (names (K a)))) ((set (names (K "all")) n)) :ruleset r)\n'
        '(set (names (K "a")) "x")\n(set (names (K "b")) "y")\n(run r 2)', filename="t"))
    out = str(g.run_program(*g.parse_program("(print-function names 9)", filename="t"))[0])
    assert '(names (K "all")) -> "x;y"' in out, out
