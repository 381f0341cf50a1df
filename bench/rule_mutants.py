"""Mutation testing of ``polysat rules --check``: every shipped rule that rewrites is mutated automatically
and the checker must catch each mutant that is not equivalent to its rule.

Mutation operators, on the rule's right-hand side (its actions) unless said otherwise:
  swap      the two operands of a Binary;
  op        a Binary or Unary op replaced by a neighbour (ADD/SUB, MUL/FDIV, MAX/MIN, RELU/NEG, ...);
  cast      a Cast dropped (its operand kept);
  rescale   a multiplication or division by a term dropped (its first operand kept);
  const     a literal constant value changed (0 -> 1, 1 -> 2, any other -> 0.5);
  axes      a literal axis list or permutation reversed, or a helper's first two arguments swapped
            (an index map or a shape computed from the wrong operand);
  guard     one side condition of the left-hand side removed (a rule's !=, has-dtype, has-shape, or an
            equality with a literal).
A mutant is *equivalent*, and excluded with the reason, when it swaps the operands of a commutative op
(ADD, MUL, MAX, MIN, CMPEQ, CMPNE), its text equals the rule's, or it removes a guard listed in
``GUARD_EQUIVALENT`` with the argument why the law holds without it (a guard implied by the rest of the
pattern, a cost or classification guard, a helper test no well-typed term fails); those are still checked
(``--check-equivalent``), and one the checker rejects is printed as a contradiction. A mutant egglog or the loader
rejects is *stillborn* (counted apart: it never reaches a user). The others are checked together, in
one checker run with every shipped rule as context and no mutant context for another (``check_rules``,
``isolate``): UNSOUND or UNCHECKABLE kills a
mutant (a failure of the checker itself does not: it is counted apart, outside the score); a mutant that passes survives; one that never fires is unexercised. The score is killed /
(killed + survived), per operator and in all. Each rule file's mutants are checked in their own e-graph.
Prints the table and the survivors, writes ``bench/results/rule_mutants.json``.

    python -m polysat.bench.rule_mutants [--seed N] [--per-rule K] [--limit N] [--operators a,b] [--out PATH]
"""
from __future__ import annotations

import argparse
import json
import pathlib
import re
import tempfile
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
COMMUTATIVE = {"ADD", "MUL", "MAX", "MIN", "CMPEQ", "CMPNE"}
OP_SWAP = {"ADD": "SUB", "SUB": "ADD", "MUL": "FDIV", "FDIV": "MUL", "MAX": "MIN", "MIN": "MAX", "CMPLT": "CMPNE",
           "RELU": "NEG", "NEG": "RELU", "EXP2": "LOG2", "LOG2": "EXP2", "SQRT": "RECIPROCAL", "RECIPROCAL": "SQRT",
           "RSQRT": "SQRT", "SUM": "MAX"}
CONST_NEXT = {"0.0": "1.0", "1.0": "2.0", "-inf": "0.0", "inf": "0.0"}

_SAME_DTYPE = ("the other operand of the same Binary states the dtype, and a Binary's operands share one dtype "
               "(Tiny IR has no implicit casts), so the removed has-dtype follows from the rest of the pattern")
_DIV_ZERO = ("dividing by +-0 makes every term +-inf (or 0/0, invalid): a sum of same-signed infinities is that "
             "infinity, as (sum x)/c is, and a sum of mixed ones is inf - inf, an invalid operation any value "
             "refines (docs/rules.md, policy 1)")
_DIV_INF = ("dividing by +-inf makes every finite term +-0 and an infinite one inf/inf (invalid, refined by any "
            "value): the sum of zeros is the 0 that (sum x)/c gives, unless sum x overflows, an overflow only the "
            "rewritten side performs, which the policy does not compare")
_FOLD = ("$fold-map answers \"\" only when the movement op does not fit its operand (a permutation of another "
         "rank, a shape it cannot broadcast to) or the folded map may leave the read's range; these ops rename, "
         "reflect, restrict or fix the read's indices, so on a well-typed term the folded map stays inside it")
