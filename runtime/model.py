"""A model's regions run in order inside one memory arena, parameters in a constant pool (docs/DESIGN.md §Runtime).

:func:`steps_of` binds every region to its kernel kind (a region no kind takes keeps its E1504 diagnostic and
runs on the CPU: playback); :func:`plan_memory` gives every tensor of one shape set its place — parameters
(:func:`parameter_names`) a slot of the :class:`ConstPool`, every other tensor (uploaded inputs,
intermediates, outputs) an offset in the arena planned from its lifetime over the steps (:mod:`.arena`);
:func:`execute` runs the steps on a :class:`Memory`: the device's four operations (``alloc``, ``view``,
``copy_in``, ``copy_out``) and its kernel launch. The same code runs on the GPU (runtime/cuda.py) and on a
numpy byte arena (runtime/host.py), where a wrong plan corrupts values as it would on the device.
"""
from __future__ import annotations

import contextlib
import dataclasses
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from ..ir.diagnostics import Diagnostic, PolysatError, fail
from ..ir.dtypes import DType, round_to
from ..ir.region import Region
from .arena import ALIGN, ArenaPlan, Block, align, plan_arena


@dataclass(frozen=True)
class Step:
    """One region: its kernel kind and binding (backend/kinds.py ``Shared``: the spec of its canonical form, one per
    distinct kernel, and the way back to the region's tensors), or kind None and why (E1504, or None: played back
    by choice)."""
    region: Region
    kind: Any
    binding: Any

    @property
    def on_cpu(self) -> bool:
        return self.kind is None


def steps_of(regions, playback_only: bool = False) -> list[Step]:
    """Every region's kind and binding, known before anything runs; a binding error other than E1504 raises."""
    from ..backend.kinds import bind_shared
    out = []
    for r in regions:
        if playback_only:
            out.append(Step(r, None, None))
            continue
        try:
            out.append(Step(r, *bind_shared(r)))
        except PolysatError as e:
            if e.diagnostics[0].kind != "NoKernelTemplate":
                raise
            out.append(Step(r, None, e.diagnostics[0]))
    return out


def parameter_names(doc: Any) -> frozenset:
    """The model's weights: signature inputs with ``"role": "param"`` and an imported model's ``"parameters"``
    (ONNX initializers). A Tiny IR model has none."""
    if not isinstance(doc, dict):
        return frozenset()
    sig = doc.get("signature") if isinstance(doc.get("signature"), dict) else {}
    named = {e.get("tensor") for e in sig.get("inputs", ()) if isinstance(e, dict) and e.get("role") == "param"}
    return frozenset(n for n in named | set(doc.get("parameters") or ()) if isinstance(n, str))


def _concrete(shape, env: Mapping[str, int]) -> tuple:
    return tuple(int(d) if isinstance(d, int) else int(d.evaluate(env)) for d in shape)


@dataclass(frozen=True)
class MemoryPlan:
    """Where every tensor of one shape set lives: arena offsets (``arena``), parameters (``params``: name ->
    (shape, dtype)), the uploaded inputs and the outputs read back, in order."""
    env: dict
    arena: ArenaPlan
    tensors: dict   # name -> (shape, DType) of every arena tensor
    params: dict    # name -> (shape, DType)
    inputs: tuple   # arena tensors uploaded before the first step
    outputs: tuple  # program outputs read back after the last step

    def to_json(self) -> dict:
        return {"env": self.env, "arena": self.arena.to_json(),
                "params": {k: {"shape": list(s), "dtype": d.value} for k, (s, d) in self.params.items()},
                "inputs": list(self.inputs), "outputs": list(self.outputs)}


