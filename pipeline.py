"""The compiler as one straight line of named stages (docs/DESIGN.md §Pipeline), each dumpable.

``Compilation`` computes each stage's artifact on first use, so a dump of a late stage runs exactly
the stages before it. Every verb (``compile``, ``run``, ``demo``, ``extract``) and the compile-time
bench go through it, so the options reach every stage that needs them: ``arch`` the device table of
the cost model, Poly Core's report and the backend; ``bind`` (symbol sizes) the prices, the report and
the plan search; ``cost`` the saturation and the extraction; ``rules_dirs`` the saturation.
``DUMPS`` maps a stage name to the JSON it writes as ``<stage>.json``.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable

from .frontend import frontend_from_doc, program_from_doc, read_json
from .ir.diagnostics import fail
from .ir.tiny import Program
from .ir.tiny_json import dump_tiny

ARCHS = ("sm80", "sm90")


@dataclass
class Compilation:
    model: "str | dict"
    arch: str = "sm90"
    rules_dirs: tuple = ()
    cost: str = "size"
    bind: "dict | None" = None  # symbol -> size (--bind); unbound symbols are priced at POLYSAT_PRICE_SYMBOL_SIZE
    _cache: dict = field(default_factory=dict)

    def __post_init__(self):
        if isinstance(self.model, str):
            self.model = _Loaded(self.model, read_json(self.model))

    @property
    def doc(self) -> dict:
        return self.model.doc if isinstance(self.model, _Loaded) else self.model

    @property
    def origin(self) -> str:
        return self.model.path if isinstance(self.model, _Loaded) else "model"

    def stage(self, name: str, make: Callable[[], Any]) -> Any:
        if name not in self._cache:
            self._cache[name] = make()
        return self._cache[name]

    @property
    def frontend(self):
        return self.stage("frontend", lambda: frontend_from_doc(self.doc, self.origin))

    @property
    def program(self) -> Program:
        return self.stage("tiny", lambda: program_from_doc(self.doc, self.origin))

    @property
    def indexbook(self):
        from .analyses.indexbook import checked_indexbook
        return self.stage("indexbook", lambda: checked_indexbook(self.program))

    @property
    def poly_view(self):
        from .analyses.polyview import build_polyview
        return self.stage("poly_view", lambda: build_polyview(self.indexbook))

    @property
    def params(self) -> dict:
        """Every symbol of the model bound to a size: from ``bind``, else POLYSAT_PRICE_SYMBOL_SIZE."""
        from .egraph.model_cost import bind_params
        return self.stage("params", lambda: bind_params(self.program, self.bind))

    @property
    def cost_model(self):
        """The ``cost`` model, built with what it declares it needs (egraph/cost.py ``Needs``)."""
        from .egraph.cost import lookup, make
        needs = lookup(self.cost).needs
        return self.stage("cost_model", lambda: make(self.cost, self.arch, self.params if needs.params else None))

    @property
    def saturated(self):
        """(EGraphState, RunReport): the Tiny IR loaded into the e-graph, saturated by the rule files the
        cost model needs (one kernel per op for a model that searches the boundaries)."""
        from .egraph.api import saturate_for
        return self.stage("saturate", lambda: saturate_for(self.program, self.cost_model, list(self.rules_dirs) or None))

    @property
    def search(self):
        """The boundary search of a cost model that picks the boundaries itself; None for the others."""
        m = self.cost_model
        return self.stage("search", lambda: m.search(self.saturated[0]) if m.needs.search else None)

    @property
    def extraction(self):
        """The cheapest terms under the cost model: rewritten Tiny IR + the kernel partition."""
        from .egraph.api import extract_full
        return self.stage("extract", lambda: self.search.best.extraction if self.search is not None
                          else extract_full(self.saturated[0], self.cost_model))

    @property
    def priced(self) -> list:
        """Every kernel of the extraction with its Poly Core region and price on ``params`` for ``arch``."""
        def make():
            from .egraph.model_cost import price_kernels
            if self.search is not None:
                return self.search.best.priced
            x = self.extraction
            return price_kernels(x.program, x.partition, self.params, self.arch)
        return self.stage("priced", make)

    @property
    def regions(self):
        """RB-SSA regions (one per kernel) synthesized from the extraction, each intermediate that all its
        readers round stored rounded (ir/region_narrow.py), validated (docs/DESIGN.md §RB-SSA)."""
        def make():
            from .analyses.region_validate import validate_regions
            from .egraph.region_synth import synthesize
            from .ir.diagnostics import PolysatError
            from .ir.region_narrow import narrow_boundaries
            x = self.extraction
            regions = narrow_boundaries(synthesize(x.program, x.partition))
            errors = [d for d in validate_regions(regions) if d.is_error]
            if errors:
                raise PolysatError(errors)
            return regions
        return self.stage("region", make)


@dataclass(frozen=True)
class _Loaded:
    path: str
    doc: Any


def _frontend_dump(c: Compilation) -> dict:
    g = c.frontend
    return g.to_json() if g is not None else {"note": "the model is Tiny IR; no Frontend IR stage"}


DUMPS: dict[str, Callable[[Compilation, str], dict]] = {
    "frontend": lambda c, d: _frontend_dump(c),
    "tiny": lambda c, d: dump_tiny(c.program),
    "indexbook": lambda c, d: _lazy("analyses.indexbook", "book_to_json")(c.indexbook),
    "poly_view": lambda c, d: _lazy("analyses.polyview", "polyview_to_json")(c.poly_view),
    "egraph": lambda c, d: _lazy("egraph.api", "dump")(*c.saturated, c.extraction),
    "region": lambda c, d: _lazy("ir.region", "regions_json")(c.regions),
    "analysis": lambda c, d: _analysis_dump(c),
    "plan": lambda c, d: backend(c, "plan_json"),
    "gpu": lambda c, d: backend(c, "gpu_json"),
    "cu": lambda c, d: {"files": backend(c, "write_cu", d)},
}


def backend(c: Compilation, stage: str, *args):
    """A backend stage (backend/stages.py) over the compilation's regions for its arch and binding."""
    return _lazy("backend.stages", stage)(c.regions, c.arch, *args, bind=c.bind)


