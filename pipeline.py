"""The compiler as one straight line of named stages (docs/DESIGN.md §Pipeline), each dumpable.

``Compilation`` computes each stage's artifact on first use, so a dump of a late stage runs exactly
the stages before it. Every verb (``compile``, ``run``, ``demo``, ``extract``) and the compile-time
bench go through it, so the options reach every stage that needs them: ``arch`` the device table of
the cost model, Poly Core's report and the backend; ``bind`` (symbol sizes) the prices, the report and
the plan search; ``cost`` the saturation and the extraction; ``rules_dirs`` the saturation.
``DUMPS`` maps a stage name to the JSON it writes as ``<stage>.json`` (or, for
the pictures, the SVG text it writes as ``<stage>.svg``).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable

from .frontend import frontend_from_doc, program_from_doc, read_model
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
            self.model = _Loaded(self.model, read_model(self.model))

    @property
    def doc(self) -> dict:
        return self.model.doc if isinstance(self.model, _Loaded) else self.model

    @property
    def origin(self) -> str:
        return self.model.path if isinstance(self.model, _Loaded) else "model"

    def stage(self, name: str, make: Callable[[], Any]) -> Any:
        """The stage's artifact, made once; a stage that failed with a diagnostic fails again at once
        (later dumps that need it report it without recomputing)."""
        from .ir.diagnostics import PolysatError
        if name not in self._cache:
            try:
                self._cache[name] = make()
            except PolysatError as e:
                self._cache[name] = e
        got = self._cache[name]
        if isinstance(got, PolysatError):
            raise PolysatError(got.diagnostics)
        return got

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
    def split(self):
        """The program cut at its data-dependent gathers (ir/gather_split.py): the affine rest goes to the
        e-graph, each gather is a kernel of its own."""
        from .ir.gather_split import split_gathers
        return self.stage("gathers", lambda: split_gathers(self.program))

    @property
    def saturated(self):
        """(EGraphState, RunReport): the Tiny IR loaded into the e-graph, saturated by the rule files the
        cost model needs (one kernel per op for a model that searches the boundaries)."""
        from .egraph.api import saturate_for
        return self.stage("saturate", lambda: saturate_for(self.split.program, self.cost_model, list(self.rules_dirs) or None))

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
            from .egraph.segment_stitch import SegmentedState
            if self.search is not None and not isinstance(self.saturated[0], SegmentedState):
                return self.search.best.priced  # a stitched search's regions are its segments' (their names)
            x = self.extraction
            return price_kernels(x.program, x.partition, self.params, self.arch)
        return self.stage("priced", make)

    @property
    def regions(self):
        """RB-SSA regions (one per kernel) synthesized from the extraction, each intermediate that all its
        readers round stored rounded (ir/region_narrow.py) and in the dim order its readers view as packed
        matrices (ir/region_layout.py), validated (docs/DESIGN.md §RB-SSA)."""
        def make():
            from .analyses.region_validate import validate_regions
            from .egraph.region_synth import synthesize
            from .ir.diagnostics import PolysatError
            from .ir.region_narrow import narrow_boundaries
            sp = self.split
            rest = []
            if sp.program.outputs:
                x = self.extraction
                rest = narrow_boundaries(synthesize(x.program, x.partition))
            regions = sp.regions(rest, self.program)
            regions = _lazy("ir.region_layout", "store_for_readers")(regions)
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
    "region": lambda c, d: _region_dump(c),
    "analysis": lambda c, d: _analysis_dump(c),
    "plan": lambda c, d: backend(c, "plan_json"),
    "gpu": lambda c, d: backend(c, "gpu_json"),
    "cu": lambda c, d: {"files": _lazy("backend.common.cu_header", "add_headers")(
        backend(c, "write_cu", d), backend(c, "kernel_sources"))},
    # pictures (SVG text, written as <stage>.svg)
    "egraph_svg": lambda c, d: _lazy("viz.dumps", "egraph_picture")(c),
    "regions_svg": lambda c, d: _lazy("viz.dumps", "regions_picture")(c),
    "roofline": lambda c, d: _lazy("viz.dumps", "roofline_picture")(c),
}


def backend(c: Compilation, stage: str, *args):
    """A backend stage (backend/stages.py) over the compilation's regions for its arch and binding."""
    return _lazy("backend.stages", stage)(c.regions, c.arch, *args, bind=c.bind)


def _region_dump(c: Compilation) -> dict:
    """The regions (``ir/region.py``'s format), each with ``user``: the user's ops it computes and the
    tensors it reads and writes, by the model's names."""
    from .ir.region import regions_json
    from .ir.user_names import region_names
    x = c.extraction
    names = region_names(c.program, x.program)
    kernels = {k.name: names(k) for k in x.partition.kernels}
    doc = regions_json(c.regions)
    for r in doc["regions"]:
        if r["region"]["name"] in kernels:
            r["user"] = kernels[r["region"]["name"]]
    return doc


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
    """Every name a dump stage (``all`` is expanded by :func:`expand_stages`)."""
    for s in stages:
        if s not in DUMPS:
            fail("UnknownStage", "--dump", f"unknown stage {s!r}; stages: {', '.join(DUMPS)}")


def user_named(c: Compilation, diags: list) -> list:
    """diags naming the user's ops and tensors instead of kernels' and nodes' ids, where the stages
    they need are already computed (naming never compiles more)."""
    from .ir.user_names import named_diagnostics, region_names, tensor_names
    if not hasattr(c._cache.get("extract"), "partition"):
        if not isinstance(c._cache.get("tiny"), Program):
            return diags
        return named_diagnostics(diags, {}, tensor_names(c.program))
    x = c.extraction
    names = region_names(c.program, x.program)
    return named_diagnostics(diags, {k.name: names(k)["ops"] for k in x.partition.kernels}, names.tensors)


def expand_stages(stages: list[str]) -> list[str]:
    """``all`` -> every stage, in pipeline order; duplicates dropped."""
    out = [x for s in stages for x in (DUMPS if s == "all" else [s])]
    return list(dict.fromkeys(out))


def write_dumps(c: Compilation, stages: list[str], out_dir: str, tolerant: bool = False,
                errors: "list | None" = None) -> list[str]:
    """Write DIR/<stage>.json (or .svg) for each stage. A stage that fails with a diagnostic does not
    stop the stages after it that do not need it: with ``tolerant`` (the demo) it is reported in the
    returned list as ``stage: unavailable (...)``; otherwise its diagnostics go to ``errors`` (each
    once), or are raised at the end when no list is given."""
    from .ir.diagnostics import PolysatError
    stages = expand_stages(stages)
    check_stages(stages)
    os.makedirs(out_dir, exist_ok=True)
    written: list = []
    failed: list = []
    for s in stages:
        try:
            doc = DUMPS[s](c, out_dir)
        except PolysatError as e:
            diags = user_named(c, e.diagnostics)
            failed += [d for d in diags if d not in failed]
            if tolerant:
                d = diags[0]
                written.append(f"{s}: unavailable ({d.code} {d.kind}: {d.why})")
            else:
                written.append(f"{s}: failed ({diags[0].code} {diags[0].kind})")
            continue
        path = os.path.join(out_dir, f"{s}.svg" if isinstance(doc, str) else f"{s}.json")
        with open(path, "w", encoding="utf-8") as f:
            if isinstance(doc, str):
                f.write(doc)
            else:
                json.dump(doc, f, indent=1, ensure_ascii=False)
                f.write("\n")
        written.append(path)
    if failed and not tolerant:
        if errors is None:
            raise PolysatError(failed)
        errors += failed
    return written
