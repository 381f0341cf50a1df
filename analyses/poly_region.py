"""A candidate region in polyhedral form: the input of Poly Core and of the cost model (docs/DESIGN.md
§Poly Core, §Cost model).

A region (one kernel, docs/DESIGN.md §RB-SSA) is a sequence of statements. Each statement has a domain (an
isl set over named loop dims, symbols as parameters), reads and one write as isl maps to named
tensors, a FLOP count per instance and the unit that executes it. Tensors are region inputs and
outputs (materialized in device memory) or internal (``deferred``: handed on inside the kernel,
docs/DESIGN.md §RB-SSA synthesis step 8). The schedule is the statement sequence plus a loop order per
statement. Everything is text here (frozen, hashable, JSON-able); :meth:`PolyRegion.bind` parses
it once (cached) and fixes the symbols to concrete values, because footprints and bytes are
counted on concrete shapes (docs/DESIGN.md §Poly Core: tiles are never symbolic).

A streamed region (docs/DESIGN.md §Streaming: an online softmax-weighted sum, FlashAttention's recurrence) names in
``stream`` its running reductions (statements whose single reduce dim is the key axis): the kernel
advances that axis ``stream_block`` keys at a time and keeps only one block of every value computed
on the way (scores, probabilities) on chip, rescaling the running results as the max moves. A
two-pass stream (max and sum first, then P·V) runs the statements in ``stream_recompute`` (the
scores and their exponentials) once per pass.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Mapping, Sequence

import islpy as isl

from ..ir.diagnostics import PolysatError, fail
from ..ir.dtypes import DType
from ..ir.expr import Expr
from ..ir.shapes import Dim, dim as to_dim
from .isl_util import held_renamed, parse_renamed, rename_tuples, tuple_template, val_int, with_template

ROLES = ("input", "output", "internal")
# the datapaths of a region's contractions: the target's own MMA (""), fp32 operands as three tf32 MMAs per product on
# the sm80 skeleton ("tf32x3", backend/templates/polysat_gemm.cuh mma_step_tf32), or fp32 operands on the FP32 pipes
# although 3xTF32 could run them, priced cheaper there ("fp32": pricing/kernels.py as_emitted, ir/region.py fp32_pipes)
MMA_PATHS = ("", "tf32x3", "fp32")
UNITS = ("tensor", "fp32", "sfu")  # tensor cores (MMA), FP32 SIMT pipes, special-function unit
COMBINES = ("sum", "max", "min")


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple  # of Dim (int | Expr over the region's symbols)
    dtype: DType
    role: str  # "input" | "output" | "internal" (deferred)

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(to_dim(d) for d in self.shape))
        if self.role not in ROLES:
            fail("InvalidAttribute", f"tensor {self.name}", f"role {self.role!r} is not one of {ROLES}")


@dataclass(frozen=True)
class Access:
    tensor: str
    relation: str  # isl map text "{ S[dims] -> T[exprs] : guards }"

    def __post_init__(self):
        if isinstance(self.relation, isl.Map):
            object.__setattr__(self, "relation", str(self.relation))


@dataclass(frozen=True)
class Statement:
    name: str
    domain: str  # isl set text "[params] -> { S[dims] : constraints }"
    reads: tuple  # of Access
    write: Access
    flops: int = 1  # per instance
    unit: str = "fp32"
    combine: str | None = None  # "sum" | "max" | "min" when the write drops dims (a reduction)
    loop_order: tuple = ()  # dim names outermost first; () = the domain's order

    def __post_init__(self):
        if isinstance(self.domain, isl.Set):
            object.__setattr__(self, "domain", str(self.domain))
        object.__setattr__(self, "reads", tuple(self.reads))
        object.__setattr__(self, "loop_order", tuple(self.loop_order))
        if self.unit not in UNITS:
            fail("InvalidAttribute", f"statement {self.name}", f"unit {self.unit!r} is not one of {UNITS}")
        if self.combine is not None and self.combine not in COMBINES:
            fail("InvalidAttribute", f"statement {self.name}", f"combine {self.combine!r} is not one of {COMBINES}")


@dataclass(frozen=True)
class PolyRegion:
    name: str
    tensors: tuple  # of TensorInfo
    statements: tuple  # of Statement, in sequence (schedule) order
    params: tuple = ()  # ((symbol, value), ...) binding the symbols to a concrete shape
    stream: tuple = ()  # names of the running reductions of a streamed region (see the module docstring)
    stream_block: int = 64  # keys per step of the streamed reductions
    stream_recompute: tuple = ()  # statements a two-pass stream runs in both passes
    mma_path: str = ""  # its contractions' datapath (MMA_PATHS): "" the target's own, "tf32x3", "fp32"
    # an A prologue's row statistic summed as A's tiles land and applied to the accumulators' rows, no pass before
    # the main loop (the sm80 skeleton, A linear in it: backend/gemm/prologue.py in_loop; analyses/prologue_cone.py)
    stat_in_loop: bool = False

    def __post_init__(self):
        object.__setattr__(self, "tensors", tuple(self.tensors))
        object.__setattr__(self, "statements", tuple(self.statements))
        object.__setattr__(self, "stream", tuple(self.stream))
        object.__setattr__(self, "stream_recompute", tuple(self.stream_recompute))
        names = {s.name for s in self.statements}
        for s in self.stream + self.stream_recompute:
            if s not in names:
                fail("UnknownTensor", f"region {self.name}", f"streamed statement {s!r} is not one of its statements")
        if self.mma_path not in MMA_PATHS:
            fail("InvalidAttribute", f"region {self.name}", f"mma_path {self.mma_path!r} is not one of {MMA_PATHS}")
        if not isinstance(self.stream_block, int) or self.stream_block < 1:
            fail("InvalidAttribute", f"region {self.name}", f"stream_block must be a positive int, got {self.stream_block!r}")
        ps = self.params.items() if isinstance(self.params, Mapping) else self.params
        object.__setattr__(self, "params", tuple(sorted((str(k), int(v)) for k, v in ps)))

    def __hash__(self) -> int:  # regions key the analysis caches: hash once
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.name, self.tensors, self.statements, self.params, self.stream, self.stream_block,
                      self.stream_recompute, self.mma_path, self.stat_in_loop))
            object.__setattr__(self, "_hash", h)
        return h

    def tensor(self, name: str) -> TensorInfo:
        by_name = self.__dict__.get("_by_name")
        if by_name is None:
            by_name = {}
            for t in self.tensors:
                by_name.setdefault(t.name, t)
            object.__setattr__(self, "_by_name", by_name)
        t = by_name.get(name)
        if t is None:
            fail("UnknownTensor", f"region {self.name}", f"no tensor named {name!r}")
        return t

    def with_params(self, **values: int) -> "PolyRegion":
        return PolyRegion(self.name, self.tensors, self.statements, {**dict(self.params), **values}, self.stream,
                          self.stream_block, self.stream_recompute, self.mma_path, self.stat_in_loop)

    def bind(self) -> "BoundRegion":
        return _bind(self)

    def to_json(self) -> dict:
        return {"name": self.name, "params": dict(self.params),
                "tensors": [{"name": t.name, "shape": [str(d) for d in t.shape], "dtype": t.dtype.value,
                             "role": t.role} for t in self.tensors],
                "statements": [{"name": s.name, "domain": s.domain, "flops": s.flops, "unit": s.unit,
                                "combine": s.combine, "loop_order": list(s.loop_order),
                                "reads": [{"tensor": a.tensor, "map": a.relation} for a in s.reads],
                                "write": {"tensor": s.write.tensor, "map": s.write.relation}}
                               for s in self.statements],
                **({"stream": {"statements": list(self.stream), "block": self.stream_block,
                               "recompute": list(self.stream_recompute)}} if self.stream else {}),
                **({"mma_path": self.mma_path} if self.mma_path else {}),
                **({"stat_in_loop": True} if self.stat_in_loop else {})}

    @staticmethod
    def from_json(d: Mapping) -> "PolyRegion":
        """The region :meth:`to_json` wrote."""
        stream = d.get("stream", {})
        return PolyRegion(
            d["name"], [TensorInfo(t["name"], tuple(t["shape"]), DType(t["dtype"]), t["role"]) for t in d["tensors"]],
            [Statement(s["name"], s["domain"], tuple(Access(a["tensor"], a["map"]) for a in s["reads"]),
                       Access(s["write"]["tensor"], s["write"]["map"]), s["flops"], s["unit"], s["combine"],
                       tuple(s["loop_order"])) for s in d["statements"]],
            d.get("params", {}), tuple(stream.get("statements", ())), stream.get("block", 64),
            tuple(stream.get("recompute", ())), d.get("mma_path", ""), bool(d.get("stat_in_loop", False)))


# ---------------------------------------------------------------------------------------------
# Bound form: parsed isl objects, parameters fixed


@dataclass(frozen=True)
class BoundStatement:
    stmt: Statement
    index: int  # position in the sequence
    domain: isl.Set
    dims: tuple  # dim names in the domain's order
    loop_order: tuple
    reads: tuple  # of (tensor name, isl.Map restricted to the domain)
    write: isl.Map
    reduce_dims: tuple  # dims the write does not depend on
    used: tuple = ()  # (tensor, concrete shape) of every tensor it accesses
    generic: "tuple | None" = field(default=None, compare=False)  # :func:`generic` of it, made as it is bound

    @cached_property
    def name(self) -> str:
        return self.stmt.name

    @cached_property
    def parallel_dims(self) -> tuple:
        return tuple(d for d in self.loop_order if d not in self.reduce_dims)


@dataclass(frozen=True)
class BoundRegion:
    region: PolyRegion
    statements: tuple  # of BoundStatement
    shapes: dict  # tensor name -> concrete shape
    tensor_sets: dict  # tensor name -> isl.Set of its elements

    def stmt(self, name: str) -> BoundStatement:
        s = self._stmts.get(name)
        if s is None:
            fail("UnknownTensor", f"region {self.region.name}", f"no statement named {name!r}")
        return s

    @cached_property
    def domains(self) -> dict:
        """statement name -> its domain (every instance of the region)."""
        return {s.name: s.domain for s in self.statements}

    @cached_property
    def _stmts(self) -> dict:
        out: dict = {}
        for s in self.statements:
            out.setdefault(s.name, s)
        return out

    def writer(self, tensor: str) -> BoundStatement | None:
        return self._writers.get(tensor)

    def readers(self, tensor: str) -> list:
        return self._readers.get(tensor, [])

    def accesses(self, tensor: str) -> list:
        """(statement name, map) of every read and write of `tensor`."""
        return self._accesses.get(tensor, [])

    @cached_property
    def _writers(self) -> dict:
        return {s.stmt.write.tensor: s for s in self.statements}

    @cached_property
    def _readers(self) -> dict:
        out: dict = {}
        for s in self.statements:
            for t in dict.fromkeys(t for t, _ in s.reads):
                out.setdefault(t, []).append(s)
        return out

    @cached_property
    def _accesses(self) -> dict:
        out: dict = {}
        for s in self.statements:
            for t, m in list(s.reads) + [(s.stmt.write.tensor, s.write)]:
                out.setdefault(t, []).append((s.name, m))
        return out

    @cached_property
    def driver(self) -> BoundStatement:
        """The statement whose instances define the kernel's tiles: the last one writing a
        region output (docs/DESIGN.md §Fusion: the consumer drives, producers are computed at its tiles)."""
        outs = [s for s in self.statements if self.region.tensor(s.stmt.write.tensor).role == "output"]
        return (outs or list(self.statements))[-1]

    @cached_property
    def schedule_maps(self) -> dict:
        """statement name -> its schedule: sequence order, then its loop order, S -> [pos, d..., 0...]."""
        depth = max(len(s.dims) for s in self.statements)
        out = {}
        for s in self.statements:
            outs = [str(s.index)] + list(s.loop_order) + ["0"] * (depth - len(s.dims))
            out[s.name] = isl.Map(f"{{ {_tuple(s)} -> [{', '.join(outs)}] }}").intersect_domain(s.domain)
        return out

    @cached_property
    def schedule(self) -> isl.UnionMap:
        """Every statement's schedule (:attr:`schedule_maps`) in one union."""
        um = None
        for m in self.schedule_maps.values():
            um = isl.UnionMap.from_map(m) if um is None else um.union(isl.UnionMap.from_map(m))
        return um


