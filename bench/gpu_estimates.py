"""The extraction cost model's price beside each GPU bench row, computed without a GPU (the GPU check's
``--merge``, bench/gpu_check.py).

A bench row carries the plan search's roofline estimate of the kernel it launched (``estimate_us``). This adds
the price the cost model (``--cost model``: Poly Core's price of each region, docs/DESIGN.md §Cost model) gives
the same computation written as a model — the GEMM, GEMM + bias + ReLU, conv, conv + bias + ReLU + max-pool,
attention or SIMT case as a Frontend IR document at the row's shapes and dtype, compiled for sm90 — as
``model_us`` (the sum over the model's kernels) with ``model_kernels`` and ``model_over_measured`` = model_us /
polysat's measured time. Nothing here needs a GPU, so the device's minutes go to measuring.
"""
from __future__ import annotations

import os
from functools import lru_cache
from typing import Any, Mapping

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def _doc(inputs: Mapping[str, tuple], graph: list, out: str, out_shape: list, dt: str, params=()) -> dict:
    return {"signature": {"inputs": [{"tensor": n, **({"role": "param"} if n in params else {})} for n in inputs],
                          "outputs": [{"tensor": out}]},
            "tensors": {**{n: {"dtype": dt, "shape": list(s)} for n, s in inputs.items()},
                        out: {"dtype": dt, "shape": out_shape}},
            "graph": graph}


def gemm_doc(m: int, n: int, k: int, dt: str, bias_relu: bool) -> dict:
    graph = [{"op": "GEMM", "name": "gemm", "inputs": ["A", "B"], "outputs": ["C0"], "attrs": {"acc_dtype": "fp32"}}]
    ins = {"A": (m, k), "B": (k, n)}
    if bias_relu:
        ins["bias"] = (n,)
        graph += [{"op": "Elementwise", "name": "bias_add", "fn": "add", "inputs": ["C0", "bias"], "outputs": ["C1"]},
                  {"op": "Elementwise", "name": "relu", "fn": "relu", "inputs": ["C1"], "outputs": ["C2"]}]
    return _doc(ins, graph, graph[-1]["outputs"][0], [m, n], dt, params=("bias",))


def conv_doc(row: Mapping[str, Any]) -> dict:
    n, c, hw, co, k, s = (row[f] for f in ("n", "c", "hw", "co", "k", "stride"))
    pad = (k - 1) // 2 if row.get("pad") is None else row["pad"]
    pool = row.get("pool")
    conv = {"op": "Conv2D", "name": "conv", "inputs": ["X", "W"] + (["b"] if pool else []), "outputs": ["Y"],
            "attrs": {"stride": [s, s], "pad": [pad] * 4, "acc_dtype": "fp32"}}
    ins = {"X": (n, c, hw, hw), "W": (co, c, k, k), **({"b": (co,)} if pool else {})}
    ho = (hw + 2 * pad - k) // s + 1
    if not pool:
        return _doc(ins, [conv], "Y", [n, co, ho, ho], row["dtype"], params=("W",))
    pk, ps, pp = pool
    hp = (ho + 2 * pp - pk) // ps + 1
    graph = [conv, {"op": "Elementwise", "name": "relu", "fn": "relu", "inputs": ["Y"], "outputs": ["R"]},
             {"op": "MaxPool2D", "name": "pool", "inputs": ["R"], "outputs": ["P"],
              "attrs": {"kernel": [pk, pk], "stride": [ps, ps], "pad": [pp] * 4}}]
    return _doc(ins, graph, "P", [n, co, hp, hp], row["dtype"], params=("W", "b"))


def attention_doc(row: Mapping[str, Any]) -> dict:
    shape = (row["batch"], row["heads"], row["seq"], row["d"])
    graph = [{"op": "Attention", "name": "attn", "inputs": ["Q", "K", "V"], "outputs": ["O"],
              "attrs": {"causal": bool(row["causal"])}}]
    return _doc({"Q": shape, "K": shape, "V": shape}, graph, "O", list(shape), row["dtype"])


def model_of(row: Mapping[str, Any]) -> "tuple[Any, dict] | None":
    """(Frontend IR document, symbol sizes) of a bench row's computation; None for a row of another bench."""
    b = row["bench"]
    if b in ("gemm", "gemm_bias_relu"):
        return gemm_doc(row["m"], row["n"], row["k"], row["dtype"], b == "gemm_bias_relu"), {}
    if b in ("conv", "conv_relu_maxpool"):
        return conv_doc(row), {}
    if b == "attention":
        return attention_doc(row), {}
    if b == "simt":
        from polysat.bench.simt import cases
        for c in cases(False) + cases(True):
            if row["case"] == f"{c['name']} " + "x".join(f"{k}{v}" for k, v in c["bind"].items()):
                return c["model"], dict(c["bind"])
    return None


@lru_cache(maxsize=None)
def _price(doc_key: str, bind_key: tuple, arch: str) -> tuple[float, int]:
    import json

    from polysat.pipeline import Compilation
    from polysat.runtime.compiled import prices
    doc = json.loads(doc_key) if doc_key.startswith("{") else doc_key
    c = Compilation(doc, arch=arch, cost="model", bind=dict(bind_key) or None)
    got = prices(c, dict(bind_key), arch)
    return float(sum(p.get("time_est_us", 0.0) for p in got.values())), len(c.regions)


def model_us(row: Mapping[str, Any], arch: str = "sm90") -> "tuple[float, int] | None":
    """(the cost model's µs for the row's computation, its kernel count), None where the row has no model."""
    import json
    got = model_of(row)
    if got is None:
        return None
    doc, bind = got
    key = doc if isinstance(doc, str) else json.dumps(doc, sort_keys=True)
    return _price(key, tuple(sorted(bind.items())), arch)


def add_model_estimates(rows: list[dict], arch: str = "sm90", say=print) -> int:
    """Add ``model_us``, ``model_kernels`` and ``model_over_measured`` to every ok row that has a model (an error
    is recorded as ``model_error``); the number of rows priced."""
    n = 0
    for r in rows:
        if r.get("status") != "ok":
            continue
        try:
            got = model_us(r, arch)
        except Exception as e:  # noqa: BLE001 - the row keeps its measurement, the reason is kept beside it
            r["model_error"] = f"{type(e).__name__}: {e}"[:500]
            continue
        if got is None:
            continue
        r["model_us"], r["model_kernels"] = got
        r["model_over_measured"] = got[0] / (r["polysat_ms"] * 1e3) if got[0] else None
        n += 1
        say(f"{r['bench']} {r['case']}: cost model {got[0]:.1f} us in {got[1]} kernel(s)")
    return n
