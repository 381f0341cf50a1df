"""An ONNX model through tinygrad's own ONNX frontend, for bench/fusion.py's real-model rows.

The serialized bytes polysat imports are parsed by ``tinygrad.nn.onnx.OnnxRunner`` (a uint8 Tensor of
the same bytes, so both sides read one graph); its initializers are realized first (they are in
memory before the model runs, as polysat's parameters are), the graph inputs are random arrays (token
ids: valid ids, in range for every Gather that reads them), and the runner builds the outputs lazily on
the ``PYTHON`` device. Shape computations the runner folds to Python values (``Shape -> ... ->
Reshape``) are realized while it builds, before the clock, as polysat folds them at import. The
outputs are then scheduled and counted as bench/tinygrad_graph.py does (``timed_linear``,
``kernel_count``); nothing of the model executes.

    kernels, seconds, frontend_seconds = schedule(model_bytes, {"S": 256})
"""
from __future__ import annotations

import contextlib
import time
import traceback

import numpy as np

DEVICE = "PYTHON"


def _shapes(model) -> dict:
    """Name -> static shape of every tensor onnx's shape inference knows (initializers included)."""
    import onnx
    out = {i.name: list(i.dims) for i in model.graph.initializer}
    try:
        inferred = onnx.shape_inference.infer_shapes(model).graph
    except Exception:  # noqa: BLE001 — no inferred shapes: only initializers bound the ids
        return out
    for v in (*inferred.value_info, *inferred.input):
        dims = v.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            out.setdefault(v.name, [d.dim_value for d in dims])
    return out


def _id_bound(model, name: str, shapes: dict) -> int:
    """One past the largest valid value of an integer graph input: the smallest extent a Gather reading
    it as indices looks up along (2 for an input no Gather reads)."""
    bounds = []
    for n in model.graph.node:
        if n.op_type == "Gather" and len(n.input) > 1 and n.input[1] == name and n.input[0] in shapes:
            axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
            bounds.append(shapes[n.input[0]][axis])
    return min(bounds) if bounds else 2


def feeds(model_bytes: bytes, params: dict | None = None, seed: int = 0, empty_floats: bool = False) -> dict:
    """Random graph inputs: floats standard normal, integer inputs valid ids (``_id_bound``), bools
    random; a ``dim_param`` takes its size from ``params`` (else POLYSAT_PRICE_SYMBOL_SIZE).
    ``empty_floats``: floats are unrealized ``Tensor.empty`` buffers instead (a weight-free graph whose
    weights are its inputs: scheduled, never allocated)."""
    import onnx
    from onnx import helper

    from ..knobs import price_symbol_size
    model = onnx.load_from_string(model_bytes)
    inits = {i.name for i in model.graph.initializer}
    shapes = _shapes(model)
    rng = np.random.default_rng(seed)
    out = {}
    for i in model.graph.input:
        if i.name in inits:
            continue
        tt = i.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else int((params or {}).get(d.dim_param, price_symbol_size()))
                 for d in tt.shape.dim]
        dt = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        if dt == np.bool_:
            out[i.name] = rng.random(shape) < 0.5
        elif np.issubdtype(dt, np.integer):
            out[i.name] = rng.integers(0, _id_bound(model, i.name, shapes), shape).astype(dt)
        elif empty_floats:
            from tinygrad import Tensor
            from tinygrad.dtype import _from_np_dtype
            out[i.name] = Tensor.empty(*shape, dtype=_from_np_dtype(dt))
        else:
            out[i.name] = rng.standard_normal(shape).astype(dt)
    return out


def _failed_node(e: BaseException) -> str:
    """The ONNX node tinygrad's runner was at when ``e`` was raised ('' if not inside the runner)."""
    for frame, _ in traceback.walk_tb(e.__traceback__):
        node = frame.f_locals.get("node") if frame.f_code.co_name == "__call__" else None
        if node is not None and hasattr(node, "op") and hasattr(node, "outputs"):
            return f"ONNX {node.op}({', '.join(node.inputs)}) -> {', '.join(node.outputs)}"
    return ""


