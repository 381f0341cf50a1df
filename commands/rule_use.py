"""Whether the chosen partition used each of a user's rules (``extract --explain`` / ``--json``).

egglog keeps no provenance of which rule made an e-node, so "used" is decided by leaving the rule
out: the model is compiled again with the same options and the user's rule files minus that one
rule (its ruleset stays declared), and the rule was used when the result differs: the extracted
Tiny IR program, or the partition into kernels (each kernel's nodes and outputs). A rule that
matched but whose rewrites the extraction never chose (or that another rule's rewrites replace
exactly) is "not used"; a rule that never matched is not used without a second compilation.
"""
from __future__ import annotations

import pathlib
import tempfile

from ..egraph.rulefiles import discover, parse_file
from ..ir.printer import format_program
from ..pipeline import Compilation


def fingerprint(c) -> tuple:
    """What the compilation chose: the extracted program and its kernels."""
    x = c.extraction
    kernels = tuple((tuple(sorted(k.nodes)), tuple(k.outputs)) for k in x.partition.kernels)
    return format_program(x.program), kernels


def _without(rules_dirs: tuple, rule, tmp: pathlib.Path) -> tuple:
    """Copies of the user's rule folders in tmp with rule's text removed from its file."""
    out = []
    for k, d in enumerate(rules_dirs):
        dst = tmp / f"d{k}"
        dst.mkdir()
        for p in discover([d], builtin=False):
            rf = parse_file(p)
            text = rf.text
            for r in rf.rules:
                if r.name == rule.name:
                    text = text.replace(r.text, "")
            (dst / pathlib.Path(p).name).write_text(text, encoding="utf-8")
        out.append(str(dst))
    return tuple(out)


def rule_use(c, rows: list) -> list:
    """rows (user_rules of extract: name, ruleset, file, matches) with "used" and "used_why" added."""
    if not rows:
        return rows
    infos = {r.name: r for d in c.rules_dirs for p in discover([d], builtin=False) for r in parse_file(p).rules}
    base = fingerprint(c)
    out = []
    for row in rows:
        row = dict(row)
        rule = infos.get(row["name"])
        if not row["matches"] or rule is None:
            row["used"], row["used_why"] = False, "it never matched"
        else:
            with tempfile.TemporaryDirectory() as tmp:
                dirs = _without(c.rules_dirs, rule, pathlib.Path(tmp))
                other = Compilation(c.doc, arch=c.arch, rules_dirs=dirs, cost=c.cost, bind=c.bind)
                got = fingerprint(other)
            prog, kern = got[0] != base[0], got[1] != base[1]
            row["used"] = prog or kern
            row["used_why"] = ("without it the extracted program and the kernels differ" if prog and kern else
                               "without it the extracted program differs" if prog else
                               "without it the kernels differ" if kern else
                               "without it the same program and kernels are chosen")
        out.append(row)
    return out