def _tuple(s: BoundStatement) -> str:
    return f"{s.name}[{', '.join(s.dims)}]"


def _fix_params(obj, env: Mapping[str, int], what: str):
    """obj with every parameter fixed to env's value and then projected out."""
    space = obj.get_space()
    n = space.dim(isl.dim_type.param)
    for i in range(n):
        p = space.get_dim_name(isl.dim_type.param, i)
        if p not in env:
            fail("UnboundSymbol", what, f"symbol {p} has no value in the region's params")
        obj = obj.fix_val(isl.dim_type.param, i, isl.Val(int(env[p])))
    return obj.project_out(isl.dim_type.param, 0, n) if n else obj


def _parse(kind, text: str, what: str):
    try:
        return kind(text)
    except isl.Error as e:
        fail("NonAffineIndex", what, f"isl cannot parse {text!r}: {e}",
             "Write domains and accesses as isl text with affine (+ floordiv) expressions.")


def _parse_named(kind, text: str, what: str, src: str, dst: "str | None" = None):
    """``_parse(kind, text)`` where the text's tuple is named ``src`` (a map's range ``dst``), through
    ``isl_util.parse_renamed``: the statements of the candidate regions differ mostly by their canonical
    names (S3 here, S5 there), so few texts are really parsed."""
    obj = parse_renamed(kind, text, [src] if dst is None else [src, dst])
    return obj if obj is not None else _parse(kind, text, what)


