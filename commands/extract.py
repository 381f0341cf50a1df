"""``polysat extract MODEL --cost=NAME [--json] [--explain]``: saturate, extract the partition into
kernels, and show each region with its Poly Core price and analysis (docs/DESIGN.md §Cost model).

It runs the one pipeline (``pipeline.Compilation``) and prints its stages: ``--cost=model`` loads the
model one kernel per op and its search picks the fusions the rules allow by modelled time on the
``--arch`` device table at the ``--bind`` sizes; ``--cost=size`` (or any other registered model) keeps
the loaded default partition's boundaries and the regions are priced the same way afterwards.
"""
from __future__ import annotations

import json
import pathlib

from .. import knobs
from ..analyses.polycore import analyze
from ..egraph.graph import export
from ..egraph.saturate import format_report
from ..pipeline import Compilation
from ..pricing.kernels import canonical, canonical_names, named_back
from .explain import explain_lines, explain_model, explain_size, hand_style
from .rule_use import rule_use
from ..ir.user_names import node_names, region_names


def run_extract(model, cost: str = knobs.DEFAULT_COST, rules_dirs=None, arch: str = "sm90", bind=None) -> dict:
    """extract_result of the compilation of ``model`` (a path or a parsed document) with these options."""
    return extract_result(Compilation(model, arch=arch, rules_dirs=tuple(rules_dirs or ()), cost=cost, bind=bind))


def user_rules(rep) -> list:
    """Per rule of a user's file (not rules/): its ruleset, file and how often it matched in the saturation."""
    from ..egraph.rulefiles import RULES_DIR
    return [{"name": r.name, "ruleset": r.ruleset, "file": r.file, "matches": r.matches}
            for r in rep.rules.values() if pathlib.Path(r.file).resolve().parent != RULES_DIR.resolve()]


def extract_result(c: Compilation) -> dict:
    """Everything extract prints, as one JSON-able dict (plus "_search"/"_extraction"... for explain)."""
    st, rep = c.saturated
    search, x, priced, params, arch = c.search, c.extraction, c.priced, c.params, c.arch
    view = export(st)
    names = region_names(c.program, x.program)
    regions = [{**_region_json(p, arch), **names(p.kernel)} for p in priced]
    costs = [p.cost for p in priced if p.cost is not None]
    total = {"kernels": len(priced), "flops": sum(k.flops for k in costs), "bytes": sum(k.bytes for k in costs),
             "time_est_us": round(sum(k.time_est_us for k in costs), 4), "cost_model": c.cost_model.name, "arch": arch,
             "params": params}
    if search is not None:
        total["unfused_kernels"] = len(search.baseline.priced)
        total["unfused_time_est_us"] = round(search.baseline.total, 4)
        total["search_evaluations"] = search.evaluations
        total["search_stop"], total["search_groups_priced"] = search.stop, search.groups_priced
    from ..pipeline import kernels
    gathers = [k for k in kernels(c) if k["name"].startswith("gather_")] if c.split.sites else []
    out = {"model": c.origin, "regions": regions, "total": total, "gathers": gathers,
           "egraph": {"enodes": rep.nodes, "eclasses": len(view.classes), "iterations": len(rep.iterations),
                      "stop_reason": rep.stop.value, "seconds": round(rep.seconds, 4)},
           "user_rules": user_rules(rep),
           "_report": rep, "_search": search, "_state": st, "_view": view, "_extraction": x, "_params": params,
           "_priced": priced, "_model": c.cost_model,
           "_tensor_names": names.tensors, "_op_names": {**node_names(c.program), **names.ops}}
    return out


def _region_json(p, arch: str) -> dict:
    k = p.kernel
    d = {"name": k.name, "inputs": list(k.inputs), "outputs": list(k.outputs), "nodes": len(k.nodes)}
    if p.region is None:  # a kernel with no Poly-View statement: a copy of memory (pricing/kernels.py copy_cost)
        c = p.cost
        d["cost"] = {"flops": 0, "bytes": c.bytes, "time_est_us": round(c.time_est_us, 4), "bound": c.bound}
        d["analysis"] = None
        return d
    c = p.cost
    ren = canonical_names(p.region)  # analysed as the canonical kernel: identical kernels (layers) analysed once
    a = analyze(canonical(p.region), arch, dict(c.tile))
    d["cost"] = {"flops": c.flops, "bytes": c.bytes, "time_est_us": round(c.time_est_us, 4), "bound": c.bound,
                 "tile": dict(c.tile), "stops": list(c.stops)}
    d["analysis"] = {"parallel_axes": list(a.parallel_axes), "reduce_axes": list(a.reduce_axes),
                     "tail_axes": list(a.tail_axes),
                     "compute_at": {"ok": a.compute_at_ok, "halo": {"bytes": a.halo_bytes,
                                                                    "per_axis": dict(a.halo_per_axis)},
                                    "reasons": [named_back(r, ren) for r in a.reasons]},
                     "min_buffer": a.min_buffer, "warnings": list(a.warnings)}
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
    for g in result.get("gathers", ()):
        lines.append(f"  + {g['name']} (ops {', '.join(g['ops'])}): a gather by run-time indices, a kernel of its own "
                     f"outside the e-graph, not priced  {', '.join(g['reads'])} -> {', '.join(g['writes'])}")
    if "unfused_time_est_us" in t:
        lines.append(f"  one kernel per op: {t['unfused_kernels']} kernels, {t['unfused_time_est_us']:.3f} µs "
                     f"({t['search_evaluations']} partitions priced; merge search: {t['search_stop']}, "
                     f"{t['search_groups_priced']} groups priced"
                     + ("; POLYSAT_SEARCH_PRICES and POLYSAT_SEARCH_SECONDS lift its limits"
                        if t["search_stop"].startswith(("price limit", "time limit")) else "") + ")")
    lines.append(format_report(result["_report"]))
    e = result["egraph"]
    lines.append(f"  e-graph: {e['enodes']} e-nodes, {e['eclasses']} e-classes")
    return "\n".join(lines)


def extract_command(c: Compilation, as_json: bool = False, explain: bool = False) -> int:
    """Print the chosen regions (table, or JSON with --json); with explain, the rejected fusions."""
    result = extract_result(c)
    if explain or as_json:
        result["user_rules"] = rule_use(c, result["user_rules"])
    rejected = hand = None
    if explain:
        rejected = explain_model(result) if result["_search"] is not None else explain_size(result, c.arch)
        hand = hand_style(result, c.program)
    if as_json:
        doc = public(result)
        if rejected is not None:
            doc["rejected"], doc["hand_style"] = rejected, hand
        print(json.dumps(doc, indent=1, default=str))
    else:
        print(format_table(result))
        if rejected is not None:
            print("\n".join(explain_lines(rejected, hand)))
            for r in result["user_rules"]:
                print(f"  user rule {r['name']} ({r['ruleset']}, {r['file']}): matched {r['matches']} time(s)"
                      + ("" if r["matches"] else " (its ruleset ran; no term matched its left-hand side)")
                      + f"; {'USED' if r['used'] else 'not used'} by the chosen partition ({r['used_why']})")
    return 0