def plan_memory(steps: list[Step], env: Mapping[str, int], params: frozenset = frozenset()) -> MemoryPlan:
    """Lifetimes over the steps -> arena offsets: an input lives from before step 0 to its last reader, a
    region's output from its step to its last reader (to after the last step when it is a program output)."""
    n = len(steps)
    start: dict = {}
    end: dict = {}
    meta: dict = {}
    pmeta: dict = {}
    outputs: list = []
    for i, s in enumerate(steps):
        for b in s.region.inputs:
            shape, dt = _concrete(b.memref.shape, env), b.memref.dtype
            if b.name in params and b.name not in start:
                pmeta.setdefault(b.name, (shape, dt))
                continue
            start.setdefault(b.name, -1)
            end[b.name] = max(end.get(b.name, -1), i)
            meta.setdefault(b.name, (shape, dt))
        for b in s.region.outputs:
            start[b.name] = i
            end[b.name] = n if b.program_output else max(end.get(b.name, i), i)
            meta[b.name] = (_concrete(b.memref.shape, env), b.memref.dtype)
            if b.program_output and b.name not in outputs:
                outputs.append(b.name)
    nbytes = {k: int(np.prod(sh, dtype=np.int64)) * dt.itemsize for k, (sh, dt) in meta.items()}
    blocks = [Block(k, nbytes[k], start[k], end[k]) for k in meta]
    inputs = tuple(k for k in meta if start[k] == -1)
    return MemoryPlan(dict(env), plan_arena(blocks), meta, pmeta, inputs, tuple(outputs))


@dataclass
class Memory:
    """A device as the runner sees it: ``alloc(nbytes) -> buffer``, ``view(buffer, offset, shape, np dtype) ->
    tensor``, ``copy_in(tensor, host array)``, ``copy_out(tensor) -> host array`` and ``launch(kind, spec,
    tensors, env, out)`` (one kernel; ``tensors`` in the spec's shapes, ``out`` the output's view)."""
    alloc: Callable[[int], Any]
    view: Callable[[Any, int, tuple, np.dtype], Any]
    copy_in: Callable[[Any, np.ndarray], None]
    copy_out: Callable[[Any], np.ndarray]
    launch: Callable[[Any, Any, Mapping[str, Any], Mapping[str, int], Any], None]


@dataclass
class ConstPool:
    """Parameters placed once, packed and aligned, in one device buffer: a later call passing the same host
    array (the same object: parameters are immutable) does not copy it again."""
    slots: dict = field(default_factory=dict)    # name -> (offset, shape, DType)
    buffer: Any = None
    sources: dict = field(default_factory=dict)  # name -> the host array last copied in
    uploads: int = 0                             # copies made (for the tests and the log)

    def tensors(self, mem: Memory, want: Mapping[str, tuple], given: Mapping[str, Any]) -> dict:
        """Each wanted parameter's device tensor, copied in only when new or given as another array."""
        layout, off = {}, 0
        for name in sorted(want):
            shape, dt = want[name]
            layout[name] = (off, shape, dt)
            off += align(max(int(np.prod(shape, dtype=np.int64)) * dt.itemsize, 1))
        if layout != self.slots:  # another set of parameters (or shapes): a new pool
            self.slots, self.buffer, self.sources = layout, mem.alloc(max(off, ALIGN)), {}
        out = {}
        for name, (o, shape, dt) in layout.items():
            t = mem.view(self.buffer, o, shape, dt.np)
            if name not in given:
                fail("MissingInput", name, f"parameter {name!r} is not given")
            if self.sources.get(name) is not given[name]:
                mem.copy_in(t, _host(given[name], shape, dt, name))
                self.sources[name] = given[name]
                self.uploads += 1
            out[name] = t
        return out


def _host(x: Any, shape: tuple, dt: DType, name: str) -> np.ndarray:
    a = np.asarray(x)
    if a.size != int(np.prod(shape, dtype=np.int64)):
        fail("AxisSizeMismatch", name, f"{name!r} has shape {list(a.shape)}, the model reads {list(shape)}")
    return np.ascontiguousarray(round_to(a, dt).astype(dt.np)).reshape(shape)


def say_on_cpu(r: Region, why: Diagnostic) -> None:
    print(f"polysat: region {r.name} has no CUDA kernel ({why.code} {why.kind}: {why.why}); it runs on the CPU "
          "(playback) inside the same arena", file=sys.stderr)


@dataclass
class Arena:
    """The arena buffer of one shape set (kept: its addresses may be baked into a captured launch sequence)."""
    buffer: Any
    nbytes: int


