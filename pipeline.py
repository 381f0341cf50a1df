"""The compiler as one ordered list of named stages (docs/DESIGN.md §Pipeline), each dumpable.

``STAGES`` is the pipeline: each :class:`Stage` has one name, used as its cache key, as the attribute of a
:class:`Compilation` (``c.tiny``, ``c.extraction``, ...) and, for a dumped stage, as the dump's name
(``--dump=tiny`` writes ``tiny.json``; the pictures are SVG text written as ``<stage>.svg``); the function
that makes it; and what it needs (the options, ``doc``, ``origin``, ``arch``, ``cost``, ``bind``,
``rules_dirs``, and earlier stages). A stage is made on first use, reading only what it declares, so a
dump of a late stage runs exactly the stages before it. Every verb (``compile``, ``run``, ``demo``,
``extract``) and the compile-time bench go through it. ``program`` and ``regions`` are the Python API's
names for ``tiny`` and ``region`` (docs/python_api.md). Each stage's function lives in its own layer and is
imported on first use (``_call``), which keeps ``polysat run``'s start-up light.

    python -c "import polysat.pipeline as p; print(p.describe())"
"""
from __future__ import annotations

import contextlib
import gc
import importlib
import os
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from .frontend import read_model
from .ir import progress, trampoline
from .ir.diagnostics import PolysatError, fail

ARCHS = ("sm80", "sm90")
OPTIONS = ("doc", "origin", "arch", "cost", "bind", "rules_dirs")
ALIASES = {"program": "tiny", "regions": "region"}  # the Python API's names (docs/python_api.md)
COST_MODULES = ("egraph.cost", "search.model")  # where the cost models ``--cost`` offers are defined (and registered)
GC_GEN0 = 50000  # allocations between the collector's youngest passes while a stage is made (Python's default: 700)


def _call(ref: str, *args, **kw) -> Any:
    """``module:function`` of the package, imported on first use."""
    module, name = ref.split(":")
    return getattr(importlib.import_module(f"polysat.{module}"), name)(*args, **kw)


def _get(ref: str) -> Any:
    module, name = ref.split(":")
    return getattr(importlib.import_module(f"polysat.{module}"), name)


@dataclass(frozen=True)
class Stage:
    name: str  # cache key, attribute of Compilation, dump name
    make: Callable  # (a view of the compilation that holds only ``needs``) -> the stage's value
    needs: tuple = ()  # options and earlier stages it reads
    dump: "Callable | None" = None  # (compilation, out dir) -> JSON document or SVG text; None: not dumped
    doc: str = ""


# ---- the stages' glue (each reads only what its stage declares) -------------------------------------

def _cost_model(s):
    """The ``cost`` model, built with what it declares it needs (egraph/cost.py ``Needs``)."""
    for m in COST_MODULES:
        importlib.import_module(f"polysat.{m}")
    needs = _call("egraph.cost:lookup", s.cost).needs
    return _call("egraph.cost:make", s.cost, s.arch, _call("pricing.symbols:bind_params", s.tiny, s.bind)
                 if needs.params else None)


def _saturated(s):
    return _call("egraph.api:saturate_for", s.split.program, s.cost_model, list(s.rules_dirs) or None)


def _search(s):
    m = s.cost_model
    return m.search(s.saturated[0]) if m.needs.search else None


def _extraction(s):
    return s.search.best.extraction if s.search is not None else _call("egraph.api:extract_full", s.saturated[0],
                                                                       s.cost_model)


def bounded(stage: str, fn: Callable, *args, **kw) -> Any:
    """fn(*args, **kw) under the time bound of a stage after the search (ir/deadline.py, POLYSAT_STAGE_SECONDS)."""
    with _get("ir.deadline:within")(stage, _get("knobs:stage_seconds")()):
        return fn(*args, **kw)


def _made_first(s, *stages: str) -> None:
    """The stages before a bounded one are made outside its bound (the search's time is not its time)."""
    for name in stages:
        getattr(s, name)


def _priced(s):
    _made_first(s, "search", "extraction", "params")
    return bounded("priced", _priced_in, s)


def _priced_in(s):
    if s.search is not None:
        return s.search.best.priced  # a stitched search's too: its segments' regions in the whole program's names
    stitched = isinstance(s.saturated[0], _get("search.stitch:SegmentedState"))
    x = s.extraction
    # a stitched program's kernels are its segments' under other ids: built kernel by kernel, each distinct one once
    return _call("pricing.kernels:price_kernels", x.program, x.partition, s.params, s.arch, by_kernel=stitched)


