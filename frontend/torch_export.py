"""torch.export programs in: core ATen (after ``run_decompositions()``) -> a Frontend IR document.

Each ATen op is mapped onto the ONNX op handlers (:mod:`.onnx_ops`) through ``Importer.call``, so both
importers share one translation of every op (its attributes, dtype rules and diagnostics). User inputs
become the signature; parameters, buffers and lifted constants are constants (materialized as
parameters, exactly as ONNX initializers are). An ATen op without a mapping, or an argument value a
mapping cannot honour, is E1102 naming the FX node and the op.
"""
from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ..ir.diagnostics import fail
from ..ir.dtypes import DType
from . import torch_aten_nn  # noqa: F401  (the layers' mappings: convolutions, norms, pools, resizes)
from .onnx import Importer
from .onnx_table import i64 as _i64
from .torch_aten import ATEN, Call, aten, written_at


def _binary(onnx_op: str, **attrs):
    def fn(c: Call, a, b, alpha=1):
        a, b = _promoted(c, a, b)
        if alpha != 1:
            b = c.onnx("Mul", [b, c.like(alpha, b if isinstance(b, str) else a)])
        return c.onnx(onnx_op, [a, b], **attrs)
    return fn


def _promoted(c: Call, a, b) -> tuple:
    """Operands a and b (tensors or Python scalars) in the dtype torch computes them in (``torch.result_type``), as
    ONNX's binary ops take one dtype: int64 positions times fp32 slopes (BLOOM's alibi), integers times a float
    scalar, fp16 and fp32 values. int32 and int64 are both i32 here; a scalar takes the tensor's dtype."""
    import torch
    proxy = lambda v: torch.empty((0,) * len(c.shape(v)), dtype=_torch_of(c.np_dtype(v))) if isinstance(v, str) \
        else v  # noqa: E731
    to = torch.result_type(proxy(a), proxy(b))

    def cast(v):
        have = _torch_of(c.np_dtype(v)) if isinstance(v, str) else to
        if have == to or {have, to} <= {torch.int32, torch.int64}:
            return v
        return c.onnx("Cast", [v], to=_onnx_dtype(c, to))
    a, b = cast(a), cast(b)

    def scalar(v, other):  # in the other tensor's dtype (or, between two scalars, the result's)
        return v if isinstance(v, str) else c.like(v, other) if isinstance(other, str) else \
            np.asarray(v, dtype=_np_dtype(to, v))
    return scalar(a, b), scalar(b, a)


def _torch_of(np_dtype):
    import torch
    import ml_dtypes
    return {np.dtype(np.float32): torch.float32, np.dtype(np.float16): torch.float16, np.dtype(np.int32): torch.int32,
            np.dtype(np.int64): torch.int64, np.dtype(np.bool_): torch.bool, np.dtype(np.float64): torch.float64,
            np.dtype(ml_dtypes.bfloat16): torch.bfloat16}[np.dtype(np_dtype)]


for _n, _o in (("add", "Add"), ("sub", "Sub"), ("mul", "Mul"), ("div", "Div"), ("maximum", "Max"), ("minimum", "Min"),
               ("eq", "Equal"), ("ne", None), ("lt", "Less"), ("le", "LessOrEqual"), ("gt", "Greater"),
               ("ge", "GreaterOrEqual"), ("pow", "Pow"), ("logical_and", "And"), ("logical_or", "Or")):
    if _o:
        aten(f"aten.{_n}.Tensor", f"aten.{_n}.Scalar", f"aten.{_n}.Tensor_Scalar", f"aten.{_n}.Tensor_Tensor",
             f"aten.{_n}.default")(_binary(_o))


aten("aten.remainder.Tensor", "aten.remainder.Scalar", "aten.remainder.Scalar_Tensor")(_binary("Mod", fmod=0))
aten("aten.fmod.Tensor", "aten.fmod.Scalar")(_binary("Mod", fmod=1))


@aten("aten.div.Tensor", "aten.div.Scalar", "aten.div.Tensor_mode", "aten.div.Scalar_mode",
      "aten.floor_divide.default")