_FUSE = ("fuse-halo, fuse-prefix and fuse-recompute add the same e-node View(x, s, m) for the read kinds they "
         "share out; without the kind test one of them adds it for every kind: the e-graph the three make "
         "together (the kind classifies the proposal for the legality facts, not the law)")
_VIEW_FOLD = ("the kept guard puts the view's map f inside the read's shape s, and the interval bounds $fold-map "
              "compares are inclusion-monotone: m . f over s2 stays inside m's bounds over s, so the fold never "
              "answers \"\" (it parses a view's shape and map from well-formed attributes)")
_SELECT_VIEW = ("a View's map f stays inside its operand's shape s (the Tiny IR view check), and the interval bounds "
                "$fold-map compares are inclusion-monotone: m . f over s2 stays inside m's bounds over s (m may leave "
                "mem under the Select's guard; the fold compares with m's own range), so it never answers \"\"")
_CONCAT = ("the siblings of one group share a0, its dims and the reduced axes, so their outputs [.., N_j] agree but "
           "for the last axis (rank >= 1: $sibling-ok asks a body [.., N, K]); $concat-pad and $concat-slice answer "
           "\"\" only for shapes that disagree elsewhere")
# (rule name or "*", removed guard) -> why the rule stays sound without it
GUARD_EQUIVALENT = {
    ("srnf-hoist-div-const", '(has-dtype x "fp32")'): "x is the dividend of a Const of dtype fp32: " + _SAME_DTYPE,
    ("srnf-hoist-div-const-fused", '(has-dtype x "fp32")'): "x is the dividend of a Const of dtype fp32: " + _SAME_DTYPE,
    ("*", '(!= v "0.0")'): _DIV_ZERO, ("*", '(!= v "-0.0")'): _DIV_ZERO,
    ("*", '(!= v "inf")'): _DIV_INF, ("*", '(!= v "-inf")'): _DIV_INF,
    ("*", '(!= v "nan")'): "x/NaN and (sum x)/NaN are NaN at every element",
    ("cast-roundtrip", '(!= t "fp32")'): "for t = fp32 the law is cast_fp32(cast_fp32(x)) = x with x of fp32: a cast "
                                         "to its own type is the identity",
    ("cast-roundtrip", '(!= t "bool")'): "bool -> fp32 -> bool is exact: false and true become 0.0 and 1.0 and back",
    ("pad-sink-cast-zero", '(!= dx "i32")'): "0 is exact in i32 too and casts to 0.0: the padded elements agree",
    ("pad-sink-cast-zero", '(!= dx "bool")'): "0 is false in bool and casts to 0.0: the padded elements agree",
    ("fuse-halo", "*"): _FUSE, ("fuse-prefix", "*"): _FUSE, ("fuse-recompute", "*"): _FUSE,
    ("sibling-gemms-concat2", "$names-are"): "a cost guard: one concatenation per group, in weight-name order, so "
                                             "the alternatives do not multiply; each sibling is its slice of the "
                                             "zero-padded concatenation of any siblings of one A (one taken twice too)",
    ("sibling-gemms-concat3", "$names-are"): "a cost guard: one concatenation per group, in weight-name order, so "
                                             "the alternatives do not multiply; each sibling is its slice of the "
                                             "zero-padded concatenation of any siblings of one A (one taken twice too)",
    ("permute-compose", '(!= r "")'): "$compose-perm answers \"\" only for permutations of different ranks, "
                                      "which no well-typed Permute(Permute(x, p), q) has",
    **{(r, '(!= m2 "")'): _FOLD for r in ("read-permute", "read-transpose", "read-flip", "read-expand",
                                          "read-broadcast", "read-shrink", "select-permute", "select-transpose",
                                          "select-expand", "select-broadcast", "split-reduce-before-broadcast")},
    ("read-view", '(!= m2 "")'): _VIEW_FOLD,
    ("select-view", '(!= m2 "")'): _SELECT_VIEW,
    **{(r, f'(!= {v} "")'): _CONCAT for r in ("sibling-gemms-concat2", "sibling-gemms-concat3")
       for v in ("p1", "p2", "p3", "m1", "m2", "m3")},
}