def _region(s):
    _made_first(s, *(("extraction", "priced") if s.split.program.outputs else ()))
    return bounded("region", _region_in, s)


def _region_in(s):
    sp = s.split
    rest = []
    if sp.program.outputs:
        x = s.extraction
        rest = _call("ir.region_narrow:narrow_boundaries", _call("egraph.region_synth:synthesize", x.program, x.partition))
    regions = _call("ir.region_layout:store_for_readers", sp.regions(rest, s.tiny))
    if sp.program.outputs:  # the kernels whose fp32 contraction the prices put on the FP32 pipes (pricing/kernels.py)
        pipes = {p.kernel.name for p in s.priced if p.region is not None and p.region.mma_path == "fp32"}
        regions = [replace(r, fp32_pipes=True) if r.name in pipes else r for r in regions]
    errors = [d for d in _call("analyses.region_validate:validate_regions", regions) if d.is_error]
    if errors:
        raise PolysatError(errors)
    return regions


# ---- the dumps ---------------------------------------------------------------------------------------

def _frontend_dump(c, d) -> dict:
    g = c.frontend
    return g.to_json() if g is not None else {"note": "the model is Tiny IR; no Frontend IR stage"}


def _region_dump(c, d) -> dict:
    """The regions (``ir/region.py``'s format), each with ``user``: the user's ops it computes and the
    tensors it reads and writes, by the model's names."""
    x = c.extraction
    names = _call("ir.user_names:region_names", c.tiny, x.program)
    kernels = {k.name: names(k) for k in x.partition.kernels}
    doc = _call("ir.region:regions_json", c.region)
    for r in doc["regions"]:
        if r["region"]["name"] in kernels:
            r["user"] = kernels[r["region"]["name"]]
    return doc


def _analysis_dump(c, d) -> dict:
    """The Poly Core report (docs/DESIGN.md §Poly Core) of every extracted region for ``arch``, priced
    on concrete shapes (``params``: --bind, else POLYSAT_PRICE_SYMBOL_SIZE)."""
    priced = c.priced
    return bounded("analysis", lambda: {"arch": c.arch, "device": _call("analyses.devices:device", c.arch).to_json(),
                                        "params": c.params, "regions": [_analysis_of(p, c.arch) for p in priced]})


def _analysis_of(p, arch: str) -> dict:
    _call("ir.deadline:check", f"kernel {p.kernel.name}")
    return {"name": p.kernel.name, **(_call("analyses.price:report", p.region, arch) if p.region is not None
                                      else {"analysis": None})}


def backend(c, stage: str, *args):
    """A backend stage (backend/stages.py) over the compilation's regions for its arch and binding."""
    regions = c.region
    return bounded(stage, _call, f"backend.stages:{stage}", regions, c.arch, *args, bind=c.bind)


def _cu_dump(c, d) -> dict:
    return backend(c, "cu_json", d)


# ---- the pipeline ------------------------------------------------------------------------------------

_BACKEND = ("region", "arch", "bind")  # what the backend's dumps read
_PICTURE = ("extraction", "tiny", "frontend", "arch", "origin", "cost")  # what the kernels' pictures read

