"""A Frontend IR model written again as tinygrad Tensor ops, for bench/fusion.py's side-by-side run.

Each Frontend op becomes the tinygrad spelling of its documented meaning (fp16/bf16 operands widened
to fp32 where polysat's lowering widens them: GEMM/conv accumulation, softmax, LayerNorm), with the
model's symbols bound to the sizes polysat prices them at. Inputs are ``Tensor.empty`` buffers on
tinygrad's ``PYTHON`` device: the bench only schedules (``schedule_linear``), nothing runs, so large
shapes cost nothing but the scheduler's own time.

    kernels, seconds = schedule(model_dict, {"S": 256})
"""
from __future__ import annotations

import time

_DT = {"fp16": "half", "bf16": "bfloat16", "fp32": "float32", "i32": "int32", "bool": "bool"}


def _shape(shape: list, params: dict) -> tuple:
    return tuple(int(params[d]) if isinstance(d, str) else int(d) for d in shape)


def _f32(x):
    from tinygrad import dtypes
    return x.cast(dtypes.float32) if x.dtype != dtypes.float32 and dtypes.is_float(x.dtype) else x


def _back(y, like):
    return y.cast(like.dtype) if y.dtype != like.dtype else y


def _gemm(a, b, attrs: dict):
    if attrs.get("trans_a"):
        a = a.transpose(-1, -2)
    if attrs.get("trans_b"):
        b = b.transpose(-1, -2)
    return _back(_f32(a) @ _f32(b), a)


def _pads4(attrs: dict, key: str) -> tuple:
    p = attrs.get(key, 0)
    p = [p] * 4 if isinstance(p, int) else list(p)
    return tuple(p) if len(p) == 4 else (p[0], p[0], p[1], p[1])


def _pair(v, default):
    v = default if v is None else v
    return (v, v) if isinstance(v, int) else tuple(v)


def _elementwise(fn: str, xs: list, attrs: dict):
    x = xs[0]
    if fn in ("add", "sub", "mul", "div", "max", "min", "pow"):
        a, b = xs
        f = {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "div": lambda: a / b,
             "max": lambda: a.maximum(b), "min": lambda: a.minimum(b), "pow": lambda: a.pow(b)}[fn]
        return f()
    f32 = _f32(x)
    if fn == "relu":
        return x.relu()
    if fn == "gelu":
        return _back(f32.gelu() if attrs.get("approximate", "none") == "tanh" else 0.5 * f32 * (1 + (f32 * 0.7071067811865476).erf()), x)
    if fn == "silu":
        return _back(f32.silu(), x)
    if fn == "sigmoid":
        return _back(f32.sigmoid(), x)
    if fn == "tanh":
        return _back(f32.tanh(), x)
    if fn == "exp":
        return _back(f32.exp(), x)
    if fn == "neg":
        return -x
    if fn in ("sqrt", "rsqrt"):
        return _back(f32.sqrt() if fn == "sqrt" else f32.rsqrt(), x)
    raise KeyError(f"bench/tinygrad_graph.py: no tinygrad spelling of Elementwise fn {fn!r}")


def _layernorm(xs: list, attrs: dict):
    x = xs[0]
    axis = attrs.get("axis", -1) % x.ndim
    y = _f32(x).layernorm(axis=tuple(range(axis, x.ndim)), eps=attrs.get("eps", 1e-5))
    if len(xs) > 1:
        y = y * _f32(xs[1])
    if len(xs) > 2:
        y = y + _f32(xs[2])
    return _back(y, x)


def _attention(q, k, v, attrs: dict):
    d = q.shape[-1]
    s = (_f32(q) @ _f32(k).transpose(-1, -2)) * float(attrs.get("scale", d ** -0.5))
    if attrs.get("causal"):
        from tinygrad import Tensor
        m, n = s.shape[-2], s.shape[-1]
        mask = Tensor.ones(m, n, dtype="bool", device=q.device).tril(n - m)
        s = mask.where(s, float("-inf"))
    return _back(s.softmax(-1).cast(v.dtype) @ _f32(v), q)