def guard_equivalent(rule: str, guard: str) -> str:
    """Why removing guard from rule keeps it sound (GUARD_EQUIVALENT), or ''."""
    for (r, g), why in GUARD_EQUIVALENT.items():
        if r in ("*", rule) and (g == "*" or g == guard or (g.startswith("$") and g + " " in guard)):
            return why
    return ""


def _tok(x) -> str:
    return x if isinstance(x, str) else "(" + " ".join(_tok(y) for y in x) + ")"


def _parse(text: str) -> list:
    from ..egraph.rule_pattern import tokens
    stack: list = [[]]
    for t, _ in tokens(text):
        if t == "(":
            stack.append([])
        elif t == ")":
            done = stack.pop()
            stack[-1].append(done)
        else:
            stack[-1].append(t)
    return stack[0][0]


def _sites(x, path=()):
    """Every sub-list of x with its path."""
    if isinstance(x, list):
        yield path, x
        for k, y in enumerate(x):
            yield from _sites(y, path + (k,))


def _replace(x, path, new):
    if not path:
        return new
    out = list(x)
    out[path[0]] = _replace(x[path[0]], path[1:], new)
    return out


def _rhs_index(form: list) -> int:
    return 2  # (rule QUERY ACTIONS ...) and (rewrite LHS RHS ...) alike


def mutants(text: str) -> list:
    """(operator, mutated rule text, equivalent-because or '') of one rule's text."""
    form = _parse(text)
    out = []
    ri = _rhs_index(form)
    rhs = form[ri]
    for path, node in _sites(rhs):
        head = node[0] if node and isinstance(node[0], str) else ""
        at = (ri,) + path
        if head == "Binary" and len(node) == 4:
            op = node[1].strip('"')
            swapped = [node[0], node[1], node[3], node[2]]
            out.append(("swap", _replace(form, at, swapped), f"operands of the commutative {op}" if op in COMMUTATIVE else ""))
            if op in OP_SWAP:
                out.append(("op", _replace(form, at, [node[0], f'"{OP_SWAP[op]}"', node[2], node[3]]), ""))
            if op in ("MUL", "FDIV"):
                out.append(("rescale", _replace(form, at, node[2]), ""))
        elif head == "Unary" and len(node) == 3 and node[1].strip('"') in OP_SWAP:
            out.append(("op", _replace(form, at, [node[0], f'"{OP_SWAP[node[1].strip(chr(34))]}"', node[2]]), ""))
        elif head == "Cast" and len(node) == 3:
            out.append(("cast", _replace(form, at, node[2]), ""))
        elif head == "Const" and len(node) == 4 and node[1].startswith('"'):
            v = node[1].strip('"')
            out.append(("const", _replace(form, at, [node[0], f'"{CONST_NEXT.get(v, "0.5")}"', node[2], node[3]]), ""))
        elif head == "Reduce" and len(node) == 6 and node[1].strip('"') in ("SUM", "MAX"):
            op, init = ("MAX", '"-inf"') if node[1] == '"SUM"' else ("SUM", '"0"')
            out.append(("op", _replace(form, at, [node[0], f'"{op}"', node[2], init, node[4], node[5]]), ""))
        elif head == "py-call" and len(node) >= 4:
            out.append(("axes", _replace(form, at, [node[0], node[1], node[3], node[2]] + node[4:]), ""))
        for k, y in enumerate(node):
            if isinstance(y, str) and re.fullmatch(r'"\(\d+(, \d+)+\)"', y):
                rev = '"(' + ", ".join(reversed(y.strip('"()').split(", "))) + ')"'
                if rev != y:
                    out.append(("axes", _replace(form, at + (k,), rev), ""))
    if form[0] == "rule":
        query = form[1]
        for k, item in enumerate(query[1:], start=1):
            head = item[0] if isinstance(item, list) and item and isinstance(item[0], str) else ""
            literal = head == "=" and any(isinstance(y, str) and y.startswith('"') for y in item[1:])
            if head in ("!=", "has-dtype", "has-shape") or literal:
                out.append(("guard", _replace(form, (1,), query[:k] + query[k + 1:]),
                            guard_equivalent(_rule_name(text), _tok(item))))
    seen, res = set(), []
    for op, f, eq in out:
        t = _tok(f)
        if t in seen:
            continue
        seen.add(t)
        res.append((op, t, eq or ("the rule's own text" if t == _tok(form) else "")))
    return res