def _gather_constant_indices_of_any_rank(runner) -> None:
    """tinygrad 0.14's ONNX Gather has a fast path for constant indices that takes a scalar or a 1-D list
    only: constant indices of rank 2 (GPT-2's (1, S) position ids) fail there comparing a list with an
    int. Such indices go to its general path as a Tensor instead (the path run-time indices take), so the
    graph stays the one polysat reads and the kernels counted are tinygrad's own."""
    from tinygrad import Tensor, dtypes
    gather = runner.onnx_ops["Gather"]

    def any_rank(x, indices, axis: int = 0):
        if isinstance(indices, (list, tuple)) and any(isinstance(i, (list, tuple)) for i in indices):
            indices = Tensor(indices, dtype=dtypes.int32, device=x.device)
        return gather(x, indices, axis=axis)
    runner.onnx_ops = {**runner.onnx_ops, "Gather": any_rank}


@contextlib.contextmanager
def _python_consts_on_device():
    """tinygrad 0.14's runner reads shape-like inputs (CumSum's axis, Gather of a Shape, ...) as Python values
    through ``Tensor.tolist``, which copies a device-less constant through the ``CPU`` device; that device
    compiles its helper programs with clang at start-up, which a machine without clang lacks. Such a
    constant is read on the bench's own device instead: the same values, and no kernel of the model's
    schedule is added or removed (these reads happen while the runner builds, before the clock)."""
    import tinygrad.nn.onnx as tonnx
    from tinygrad import Tensor
    plain = tonnx._to_python_const

    def on_device(t, *args, **kw):
        if isinstance(t, Tensor) and t.uop.device is None:
            t = t.clone(DEVICE)
        return plain(t, *args, **kw)
    tonnx._to_python_const = on_device
    try:
        yield
    finally:
        tonnx._to_python_const = plain


def outputs(model_bytes: bytes, inputs: dict) -> list:
    """The model's graph outputs as lazy tinygrad Tensors on the current device, built by tinygrad's
    ``OnnxRunner`` from ``model_bytes`` over ``inputs`` (numpy arrays, realized as the initializers are;
    or tinygrad Tensors, taken as they are: ``Tensor.empty`` weights of a weight-free graph). An error
    inside the runner is re-raised naming the ONNX node it was at."""
    from tinygrad import Tensor
    from tinygrad.nn.onnx import OnnxRunner
    runner = OnnxRunner(Tensor(np.frombuffer(model_bytes, dtype=np.uint8).copy()))
    _gather_constant_indices_of_any_rank(runner)
    xs = {k: v if isinstance(v, Tensor) else Tensor(v) for k, v in inputs.items()}
    held = [v for v in runner.graph_values.values() if isinstance(v, Tensor)] + \
        [xs[k] for k, v in inputs.items() if not isinstance(v, Tensor)]  # (a Tensor given stays as it is)
    if held:  # (Tensor.realize takes at least one tensor)
        Tensor.realize(*held)
    try:
        with _python_consts_on_device():
            out = runner(xs)
    except Exception as e:  # noqa: BLE001 — say which node tinygrad could not take
        where = _failed_node(e)
        if not where:
            raise
        raise RuntimeError(f"{where}: {type(e).__name__}: {e}") from e
    return [out[n] for n in runner.graph_outputs]


def scheduled(model_bytes: bytes, params: dict | None = None, seed: int = 0) -> dict:
    """tinygrad's schedule of the model on the ``PYTHON`` device: ``{"inputs", "outputs", "linear",
    "kernels", "schedule_s", "frontend_s"}`` (frontend_s: parse + runner build, outside the clock).
    ``run_linear(linear)`` computes ``outputs`` from ``inputs``. tinygrad's schedule cache is off."""
    from tinygrad.helpers import Context

    from .tinygrad_graph import kernel_count, timed_linear
    inputs = feeds(model_bytes, params, seed)
    with Context(DEV=DEVICE, SCACHE=0):
        t0 = time.perf_counter()
        outs = outputs(model_bytes, inputs)
        frontend_s = time.perf_counter() - t0
        linear, dt = timed_linear(outs)
    return {"inputs": inputs, "outputs": outs, "linear": linear, "kernels": kernel_count(linear),
            "schedule_s": dt, "frontend_s": frontend_s}


def schedule(model_bytes: bytes, params: dict | None = None) -> tuple:
    """(kernels, seconds, frontend seconds) of tinygrad's schedule of the ONNX model (``scheduled``)."""
    s = scheduled(model_bytes, params)
    return s["kernels"], s["schedule_s"], s["frontend_s"]