def _analysis_dump(c: Compilation) -> dict:
    """The Poly Core report (docs/DESIGN.md §Poly Core) of every extracted region for ``arch``, priced
    on concrete shapes (``params``: --bind, else POLYSAT_PRICE_SYMBOL_SIZE)."""
    from .analyses.cost_model import report
    from .analyses.devices import device
    return {"arch": c.arch, "device": device(c.arch).to_json(), "params": c.params,
            "regions": [{"name": p.kernel.name, **(report(p.region, c.arch) if p.region is not None else {"analysis": None})}
                        for p in c.priced]}


def _lazy(module: str, name: str):
    """A later stage's function, imported on use (keeps `polysat run` start-up light)."""
    import importlib
    return getattr(importlib.import_module(f"polysat.{module}"), name)


def check_stages(stages: list[str]) -> None:
    for s in stages:
        if s not in DUMPS:
            fail("UnknownStage", "--dump", f"unknown stage {s!r}; stages: {', '.join(DUMPS)}")


def write_dumps(c: Compilation, stages: list[str], out_dir: str, tolerant: bool = False) -> list[str]:
    """Write DIR/<stage>.json for each stage. With ``tolerant`` (the demo), a stage that cannot apply to
    this model (a diagnostic) is reported in the returned list as ``stage: unavailable (...)``."""
    from .ir.diagnostics import PolysatError
    check_stages(stages)
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for s in stages:
        try:
            doc = DUMPS[s](c, out_dir)
        except PolysatError as e:
            if not tolerant:
                raise
            d = e.diagnostics[0]
            written.append(f"{s}: unavailable ({d.code} {d.kind}: {d.why})")
            continue
        path = os.path.join(out_dir, f"{s}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1, ensure_ascii=False)
            f.write("\n")
        written.append(path)
    return written