def div(c: Call, a, b, rounding_mode=None):
    """torch's division: true division (of integers too: a float, which ONNX's integer Div is not), or rounded toward
    0 (``trunc``: ONNX's integer Div) or toward -inf (``floor``, ``//``: integers exactly as (a - a mod b) / b)."""
    mode = "floor" if c.op == "aten.floor_divide.default" else rounding_mode
    out = c.node.meta["val"].dtype if "val" in c.node.meta else None
    if mode is None:  # integers divided as the result's floats
        a, b = (_as_result(c, v) if isinstance(v, str) else v for v in (a, b))
    q = _binary("Div")(c, a, b)
    if mode is None or out is None or not out.is_floating_point and mode == "trunc":
        return q
    if out.is_floating_point:
        return c.onnx("Floor", [q]) if mode == "floor" else \
            c.onnx("Where", [c.onnx("Less", [q, c.like(0, q)]), c.onnx("Ceil", [q]), c.onnx("Floor", [q])])
    rest = _binary("Mod", fmod=0)(c, a, b)  # the sign of b: a - rest is a multiple of b
    return _binary("Div")(c, _binary("Sub")(c, a, rest), b)


@aten("aten.ne.Tensor", "aten.ne.Scalar")
def ne(c: Call, a, b):
    return c.onnx("Not", [_binary("Equal")(c, a, b)])


_UNARY = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "exp": "Exp", "log": "Log", "sqrt": "Sqrt",
          "reciprocal": "Reciprocal", "neg": "Neg", "abs": "Abs", "erf": "Erf", "logical_not": "Not", "sign": "Sign",
          "isnan": "IsNaN", "sin": "Sin", "cos": "Cos", "floor": "Floor", "ceil": "Ceil", "round": "Round"}
for _n, _o in _UNARY.items():
    aten(f"aten.{_n}.default")(lambda c, x, _o=_o: c.onnx(_o, [_as_result(c, x)]))


def _as_result(c: Call, x: str) -> str:
    """x cast to the node's float result where x is not a float (``torch.sqrt(torch.tensor(8))``, RAFT's scale:
    torch computes a float function of integers in floats)."""
    want = c.node.meta["val"].dtype if "val" in c.node.meta else None
    if want is None or not want.is_floating_point or np.issubdtype(c.np_dtype(x), np.floating) or \
            c.np_dtype(x) == _np_dtype(want, 0.0):
        return x
    return c.onnx("Cast", [x], to=_onnx_dtype(c, want))


@aten("aten.bitwise_not.default", "aten.bitwise_and.Tensor", "aten.bitwise_or.Tensor", "aten.bitwise_xor.Tensor")
def bitwise(c: Call, x, y=None):
    if c.imp.uop(c.imp.value(x, c.name)).dtype != DType.bool:
        c.unsupported("bitwise ops on integers (polysat takes them on bool only)")
    if y is None:
        return c.onnx("Not", [x])
    return c.onnx({"and": "And", "or": "Or", "xor": "Xor"}[c.op.split("_")[1].split(".")[0]], [x, y])


@aten("aten.rsqrt.default")
def rsqrt(c: Call, x):
    return c.onnx("Reciprocal", [c.onnx("Sqrt", [_as_result(c, x)])])


@aten("aten.log1p.default")
def log1p(c: Call, x):  # log(1 + x), as ONNX exporters write it (no Log1p op: x below fp32's epsilon gives 0)
    x = _as_result(c, x)
    return c.onnx("Log", [c.onnx("Add", [x, c.like(1, x)])])


@aten("aten.copy.default")
def copy(c: Call, dst, src, non_blocking=False):
    """The functional copy: src in dst's dtype, broadcast to dst's shape (dst's values are not read)."""
    src = c.like(src, dst)
    if isinstance(src, str):
        src = c.onnx("Cast", [src], to=_onnx_dtype(c, c.node.meta["val"].dtype))
    return c.onnx("Expand", [src, _i64(c.shape(dst))])


