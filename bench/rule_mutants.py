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
(ADD, MUL, MAX, MIN, CMPEQ, CMPNE) or its text equals the rule's. A mutant egglog or the loader
rejects is *stillborn* (counted apart: it never reaches a user). The others are checked together, in
one checker run with every shipped rule as context (``check_rules``): UNSOUND or UNCHECKABLE kills a
mutant; a mutant that passes survives; one that never fires is unexercised. The score is killed /
(killed + survived). Prints the table and the survivors, writes ``bench/results/rule_mutants.json``.

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
                out.append(("guard", _replace(form, (1,), query[:k] + query[k + 1:]), ""))
    seen, res = set(), []
    for op, f, eq in out:
        t = _tok(f)
        if t in seen:
            continue
        seen.add(t)
        res.append((op, t, eq or ("the rule's own text" if t == _tok(form) else "")))
    return res


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


def run(rows: list, seed: int, budget: int = 12) -> dict:
    """Check the non-equivalent mutants in one checker run; fills each row's outcome; the summary."""
    from ..checker.check import check_rules
    live = [r for r in rows if not r["equivalent"]]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for k, r in enumerate(live):
            (pathlib.Path(tmp) / f"m{k:04d}.egg").write_text(
                f"(ruleset mut{k})\n; law: mutant of {r['rule']} ({r['operator']})\n{_renamed(r['text'], r['name'], f'mut{k}')}\n")
        rep = check_rules([tmp], cases=1, only=[tmp], seed=seed, budget=budget)
        dead = {pathlib.Path(d.at.split(":")[0]).name for d in rep.errors}
    verdicts = {v.rule.name: v for v in rep.verdicts}
    for k, r in enumerate(live):
        v = verdicts.get(r["name"])
        if v is None or f"m{k:04d}.egg" in dead:
            r["outcome"] = "stillborn"
        elif v.unsound or v.error:
            r["outcome"] = "killed"
        elif v.fired < 1:
            r["outcome"] = "unexercised"
        else:
            r["outcome"] = "survived"
    for r in rows:
        r.setdefault("outcome", "equivalent")
    count = {o: sum(r["outcome"] == o for r in rows) for o in ("killed", "survived", "unexercised", "stillborn", "equivalent")}
    decided = count["killed"] + count["survived"]
    return {"mutants": len(rows), **count, "score": round(count["killed"] / decided, 4) if decided else None,
            "seconds": round(time.perf_counter() - t0, 1)}


def main(argv: "list | None" = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--per-rule", type=int, default=3)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--operators", type=lambda t: set(t.split(",")), default=None,
                    help="only these operators (comma-separated: swap,op,cast,rescale,const,axes,guard)")
    ap.add_argument("--out", default=str(HERE / "results" / "rule_mutants.json"))
    a = ap.parse_args(argv)
    rows = build(a.per_rule, a.seed, a.limit, operators=a.operators)
    summary = run(rows, a.seed)
    print(f"{'operator':<10} {'killed':>6} {'survived':>8} {'unexerc.':>8} {'stillborn':>9} {'equiv.':>6}")
    for op in sorted({r["operator"] for r in rows}):
        rs = [r for r in rows if r["operator"] == op]
        print(f"{op:<10} " + " ".join(f"{sum(r['outcome'] == o for r in rs):>{w}}" for o, w in
                                      (("killed", 6), ("survived", 8), ("unexercised", 8), ("stillborn", 9), ("equivalent", 6))))
    ng = [r for r in rows if r["operator"] != "guard" and r["outcome"] in ("killed", "survived")]
    if ng:
        print(f"without guard mutants (a removed guard is often redundant under the refinement policy): score "
              f"{sum(r['outcome'] == 'killed' for r in ng) / len(ng):.4f} of {len(ng)}")
    print(f"mutation score {summary['score']} ({summary['killed']} killed of {summary['killed'] + summary['survived']} "
          f"non-equivalent exercised mutants; {summary['equivalent']} equivalent, {summary['stillborn']} stillborn, "
          f"{summary['unexercised']} unexercised) in {summary['seconds']}s")
    for r in rows:
        if r["outcome"] == "survived":
            print(f"  survivor {r['name']} ({r['file']}, {r['operator']}): {r['text']}")
        elif r["outcome"] == "equivalent":
            print(f"  equivalent {r['name']} ({r['operator']}): {r['equivalent']}")
    pathlib.Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(a.out).write_text(json.dumps({"seed": a.seed, "per_rule": a.per_rule, "summary": summary, "mutants": rows},
                                              indent=1), encoding="utf-8")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