def _rule_name(text: str) -> str:
    m = re.search(r':name\s+"([^"]*)"', text)
    return m.group(1) if m else ""


def _renamed(text: str, name: str, ruleset: str) -> str:
    text = re.sub(r':ruleset\s+[^\s()]+', f":ruleset {ruleset}", text)
    return re.sub(r':name\s+"[^"]*"', f':name "{name}"', text)


def build(per_rule: int, seed: int, limit: "int | None" = None, files=None, operators=None) -> list:
    """The mutants of the shipped rules that rewrite: at most per_rule a rule (a seeded sample), at most
    limit in all (a seeded sample across rules), only of the rule files named in files and by the
    operators given when given: dicts with rule, name, operator, text, equivalent."""
    from ..checker.check import _facts_only
    from ..egraph.rulefiles import discover, parse_file
    rng = np.random.default_rng(seed)
    rows = []
    for path in discover():
        if files and pathlib.Path(path).name not in files:
            continue
        for r in parse_file(path).rules:
            if _facts_only(r.text):
                continue
            ms = [m for m in mutants(r.text) if not operators or m[0] in operators]
            pick = sorted(rng.permutation(len(ms))[:per_rule].tolist())
            for k in pick:
                op, text, eq = ms[k]
                rows.append({"rule": r.name, "file": pathlib.Path(r.file).name, "operator": op,
                             "name": f"{r.name}~m{k}", "text": text, "equivalent": eq})
    if limit is not None and len(rows) > limit:
        rows = [rows[k] for k in sorted(rng.permutation(len(rows))[:limit].tolist())]
    return rows


def _check(live: list, seed: int, budget: int) -> None:
    """One checker run over mutants of one rule file: each row's checked outcome."""
    from ..checker.check import check_rules
    with tempfile.TemporaryDirectory() as tmp:
        for k, r in enumerate(live):
            (pathlib.Path(tmp) / f"m{k:04d}.egg").write_text(
                f"(ruleset mut{k})\n; law: mutant of {r['rule']} ({r['operator']})\n{_renamed(r['text'], r['name'], f'mut{k}')}\n")
        try:
            rep = check_rules([tmp], cases=1, only=[tmp], seed=seed, budget=budget, isolate=True)
        except BaseException as e:  # noqa: BLE001 — egglog's PanicException is a BaseException
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            for r in live:
                r["checked"] = f"not decided: the checker's e-graph failed ({type(e).__name__})"
            return
        dead = {pathlib.Path(d.at.split(":")[0]).name for d in rep.errors}
    verdicts = {v.rule.name: v for v in rep.verdicts}
    for k, r in enumerate(live):
        v = verdicts.get(r["name"])
        if v is None or f"m{k:04d}.egg" in dead:
            r["checked"] = "stillborn"
        elif v.error.startswith("the checker failed"):  # not a catch: the checker itself broke
            r["checked"] = "checker failed"
            r["why"] = v.error[:400]
        elif v.unsound or v.error:
            r["checked"] = "killed"
            r["why"] = (v.error or v.counterexample)[:400]
        elif v.fired < 1:
            r["checked"] = "unexercised"
        else:
            r["checked"] = "survived"


