"""``run --target cuda`` end to end (docs/DESIGN.md §Runtime): the compiled model at the inputs' shapes — from
the disk cache (runtime/cache.py) or compiled and stored there — run in one arena with its parameters in the
constant pool and its launch sequence captured as a CUDA Graph (runtime/cuda.py), then one measurement-log
row per kernel (runtime/measure.py).

A compiled model is the RB-SSA regions, the memory plan, and per kernel step its kind, Schedule Plan, Poly Core
price at the bound shapes and cubin; a region no kind takes is a playback step (its E1504 reason kept).
``compile_only`` builds and stores it without a GPU (cubins by NVRTC or nvcc for ``--arch``), so a GPU machine
sharing ``POLYSAT_MODEL_CACHE`` starts at once.
"""
from __future__ import annotations

import json
import os
import sys
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Mapping

from ..ir.diagnostics import fail
from ..ir.region import regions_json
from ..ir.region_load import regions_from_json
from ..ir.trampoline import json_text, json_value
from . import cache, measure
from .model import parameter_names, plan_memory, steps_of


@dataclass
class CompiledModel:
    key: str
    directory: str
    model: str             # the model's path (or "model")
    regions: list
    params: frozenset
    env: dict              # the bound symbols
    arch: str              # the skeleton family the kernels are planned for: sm80 | sm90
    kernels: list          # per region {"region", "ops", "kind", "spec", "name", "plan", "cubin"}; a CPU step:
    #                        {"region", "ops", "kind": "playback", "why"}
    prices: dict           # region -> Poly Core price (Cost.to_json) at env
    memory: dict           # MemoryPlan.to_json
    from_cache: bool

    def rows(self, actual_us: Mapping[str, float], source: str = "run") -> list[dict]:
        """One measurement-log row per kernel; actual_us maps a kernel's region name to its measured µs."""
        return [measure.row(source=source, model=self.model, kernel=k["region"], ops=k.get("ops", ()), kind=k["kind"],
                            arch=self.arch,
                            shapes=self.env, price=self.prices.get(k["region"]),
                            actual_us=actual_us.get(k["region"]) if k["kind"] != "playback" else None,
                            plan=k.get("plan") or {"target": "playback", "why": k.get("why", "")})
                for k in self.kernels]

    def summary(self) -> str:
        a = self.memory["arena"]
        n = sum(k["kind"] != "playback" for k in self.kernels)
        return (f"{n} kernel(s) for {self.arch}, {len(self.kernels) - n} on the CPU; arena {a['peak_bytes']} B for "
                f"{a['sum_of_sizes']} B of tensors; {len(self.params)} parameter(s) in the constant pool")


def _model_bytes(c) -> bytes:
    if os.path.isfile(c.origin):
        with open(c.origin, "rb") as f:
            return f.read()
    doc = {k: v for k, v in c.doc.items() if k != "parameters"} if isinstance(c.doc, dict) else c.doc
    return json.dumps(doc, sort_keys=True, default=str).encode()  # weights are inputs: they shape no kernel


def prices(c, env: Mapping[str, int], arch: str) -> dict:
    """Poly Core's price (Cost.to_json) of each kernel of compilation c at the sizes env on arch, by kernel name."""
    from ..pricing.kernels import price_kernels
    from ..pricing.symbols import bind_params, program_symbols
    x = c.extraction
    syms = set(program_symbols(c.program))
    params = bind_params(c.program, {k: v for k, v in env.items() if k in syms})
    return {p.kernel.name: p.cost.to_json() for p in price_kernels(x.program, x.partition, params, arch)
            if p.cost is not None}


def _arch_flag(arch: str, cc: tuple) -> str:
    from ..backend.common.kernel_cache import _gpu_arch_flag
    return _gpu_arch_flag(arch, arch, cc)


