"""The rule soundness checker (``polysat rules --check``, docs/rules.md): test programs built from each
rule's own left-hand side (``instance.py``) and a pool of random programs (``randprog.py``), each rule
run alone (``check.py``), every e-node it adds compared with the value of its class (``values.py``,
``diff.py``) on inputs that expose fp16/bf16 rounding (``numerics.py``), a shrunk counterexample
(``explain.py``) and the verdicts (``report.py``).
"""
from .check import check_rules
from .report import CheckReport

__all__ = ["check_rules", "CheckReport"]
