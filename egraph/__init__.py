"""The e-graph stage (docs/DESIGN.md §E-graph): Tiny IR and RB-SSA terms in egglog, rewrite
rules kept as files in ``rules/``, bounded saturation, extraction with named cost models, and the
rule soundness checker.

    st, report = saturate(program, rules_dirs=None, limits=None)
    program2, partition, cost = extract(st, cost="size")
    list_rules(dirs) ; check_rules(dirs, cases) ; format_report(report)
"""
from .api import Extraction, extract, extract_full
from .cost import REGISTRY as COST_MODELS, CostModel, Region, register as register_cost
from .model_cost import ModelCost
from .partition import Kernel, Partition
from .rulefiles import list_rules
from .saturate import Limits, Phase, RunReport, StopReason, default_limits as limits, format_report, saturate
from .soundness import CheckReport, check_rules

__all__ = ["saturate", "extract", "extract_full", "Extraction", "list_rules", "check_rules", "CheckReport",
           "format_report", "RunReport", "StopReason", "Phase", "Limits", "limits", "Partition", "Kernel",
           "CostModel", "Region", "register_cost", "COST_MODELS", "ModelCost"]
