"""The e-graph engine (docs/DESIGN.md §E-graph): Tiny IR and RB-SSA terms in egglog, rewrite rules kept
as files in ``rules/`` (loaded and linted), bounded saturation, extraction with named cost models, and
region synthesis. The ``--cost model`` fusion search is search/, the rule soundness checker checker/.

    st, report = saturate(program, rules_dirs=None, limits=None)
    program2, partition, cost = extract(st, cost="size")
    list_rules(dirs) ; format_report(report)
"""
from .api import Extraction, extract, extract_full
from .cost import REGISTRY as COST_MODELS, CostModel, KernelClasses, register as register_cost
from .partition import Kernel, Partition
from .rulefiles import list_rules
from .saturate import Limits, Phase, RunReport, StopReason, default_limits as limits, format_report, saturate

__all__ = ["saturate", "extract", "extract_full", "Extraction", "list_rules", "format_report", "RunReport",
           "StopReason", "Phase", "Limits", "limits", "Partition", "Kernel", "CostModel", "KernelClasses",
           "register_cost", "COST_MODELS"]
