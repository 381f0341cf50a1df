"""The e-graph stage as the pipeline calls it (docs/DESIGN.md §Pipeline): the saturation a cost model
needs and the extraction under it, chosen by what the model declares (``CostModel.needs``)."""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.tiny import Program
from ..ir.tiny_json import dump_tiny
from .cost import CostModel, lookup, make
from .extract import extract_classes
from .graph import export
from .partition import Partition
from .printer import format_terms
from .state import EGraphState
from .totiny import to_tiny


@dataclass(frozen=True)
class Extraction:
    program: Program
    partition: Partition
    cost: float
    chosen: dict  # class id -> ENode (for term printing)
    roots: tuple  # class id per program output


def extract(state: EGraphState, cost: "str | CostModel" = "size") -> tuple:
    """(rewritten Program, Partition, cost) of the cheapest terms under the named cost model."""
    x = extract_full(state, cost)
    return x.program, x.partition, x.cost


def extract_full(state: EGraphState, cost: "str | CostModel" = "size", arch: str = "sm90",
                 params: "dict | None" = None) -> Extraction:
    """The cheapest terms under the cost model (built by ``make`` with arch and params if it needs them):
    a model that picks the kernel boundaries itself (``needs.search``) extracts by its search; any other
    by the DAG-aware greedy extractor over its node and region prices."""
    model = make(cost, arch, params)
    if model.needs.search:
        return model.search(state).best.extraction
    view = export(state)
    roots = [view.by_index[state.index[nid]] for _, nid in state.program.outputs]
    chosen, total = extract_classes(view, roots, model)
    prog, part = to_tiny(state, view, chosen, roots)
    return Extraction(prog, part, total, chosen, tuple(roots))


def saturate_for(program: Program, cost: "str | CostModel" = "size", rules_dirs=None, limits=None) -> tuple:
    """(EGraphState, RunReport): the saturation the cost model needs (``CostModel.saturate``): a model that
    searches the boundaries starts from one kernel per op with the opt-in fusion rules
    (search/model.py ``saturate_unfused``); every other model keeps the loaded default partition."""
    return lookup(cost).saturate(program, rules_dirs, limits)


def dump(state: EGraphState, report, extraction: Extraction) -> dict:
    """The e-graph stage as JSON (for ``--dump=egraph``): run report, extracted terms, rewritten
    Tiny IR and the kernel partition."""
    return {"saturation": report.to_json(), "cost": extraction.cost,
            "terms": format_terms(extraction.chosen, extraction.roots).splitlines(),
            "tiny": dump_tiny(extraction.program), "partition": extraction.partition.to_json()}
