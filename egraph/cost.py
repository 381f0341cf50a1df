"""Named cost models for extraction, chosen by ``--cost=NAME`` (docs/DESIGN.md §Cost model).

A cost model prices each e-node it may pick (``enode_cost``) and, optionally, each kernel as a
whole (``region_cost``): when extraction resolves a kernel-boundary ``Mat(x)``, it hands the model
the e-classes that form x's kernel (everything x needs, up to Reads of memory), so a Poly Core
model can price a region (FLOPs, bytes, occupancy) rather than a sum of node prices. Totals are
``combine``d from the distinct e-classes of the extracted DAG (a shared subterm is paid once) plus
the region costs. Register a model class with :func:`register`; ``size`` is the default.

A model *declares* what it needs (:class:`Needs`): a device table (``arch``), concrete sizes for the
model's symbols (``params``), and whether it picks the kernel boundaries itself (``search``: the
program is loaded one kernel per op and the model's ``search`` extracts). :func:`make` builds a
registered model from the pipeline's options by that declaration, so ``--arch`` and ``--bind`` reach
every model that prices with them and no caller probes a model's type.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import ClassVar, Iterable

from ..ir.diagnostics import fail
from .saturate import saturate as _loaded_partition

REGISTRY: dict = {}  # name -> CostModel subclass, each registered where it is defined


def register(model: type) -> type:
    """Register a CostModel subclass under its ``name`` (a class decorator at its definition)."""
    REGISTRY[model.name] = model
    return model


@dataclass(frozen=True)
class KernelClasses:
    """One kernel seen by a cost model: the Mat e-node's class, its root value class, the classes it
    evaluates and the e-node chosen for each."""
    mat_class: int
    root: int
    chosen: dict  # class id -> ENode, for the classes inside the kernel


@dataclass(frozen=True)
class Needs:
    """What a cost model needs from the pipeline; :func:`make` passes exactly these to its constructor."""
    arch: bool = False  # prices on a device table: constructed with arch="sm80" | "sm90"
    params: bool = False  # prices on concrete shapes: constructed with params={symbol: size} (--bind)
    search: bool = False  # picks the kernel boundaries itself: loaded one kernel per op, extracted by .search()


class CostModel(abc.ABC):
    name = "base"
    needs: ClassVar[Needs] = Needs()

    @abc.abstractmethod
    def enode_cost(self, node, view) -> float:
        """The price of choosing e-node `node` (every concrete model defines it)."""

    @classmethod
    def saturate(cls, program, rules_dirs=None, limits=None) -> tuple:
        """(EGraphState, RunReport): the saturation this model extracts from; by default the program loaded
        with its default partition (egraph/saturate.py). A model that picks the boundaries itself loads it
        one kernel per op instead."""
        return _loaded_partition(program, rules_dirs, limits)

    def enode_costs(self, view) -> dict:
        """{e-node: float(enode_cost)} over the view (a model may make it faster, never different)."""
        return {n: float(self.enode_cost(n, view)) for ns in view.classes.values() for n in ns}

    def region_cost(self, region: KernelClasses, view) -> float:
        return 0.0

    def combine(self, parts: Iterable[float]) -> float:
        return float(sum(parts))


class SearchingCost(CostModel):
    """A model that picks the kernel boundaries itself (``needs.search``): the pipeline loads the
    program one kernel per op and extracts with :meth:`search`."""
    needs: ClassVar[Needs] = Needs(search=True)

    @abc.abstractmethod
    def search(self, state):
        """The boundary search over the saturated e-graph; its ``.best.extraction`` is the extraction."""


@register
class SizeCost(CostModel):
    """Number of e-nodes in the extracted DAG. A kernel boundary (Mat) counts as a node, so size
    never adds a boundary that the loaded default partition does not have."""
    name = "size"

    def enode_cost(self, node, view) -> float:
        return 0.0 if node.op == "Tensor" else 1.0


def lookup(name: "str | CostModel") -> type:
    """The registered class of ``name`` (the class of an instance); unknown names are a diagnostic."""
    if isinstance(name, CostModel):
        return type(name)
    if name not in REGISTRY:
        fail("InvalidAttribute", "--cost", f"unknown cost model {name!r}; known: {', '.join(sorted(REGISTRY))}",
             "Choose one of the registered cost models.")
    return REGISTRY[name]


def make(name: "str | CostModel", arch: str = "sm90", params: "dict | None" = None) -> CostModel:
    """The model named ``name`` built with what it declares it needs (an instance passes through)."""
    if isinstance(name, CostModel):
        return name
    cls = lookup(name)
    kw: dict = {}
    if cls.needs.arch:
        kw["arch"] = arch
    if cls.needs.params:
        kw["params"] = dict(params or {})
    return cls(**kw)