def _reduce_dims(write: isl.Map, dims: Sequence[str]) -> tuple:
    """Dims along which two instances write the same element: the write ignores them."""
    same = write.apply_range(write.reverse())  # S -> S' writing the same cell
    deltas = same.deltas()
    if deltas.is_empty():
        return ()
    return tuple(d for k, d in enumerate(dims)
                 if (val_int(deltas.dim_min_val(k)), val_int(deltas.dim_max_val(k))) != (0, 0))


@lru_cache(maxsize=512)
def _bind(region: PolyRegion) -> BoundRegion:
    env = tuple(region.params)
    names = [t.name for t in region.tensors]
    if len(set(names)) != len(names):
        fail("DuplicateDefinition", f"region {region.name}", "a tensor name appears twice")
    shapes, tensor_sets = {}, {}
    for t in region.tensors:
        try:
            shape = _concrete(t.shape, env)
        except (KeyError, TypeError, ValueError) as e:
            fail("UnboundSymbol", f"tensor {t.name}", f"its shape {t.shape} needs a value for {e}")
        if any(s <= 0 for s in shape):
            fail("UnaddressableShape", f"tensor {t.name}", f"shape {shape} has a non-positive size")
        shapes[t.name] = shape
        tensor_sets[t.name] = _tensor_set(t.name, shape)
    written = [s.write.tensor for s in region.statements]
    if len(set(written)) != len(written):
        fail("DuplicateDefinition", f"region {region.name}", "two statements write one tensor (RB-SSA has one writer)")
    bound = []
    for i, st in enumerate(region.statements):
        for a in st.reads + (st.write,):
            region.tensor(a.tensor)
        used = tuple(sorted({(a.tensor, shapes[a.tensor]) for a in st.reads + (st.write,)}))
        *parts, gen = _bind_statement(region.name, st, env, used)
        bound.append(BoundStatement(st, i, *parts, used=used, generic=gen))
    for name in names:
        t = region.tensor(name)
        if t.role == "input" and name in written:
            fail("DuplicateDefinition", f"tensor {name}", "a region input is also written inside the region")
        if t.role != "input" and name not in written:
            fail("OutputNeverProduced", f"tensor {name}", f"{t.role} tensor is never written in region {region.name}")
    return BoundRegion(region, tuple(bound), shapes, tensor_sets)