@aten("aten.slice_scatter.default")
def slice_scatter(c: Call, x, src, dim=0, start=None, end=None, step=1):
    """x with its [start:end] slice along dim replaced by src: the slices of x around it and src, concatenated
    (a step other than 1 is refused)."""
    if step != 1:
        c.unsupported(f"slice_scatter with step {step} (polysat writes a slice of step 1 only)")
    n = c.shape(x)[dim]
    if not isinstance(n, int):
        c.unsupported(f"slice_scatter along a symbolic dim {n}")
    lo = 0 if start is None else (start + n if start < 0 else min(start, n))
    hi = n if end is None else (end + n if end < 0 else min(end, n))
    hi = max(lo, hi)
    parts = [c.onnx("Slice", [x, _i64([a]), _i64([b]), _i64([dim])]) for a, b in ((0, lo),) if b > a]
    parts.append(src)
    parts += [c.onnx("Slice", [x, _i64([a]), _i64([b]), _i64([dim])]) for a, b in ((hi, n),) if b > a]
    return parts[0] if len(parts) == 1 else c.onnx("Concat", parts, axis=int(dim))


@aten("aten.gelu.default")
def gelu(c: Call, x, approximate="none"):
    return c.onnx("Gelu", [x], approximate=approximate)


@aten("aten.silu.default")
def silu(c: Call, x):
    return c.onnx("Mul", [x, c.onnx("Sigmoid", [x])])


@aten("aten.clamp.default", "aten.clamp.Tensor")
def clamp(c: Call, x, min=None, max=None):  # noqa: A002 — ATen's argument names
    return c.onnx("Clip", [x, None if min is None else c.like(min, x), None if max is None else c.like(max, x)])


@aten("aten.where.self")
def where(c: Call, cond, a, b):
    ref = a if isinstance(a, str) else b
    return c.onnx("Where", [cond, c.like(a, ref), c.like(b, ref)])


@aten("aten._to_copy.default")
def to_copy(c: Call, x, dtype=None, **kw):
    if dtype is None:
        return c.onnx("Identity", [x])
    return c.onnx("Cast", [x], to=_onnx_dtype(c, dtype))


@aten("aten.clone.default", "aten.alias.default", "aten.detach.default", "aten.lift_fresh_copy.default")
def identity(c: Call, x, **kw):
    return c.onnx("Identity", [x])


@aten("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default")
def view(c: Call, x, shape):
    return c.onnx("Reshape", [x, _i64(shape)])


@aten("aten.permute.default")
def permute(c: Call, x, dims):
    return c.onnx("Transpose", [x], perm=list(dims))


@aten("aten.expand.default")
def expand(c: Call, x, shape, implicit=False):
    xs = c.shape(x)
    full = [xs[k - (len(shape) - len(xs))] if d == -1 else d for k, d in enumerate(shape)]
    return c.onnx("Expand", [x, _i64(full)])


@aten("aten.repeat.default")
def repeat(c: Call, x, repeats):
    """x tiled ``repeats`` times per dim (more repeats than dims: leading dims of 1 first), ONNX Tile."""
    xs = c.shape(x)
    if len(repeats) > len(xs):
        x = c.onnx("Reshape", [x, _i64([1] * (len(repeats) - len(xs)) + list(xs))])
    return c.onnx("Tile", [x, _i64(repeats)])


@aten("aten.unsqueeze.default")
def unsqueeze(c: Call, x, dim):
    return c.onnx("Unsqueeze", [x, _i64([dim])])


@aten("aten.squeeze.dims", "aten.squeeze.dim", "aten.squeeze.default")
def squeeze(c: Call, x, dims=None):
    if dims is None:
        return c.onnx("Squeeze", [x])
    xs = c.shape(x)
    dims = [d for d in (dims if isinstance(dims, (list, tuple)) else [dims]) if xs[d] == 1]
    return c.onnx("Squeeze", [x, _i64(dims)]) if dims else c.onnx("Identity", [x])


@aten("aten.slice.Tensor")
def slice_(c: Call, x, dim=0, start=None, end=None, step=1):
    return c.onnx("Slice", [x, _i64([start or 0]), _i64([2**62 if end is None else end]), _i64([dim]),
                            _i64([step])])