STAGES = (
    Stage("frontend", lambda s: _call("frontend:frontend_from_doc", s.doc, s.origin), ("doc", "origin"),
          _frontend_dump, "the parsed Frontend IR graph (None for a Tiny IR model)"),
    Stage("tiny", lambda s: _call("frontend:program_from_doc", s.doc, s.origin), ("doc", "origin"),
          lambda c, d: _call("ir.tiny_json:dump_tiny", c.tiny), "the model lowered to Tiny IR"),
    Stage("indexbook", lambda s: _call("analyses.indexbook:checked_indexbook", s.tiny), ("tiny",),
          lambda c, d: _call("analyses.indexbook:book_to_json", c.indexbook), "axes, domains and index maps per value"),
    Stage("poly_view", lambda s: _call("analyses.polyview:build_polyview", s.indexbook), ("indexbook",),
          lambda c, d: _call("analyses.polyview:polyview_to_json", c.poly_view), "SCoP domains and access relations"),
    Stage("params", lambda s: _call("pricing.symbols:bind_params", s.tiny, s.bind), ("tiny", "bind"), None,
          "every symbol bound: from --bind, else POLYSAT_PRICE_SYMBOL_SIZE"),
    Stage("cost_model", _cost_model, ("cost", "arch", "tiny", "bind"), None, "the --cost model, built with what it needs"),
    Stage("split", lambda s: _call("ir.gather_split:split_gathers", s.tiny), ("tiny",), None,
          "the program cut at its data-dependent gathers: the affine rest, and a kernel per gather"),
    Stage("saturated", _saturated, ("split", "cost_model", "rules_dirs"), None,
          "(EGraphState, RunReport): the rest loaded and saturated as the cost model needs"),
    Stage("search", _search, ("cost_model", "saturated"), None,
          "the boundary search of a cost model that picks the boundaries itself; None for the others"),
    Stage("extraction", _extraction, ("search", "saturated", "cost_model"), None,
          "the cheapest terms: rewritten Tiny IR and the kernel partition"),
    Stage("egraph", None, ("saturated", "extraction"), lambda c, d: _call("egraph.api:dump", *c.saturated, c.extraction),
          "the saturation's report, the extracted terms and the partition (a dump only)"),
    Stage("priced", _priced, ("search", "saturated", "extraction", "params", "arch"), None,
          "every kernel with its Poly Core region and price"),
    Stage("region", _region, ("split", "extraction", "tiny", "priced"), _region_dump,
          "RB-SSA regions, one per kernel, narrowed, laid out for their readers and validated"),
    Stage("analysis", None, ("arch", "params", "priced"), _analysis_dump, "the Poly Core report of every region (a dump only)"),
    Stage("plan", None, _BACKEND, lambda c, d: backend(c, "plan_json"), "each region's kind and Schedule Plan (a dump only)"),
    Stage("gpu", None, _BACKEND, lambda c, d: backend(c, "gpu_json"), "each kernel's GPU IR (a dump only)"),
    Stage("cu", None, _BACKEND, _cu_dump, "a standalone .cu file per distinct kernel and the launches that use it (a dump only)"),
    Stage("egraph_svg", None, ("saturated", "extraction", "origin", "cost"), lambda c, d: _call("viz.dumps:egraph_picture", c), "the e-graph, drawn"),
    Stage("regions_svg", None, _PICTURE, lambda c, d: _call("viz.dumps:regions_picture", c), "the kernels over the user's ops"),
    Stage("roofline", None, _PICTURE, lambda c, d: _call("viz.dumps:roofline_picture", c), "every kernel on the roofline"),
)
BY_NAME = {s.name: s for s in STAGES}
DUMPS = {s.name: s.dump for s in STAGES if s.dump is not None}  # name -> (compilation, out dir) -> JSON or SVG


def describe() -> str:
    """The pipeline as a list: each stage with what it needs and whether it is dumped."""
    return "\n".join(f"{k:2d} {s.name:12s} <- {', '.join(s.needs) or '-':36s} {'dump ' if s.dump else '     '}{s.doc}"
                     for k, s in enumerate(STAGES))


class _Needs:
    """What a stage's function sees of the compilation: the values it declares, nothing else."""

    def __init__(self, c: "Compilation", stage: Stage, mine: bool = False):
        self._c, self._stage = c, stage
        self._allowed = set(stage.needs) | ({stage.name} if mine else set())  # a dump reads its own stage too

    def __getattr__(self, name: str) -> Any:
        if ALIASES.get(name, name) not in self._allowed:
            raise AttributeError(f"stage {self._stage.name!r} reads {name!r}, which it does not declare it needs")
        return getattr(self._c, name)


