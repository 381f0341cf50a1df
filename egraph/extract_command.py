"""``polysat extract MODEL --cost=NAME [--json] [--explain]``: saturate, extract the partition into
kernels, and show each region with its Poly Core price and analysis (seed 000 §7.1, §10 step 5, §11;
issue 5).

``--cost=model`` loads the model one kernel per op and lets ``egraph.model_cost`` search the
fusions the rules allow by modelled time; ``--cost=size`` (or any other registered model) keeps the
loaded default partition's boundaries and the regions are priced the same way afterwards.
"""
from __future__ import annotations

import json

from ..analyses.polycore import analyze
from .api import extract_full
from .cost import get
from .explain import explain_lines, explain_size, explain_model
from .graph import export
from .model_cost import ModelCost, bind_params, price_kernels, saturate_unfused
from .saturate import format_report, saturate
from ..ir.user_names import region_names


def run_extract(model_path, cost: str = "size", rules_dirs=None, arch: str = "sm90", bind=None) -> dict:
    """Everything extract prints, as one JSON-able dict (plus "_search"/"_extraction" for explain)."""
    from ..frontend import load_model
    program = load_model(model_path)
    params = bind_params(program, bind)
    model = ModelCost(params, arch) if cost == "model" else get(cost)
    if isinstance(model, ModelCost):
        st, rep = saturate_unfused(program, rules_dirs)
        search = model.search(st)
        x = search.best.extraction
        priced = search.best.priced
    else:
        st, rep = saturate(program, rules_dirs)
        search = None
        x = extract_full(st, model)
        priced = price_kernels(x.program, x.partition, params, arch)
    view = export(st)
    names = region_names(program, x.program)
    regions = [{**_region_json(p, arch), **names(p.kernel)} for p in priced]
    costs = [p.cost for p in priced if p.cost is not None]
    total = {"kernels": len(priced), "flops": sum(c.flops for c in costs), "bytes": sum(c.bytes for c in costs),
             "time_est_us": round(sum(c.time_est_us for c in costs), 4), "cost_model": model.name, "arch": arch,
             "params": params}
    if search is not None:
        total["unfused_kernels"] = len(search.baseline.priced)
        total["unfused_time_est_us"] = round(search.baseline.total, 4)
        total["search_evaluations"] = search.evaluations
    out = {"model": str(model_path), "regions": regions, "total": total,
           "egraph": {"enodes": rep.nodes, "eclasses": len(view.classes), "iterations": len(rep.iterations),
                      "stop_reason": rep.stop.value, "seconds": round(rep.seconds, 4)},
           "_report": rep, "_search": search, "_state": st, "_view": view, "_extraction": x, "_params": params, "_priced": priced,
           "_tensor_names": names.tensors}
    return out


def _region_json(p, arch: str) -> dict:
    k = p.kernel
    d = {"name": k.name, "inputs": list(k.inputs), "outputs": list(k.outputs), "nodes": len(k.nodes)}
    if p.region is None:  # a kernel with no Poly-View statement (a copy of memory)
        d["cost"] = {"flops": 0, "bytes": 0, "time_est_us": 0.0, "bound": "none"}
        d["analysis"] = None
        return d
    c = p.cost
    a = analyze(p.region, arch, dict(c.tile))
    d["cost"] = {"flops": c.flops, "bytes": c.bytes, "time_est_us": round(c.time_est_us, 4), "bound": c.bound,
                 "tile": dict(c.tile), "stops": list(c.stops)}
    d["analysis"] = {"parallel_axes": list(a.parallel_axes), "reduce_axes": list(a.reduce_axes),
                     "tail_axes": list(a.tail_axes),
                     "compute_at": {"ok": a.compute_at_ok, "halo": {"bytes": a.halo_bytes,
                                                                    "per_axis": dict(a.halo_per_axis)},
                                    "reasons": list(a.reasons)},
                     "min_buffer": a.min_buffer}
    return d


def public(result: dict) -> dict:
    return {k: v for k, v in result.items() if not k.startswith("_")}


def format_table(result: dict) -> str:
    t = result["total"]
    lines = [f"{result['model']}: {t['kernels']} region(s), cost={t['cost_model']}, arch={t['arch']}, "
             f"params {', '.join(f'{k}={v}' for k, v in t['params'].items()) or '(none)'}",
             f"  {'region':<8}{'nodes':>6}{'FLOPs':>22}{'bytes':>18}{'est µs':>13}  {'bound':<8}{'halo B':>8}  "
             f"inputs -> outputs"]
    for r in result["regions"]:
        c, a = r["cost"], r["analysis"]
        halo = a["compute_at"]["halo"]["bytes"] if a else 0
        lines.append(f"  {r['name']:<8}{r['nodes']:>6}{c['flops']:>22,}{c['bytes']:>18,}{c['time_est_us']:>13.3f}  "
                     f"{c['bound']:<8}{halo:>8}  {', '.join(r['reads'])} -> {', '.join(r['writes'])}")
        lines.append(f"  {'':<8}ops: {', '.join(r['ops'])}")
    lines.append(f"  {'total':<8}{'':>6}{t['flops']:>22,}{t['bytes']:>18,}{t['time_est_us']:>13.3f}")
    if "unfused_time_est_us" in t:
        lines.append(f"  one kernel per op: {t['unfused_kernels']} kernels, {t['unfused_time_est_us']:.3f} µs "
                     f"({t['search_evaluations']} partitions priced)")
    lines.append(format_report(result["_report"]))
    e = result["egraph"]
    lines.append(f"  e-graph: {e['enodes']} e-nodes, {e['eclasses']} e-classes")
    return "\n".join(lines)


def extract_command(model_path, cost: str = "size", rules_dirs=None, as_json: bool = False, explain: bool = False,
                    arch: str = "sm90", bind=None) -> int:
    """Print the chosen regions (table, or JSON with --json); with explain, the rejected fusions."""
    result = run_extract(model_path, cost, rules_dirs, arch, bind)
    rejected = None
    if explain:
        rejected = explain_model(result) if result["_search"] is not None else explain_size(result, arch)
    if as_json:
        doc = public(result)
        if rejected is not None:
            doc["rejected"] = rejected
        print(json.dumps(doc, indent=1, default=str))
    else:
        print(format_table(result))
        if rejected is not None:
            print("\n".join(explain_lines(rejected)))
    return 0