@lru_cache(maxsize=4096)
def _concrete(shape: tuple, env: tuple) -> tuple:
    """A tensor's shape with the region's symbols given their values (kept: the regions of a search repeat them)."""
    return tuple(int(Expr.of(d).evaluate(dict(env))) for d in shape)


@lru_cache(maxsize=4096)
def _tensor_set(name: str, shape: tuple) -> isl.Set:
    return _box(shape).set_tuple_name(name)


@lru_cache(maxsize=4096)
def _box(shape: tuple) -> isl.Set:
    """The elements of a tensor of this shape, its tuple unnamed (parsed once per shape)."""
    axes = [f"a{i}" for i in range(len(shape))]
    cs = " and ".join(f"0 <= {a} < {s}" for a, s in zip(axes, shape, strict=True))
    return isl.Set(f"{{ [{', '.join(axes)}]" + (f" : {cs} }}" if cs else " }"))


@lru_cache(maxsize=8192)
def _bind_statement(region_name: str, st: Statement, env_key: tuple, used: tuple) -> tuple:
    """(domain, dims, loop order, reads, write, reduce dims, :func:`generic` form) of one statement with the symbols fixed
    (`used`: (tensor, concrete shape) of every tensor it accesses). isl work is the slow part of
    binding, and one statement recurs in many candidate regions, under other canonical names (S3 here,
    S5 there): it is bound once per text and shapes with its statement and tensor names as placeholders,
    then named. A statement that fails is bound again under its own names, so the diagnostic names it."""
    gen = _generic(st, used)
    if gen is None:
        return (*_bind_named(region_name, st, env_key, used), gen)
    gst, gused, tensors = gen
    try:
        dom, dims, order, reads, write, rdims = _bind_generic(gst, env_key, gused)
    except PolysatError:
        return (*_bind_named(region_name, st, env_key, used), gen)

    def named(m, tensor: str):  # held with the generic map's text renamed: never printed (isl_util.held_renamed)
        out = m.set_tuple_name(isl.dim_type.in_, st.name).set_tuple_name(isl.dim_type.out, tensor)
        return held_renamed(m, out, {_STMT: st.name, m.get_tuple_name(isl.dim_type.out): tensor})
    return (held_renamed(dom, dom.set_tuple_name(st.name), {_STMT: st.name}), dims, order,
            tuple((tensors[t], named(m, tensors[t])) for t, m in reads), named(write, st.write.tensor), rdims, gen)