@dataclass
class Compilation:
    model: "str | dict"
    arch: str = "sm90"
    rules_dirs: tuple = ()
    cost: str = "size"  # the loaded partition; every user entry point (CLI verbs, polysat.compile, torch.compile,
    # the ONNX backend) passes knobs.DEFAULT_COST, the searched partition
    bind: "dict | None" = None  # symbol -> size (--bind); unbound symbols are priced at POLYSAT_PRICE_SYMBOL_SIZE
    _cache: dict = field(default_factory=dict)

    def __post_init__(self):
        if isinstance(self.model, str):
            self.model = _Loaded(self.model, read_model(self.model, self.bind))
            fixed = self.model.doc.get("fixed_sizes", {}) if isinstance(self.model.doc, dict) else {}
            if fixed and self.bind:  # imported at those sizes (an ONNX model's dynamic axes): nothing left to bind
                self.bind = {k: v for k, v in self.bind.items() if k not in fixed} or None

    @property
    def doc(self) -> dict:
        return self.model.doc if isinstance(self.model, _Loaded) else self.model

    @property
    def origin(self) -> str:
        return self.model.path if isinstance(self.model, _Loaded) else "model"

    def __getattr__(self, name: str) -> Any:
        name = ALIASES.get(name, name)
        stage = BY_NAME.get(name)
        if stage is None or stage.make is None or name.startswith("_"):
            raise AttributeError(f"{type(self).__name__} has no stage {name!r}")
        return self.get(stage)

    def get(self, stage: Stage) -> Any:
        """The stage's value, made once; a stage that failed with a diagnostic fails again at once
        (later dumps that need it report it without recomputing)."""
        if stage.name not in self._cache:
            try:
                with progress.stage(stage.name), _collector_relaxed():  # stderr, a terminal only (ir/progress.py)
                    self._cache[stage.name] = stage.make(_Needs(self, stage))
            except PolysatError as e:
                self._cache[stage.name] = e
        got = self._cache[stage.name]
        if isinstance(got, PolysatError):
            raise PolysatError(got.diagnostics)
        return got

    def made(self, name: str) -> bool:
        """Whether stage ``name`` is already made (and did not fail)."""
        got = self._cache.get(name)
        return name in self._cache and not isinstance(got, PolysatError)


@contextlib.contextmanager
def _collector_relaxed():
    """Python's cycle collector run every GC_GEN0 allocations instead of every 700 while a stage is made, then as
    before. A stage allocates millions of small objects beside a large live heap (the e-graph's view, the caches of
    the search), and each of the collector's passes walks the objects of its generation, the oldest one every
    hundred passes: at 700 the search of a 32-expert mixture spent a third of its CPU time collecting. Reference
    counting still frees every object no cycle holds at once; cycles wait at most GC_GEN0 allocations more."""
    before = gc.get_threshold()
    if before[0] and before[0] < GC_GEN0:
        gc.set_threshold(GC_GEN0, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


@dataclass(frozen=True)
class _Loaded:
    path: str
    doc: Any


def check_stages(stages: list[str]) -> None:
    """Every name a dump stage (``all`` is expanded by :func:`expand_stages`)."""
    for s in stages:
        if s not in DUMPS:
            fail("UnknownStage", "--dump", f"unknown stage {s!r}; stages: {', '.join(DUMPS)}")


def user_named(c: Compilation, diags: list) -> list:
    """diags naming the user's ops and tensors instead of kernels' and nodes' ids, where the stages
    they need are already computed (naming never compiles more)."""
    if not c.made("extraction"):
        if not c.made("tiny"):
            return diags
        return _call("ir.user_names:named_diagnostics", diags, {}, _call("ir.user_names:tensor_names", c.tiny))
    x = c.extraction
    names = _call("ir.user_names:region_names", c.tiny, x.program)
    return _call("ir.user_names:named_diagnostics", diags, {k.name: names(k)["ops"] for k in x.partition.kernels},
                 names.tensors)


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
    stages = expand_stages(stages)
    check_stages(stages)
    os.makedirs(out_dir, exist_ok=True)
    written: list = []
    failed: list = []
    for s in stages:
        try:
            doc = BY_NAME[s].dump(_Needs(c, BY_NAME[s], mine=True), out_dir)
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
                f.write(trampoline.json_text(doc, indent=1))  # json.dump recurses once per level
                f.write("\n")
        written.append(path)
    if failed and not tolerant:
        if errors is None:
            raise PolysatError(failed)
        errors += failed
    return written


def kernels(compilation: Any) -> list:
    """The kernels extraction made (under the compilation's cost model), named by the user's ops and
    tensors: [{"name", "ops", "reads", "writes"}]."""
    sp = compilation.split
    out = []
    if sp.program.outputs:
        x = compilation.extraction
        names = _call("ir.user_names:region_names", compilation.tiny, x.program)
        out = [{"name": k.name, **names(k)} for k in x.partition.kernels]
    ops = _call("ir.user_names:node_names", compilation.tiny)
    out += [{"name": f"gather_{s.node.id}", "ops": [ops[s.node.id]], "reads": [s.data, s.index], "writes": [s.out]}
            for s in sp.sites]  # a data-dependent gather: a kernel of its own (ir/gather_split.py)
    if sp.sites:  # in the order they run
        order = {r.name: k for k, r in enumerate(compilation.region)}
        out.sort(key=lambda k: order.get(k["name"], len(order)))
    return out