def execute(steps: list[Step], mp: MemoryPlan, inputs: Mapping[str, Any], mem: Memory, arena: Arena,
            pool: ConstPool) -> dict[str, np.ndarray]:
    """Run the steps once: inputs copied into the arena, parameters from the pool, each kernel launched
    on its views, each CPU step played back on copies of its inputs and its outputs copied into the arena;
    the program outputs read back."""
    from ..ir.playback import _RegionRun
    env = mp.env
    views = pool.tensors(mem, mp.params, inputs)

    def at(name: str, shape: tuple | None = None) -> Any:
        if name in views and shape is None:
            return views[name]
        sh, dt = mp.tensors.get(name) or mp.params[name]
        base = mp.arena.offsets.get(name)
        if base is None:  # a parameter seen under another shape (size-1 dims): the same pool bytes
            return mem.view(pool.buffer, pool.slots[name][0], shape, dt.np)
        return mem.view(arena.buffer, base, sh if shape is None else shape, dt.np)

    for name in mp.inputs:
        if name not in inputs:
            fail("MissingInput", name, f"the model reads {name!r}, which is neither given nor written by a region")
        sh, dt = mp.tensors[name]
        mem.copy_in(at(name), _host(inputs[name], sh, dt, name))
    for s in steps:
        r = s.region
        if s.on_cpu:
            if isinstance(s.binding, Diagnostic):
                say_on_cpu(r, s.binding)
            host = {b.name: mem.copy_out(at(b.name, _concrete(b.memref.shape, env))) for b in r.inputs}
            with np.errstate(all="ignore"):
                made = _RegionRun(r, host, dict(env)).run()
            for b in r.outputs:
                mem.copy_in(at(b.name), np.ascontiguousarray(made[b.name]).reshape(mp.tensors[b.name][0]))
            continue
        spec = s.binding.spec
        shapes = spec.shapes(env)
        several = getattr(spec, "outputs", ())  # a SIMT kernel writing several outputs takes the others by name
        user = s.binding.user  # the spec's tensor names are its canonical form's: the region's tensor of each
        out = at(user(spec.c) if several else r.outputs[0].name, tuple(shapes[spec.c]))
        tensors = {**s.binding.arrays({b.name: at(b.name) for b in r.inputs}, env, _reshape),
                   **{n: at(user(n), tuple(shapes[n])) for n in several if n != spec.c}}
        with in_region(r.name, spec.name):
            mem.launch(s.kind, spec, tensors, env, out)
    return {name: mem.copy_out(at(name)) for name in mp.outputs}


@contextlib.contextmanager
def in_region(region: str, kernel: str):
    """A diagnostic raised while a region's kernel is prepared or launched names the region: kernels are shared
    by canonical form (their names, ``R0``.., are the form's), so the kernel's name alone does not say which
    region of the model failed."""
    try:
        yield
    except PolysatError as e:
        raise PolysatError([dataclasses.replace(d, why=f"{d.why} (region {region!r}, kernel {kernel!r})",
                                                details=d.details + (("region", region),))
                            for d in e.diagnostics]) from None


def _reshape(t: Any, shape) -> Any:
    """Another shape over the same packed bytes (numpy views and runtime/cuda.py's device views both reshape)."""
    return t.reshape(tuple(shape))


class ModelRuntime:
    """A model's steps on one device: per shape set (the symbols' values) its memory plan and its arena, kept
    for the next call with the same shapes; one constant pool for the parameters."""

    def __init__(self, steps: list[Step], mem: Memory, params: frozenset = frozenset()):
        self.steps, self.mem, self.params = list(steps), mem, frozenset(params)
        self.plans: dict = {}
        self.arenas: dict = {}
        self.pool = ConstPool()

    @property
    def regions(self) -> list[Region]:
        return [s.region for s in self.steps]

    def shape_set(self, inputs: Mapping[str, Any]) -> tuple:
        from ..ir.playback import bind_region_symbols
        return tuple(sorted(bind_region_symbols(self.regions, inputs).items()))

    def memory_plan(self, key: tuple) -> MemoryPlan:
        if key not in self.plans:
            self.plans[key] = plan_memory(self.steps, dict(key), self.params)
        return self.plans[key]

    def arena(self, key: tuple) -> Arena:
        if key not in self.arenas:
            peak = self.memory_plan(key).arena.peak
            self.arenas[key] = Arena(self.mem.alloc(max(peak, ALIGN)), peak)
        return self.arenas[key]

    def run(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        key = self.shape_set(inputs)
        return execute(self.steps, self.memory_plan(key), inputs, self.mem, self.arena(key), self.pool)
