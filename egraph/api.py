"""The e-graph stage as the CLI and the pipeline call it (seed 000 §10 step 5)."""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.tiny import Program
from .cost import CostModel, get
from .extract import extract_classes
from .graph import export
from .partition import Partition
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


def extract_full(state: EGraphState, cost: "str | CostModel" = "size") -> Extraction:
    model = get(cost)
    if hasattr(model, "extract_full"):  # a model that searches the boundaries itself (model_cost.py)
        return model.extract_full(state)
    view = export(state)
    roots = [view.by_index[state.index[nid]] for _, nid in state.program.outputs]
    chosen, total = extract_classes(view, roots, model)
    prog, part = to_tiny(state, view, chosen, roots)
    return Extraction(prog, part, total, chosen, tuple(roots))


def dump(state: EGraphState, report, extraction: Extraction) -> dict:
    """The e-graph stage as JSON (for ``--dump=egraph``): run report, extracted terms, rewritten
    Tiny IR and the kernel partition."""
    from ..ir.tiny_json import dump_tiny
    from .printer import format_terms
    return {"saturation": report.to_json(), "cost": extraction.cost,
            "terms": format_terms(extraction.chosen, extraction.roots).splitlines(),
            "tiny": dump_tiny(extraction.program), "partition": extraction.partition.to_json()}
