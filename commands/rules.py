"""``polysat rules [--check [--cases N] [--only FILE|NAME]] [--rules DIR] [--json]`` as one function the CLI calls."""
from __future__ import annotations

import json

from ..egraph.rulefiles import discover, list_rules, parse_file
from ..egraph.state import validate
from ..checker.check import check_rules


def rules_command(check: bool = False, rules_dirs=None, cases: "int | None" = None, as_json: bool = False,
                  only=None) -> int:
    """Print the rule catalogue, or check the rules' soundness (all, or ``only`` the named rules/files, every
    file loaded as context); the exit status: 0 sound and exercised, 1 unsound or broken, 2 not exercised."""
    if not check:
        files = [parse_file(p) for p in discover(rules_dirs)]
        validate(files)  # helpers, relations and rulesets resolved now, not at the first run
        rows = list_rules(files=files)
        if as_json:
            print(json.dumps([{"file": f, "name": n, "ruleset": r, "law": law} for f, n, r, law in rows], indent=1))
        else:
            for f, n, r, law in rows:
                print(f"{n:<36} {r:<12} {law}")
            print(f"{len(rows)} rule(s)")
        return 0
    rep = check_rules(rules_dirs, cases, only=only)
    print(json.dumps(rep.to_json(), indent=1) if as_json else rep.format())
    return rep.exit_status