def compile_model(c, inputs: Mapping[str, Any], arch: str, cc: tuple) -> CompiledModel:
    """The compiled model of compilation c at the shapes of inputs for arch (cc: the compute capability the
    cubins are built for), from the cache when there; otherwise compiled (regions, plans, cubins) and stored."""
    from ..backend.common.kernel_cache import cubin_for, cubin_name, store_cubin
    from ..ir.playback import bind_region_symbols
    from .kernels import source
    key = cache.model_key(_model_bytes(c), inputs, _arch_flag(arch, cc),
                          {"cost": c.cost, "bind": c.bind, "rules": list(c.rules_dirs), "price_arch": c.arch})
    hit = _cached(key)
    if hit is not None:
        cm, cubins = hit
        for name, data in cubins.items():  # the runtime loads kernels from the kernel cache: no compiler runs
            store_cubin(name, data)
        return cm
    regions = c.regions
    steps = steps_of(regions)
    env = bind_region_symbols(regions, inputs)
    params = parameter_names(c.doc)
    from ..pipeline import kernels as user_kernels
    ops = {k["name"]: k["ops"] for k in user_kernels(c)}  # the user's op names each kernel computes
    kernels, cubins = [], {}
    for s in steps:
        if s.on_cpu:
            kernels.append({"region": s.region.name, "ops": ops.get(s.region.name, []), "kind": "playback",
                            "why": str(s.binding)})
            continue
        ks = source(s.kind.name, s.binding.spec, env, arch)
        name = cubin_name(ks, arch, cc)
        cubins[name] = cubin_for(ks, arch, cc)
        kernels.append({"region": s.region.name, "ops": ops.get(s.region.name, []), "kind": s.kind.name,
                        "spec": s.binding.spec.name, "name": ks.name,
                        "plan": ks.plan.to_json(ks.spec), "cubin": name})
    doc = {"model": c.origin, "arch": arch, "env": env, "params": sorted(params & _read(regions)),
           "regions": regions_json(regions), "memory": plan_memory(steps, env, params).to_json(),
           "kernels": kernels, "prices": prices(c, env, arch)}
    doc = json_value(json_text(doc, default=str))  # JSON types only (the regions nest as deep as a fused chain)
    try:
        directory = cache.store(key, doc, cubins)
    except OSError as e:  # the cache only saves time: the model still runs
        print(f"polysat: warning: the compiled model could not be stored in {cache.cache_dir()} ({e})", file=sys.stderr)
        directory = ""
    return _from_doc(key, directory, doc, False)


def _cached(key: str) -> "tuple[CompiledModel, dict] | None":
    """The stored entry of key as a compiled model with its cubins, or None (a miss: missing, or an entry that is
    not one, runtime/cache.py)."""
    hit = cache.load(key)
    if hit is None:
        return None
    doc, cubins = hit
    try:
        return _from_doc(key, os.path.join(cache.cache_dir(), key), doc, True), cubins
    except Exception:  # noqa: BLE001 — a damaged entry of the right schema is a miss too
        return None


def _read(regions) -> set:
    return {b.name for r in regions for b in r.inputs}


def _from_doc(key: str, directory: str, doc: dict, from_cache: bool) -> CompiledModel:
    return CompiledModel(key, directory, doc["model"], regions_from_json(json_value(json_text(doc["regions"]))),
                         frozenset(doc["params"]), dict(doc["env"]), doc["arch"], list(doc["kernels"]),
                         dict(doc["prices"]), dict(doc["memory"]), from_cache)


_RUNTIMES: "OrderedDict[str, Any]" = OrderedDict()  # compiled-model key -> its CudaRuntime in this process
KEEP_RUNTIMES = 8


def _runtime(cm: CompiledModel) -> Any:
    """The process's runtime of a compiled model: a later call (the Python API, the torch.compile backend) finds
    its arenas, constant pool and captured graphs."""
    from .cuda import CudaRuntime
    if cm.key not in _RUNTIMES:
        _RUNTIMES[cm.key] = CudaRuntime(cm.regions, cm.params)
        while len(_RUNTIMES) > KEEP_RUNTIMES:
            _RUNTIMES.popitem(last=False)
    _RUNTIMES.move_to_end(cm.key)
    return _RUNTIMES[cm.key]


def run_cuda_model(c, inputs: Mapping[str, Any], compile_only: bool = False) -> "dict | None":
    """`run --target cuda`: compile (or load) the model at the inputs' shapes and run it on the GPU; with
    compile_only, compile and store it (no GPU needed) and return None."""
    from ..backend.common.gpu import cuda_available, device
    gpu = cuda_available()
    if not gpu and not compile_only:
        fail("UnknownTarget", "--target cuda", "no CUDA GPU is visible (cuda-python, an NVIDIA driver and a device "
             "are needed)", "Run on a machine with an NVIDIA GPU (sm80 or newer), or use --target playback; "
             "--compile-only compiles the model into POLYSAT_MODEL_CACHE without a GPU.")
    if gpu:
        dev = device()
        arch, cc = dev.arch, dev.cc
    else:
        arch, cc = c.arch, ((9, 0) if c.arch == "sm90" else (8, 0))
    cm = compile_model(c, inputs, arch, cc)
    where = ("loaded from " if cm.from_cache else "stored in ") + cm.directory if cm.directory else "not stored"
    print(f"polysat: compiled model {where}: {cm.summary()}", file=sys.stderr)
    if compile_only:
        return None
    rt = _runtime(cm)
    outs = rt.run(inputs)
    try:
        path = measure.append(cm.rows(rt.actual_us(inputs)))
    except OSError as e:  # the log only records: the outputs still come back
        print(f"polysat: warning: the measurement log {measure.knobs.measure_log()} cannot be written "
              f"({e.strerror or e})", file=sys.stderr)
        path = None
    if path:
        print(f"polysat: {len(cm.kernels)} kernel measurement(s) appended to {path}", file=sys.stderr)
    return outs
