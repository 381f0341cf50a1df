"""One launch of every kernel kind, for compute-sanitizer (``make gpu-check``'s sanitize part, bench/gpu_check.py).

    python -m polysat.bench.gpu_launch ITEM          # compile ITEM's example, launch each kernel once, check
    python -m polysat.bench.gpu_launch --list

An item is an example model compiled through the whole pipeline (front end, e-graph, regions, binding) at small
shapes with tails, whose kernels are launched exactly once each on the default stream (runtime/cuda.py
``run_once``: no timing repeats, no graph capture), and whose outputs are compared with the CPU playback of the
same regions. ``skeleton`` forces that skeleton's best plan where the kind has several (sm80 on a Hopper GPU is
the portable path every other GPU runs). Prints one JSON line ``{"item", "ok", "kernels", "max_rel_err",
"error"}``; exit status 0 when every output matches, 1 otherwise. :func:`sources` renders the same kernels
without a GPU (the CPU tests build them with nvcc).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Mapping

import numpy as np

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


@dataclass(frozen=True)
class Item:
    name: str
    example: str                 # a file of examples/
    cost: str                    # the extraction cost that gives this kind its region
    kind: str                    # the kernel kind the item is about (every region's kernel is launched)
    bind: Mapping[str, int] = field(default_factory=dict)
    skeleton: "str | None" = None  # force this skeleton's best plan (gemm, conv, conv_pool, attention)
    dtype: "str | None" = None  # the example's tensors in this dtype, priced at ``bind`` (fp32: 3xTF32 where cheaper)
    tolerance: float = 2e-2  # of the largest output: fp16 / bf16 outputs of fp32 accumulations


ITEMS = [
    Item("gemm_sm90", "gemm_bias_relu.json", "model", "gemm", {"M": 333, "N": 264, "K": 200}, "sm90"),
    Item("gemm_sm80", "gemm_bias_relu.json", "model", "gemm", {"M": 77, "N": 93, "K": 101}, "sm80"),
    # fp32 operands, the size the prices put on tensor cores (3xTF32, the sm80 skeleton on either arch)
    Item("gemm_fp32", "gemm_bias_relu.json", "model", "gemm", {"M": 1024, "N": 264, "K": 200}, dtype="fp32",
         tolerance=2e-5),
    # RMSNorm as the fp32 GEMM's A prologue, its statistic summed in the main loop (the accumulators' rows scaled)
    Item("gemm_rmsnorm_fp32", "rmsnorm_proj.json", "model", "gemm", tolerance=2e-5),
    Item("conv", "conv3x3_s2_silu.json", "model", "conv"),
    Item("conv_sm80", "conv3x3_s2_silu.json", "model", "conv", {}, "sm80"),
    Item("conv_pool", "conv_relu_maxpool.json", "model", "conv_pool"),
    Item("attention", "attention.json", "model", "attention", {"B": 2, "H": 2, "M": 100, "N": 130}),
    Item("attention_sm80", "attention.json", "model", "attention", {"B": 2, "H": 2, "M": 100, "N": 130}, "sm80"),
    Item("scores", "attention.json", "size", "softmax_scores", {"B": 2, "H": 2, "M": 100, "N": 130}),
    Item("simt_softmax", "softmax.json", "model", "simt", {"R": 37, "C": 1000}),
    Item("simt_layernorm", "layernorm.json", "model", "simt", {"T": 37}),
]
BY_NAME = {i.name: i for i in ITEMS}
FORCEABLE = ("gemm", "conv", "conv_pool", "attention")


def compile_item(item: Item) -> tuple[Any, list, dict]:
    """(compilation, regions, random inputs scaled to keep fp16 sums finite) of the item's example (items that
    differ only in the skeleton share one compilation)."""
    return _compiled(item.example, item.cost, tuple(sorted(item.bind.items())), item.dtype)


@lru_cache(maxsize=None)
def _compiled(example: str, cost: str, bind: tuple, dtype: "str | None" = None) -> tuple[Any, list, dict]:
    from ..cli import random_inputs
    from ..pipeline import Compilation
    path = os.path.join(EXAMPLES, example)
    if dtype is None:
        c = Compilation(path, cost=cost)
    else:
        with open(path) as f:
            doc = json.load(f)
        for t in doc["tensors"].values():
            t["dtype"] = dtype
        c = Compilation(doc, cost=cost, bind=dict(bind))
    ins = {k: v * 0.5 for k, v in random_inputs(c.program, dict(bind), 0).items()}
    return c, c.regions, ins


def _forced(kind: str, spec: Any, env: Mapping[str, int], arch: str, skeleton: str) -> Any:
    """The KernelSource of the best plan of ``skeleton`` for spec at env on arch."""
    if kind == "gemm":
        from ..backend.gemm import launch as m
        from ..backend.gemm.plan import search
        cspec = m.concrete_spec(spec, env)
        from ..backend.gemm.render import render
        return render(cspec, search(cspec, arch, skeletons=(skeleton,)).best)
    if kind in ("conv", "conv_pool"):
        from ..backend.conv.plan import search
        from ..backend.conv.render import render
        return render(spec, search(spec, arch, skeletons=(skeleton,)).best)
    if kind == "attention":
        from ..backend.attention import launch as m
        from ..backend.attention.kind import region_algo
        from ..backend.attention.plan import search
        from ..backend.attention.render import render
        cspec = m.concrete_spec(spec, env)
        algo = region_algo(spec)
        return render(cspec, search(cspec, arch, skeletons=(skeleton,), algos=(algo,) if algo else None).best)
    raise KeyError(kind)


def kernel_source(item: Item, kind: str, spec: Any, env: Mapping[str, int], arch: str) -> Any:
    """The KernelSource the item launches for one region (its forced skeleton where it has one)."""
    from ..runtime.kernels import source
    if item.skeleton and kind in FORCEABLE:
        ks = _forced(kind, spec, env, arch, item.skeleton)
        if ks.skeleton != item.skeleton:
            raise RuntimeError(f"asked for the {item.skeleton} skeleton, the search gave {ks.skeleton}")
        return ks
    return source(kind, spec, env, arch)


def sources(item: Item, arch: str = "sm90") -> list[tuple[str, str, Any]]:
    """(region, kind, KernelSource) of every region the item launches, rendered for arch without a GPU."""
    from ..ir.playback import bind_region_symbols
    from ..runtime.model import steps_of
    _, regions, ins = compile_item(item)
    env = bind_region_symbols(regions, ins)
    out = []
    for s in steps_of(regions):
        if s.on_cpu:
            raise RuntimeError(f"region {s.region.name} has no kernel: {s.binding}")
        out.append((s.region.name, s.kind.name, kernel_source(item, s.kind.name, s.binding.spec, env, arch)))
    if item.kind not in {k for _, k, _ in out}:
        raise RuntimeError(f"{item.example} at cost {item.cost} has no {item.kind} region: {[k for _, k, _ in out]}")
    return out


def _prepare(item: Item):
    """runtime/cuda.py ``run_once``'s prepare: the kind's own, or the forced skeleton's plan."""
    from ..backend.common.gpu import device
    from ..runtime.kernels import prepare

    def make(kind: str, spec: Any, tensors: Mapping[str, Any], env: Mapping[str, int]) -> Any:
        if not (item.skeleton and kind in FORCEABLE):
            return prepare(kind, spec, tensors, env)
        ks = kernel_source(item, kind, spec, env, device().arch)
        if kind == "gemm":
            from ..backend.gemm.launch import prepare as p
            return p(spec, tensors, env, plan=ks.plan)
        if kind in ("conv", "conv_pool"):
            from ..backend.conv.launch import prepare as p
            return p(spec, tensors, plan=ks.plan)
        from ..backend.attention.launch import prepare as p
        return p(spec, tensors, env, plan=ks.plan)
    return make


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / max(|want|, 1e-6) over finite wants; inf where got has a NaN that want has not."""
    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if g.shape != w.shape:
        return float("inf")
    if np.isnan(g).any() and not np.isnan(w).any():
        return float("inf")
    fin = np.isfinite(w)
    return float(np.abs(g[fin] - w[fin]).max(initial=0.0) / max(np.abs(w[fin]).max(initial=0.0), 1e-6))


def launch(item: Item) -> dict:
    """Compile the item, launch every kernel once on the GPU, compare with the CPU playback."""
    from ..ir.playback import playback
    from ..runtime.cuda import run_once
    from ..runtime.model import parameter_names, steps_of
    c, regions, ins = compile_item(item)
    kinds = [s.kind.name if s.kind else "playback" for s in steps_of(regions)]
    got = run_once(regions, ins, parameter_names(c.doc), _prepare(item))
    want = playback(regions, ins)
    err = max((rel_err(got[k], want[k]) for k in want), default=0.0)
    return {"item": item.name, "ok": err <= item.tolerance and item.kind in kinds, "kernels": kinds, "max_rel_err": err,
            "error": "" if item.kind in kinds else f"no {item.kind} region (got {kinds})"}


def main(argv: "list[str] | None" = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("item", nargs="?", choices=sorted(BY_NAME))
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args(argv)
    if a.list or not a.item:
        print("\n".join(f"{i.name}: {i.example} ({i.cost}) -> {i.kind}" + (f", {i.skeleton}" if i.skeleton else "")
                        for i in ITEMS))
        return 0
    try:
        res = launch(BY_NAME[a.item])
    except Exception as e:  # noqa: BLE001 - the report wants the reason, whatever failed
        res = {"item": a.item, "ok": False, "kernels": [], "max_rel_err": None, "error": f"{type(e).__name__}: {e}"}
    print(json.dumps(res), flush=True)
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
