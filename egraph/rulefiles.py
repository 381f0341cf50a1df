"""Rule files: discovery, the catalogue of named rules and their laws, and validation
(docs/DESIGN.md §E-graph).

A rule file is egglog text (``*.egg``) in ``rules/`` or a folder given with ``--rules DIR``. Every
``rule``/``rewrite``/``birewrite`` carries ``:name "..."`` and ``:ruleset r``, and the comment lines
right above it state its law (``; law: ...``). Files are validated in a scratch e-graph before they
touch the real one, so a bad file is a coded diagnostic (E1403 RuleFileError, with file:line and the
rule's name) and never a panic that poisons the run.
"""
from __future__ import annotations

import pathlib
import re
from dataclasses import dataclass
from functools import lru_cache

from ..ir.diagnostics import PolysatError, diag

RULES_DIR = pathlib.Path(__file__).resolve().parent.parent / "rules"
_RULE_HEADS = ("rule", "rewrite", "birewrite")
# A rule file declares: rules, rulesets, the tables and sorts they use, and (check ...) goals. Every other egglog
# command (output, input, run, run-schedule, extract, push, pop, include, print-*, let, union, set, ...) would run
# at load, outside the saturation's limits, and may read or write files: it is E1403 at its line.
DECLARATIONS = frozenset(_RULE_HEADS + ("ruleset", "relation", "function", "constructor", "datatype", "datatype*",
                                        "sort", "check"))


@dataclass(frozen=True)
class RuleInfo:
    file: str
    line: int
    name: str
    ruleset: str
    law: str
    text: str


@dataclass(frozen=True)
class RuleFile:
    path: str
    text: str
    rules: tuple  # RuleInfo
    rulesets: tuple  # ruleset names declared in the file, in order


def discover(dirs=None, builtin: bool = True) -> list:
    """The .egg files of the built-in rules/ folder (unless builtin=False) and of each dir, in order."""
    folders = ([RULES_DIR] if builtin else []) + [pathlib.Path(d) for d in (dirs or [])]
    out = []
    for d in folders:
        if not d.exists():
            raise PolysatError(diag("FileNotFound", str(d), f"no rules folder {d}"))
        files = [d] if d.is_file() else sorted(d.glob("*.egg"))
        out.extend(str(p) for p in files)
    return out


MAX_NESTING = 200  # parentheses inside one top-level form (a rule's pattern is a few levels deep)


_LEX = re.compile(r';[^\n]*|"(?:\\[\s\S]|[^"\\])*"?|[()]')  # a comment, a string (to its end if unclosed), a paren


def _forms(text: str, path: str) -> list:
    """Top-level s-expressions as (start offset, end offset, line), skipping comments and strings."""
    forms, depth, start = [], 0, 0
    lines, at = 1, 0  # the line of offset at
    for m in _LEX.finditer(text):
        c = text[m.start()]
        if c == "(":
            if depth == 0:
                start = m.start()
            depth += 1
            if depth > MAX_NESTING:
                _fail(path, _line(text, m.start()), None, f"a form nested deeper than {MAX_NESTING} levels (the walks "
                      "over a rule's patterns, and egglog's own parser, would run out of stack)",
                      "Split the pattern into shorter rules.")
        elif c == ")":
            depth -= 1
            if depth < 0:
                _fail(path, _line(text, m.start()), None, "unbalanced ')'")
            if depth == 0:
                lines += text.count("\n", at, start)
                at = start
                forms.append((start, m.end(), lines))
    if depth:
        _fail(path, _line(text, start), None, "unclosed '(' (the form starting here never ends)")
    return forms


@lru_cache(maxsize=64)
def form_texts(path: str, text: str) -> tuple:
    """(start offset, text, first line) of each top-level form of an egglog text, comments dropped (the parse of
    a rule file; egglog is given one form at a time, egraph/state.py run_forms: the parse of one egglog program
    grows faster than its length)."""
    return tuple((a, text[a:b], line) for a, b, line in _forms(text, path))


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _law(text: str, start: int) -> str:
    """The ';' comment lines directly above offset start."""
    lines = text[:start].rstrip(" \t").split("\n")[:-1][::-1] if text[:start].strip() else []
    out = []
    for ln in lines:
        s = ln.strip()
        if not s.startswith(";"):
            break
        out.append(s.lstrip(";").strip())
    law = " ".join(reversed(out)).strip()
    return re.sub(r"^law:\s*", "", law)


