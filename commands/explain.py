"""``polysat extract --explain``: the fusions the extraction rejected and what decided each (docs/DESIGN.md
§Cost model, §Fusion): a rule (no rule fuses the read, or the fused kernel breaks a legality class: the
class, in the user's op names), the price (Poly Core prices the fused partition higher: both prices), or the
segmenter (a boundary between repeated blocks); the softmax-weighted sums it streamed (docs/DESIGN.md
§Streaming: one pass over the keys, rules/streaming.egg) with the price of the two-pass spelling they
replaced; and the modelled time of the hand-style partition (search/hand_partition.py) beside the chosen one.
"""
from __future__ import annotations

import math
import re
from dataclasses import replace

from ..analyses.price import price
from ..analyses.indexbook import checked_indexbook
from ..analyses.poly_from_view import region_from_polyview
from ..analyses.polyview import build_polyview
from .partition_legality import illegal_fusions
from ..pricing.kernels import canonical
from ..search.hand_partition import hand_partition
from ..egraph.partition import FREE_OPS, Kernel, Partition
from ..egraph.stream import parse_tag
from ..ir.user_names import humanize, node_names


def _names(result: dict) -> dict:
    """e-class -> the user's name for the value of the original Tiny node it holds (``ln1``, or ``ln1 (an
    intermediate)``); a class holding no original node is named by the nearest named class it reads
    (``ln1 (a value computed from it)``)."""
    from ..ir.user_names import tensor_names
    st, view = result["_state"], result["_view"]
    users = tensor_names(st.program)
    out: dict = {}
    for nid, i in st.index.items():
        c = view.by_index.get(i)
        if c is not None:
            out.setdefault(c, _label(users.get(nid, nid)))
    return _Named(out, view)


class _Named(dict):
    def __init__(self, names: dict, view):
        super().__init__(names)
        self.view = view

    def get(self, c, default=None):
        if c in self:
            return self[c]
        seen, frontier = {c}, [c]
        while frontier:  # breadth first over what the class reads
            nxt = []
            for k in frontier:
                for n in self.view.classes.get(k, ()):
                    for ch in n.children:
                        if ch in self:
                            return f"{self[ch].removesuffix(' (an intermediate)')} (a value computed from it)"
                        if ch not in seen:
                            seen.add(ch)
                            nxt.append(ch)
            frontier = nxt
        return default


_CLASS = re.compile(r"@(\d+)")  # an e-class a legality rule names (search/legality.py violations)


def _label(name: str) -> str:
    """A tensor name for text: an op's intermediate (``fc1·n0``) is said as such, without the node id."""
    op, dot, _ = name.partition("\u00b7")
    return f"{op} (an intermediate)" if dot else name


def _said_once(why: str, names: dict) -> str:
    """A rejection's reason in the user's op names, each clause once (the verdict prefix kept)."""
    head, sep, rest = why.partition(": ")
    return f"{head}{sep}{humanize(rest, names)}" if head in ("illegal", "segment boundary") else humanize(why, names)


