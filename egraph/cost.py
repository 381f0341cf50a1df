"""Named cost models for extraction, chosen by ``--cost=NAME`` (seed 000 §11; DESIGN.md).

A cost model prices each e-node it may pick (``enode_cost``) and, optionally, each kernel as a
whole (``region_cost``): when extraction resolves a kernel-boundary ``Mat(x)``, it hands the model
the e-classes that form x's kernel (everything x needs, up to Reads of memory), so a Poly Core
model can price a region (FLOPs, bytes, occupancy) rather than a sum of node prices. Totals are
``combine``d from the distinct e-classes of the extracted DAG (a shared subterm is paid once) plus
the region costs. Register a model with :func:`register`; ``size`` is the default.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Iterable

from ..ir.diagnostics import fail


@dataclass(frozen=True)
class Region:
    """One kernel seen by a cost model: the Mat e-node's class, its root value class, the classes it
    evaluates and the e-node chosen for each."""
    mat_class: int
    root: int
    chosen: dict  # class id -> ENode, for the classes inside the kernel


class CostModel(abc.ABC):
    name = "base"

    @abc.abstractmethod
    def enode_cost(self, node, view) -> float:
        """The price of choosing e-node `node` (every concrete model defines it)."""

    def region_cost(self, region: Region, view) -> float:
        return 0.0

    def combine(self, parts: Iterable[float]) -> float:
        return float(sum(parts))


class SizeCost(CostModel):
    """Number of e-nodes in the extracted DAG. A kernel boundary (Mat) counts as a node, so size
    never adds a boundary that the loaded default partition does not have."""
    name = "size"

    def enode_cost(self, node, view) -> float:
        return 0.0 if node.op == "Tensor" else 1.0


REGISTRY: dict = {}


def register(model: CostModel) -> CostModel:
    REGISTRY[model.name] = model
    return model


register(SizeCost())


def get(name: "str | CostModel") -> CostModel:
    if isinstance(name, CostModel):
        return name
    if name not in REGISTRY:
        fail("InvalidAttribute", "--cost", f"unknown cost model {name!r}; known: {', '.join(sorted(REGISTRY))}",
             "Choose one of the registered cost models.")
    return REGISTRY[name]