def parse_file(path: str) -> RuleFile:
    """The file read, parsed and linted (E1403 at file:line otherwise). The file is read every time; its
    parse is kept per (path, text), so a compile that asks for the same file again (the schedule's shipped
    rulesets, each saturation of a segmented program) parses and lints it once."""
    try:
        text = pathlib.Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise PolysatError(diag("RuleFileError", path, f"cannot read rule file: {e}")) from None
    return _parsed(path, text)


@lru_cache(maxsize=256)
def _parsed(path: str, text: str) -> RuleFile:
    rules, rulesets, names = [], [], set()
    for start, form, line in form_texts(path, text):
        head = re.match(r"\(\s*([^\s()]+)", form)
        head = head.group(1) if head else ""
        if head not in DECLARATIONS:
            _fail(path, line, None, f"({head or form[:20]} ...) is not a declaration: a rule file "
                  "holds rules, rulesets, relation/function/datatype/sort declarations and (check ...) goals only",
                  "Remove the command; polysat runs the rules itself, under its limits.")
        if head == "ruleset":
            rulesets.append(form[1:-1].split()[1])
        if head not in _RULE_HEADS:
            continue
        name = re.search(r':name\s+"([^"]*)"', form)
        rs = re.search(r":ruleset\s+([^\s()]+)", form)
        if not name:
            _fail(path, line, None, f"this {head} has no :name \"...\"", "Name every rule: :name \"family-what\".")
        if not rs:
            _fail(path, line, name.group(1), "this rule has no :ruleset", "Put every rule in a named ruleset.")
        law = _law(text, start)
        if not law:
            _fail(path, line, name.group(1), "no law comment above the rule", "State the law: '; law: lhs = rhs'.")
        if name.group(1) in names:
            _fail(path, line, name.group(1), "two rules share this name")
        names.add(name.group(1))
        rules.append(RuleInfo(path, line, name.group(1), rs.group(1), law, form))
    rf = RuleFile(path, text, tuple(rules), tuple(rulesets))
    from .rule_lint import lint_file, raise_if_any
    raise_if_any(lint_file(rf))
    return rf


def rule_at(rf: RuleFile, line: int) -> "str | None":
    """The name of the rule whose form starts at or before line (the innermost candidate)."""
    best = None
    for r in rf.rules:
        if r.line <= line:
            best = r.name
    return best


def egg_error(rf: RuleFile, err: BaseException, line0: int = 1) -> PolysatError:
    """An egglog parse/type error as E1403 with file:line and the rule's name (line0: the line of the file egglog's
    text started at)."""
    msg = str(err)
    m = re.search(r"In (\d+):(\d+)", msg)
    line = int(m.group(1)) + line0 - 1 if m else line0
    why = msg.splitlines()[-1].strip() if msg.strip() else type(err).__name__
    return _err(rf.path, line, rule_at(rf, line), why)


def _err(path: str, line: int, rule: "str | None", why: str, suggestion: "str | None" = None) -> PolysatError:
    at = f"{path}:{line}" + (f" (rule {rule!r})" if rule else "")
    return PolysatError(diag("RuleFileError", at, why, suggestion, file=path, line=line, rule=rule))


def _fail(path: str, line: int, rule: "str | None", why: str, suggestion: "str | None" = None):
    raise _err(path, line, rule, why, suggestion)


BUILTIN_RULESETS = ("analysis",)  # declared by the schema (egraph/state.py base_egraph), not by a rule file


def check_rulesets(files: list) -> None:
    """Every rule's :ruleset is declared by one of the files (or is built in): E1403 at the rule otherwise,
    at load time, not when a schedule first runs it."""
    declared = set(BUILTIN_RULESETS) | {n for rf in files for n in rf.rulesets}
    for rf in files:
        for r in rf.rules:
            if r.ruleset not in declared:
                _fail(rf.path, r.line, r.name, f"ruleset {r.ruleset!r} is declared by no rule file "
                      f"(declared: {', '.join(sorted(declared))})",
                      f"Declare it in the file: (ruleset {r.ruleset}), or use a declared ruleset.")


def list_rules(dirs=None, builtin: bool = True, files: "list | None" = None) -> list:
    """[(file, name, ruleset, law)] of every rule in the built-in folder and dirs (or of the parsed files
    given): the files are linted and their rulesets checked (``polysat rules`` also loads them into a
    scratch e-graph, ``egraph/state.py validate``), so an error is reported here, not at the first run."""
    files = files if files is not None else [parse_file(p) for p in discover(dirs, builtin)]
    check_rulesets(files)
    return [(r.file, r.name, r.ruleset, r.law) for rf in files for r in rf.rules]


def shipped_rulesets() -> tuple:
    """The rulesets the shipped rule files declare (any other one is a user's)."""
    return tuple(n for p in discover(None, True) for n in parse_file(p).rulesets)