def run(rows: list, seed: int, budget: int = 12, check_equivalent: bool = False) -> dict:
    """Check the non-equivalent mutants (and the equivalent ones when asked), one checker run per rule file;
    fills each row's outcome; the summary."""
    t0 = time.perf_counter()
    todo = [r for r in rows if check_equivalent or not r["equivalent"]]
    for f in sorted({r["file"] for r in todo}):
        _check([r for r in todo if r["file"] == f], seed, budget)
    for r in rows:
        r["outcome"] = "equivalent" if r["equivalent"] else r["checked"]
    count = {o: sum(r["outcome"] == o for r in rows)
             for o in ("killed", "survived", "unexercised", "stillborn", "equivalent", "checker failed")}
    decided = count["killed"] + count["survived"]
    per_op = {}
    for op in sorted({r["operator"] for r in rows}):
        k = sum(r["outcome"] == "killed" for r in rows if r["operator"] == op)
        d = sum(r["outcome"] in ("killed", "survived") for r in rows if r["operator"] == op)
        per_op[op] = {"killed": k, "decided": d, "score": round(k / d, 4) if d else None}
    return {"mutants": len(rows), **count, "score": round(count["killed"] / decided, 4) if decided else None,
            "per_operator": per_op, "seconds": round(time.perf_counter() - t0, 1),
            "contradictions": [r["name"] for r in rows if r["equivalent"] and r.get("checked") == "killed"]}


def main(argv: "list | None" = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--per-rule", type=int, default=3)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--operators", type=lambda t: set(t.split(",")), default=None,
                    help="only these operators (comma-separated: swap,op,cast,rescale,const,axes,guard)")
    ap.add_argument("--check-equivalent", action="store_true",
                    help="check the equivalent guard mutants too (each must pass; a rejected one is a contradiction)")
    ap.add_argument("--out", default=str(HERE / "results" / "rule_mutants.json"))
    a = ap.parse_args(argv)
    rows = build(a.per_rule, a.seed, a.limit, operators=a.operators)
    summary = run(rows, a.seed, check_equivalent=a.check_equivalent)
    print(f"{'operator':<10} {'killed':>6} {'survived':>8} {'unexerc.':>8} {'stillborn':>9} {'equiv.':>6} {'chk.fail':>8}")
    for op in sorted({r["operator"] for r in rows}):
        rs = [r for r in rows if r["operator"] == op]
        print(f"{op:<10} " + " ".join(f"{sum(r['outcome'] == o for r in rs):>{w}}" for o, w in
                                      (("killed", 6), ("survived", 8), ("unexercised", 8), ("stillborn", 9), ("equivalent", 6),
                                       ("checker failed", 8))))
    for op, d in summary["per_operator"].items():
        print(f"  score of {op}: {d['score']} ({d['killed']} of {d['decided']})")
    for n in summary["contradictions"]:
        print(f"  CONTRADICTION: {n} is listed as equivalent but the checker rejects it")
    print(f"mutation score {summary['score']} ({summary['killed']} killed of {summary['killed'] + summary['survived']} "
          f"non-equivalent exercised mutants; {summary['equivalent']} equivalent, {summary['stillborn']} stillborn, "
          f"{summary['unexercised']} unexercised) in {summary['seconds']}s")
    for r in rows:
        if r["outcome"] == "survived":
            print(f"  survivor {r['name']} ({r['file']}, {r['operator']}): {r['text']}")
        elif r["outcome"] == "checker failed":
            print(f"  checker failed on {r['name']} ({r['file']}, {r['operator']}): {r['why'][:160]}")
        elif r["outcome"] == "equivalent":
            print(f"  equivalent {r['name']} ({r['operator']}): {r['equivalent']}"
                  + (f" [checked: {r['checked']}]" if "checked" in r else ""))
    pathlib.Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(a.out).write_text(json.dumps({"seed": a.seed, "per_rule": a.per_rule, "summary": summary, "mutants": rows},
                                              indent=1), encoding="utf-8")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
