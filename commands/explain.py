"""``polysat extract --explain``: the fusions the extraction rejected and why (docs/DESIGN.md
§Cost model, §Fusion): illegal (no rule fuses the read, or the fused kernel breaks a legality class), or
priced higher by Poly Core, with both prices; and the softmax-weighted sums it streamed (docs/DESIGN.md
§Streaming: one pass over the keys, rules/streaming.egg) with the price of the two-pass spelling they replaced.
"""
from __future__ import annotations

import math
from dataclasses import replace

from ..analyses.cost_model import price
from ..analyses.indexbook import checked_indexbook
from ..analyses.poly_from_view import region_from_polyview
from ..analyses.polyview import build_polyview
from ..egraph.legality import illegal_fusions
from ..egraph.model_cost import canonical
from ..egraph.partition import Kernel, Partition
from ..ir.user_names import humanize


def _names(result: dict) -> dict:
    """e-class -> the user's name for the value of the original Tiny node it holds (``ln1``, or
    ``ln1·n8`` for an intermediate of the op ln1)."""
    from ..ir.user_names import tensor_names
    st, view = result["_state"], result["_view"]
    users = tensor_names(st.program)
    out: dict = {}
    for nid, i in st.index.items():
        c = view.by_index.get(i)
        if c is not None:
            out.setdefault(c, users.get(nid, nid))
    return out


def explain_model(result: dict) -> list:
    """One entry per value the chosen partition materializes: why it was not fused away."""
    search, view = result["_search"], result["_view"]
    names = _names(result)
    cur = search.best
    out = []
    tried = set()
    for r in search.rejected:
        tried.add(r.mat)
        x = next((n.children[0] for n in view.classes[r.mat] if n.op == "Mat"), r.mat)
        out.append({"value": names.get(x, f"e-class {x}"), "verdict": r.why.split(":")[0],
                    "why": humanize(r.why, result["_tensor_names"]),
                    "separate_us": round(r.separate_us, 4),
                    "fused_us": None if r.fused_us is None else round(r.fused_us, 4),
                    "kernels": [r.kernels_before, r.kernels_after],
                    "scope": "the two kernels around the boundary" if r.local else "the whole partition"})
    if search.streamed:  # price the best partition that streams nothing: what streaming replaced
        two = result["_model"].search(result["_state"], stream=False).best
        for s in search.streamed:
            out.append({"value": names.get(s.value, f"e-class {s.value}"), "verdict": "streamed", "passes": s.passes,
                        "why": "illegal" if two.illegal else ("priced higher" if two.total > s.total_us else "cheaper"),
                        "separate_us": None if two.total == math.inf else round(two.total, 4),
                        "fused_us": round(s.total_us, 4), "kernels": [len(two.priced), s.kernels],
                        "scope": "the whole partition"})
    for c, n in cur.extraction.chosen.items():
        if n.op == "Mat" and c not in tried:
            x = n.children[0]
            if c in search.sites:
                continue  # a fusion the search priced but did not list (after the merge phase)
            out.append({"value": names.get(x, f"e-class {x}"), "verdict": "illegal",
                        "why": "illegal: no rule of rules/fusion.egg fuses any read of this value (a broadcast of "
                               "a value holding a reduction: many-to-many)",
                        "separate_us": round(cur.total, 4), "fused_us": None,
                        "kernels": [len(cur.priced), None], "scope": "rules"})
    return out


def explain_size(result: dict, arch: str) -> list:
    """For a partition chosen without a search: each producer -> consumer kernel pair priced apart
    and merged into one kernel."""
    x, params = result["_extraction"], result["_params"]
    prog, part = x.program, x.partition
    priced = {p.kernel.name: p for p in result["_priced"]}
    pv = build_polyview(checked_indexbook(prog))
    out = []
    for b in part.kernels:
        for a in part.kernels:
            if a is b or not set(a.outputs) & set(b.inputs):
                continue
            nodes = a.nodes | b.nodes
            merged = Kernel(f"{a.name}+{b.name}", nodes, tuple(o for o in a.outputs + b.outputs),
                            tuple(i for i in dict.fromkeys(a.inputs + b.inputs) if i not in nodes))
            kernels = tuple(merged if k is b else k for k in part.kernels if k is not a)
            bad = illegal_fusions(prog, Partition(kernels))
            sep = sum(priced[k.name].cost.time_est_us for k in (a, b) if priced[k.name].cost is not None)
            region = region_from_polyview(pv, nodes, None, params, merged.name)
            fused = replace(price(canonical(region), arch), region=merged.name).time_est_us
            verdict = "illegal" if bad else ("priced higher" if fused >= sep else "cheaper: --cost=size keeps the loaded boundary, --cost=model fuses it")
            why = humanize("illegal: " + "; ".join(r[3] for r in bad), result["_tensor_names"]) if bad else verdict
            out.append({"value": ", ".join(result["_tensor_names"].get(o, o) for o in a.outputs), "verdict": verdict, "why": why,
                        "separate_us": round(sep, 4), "fused_us": round(fused, 4), "kernels": [2, 1],
                        "scope": "the two kernels"})
    return out


def explain_lines(entries: list) -> list:
    streamed = [r for r in entries if r["verdict"] == "streamed"]
    rejected = [r for r in entries if r["verdict"] != "streamed"]
    lines = []
    if streamed:
        lines.append("streamed softmax-weighted sums (rules/streaming.egg: online_softmax_sum walks the keys in blocks "
                     "with a running max and sum, P never written):")
        for r in streamed:
            two = "n/a" if r["separate_us"] is None else f"{r['separate_us']:.3f} µs"
            walks = "1 pass over the keys" if r["passes"] == 1 else f"{r['passes']} passes over the keys"
            lines.append(f"  {r['value']}: streamed ({walks}) — {r['fused_us']:.3f} µs, {r['kernels'][1]} kernel(s); "
                         f"without streaming {two}, {r['kernels'][0]} kernel(s) ({r['why']})")
    if not rejected:
        return lines + ["rejected fusions: none (every boundary was fused)"]
    lines.append("rejected fusions:")
    for r in rejected:
        fused = "n/a" if r["fused_us"] is None else f"{r['fused_us']:.3f} µs"
        lines.append(f"  {r['value']}: {r['verdict']} — separate {r['separate_us']:.3f} µs, fused {fused}")
        if r["why"] != r["verdict"]:
            lines.append(f"      {r['why']}")
    return lines