def renamed(region: PolyRegion, ren: Mapping[str, str], name: str) -> PolyRegion:
    """region named ``name``, its statement and tensor names (and the tuple names of its texts) mapped by ``ren``
    (names it lacks stay); every name is an identifier, as isl prints them."""
    def sub(text: str) -> str:
        parts = tuple_template(text)
        return with_template(tuple(p if k % 2 == 0 else ren.get(p, p) for k, p in enumerate(parts)))

    def acc(a: Access) -> Access:
        return Access(ren.get(a.tensor, a.tensor), sub(a.relation))
    tensors = tuple(TensorInfo(ren.get(t.name, t.name), t.shape, t.dtype, t.role) for t in region.tensors)
    stmts = tuple(Statement(ren.get(s.name, s.name), sub(s.domain), tuple(acc(a) for a in s.reads), acc(s.write), s.flops,
                            s.unit, s.combine, s.loop_order) for s in region.statements)
    return PolyRegion(name, tensors, stmts, region.params, tuple(ren.get(x, x) for x in region.stream), region.stream_block,
                      tuple(ren.get(x, x) for x in region.stream_recompute), region.mma_path, region.stat_in_loop)


_STMT = "polysat_s"


def generic(s: BoundStatement) -> "tuple | None":
    """(the statement with its name and tensor names as placeholders, its tensors' shapes likewise, placeholder ->
    tensor): equal for one statement met under other names in other regions, so a fact of its bound form that no
    name changes can be kept once; None when it has no such form."""
    return s.generic