def _conv(xs: list, attrs: dict):
    x, w = xs[0], xs[1]
    bias = xs[2] if len(xs) > 2 else None
    p = _pads4(attrs, "pad")
    y = _f32(x).conv2d(_f32(w), None if bias is None else _f32(bias), groups=attrs.get("groups", 1),
                       stride=_pair(attrs.get("stride"), 1), dilation=_pair(attrs.get("dilation"), 1),
                       padding=(p[2], p[3], p[0], p[1]))
    return _back(y, x)


def _maxpool(x, attrs: dict):
    k = _pair(attrs.get("kernel"), 2)
    p = _pads4(attrs, "pad")
    return x.max_pool2d(kernel_size=k, stride=_pair(attrs.get("stride"), k), dilation=_pair(attrs.get("dilation"), 1),
                        padding=(p[2], p[3], p[0], p[1]))


def build(model: dict, params: dict) -> list:
    """The model's output tensors as tinygrad Tensors over empty PYTHON-device input buffers."""
    from tinygrad import Tensor
    env: dict = {}
    for inp in model["signature"]["inputs"]:
        t = model["tensors"][inp["tensor"]]
        env[inp["tensor"]] = Tensor.empty(*_shape(t["shape"], params), dtype=_DT[t["dtype"]], device="PYTHON")
    for g in model["graph"]:
        xs, a, op = [env[i] for i in g["inputs"]], g.get("attrs") or {}, g["op"]
        if op == "GEMM":
            y = _gemm(xs[0], xs[1], a)
        elif op == "Elementwise":
            y = _elementwise(g["fn"], xs, a)
        elif op == "LayerNorm":
            y = _layernorm(xs, a)
        elif op == "Softmax":
            y = _back(_f32(xs[0]).softmax(a.get("axis", -1)), xs[0])
        elif op == "Attention":
            y = _attention(*xs, a)
        elif op == "Reshape":
            y = xs[0].reshape(*_shape(a["shape"], params))
        elif op == "Transpose":
            y = xs[0].permute(*a["perm"])
        elif op == "Conv2D":
            y = _conv(xs, a)
        elif op == "MaxPool2D":
            y = _maxpool(xs[0], a)
        elif op == "Constant":
            y = Tensor.full(_shape(a.get("shape", []), params), a["value"], dtype=_DT[a.get("dtype", "fp32")],
                            device="PYTHON")
        elif op == "Reduce":  # accumulated (and returned) in fp32, the Frontend op's default acc_dtype
            ax = a["axes"] if isinstance(a["axes"], int) else tuple(a["axes"])
            y = getattr(_f32(xs[0]), a.get("op", "sum"))(axis=ax, keepdim=bool(a.get("keepdim", False)))
        else:
            raise KeyError(f"bench/tinygrad_graph.py: no tinygrad spelling of Frontend op {op!r}")
        env[g["outputs"][0]] = y
    return [env[o["tensor"]] for o in model["signature"]["outputs"]]


def timed_linear(outs: list) -> tuple:
    """(linear, seconds): tinygrad's schedule of the tensors ``outs`` (``schedule_linear``: kernelize +
    rangeify + linearize; nothing executes) and the wall time of building it. The tensors now stand for
    the schedule's buffers: ``run_linear(linear)`` computes them."""
    t0 = time.perf_counter()
    linear = outs[0].schedule_linear(*outs[1:])
    return linear, time.perf_counter() - t0


def kernel_count(linear) -> int:
    """The kernels of a schedule: its calls of a compiled program (copies and buffer views are not)."""
    from tinygrad.uop.ops import Ops
    return sum(1 for s in linear.src if s.op == Ops.CALL and s.src and s.src[0].op == Ops.SINK)


def schedule(model: dict, params: dict) -> tuple:
    """(kernels, seconds): tinygrad's kernel count for the model and the wall time of building its
    schedule (``timed_linear``). tinygrad's schedule cache is off so a graph met before is scheduled again."""
    from tinygrad.helpers import Context
    with Context(DEV="PYTHON", SCACHE=0):
        outs = build(model, params)
        linear, dt = timed_linear(outs)
    return kernel_count(linear), dt