@aten("aten.select.int")
def select(c: Call, x, dim, index):
    return c.onnx("Gather", [x, np.asarray(index, dtype=np.int64)], axis=int(dim))


@aten("aten.cat.default")
def cat(c: Call, xs, dim=0):
    return c.onnx("Concat", list(xs), axis=int(dim))


@aten("aten.split_with_sizes.default")
def split(c: Call, x, sizes, dim=0):
    return tuple(c.onnx("Split", [x, _i64(sizes)], n_out=len(sizes), axis=int(dim)))


@aten("aten.constant_pad_nd.default")
def pad(c: Call, x, pads, value=0.0):
    rank = len(c.shape(x))
    begins, ends = [0] * rank, [0] * rank
    for k in range(len(pads) // 2):  # torch lists (last-axis lo, hi), then the axis before, ...
        begins[rank - 1 - k], ends[rank - 1 - k] = pads[2 * k], pads[2 * k + 1]
    return c.onnx("Pad", [x, _i64(begins + ends), c.like(value, x)])


RUN_TIME = type("RunTime", (), {"__repr__": lambda self: "RUN_TIME", "__doc__": "a scalar known at run time only"})()


@aten("aten._local_scalar_dense.default")
def item(c: Call, x):
    """``t.item()`` of a computed tensor (XLM's ``assert lengths.max().item() <= slen``): a value polysat carries only
    into the checks torch.export records (``assertion``); any other reader is refused."""
    return RUN_TIME


@aten("aten.sym_size.int")
def sym_size(c: Call, x, dim):
    """A size torch.export left symbolic (a mask's count, say) that the import knows."""
    n = c.shape(x)[int(dim)]
    if not isinstance(n, int):
        c.unsupported(f"size {dim} of a tensor of symbolic shape {list(c.shape(x))}")
    return n


@aten("aten._assert_tensor_metadata.default", "aten._assert_scalar.default", "aten._assert_async.msg",
      "aten.sym_constrain_range_for_size.default")
def assertion(c: Call, *args, **kw):
    """A check torch.export records about shapes and dtypes it traced (the import checks them itself): nothing
    to compute."""
    return None


@aten("aten.arange.start_step", "aten.arange.start", "aten.arange.default")
def arange(c: Call, start, end=None, step=1, dtype=None, **kw):
    """A constant (position ids, masks): folded wherever it meets other constants."""
    if end is None:
        start, end = 0, start
    name = c.imp.fresh(c.name)
    floats = any(isinstance(v, float) for v in (start, end, step))
    c.imp.consts[name] = np.arange(start, end, step, dtype=_np_dtype(dtype, 1.0 if floats else 1))
    return name


@aten("aten.hardtanh.default")
def hardtanh(c: Call, x, min_val=-1.0, max_val=1.0):
    return c.onnx("Clip", [x, c.like(min_val, x), c.like(max_val, x)])


@aten("aten.cumsum.default")
def cumsum(c: Call, x, dim, dtype=None):
    y = c.onnx("CumSum", [x, np.asarray(dim, dtype=np.int64)])
    return y if dtype is None else c.onnx("Cast", [y], to=_onnx_dtype(c, dtype))


@aten("aten.any.dim", "aten.any.dims", "aten.any.default")
def any_(c: Call, x, dim=None, keepdim=False):
    """True where some element along dim is: the max of the mask as int32."""
    axes = list(range(len(c.shape(x)))) if dim is None else list(dim if isinstance(dim, (list, tuple)) else [dim])
    m = c.onnx("ReduceMax", [c.onnx("Cast", [x], to=6), _i64(axes)], keepdims=int(bool(keepdim)))
    return c.onnx("Cast", [m], to=9)


@aten("aten.as_strided.default")
def as_strided(c: Call, x, size, stride, storage_offset=0):
    """A strided view of x's (contiguous) elements: a Gather of the flattened x at constant indices, which the
    importer folds when x is a constant and the region reads as a non-affine gather otherwise."""
    n = int(np.prod(c.shape(x))) if c.shape(x) else 1
    idx = np.full(tuple(size), int(storage_offset or 0), dtype=np.int64)
    for k, (sz, st) in enumerate(zip(size, stride)):
        idx = idx + (np.arange(sz, dtype=np.int64) * st).reshape((1,) * k + (sz,) + (1,) * (len(size) - k - 1))
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        c.unsupported(f"size {list(size)}, stride {list(stride)} and offset {storage_offset} reach past x's {n} elements")
    return c.onnx("Gather", [c.onnx("Reshape", [x, _i64([n])]), idx], axis=0)


@aten("aten.diagonal.default")
def diagonal(c: Call, x, offset=0, dim1=0, dim2=1):
    """The diagonal of dims dim1 and dim2 (element (i, i + offset)) as the last dim, the others in order, as torch
    gives it: those two dims moved last and flattened, then every (n2 + 1)-th element sliced from the first on
    the diagonal (an affine view, no gather)."""
    shape = c.shape(x)
    r = len(shape)
    d1, d2 = int(dim1) % max(r, 1), int(dim2) % max(r, 1)
    if d1 == d2 or not all(isinstance(n, int) for n in shape):
        c.unsupported(f"dims {dim1} and {dim2} of a tensor of shape {list(shape)}: two distinct dims of known sizes")
    n1, n2, off = shape[d1], shape[d2], int(offset)
    length = min(n1, n2 - off) if off >= 0 else min(n1 + off, n2)
    if length <= 0:
        c.unsupported(f"offset {off} of a {n1} x {n2} matrix: an empty diagonal")
    rest = [k for k in range(r) if k not in (d1, d2)]
    moved = c.onnx("Transpose", [x], perm=rest + [d1, d2])
    flat = c.onnx("Reshape", [moved, _i64([shape[k] for k in rest] + [n1 * n2])])
    start = off if off >= 0 else -off * n2
    return c.onnx("Slice", [flat, _i64([start]), _i64([start + (length - 1) * (n2 + 1) + 1]), _i64([-1]),
                            _i64([n2 + 1])])


@aten("aten.full.default")
def full(c: Call, size, value, dtype=None, **kw):
    return _constant(c, size, value, _np_dtype(dtype, value))


def _constant(c: Call, size, value, np_dtype) -> str:
    name = c.imp.fresh(c.name)
    c.imp.consts[name] = np.full(list(size), value, dtype=np_dtype)
    return name


@aten("aten.full_like.default", "aten.zeros_like.default", "aten.ones_like.default", "aten.empty_like.default")
def full_like(c: Call, x, value=None, dtype=None, **kw):
    fill = {"aten.zeros_like.default": 0, "aten.ones_like.default": 1, "aten.empty_like.default": 0}.get(c.op,
                                                                                                        value)
    return _constant(c, c.shape(x), fill, c.np_dtype(x) if dtype is None else _np_dtype(dtype, fill))


@aten("aten.new_zeros.default", "aten.new_ones.default", "aten.new_full.default", "aten.zeros.default",
      "aten.ones.default", "aten.empty.memory_format", "aten.new_empty.default")
def new_full(c: Call, *args, dtype=None, **kw):
    """x.new_zeros(size) and friends (x's dtype where none is named), torch.zeros(size) (float32 by default);
    ``empty`` as zeros (its values are unspecified: a model reads only what it writes there)."""
    if c.op.startswith("aten.new_"):
        x, size, *rest = args
    else:
        x, (size, *rest) = None, args
    fill = rest[0] if c.op == "aten.new_full.default" else (1 if "ones" in c.op else 0)
    if dtype is not None:
        return _constant(c, size, fill, _np_dtype(dtype, fill))
    return _constant(c, size, fill, c.np_dtype(x) if x is not None else np.float32)


@aten("aten.scalar_tensor.default")
def scalar_tensor(c: Call, value, dtype=None, **kw):
    return full(c, [], value, dtype)


def _np_dtype(dtype, value) -> Any:
    import torch
    if dtype is None:
        return np.float32 if isinstance(value, float) else (np.bool_ if isinstance(value, bool) else np.int64)
    import ml_dtypes
    return {torch.float32: np.float32, torch.float16: np.float16, torch.int32: np.int32, torch.int64: np.int64,
            torch.bool: np.bool_, torch.float64: np.float64, torch.bfloat16: ml_dtypes.bfloat16}.get(dtype, np.float32)


@aten("aten.index_select.default")
def index_select(c: Call, x, dim, index):
    return c.onnx("Gather", [x, index], axis=int(dim))


@aten("aten.embedding.default")
def embedding(c: Call, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return c.onnx("Gather", [weight, indices], axis=0)  # padding_idx and the rest only change the gradient


@aten("aten.gather.default")
def gather(c: Call, x, dim, index, sparse_grad=False):
    return c.onnx("GatherElements", [x, index], axis=int(dim))


def _onnx_dtype(c: Call, dtype) -> int:
    import torch
    table = {torch.float32: 1, torch.float16: 10, torch.bfloat16: 16, torch.int32: 6, torch.bool: 9,
             torch.int64: 7, torch.float64: 11}
    if dtype not in table:
        fail("UnsupportedDtype", c.name, f"torch dtype {dtype} is not computed by polysat")
    return table[dtype]


def _dtype_of_torch(t, at: str) -> DType:
    import torch
    table = {torch.float32: DType.fp32, torch.float16: DType.fp16, torch.bfloat16: DType.bf16,
             torch.int32: DType.i32, torch.bool: DType.bool}
    if t.dtype not in table:
        fail("UnsupportedDtype", at, f"input of torch dtype {t.dtype}; polysat computes in fp16, bf16, fp32, "
             "int32 and bool")
    return table[t.dtype]


def _np(t) -> np.ndarray:
    import torch
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        import ml_dtypes
        return t.float().numpy().astype(ml_dtypes.bfloat16)
    return t.numpy().copy()


def _shape_of(val) -> tuple:
    from ..ir.shapes import shape_of
    return shape_of([int(d) if str(d).lstrip("-").isdigit() else str(d).replace(" ", "") for d in val.shape])


def import_graph(gm, user_inputs: list, consts: dict, outputs: list, origin: str = "torch") -> dict:
    """An ATen-level FX graph -> Frontend IR document. ``user_inputs`` are placeholder names that become
    the signature, ``consts`` maps the other placeholders to tensors, ``outputs`` the output nodes."""
    from .onnx_ops import HANDLERS  # noqa: F401  (fill the ONNX table the mappings call)
    from . import lower_elementwise, lower_gather, lower_linear, lower_movement, lower_resize, lower_window  # noqa: F401
    names = {n.name for n in gm.graph.nodes}
    imp = Importer(names, 21)
    vals: dict = {}
    narrowed: dict = {}
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            if n.name in consts:
                imp.consts[n.name] = _np(consts[n.name])
            elif n.name in user_inputs:
                v = n.meta["val"]
                if str(v.dtype) == "torch.int64":  # ids, positions: computed as i32, checked to fit when they arrive
                    narrowed[n.name] = "int64"
                    imp.add_input(n.name, DType.i32, _shape_of(v))
                else:
                    imp.add_input(n.name, _dtype_of_torch(v, n.name), _shape_of(v))
            vals[n] = n.name
        elif n.op == "call_function":
            vals[n] = _call(imp, n, vals)
        elif n.op == "get_attr":
            imp.consts[n.name] = _np(getattr(gm, n.target))
            vals[n] = n.name
        elif n.op == "output":
            pass
    outs = []
    for k, o in enumerate(outputs):
        t = vals.get(o) if o is not None else None
        if not isinstance(t, str):
            fail("UnsupportedOp", origin, f"output {k} is not a tensor polysat computes")
        outs.append({"tensor": imp.value(t, f"output {k}")})
    return {"signature": {"inputs": imp.inputs, "outputs": outs}, "tensors": imp.tensors, "graph": imp.nodes,
            "parameters": imp.params, "narrowed_inputs": narrowed}


_SCALAR_OPS = frozenset({operator.ge, operator.gt, operator.le, operator.lt, operator.eq, operator.ne, operator.add,
                         operator.sub, operator.mul, operator.floordiv, operator.mod, operator.neg})


def _call(imp: Importer, n, vals: dict) -> Any:
    if n.target is operator.getitem:
        src, k = n.args
        got = vals[src][k]
        if got is None:
            fail("UnsupportedOp", n.name, f"output {k} of {src.name}{written_at(src)} (e.g. pool indices, batch "
                 "statistics) is not computed by polysat")
        return got
    if n.target in _SCALAR_OPS:  # on sizes, which the import knows: the checks after a mask's index, say
        args = [vals[a] if hasattr(a, "op") and hasattr(a, "target") else a for a in n.args]
        if any(a is RUN_TIME for a in args):
            return RUN_TIME
        if all(isinstance(a, (int, float, bool)) for a in args):
            return n.target(*args)
    op = str(n.target)
    if op not in ATEN:
        family = sorted(k for k in ATEN if k.rsplit(".", 1)[0] == op.rsplit(".", 1)[0])
        fail("UnsupportedOp", n.name, f"ATen op {op} (FX node {n.name!r}{written_at(n)}) has no polysat mapping",
             (f"polysat maps {', '.join(family)} of this op; " if family else "") +
             f"rewrite that line with ops polysat maps ({len(ATEN)} core ATen ops: frontend/torch_export.py, "
             "torch_aten_nn.py), "
             "or export the model to ONNX (torch.onnx.export), whose importer may take it.")

    def arg(a):
        if hasattr(a, "op") and hasattr(a, "target"):  # an FX node
            if vals[a] is RUN_TIME and ATEN[op] is not assertion:
                fail("UnsupportedOp", n.name, f"ATen op {op} (FX node {n.name!r}{written_at(n)}) reads {a.name}, a "
                     f"scalar read from a tensor at run time (.item()), which polysat computes only into checks",
                     "compute it from sizes, or keep it a tensor")
            return vals[a]
        if isinstance(a, (list, tuple)):
            return type(a)(arg(x) for x in a)
        return a
    return ATEN[op](Call(imp, n, op), *[arg(a) for a in n.args], **{k: arg(v) for k, v in n.kwargs.items()})


def _decompositions(ep):
    """Core ATen's decompositions, but an ``einsum`` of one or two operands and no diagonal is kept whole
    (ONNX Einsum, as the ONNX exporter writes it): decomposed, its operands are permuted, given size-1 dims and
    flattened into a ``bmm`` whose batch and result no longer line up with the values around it (ProphetNet's
    attention scores against their softmax)."""
    import torch
    table = torch.export.default_decompositions()
    whole = [n for n in ep.graph.nodes if n.op == "call_function" and n.target == torch.ops.aten.einsum.default]
    if whole and all(len(n.args[1]) <= 2 and _no_diagonal(n.args[0]) for n in whole):
        del table[torch.ops.aten.einsum.default]
    return table


def _no_diagonal(eq: str) -> bool:
    """No letter twice in one operand (a diagonal, which polysat's Einsum does not take)."""
    terms = eq.replace(" ", "").replace("...", "").partition("->")[0].split(",")
    return all(len(set(t)) == len(t) for t in terms)


def import_exported(ep, origin: str = "torch.export") -> dict:
    """A ``torch.export.ExportedProgram`` -> Frontend IR document (decomposed to core ATen first)."""
    from torch.export.graph_signature import InputKind
    ep = ep.run_decompositions(_decompositions(ep))
    sig = ep.graph_signature
    user, consts = [], {}
    for spec in sig.input_specs:
        name = spec.arg.name
        if spec.kind == InputKind.USER_INPUT:
            user.append(name)
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            consts[name] = ep.state_dict[spec.target] if spec.target in ep.state_dict else ep.constants[spec.target]
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            consts[name] = ep.constants[spec.target]
        else:
            fail("UnsupportedOp", origin, f"input {name!r} of kind {spec.kind.name} is not supported")
    out_node = next(n for n in ep.graph_module.graph.nodes if n.op == "output")
    outs = list(out_node.args[0])
    return import_graph(ep.graph_module, user, consts, outs, origin)