def _generic(st: Statement, used: tuple) -> "tuple | None":
    """(st with its name and tensor names as placeholders, used likewise, placeholder -> tensor), or None
    when a placeholder could be confused with a name of the texts."""
    accs = st.reads + (st.write,)
    texts = [st.domain] + [a.relation for a in accs]
    ph = {t: f"polysat_t{k}" for k, t in enumerate(dict.fromkeys(a.tensor for a in accs))}
    if st.name in ph or any("polysat_" in x for x in texts + [st.name] + list(ph)):
        return None
    ren = {st.name: _STMT, **ph}
    if rename_tuples("", ren) is None:  # a name that is no identifier: bound as it is
        return None
    gst = Statement(_STMT, rename_tuples(st.domain, ren),
                    tuple(Access(ph[a.tensor], rename_tuples(a.relation, ren)) for a in st.reads),
                    Access(ph[st.write.tensor], rename_tuples(st.write.relation, ren)), st.flops, st.unit, st.combine,
                    st.loop_order)
    return gst, tuple(sorted((ph[t], shape) for t, shape in used)), {v: k for k, v in ph.items()}


@lru_cache(maxsize=8192)
def _bind_generic(gst: Statement, env_key: tuple, gused: tuple) -> tuple:
    return _bind_named("", gst, env_key, gused)


def _bind_named(region_name: str, st: Statement, env_key: tuple, used: tuple) -> tuple:
    env, shapes = dict(env_key), dict(used)
    what = f"statement {st.name} of region {region_name}"
    dom = _fix_params(_parse_named(isl.Set, st.domain, what, st.name), env, what)
    if dom.get_tuple_name() != st.name:
        fail("MalformedStructure", what, f"the domain's tuple is {dom.get_tuple_name()!r}, not {st.name!r}")
    dims = tuple(dom.get_dim_name(isl.dim_type.set, k) for k in range(dom.dim(isl.dim_type.set)))
    if any(d is None for d in dims):
        fail("MalformedStructure", what, "every domain dim needs a name")
    order = st.loop_order or dims
    if sorted(order) != sorted(dims):
        fail("InvalidPermutation", what, f"loop order {order} is not a permutation of the dims {dims}")

    def acc(a: Access):
        m = _fix_params(_parse_named(isl.Map, a.relation, what, st.name, a.tensor), env, what)
        if m.get_tuple_name(isl.dim_type.out) != a.tensor:
            fail("UnknownTensor", what, f"access {a.relation!r} targets {m.get_tuple_name(isl.dim_type.out)!r}, "
                                        f"declared as {a.tensor!r}")
        if m.get_tuple_name(isl.dim_type.in_) != st.name or m.dim(isl.dim_type.in_) != len(dims):
            fail("MalformedStructure", what, f"access {a.relation!r} does not start from {st.name}{list(dims)}")
        m = m.intersect_domain(dom)
        if not m.range().is_subset(_tensor_set(a.tensor, shapes[a.tensor])):
            fail("OutOfBoundsView", what, f"access to {a.tensor} leaves its shape {shapes[a.tensor]}",
                 "Guard padded reads in the access map (e.g. `: 0 <= h + r - 1 < H`).")
        return m
    reads = tuple((a.tensor, acc(a)) for a in st.reads)
    write = acc(st.write)
    if not write.is_single_valued():
        fail("MalformedStructure", what, "the write must give one element per instance")
    rdims = _reduce_dims(write, dims)
    if rdims and st.combine is None:
        fail("AccDtypeMissing", what, f"the write drops dims {rdims} but the statement names no combine op",
             "Set combine='sum'|'max'|'min' on a reducing statement.")
    return dom, dims, tuple(order), reads, write, rdims


def box_domain(name: str, dims: Sequence[str], sizes: Sequence[Dim], params: Sequence[str] = ()) -> str:
    """The isl text of a rectangular domain ``name[dims] : 0 <= d < size``."""
    cs = " and ".join(f"0 <= {d} < {Expr.of(s).to_isl()}" for d, s in zip(dims, sizes, strict=True))
    pre = f"[{', '.join(params)}] -> " if params else ""
    return f"{pre}{{ {name}[{', '.join(dims)}] : {cs} }}"


__all__ = ["TensorInfo", "Access", "Statement", "PolyRegion", "BoundRegion", "BoundStatement", "box_domain",
           "PolysatError"]