def _decider(why: str) -> str:
    """What decided a rejection: "rule" (illegal, no fused term), "price", "segment" or "search limit"
    (the merge search or the descent stopped before it reached the fusion, or the descent of a large
    program does not try it: its value computes a reduction)."""
    head = why.split(":")[0]
    return {"priced higher": "price", "segment boundary": "segment", "not reached": "search limit",
            "not tried": "search limit"}.get(head, "rule")


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
        why = _CLASS.sub(lambda m: _label(names.get(int(m.group(1)), "a reduction")), r.why)  # the rules' @class
        out.append({"value": names.get(x, f"e-class {x}"), "verdict": r.why.split(":")[0],
                    "decided_by": _decider(r.why), "why": _said_once(why, result["_op_names"]),
                    "separate_us": round(r.separate_us, 4),
                    "fused_us": None if r.fused_us is None else round(r.fused_us, 4),
                    "kernels": [r.kernels_before, r.kernels_after],
                    "scope": "the two kernels around the boundary" if r.local else "the whole partition"})
    if search.streamed:  # price the best partition that streams nothing: what streaming replaced
        two = result["_model"].search(result["_state"], stream=False).best
        for s in search.streamed:
            out.append({"value": names.get(s.value, f"e-class {s.value}"), "verdict": "streamed", "passes": s.passes,
                        "decided_by": "price",
                        "why": "illegal" if two.illegal else ("priced higher" if two.total > s.total_us else "cheaper"),
                        "separate_us": None if two.total == math.inf else round(two.total, 4),
                        "fused_us": round(s.total_us, 4), "kernels": [len(two.priced), s.kernels],
                        "scope": "the whole partition"})
    for c, n in cur.extraction.chosen.items():
        if n.op == "Mat" and c not in tried:
            x = n.children[0]
            if c in search.sites:
                continue  # a fusion the search priced but did not list (after the merge phase)
            out.append({"value": names.get(x, f"e-class {x}"), "verdict": "illegal", "decided_by": "rule",
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
            why = _said_once("illegal: " + "; ".join(r[3] for r in bad), result["_op_names"]) if bad else verdict
            out.append({"value": ", ".join(_label(result["_tensor_names"].get(o, o)) for o in a.outputs),
                        "verdict": verdict, "decided_by": "rule" if bad else "price", "why": why,
                        "separate_us": round(sep, 4), "fused_us": round(fused, 4), "kernels": [2, 1],
                        "scope": "the two kernels"})
    return out


def hand_style(result: dict, original) -> dict:
    """The hand-style partition (search/hand_partition.py) of the chosen partition's program, priced with the same
    cost: its kernels (the user's ops of each), their modelled time, and any legality class it breaks."""
    from .partition_legality import illegal_fusions
    from ..pricing.kernels import price_kernels, total_us
    x = result["_extraction"]
    prog, part = hand_partition(original, x.program)
    priced = price_kernels(prog, part, result["_params"], result["total"]["arch"])
    ops = node_names(original, prog)
    kernels = []
    for k in part.kernels:
        mine = [ops.get(i, i) for i in sorted(k.nodes, key=[n.id for n in prog.nodes].index)
                if prog[i].op not in FREE_OPS]
        kernels.append([o for o in dict.fromkeys(mine) if parse_tag(o) is None])
    bad = illegal_fusions(prog, part)
    return {"kernels": len(part.kernels), "time_est_us": round(total_us(priced), 4), "ops": kernels,
            "illegal": [humanize(b[3], ops) for b in bad],
            "chosen": {"kernels": result["total"]["kernels"], "time_est_us": result["total"]["time_est_us"]}}


def explain_lines(entries: list, hand: "dict | None" = None) -> list:
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
        lines.append("rejected fusions: none (every boundary was fused)")
    else:
        lines.append("rejected fusions: each with the rule or the price that decided it")
    for r in rejected:
        lines.append(f"  {r['value']}: {_reason(r)}")
    if hand is not None:
        lines.append(f"hand-style partition: {_kernels(hand['kernels'])}, {hand['time_est_us']:.3f} µs "
                     f"(chosen: {_kernels(hand['chosen']['kernels'])}, {hand['chosen']['time_est_us']:.3f} µs)")
        lines.append("  " + " | ".join(f"h{k}: {', '.join(ops)}" for k, ops in enumerate(hand["ops"])))
        for why in hand["illegal"]:
            lines.append(f"  (it breaks a legality class: {why})")
    return lines


def _kernels(n: int) -> str:
    return f"{n} kernel" if n == 1 else f"{n} kernels"


def _reason(r: dict) -> str:
    """One line: the rule that decided (its reason once), or the price (both sides and the difference)."""
    fused = "n/a" if r["fused_us"] is None else f"{r['fused_us']:.3f} µs"
    if r["decided_by"] == "price":
        delta = "" if r["fused_us"] is None else f", +{r['fused_us'] - r['separate_us']:.3f} µs"
        return (f"price — fused {fused} >= separate {r['separate_us']:.3f} µs ({r['scope']}{delta}; "
                f"kernels {r['kernels'][0]} -> {r['kernels'][1]})")
    why = r["why"].removeprefix("illegal: ").removeprefix("segment boundary: ")
    return f"{r['decided_by']} — {why} (separate {r['separate_us']:.3f} µs, fused {fused})"
