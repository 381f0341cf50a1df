"""Independent numpy oracles of the Frontend IR ops, and the harness that runs models through the CLI.

The oracle half never imports polysat: each op is written again from its documented meaning (docs/DESIGN.md
§Frontend IR; tinygrad's ``dot`` for GEMM), in float64, on inputs rounded
to their declared dtype the way ``polysat run`` rounds them (float32 first, then fp16 / bf16 through
ml_dtypes). The harness half writes a model and an .npz, calls ``polysat.cli.main`` in-process (no
interpreter start-up per case) and reads the outputs and diagnostics back.

Test files load this module by path (``pytest --import-mode=importlib`` puts no test folder on
``sys.path``)::

    _spec = importlib.util.spec_from_file_location("polysat_test_oracle", Path(__file__).with_name("oracle.py"))
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import tempfile
from typing import Any, Sequence

import ml_dtypes
import numpy as np

RTOL = ATOL = 1e-3
NP_DTYPES = {"fp16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16), "fp32": np.dtype(np.float32),
             "i32": np.dtype(np.int32), "bool": np.dtype(np.bool_)}


# ---- rounding --------------------------------------------------------------------------------------

def rounded(x: np.ndarray, dtype: str) -> np.ndarray:
    """x as the model sees it: float32, then rounded to its declared dtype; returned as float64."""
    x = np.asarray(x)
    if dtype in ("i32", "bool"):
        return x.astype(NP_DTYPES[dtype])
    return x.astype(np.float32).astype(NP_DTYPES[dtype]).astype(np.float64)


_MANTISSA = {"fp16": (10, -14), "bf16": (7, -126), "fp32": (23, -126)}  # (mantissa bits, min normal exponent)


def ulp_at_one(dtype: str) -> float:
    """The spacing of dtype's numbers at 1.0 (its machine epsilon): 2**-10 for fp16, 2**-7 for bf16."""
    return 2.0 ** -_MANTISSA[dtype][0]


def half_ulp(ref: np.ndarray, dtype: str) -> np.ndarray:
    """Half a unit in the last place of dtype at |ref|: the error of rounding the result to dtype."""
    bits, emin = _MANTISSA[dtype]
    a = np.abs(ref)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.maximum(np.floor(np.log2(np.where((a > 0) & np.isfinite(a), a, 1.0))), emin)
    return np.where(np.isfinite(a), 2.0 ** (e - bits) / 2, 0.0)


def assert_close(got: np.ndarray, ref: np.ndarray, out_dtype: str = "fp32", what: str = "") -> None:
    """|got - ref| <= atol + rtol*|ref| (1e-3 each), plus half an ulp of a 16-bit output dtype (the final
    rounding, larger than rtol for bf16); NaN matches NaN, an infinity itself. Shapes must agree."""
    got = np.asarray(got)
    ref = np.asarray(ref, dtype=np.float64) if out_dtype != "bool" else np.asarray(ref)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != oracle {ref.shape}"
    if out_dtype in ("bool", "i32"):
        np.testing.assert_array_equal(got, ref.astype(NP_DTYPES[out_dtype]), err_msg=what)
        return
    g = got.astype(np.float64)
    allowed = ATOL + RTOL * np.abs(ref) + (half_ulp(ref, out_dtype) if out_dtype in ("fp16", "bf16") else 0.0)
    with np.errstate(invalid="ignore"):
        ok = (np.abs(g - ref) <= allowed) | (np.isnan(g) & np.isnan(ref)) | (np.isinf(ref) & (g == ref))
    if not ok.all():
        bad = np.argwhere(~ok)[:5]
        rows = ", ".join(f"{tuple(int(i) for i in k)}: got {g[tuple(k)]!r} want {ref[tuple(k)]!r}" for k in bad)
        raise AssertionError(f"{what}: {int((~ok).sum())} of {ok.size} elements differ beyond rtol=atol=1e-3 "
                             f"({out_dtype} output); first: {rows}")


def chain_roundoff(regions, name: str) -> float:
    """The sum of the unit roundoffs (ulp_at_one) of the 16-bit intermediates on the longest chain of regions that
    ends at output ``name``: 0 where no 16-bit value passes between regions on the way (then every element must
    meet assert_close). Duck-typed over RB-SSA regions (``inputs``/``outputs`` bindings with ``name``,
    ``memref.dtype.value`` and ``program_output``): this module imports nothing of polysat."""
    acc: dict = {}
    for r in regions:
        here = 0.0
        for b in r.inputs:
            if b.name in acc:
                dt = b.memref.dtype.value
                here = max(here, acc[b.name] + (ulp_at_one(dt) if dt in ("fp16", "bf16") else 0.0))
        for b in r.outputs:
            acc[b.name] = here
    return acc.get(name, 0.0)


def assert_close_chained(got: np.ndarray, ref: np.ndarray, out_dtype: str, roundoff: float, what: str = "") -> None:
    """assert_close for the output of a chain of kernels that hand 16-bit values to each other (``roundoff`` from
    chain_roundoff). Each kernel's fp32 arithmetic differs from its playback's in order (tensor-core tiles, tree
    reductions), so a stored 16-bit intermediate can round the other way: one ulp, which the next kernels carry
    to the output with their gain (a 1-ulp flip of one fp16 hidden activation near 20, times a weight near 1, is
    0.016 at the output, 8 of its ulps at 3.5: what the first GPU check met on bench_transformer1). So beyond
    assert_close's elementwise bound each element may differ by roundoff * max|ref| (a normwise bound); every
    kernel is still held to the elementwise bound on its own inputs by the per-kernel tests."""
    if roundoff <= 0.0:
        assert_close(got, ref, out_dtype, what)
        return
    ref = np.asarray(ref, dtype=np.float64)
    g = np.asarray(got).astype(np.float64)
    assert g.shape == ref.shape, f"{what}: shape {g.shape} != oracle {ref.shape}"
    fin = np.isfinite(ref)
    scale = float(np.abs(ref[fin]).max(initial=0.0))
    allowed = ATOL + RTOL * np.abs(ref) + roundoff * scale + (half_ulp(ref, out_dtype) if out_dtype in ("fp16", "bf16") else 0.0)
    with np.errstate(invalid="ignore"):
        ok = (np.abs(g - ref) <= allowed) | (np.isnan(g) & np.isnan(ref)) | (np.isinf(ref) & (g == ref))
    if not ok.all():
        k = tuple(int(i) for i in np.argwhere(~ok)[0])
        raise AssertionError(f"{what}: {int((~ok).sum())} of {ok.size} elements differ beyond rtol=atol=1e-3 + "
                             f"{roundoff:.2e} * max|ref| ({out_dtype} output, chained 16-bit intermediates); first: "
                             f"{k}: got {g[k]!r} want {ref[k]!r}")


# ---- elementwise -------------------------------------------------------------------------------------

_erf = np.vectorize(math.erf, otypes=[np.float64])


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def gelu(x, approximate: str = "none"):
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


UNARY = {
    "neg": np.negative, "relu": lambda x: np.maximum(x, 0.0), "exp": np.exp, "exp2": np.exp2, "log": np.log,
    "log2": np.log2, "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x), "recip": lambda x: 1.0 / x,
    "sigmoid": sigmoid, "silu": lambda x: x * sigmoid(x), "tanh": np.tanh, "gelu": gelu,
}
POSITIVE_DOMAIN = frozenset({"log", "log2", "sqrt", "rsqrt", "recip"})
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "max": np.maximum,
          "min": np.minimum, "pow": np.power}
COMPARE = {"gt": np.greater, "ge": np.greater_equal, "lt": np.less, "le": np.less_equal, "eq": np.equal,
           "ne": np.not_equal}
_RANK = {"bool": 0, "i32": 1, "fp16": 2, "bf16": 2, "fp32": 3}


def promote(a: str, b: str) -> str:
    """The documented promotion: the wider dtype; fp16 with bf16 gives fp32 (neither holds the other)."""
    if a == b:
        return a
    if {a, b} == {"fp16", "bf16"}:
        return "fp32"
    return a if _RANK[a] > _RANK[b] else b


# ---- reductions and normalisations ------------------------------------------------------------------

def reduce(x, op: str, axes: Sequence[int], keepdim: bool = False):
    fn = {"sum": np.sum, "max": np.max, "min": np.min, "mean": np.mean}[op]
    return fn(x, axis=tuple(axes), keepdims=keepdim)


def softmax(x, axis: int):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def layernorm(x, axis: int = -1, eps: float = 1e-5, gamma=None, beta=None):
    """Normalise over axis..rank-1 (ONNX LayerNormalization); gamma/beta have the normalised shape."""
    axes = tuple(range(axis % x.ndim, x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    if gamma is not None:
        y = y * gamma
    if beta is not None:
        y = y + beta
    return y


# ---- contractions ------------------------------------------------------------------------------------

def dot(a, b):
    """tinygrad ``a.dot(b)``: 1-D operands, broadcast batch dims (the numpy matmul rules)."""
    if a.ndim == 1 and b.ndim == 1:
        return np.asarray(np.sum(a * b))
    if b.ndim == 1:
        return np.einsum("...k,k->...", a, b)
    if a.ndim == 1:
        return np.einsum("k,...kn->...n", a, b)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    return np.einsum("...mk,...kn->...mn", a, b)


def conv2d(x, w, bias=None, stride=(1, 1), pad=(0, 0, 0, 0), dilation=(1, 1), groups: int = 1):
    """Direct convolution, one kernel tap at a time: X (N, C, H, W), W (Co, C/groups, Kh, Kw);
    pad is [top, bottom, left, right]."""
    n, c, h, wd = x.shape
    co, cg, kh, kw = w.shape
    (sh, sw), (dh, dw) = stride, dilation
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[1]), (pad[2], pad[3])))
    ho = (h + pad[0] + pad[1] - dh * (kh - 1) - 1) // sh + 1
    wo = (wd + pad[2] + pad[3] - dw * (kw - 1) - 1) // sw + 1
    cog = co // groups
    y = np.zeros((n, co, ho, wo))
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        ws = w[g * cog:(g + 1) * cog]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dh: i * dh + sh * (ho - 1) + 1: sh, j * dw: j * dw + sw * (wo - 1) + 1: sw]
                y[:, g * cog:(g + 1) * cog] += np.einsum("nchw,oc->nohw", patch, ws[:, :, i, j])
    if bias is not None:
        y = y + bias[None, :, None, None]
    return y


def maxpool2d(x, kernel, stride=None, pad=(0, 0, 0, 0)):
    """Max over each window; padding never wins (it is -inf)."""
    kh, kw = kernel
    sh, sw = stride or kernel
    n, c, h, wd = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[1]), (pad[2], pad[3])), constant_values=-np.inf)
    ho = (h + pad[0] + pad[1] - kh) // sh + 1
    wo = (wd + pad[2] + pad[3] - kw) // sw + 1
    y = np.full((n, c, ho, wo), -np.inf)
    for i in range(kh):
        for j in range(kw):
            y = np.maximum(y, xp[:, :, i: i + sh * (ho - 1) + 1: sh, j: j + sw * (wo - 1) + 1: sw])
    return y


def attention(q, k, v, causal: bool = False, scale: float | None = None, p_dtype: str | None = None):
    """softmax(scale * Q K^T, masked) V. The causal mask is aligned bottom-right: query i sees key j
    iff j <= i + (N - M). p_dtype rounds the probabilities before P V (fp16/bf16 V: P is cast to V's
    dtype, as flash kernels do)."""
    m, d = q.shape[-2], q.shape[-1]
    n = k.shape[-2]
    scale = d ** -0.5 if scale is None else scale
    s = np.einsum("bhmd,bhnd->bhmn", q, k) * scale
    if causal:
        keep = np.arange(n)[None, :] <= np.arange(m)[:, None] + (n - m)
        s = np.where(keep, s, -np.inf)
    with np.errstate(invalid="ignore"):
        p = softmax(s, -1)
    if p_dtype is not None:
        p = rounded(p, p_dtype)
    return np.einsum("bhmn,bhnv->bhmv", p, v)


# ---- movement ----------------------------------------------------------------------------------------

def slice_(x, starts, ends, steps=None, axes=None):
    """Python slicing on the named axes (negative indices count from the end, clamped like Python)."""
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    sl = [slice(None)] * x.ndim
    for a, s, e, st in zip(axes, starts, ends, steps, strict=True):
        sl[a] = slice(s, e, st)
    return x[tuple(sl)]


# ---- harness: models and the CLI --------------------------------------------------------------------

def model(inputs: dict, graph: list, outputs: Sequence[str], tensors: dict | None = None) -> dict:
    """A Frontend IR document: inputs {name: (dtype, shape)}, graph nodes, output names, and any extra
    declared tensors {name: {"dtype"?, "shape"?}}."""
    table = {k: {"dtype": dt, "shape": list(shape)} for k, (dt, shape) in inputs.items()}
    table.update(tensors or {})
    return {"signature": {"inputs": [{"tensor": k} for k in inputs], "outputs": [{"tensor": o} for o in outputs]},
            "tensors": table, "graph": graph}


def node(op: str, inputs: Sequence[str], output: str, /, name: str | None = None, **attrs: Any) -> dict:
    d = {"op": op, "name": name or output, "inputs": list(inputs), "outputs": [output], "attrs": attrs}
    if op == "Elementwise":
        d["fn"] = attrs.pop("fn")
    return d


def conv_model(x, w, attrs, dt="fp16", bias=False, act=None, residual=False, pool=None) -> dict:
    """A Frontend IR Conv2D model: X of shape x, W of shape w (OIHW), Conv2D attrs (fp32 accumulation),
    then optionally + b (bias), an Elementwise activation, + R (residual, of the conv's output shape)
    and a MaxPool2D (attrs pool)."""
    t = {"X": {"dtype": dt, "shape": x}, "W": {"dtype": dt, "shape": w}}
    ins, cin = [{"tensor": "X"}, {"tensor": "W", "role": "param"}], ["X", "W"]
    if bias:
        t["b"] = {"dtype": dt, "shape": [w[0]]}
        ins.append({"tensor": "b", "role": "param"})
        cin.append("b")
    g = [{"op": "Conv2D", "name": "conv", "inputs": cin, "outputs": ["Y0"], "attrs": {**attrs, "acc_dtype": "fp32"}}]
    cur = "Y0"
    if act:
        g.append({"op": "Elementwise", "name": "act", "fn": act, "inputs": [cur], "outputs": ["Y1"]})
        cur = "Y1"
    if residual:
        def two(v):
            return [v, v] if isinstance(v, int) else list(v)
        st_, dil = two(attrs.get("stride", 1)), two(attrs.get("dilation", 1))
        pad = attrs.get("pad", 0)
        pad = [pad] * 4 if isinstance(pad, int) else list(pad)
        ho = (x[2] + pad[0] + pad[1] - dil[0] * (w[2] - 1) - 1) // st_[0] + 1
        wo = (x[3] + pad[2] + pad[3] - dil[1] * (w[3] - 1) - 1) // st_[1] + 1
        t["R"] = {"dtype": dt, "shape": [x[0], w[0], ho, wo]}
        ins.append({"tensor": "R"})
        g.append({"op": "Elementwise", "name": "res", "fn": "add", "inputs": [cur, "R"], "outputs": ["Y2"]})
        cur = "Y2"
    if pool:
        g.append({"op": "MaxPool2D", "name": "pool", "inputs": [cur], "outputs": ["P"], "attrs": pool})
        cur = "P"
    t[cur] = {"dtype": dt}
    return {"signature": {"inputs": ins, "outputs": [{"tensor": cur}]}, "tensors": t, "graph": g}


def build_host_emulator(source: str, workdir, name: str) -> str:
    """Build a host emulator (C++ over the kernel templates' __host__ __device__ helpers and the headers
    beside the tests) with nvcc into workdir/name; fails the test with nvcc's error. Returns the executable."""
    import os
    import subprocess

    from polysat.backend.common.nvcc import nvcc_path
    from polysat.backend.common.render import TEMPLATES
    nvcc = nvcc_path()
    assert nvcc, "nvcc is needed to build the host emulator"
    src, exe = os.path.join(str(workdir), f"{name}.cu"), os.path.join(str(workdir), name)
    with open(src, "w", encoding="utf-8") as f:
        f.write(source)
    build = subprocess.run([nvcc, "-std=c++17", "-O1", "-I", TEMPLATES, "-I", os.path.dirname(os.path.abspath(__file__)),
                            "-o", exe, src], capture_output=True, text=True, check=False)
    assert build.returncode == 0, build.stderr[-4000:]
    return exe


def run_host_emulator(source: str, workdir, name: str) -> list:
    """Build (:func:`build_host_emulator`) and run a host emulator; fails the test on a non-zero exit.
    Returns its stdout's lines."""
    import os
    import subprocess

    exe = build_host_emulator(source, workdir, name)
    run = subprocess.run([exe], capture_output=True, text=True, check=False, timeout=300,
                         env={**os.environ, "LC_ALL": "C"})
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return run.stdout.split("\n")


def nvcc_builds(index: list, what: str) -> list:
    """Build each (label, arch, kernel source) with nvcc (2 workers, cached by source hash) and return
    (label, arch, kernel source, report); fails the test when nvcc is missing, prints the build time."""
    import time

    import pytest

    from polysat.backend.common.nvcc import check_many, nvcc_path
    if nvcc_path() is None:
        pytest.fail("nvcc is required for the compile checks (set POLYSAT_NVCC or put it on PATH)")
    t0 = time.perf_counter()
    reports = check_many([(ks.source, arch) for _, arch, ks in index], workers=2)
    fresh = [r for r in reports if not r.cached]
    print(f"\nnvcc: {len(index)} {what} ({len(fresh)} uncached, {sum(r.seconds for r in fresh):.1f}s) "
          f"in {time.perf_counter() - t0:.1f}s wall")
    return [(label, arch, ks, rep) for (label, arch, ks), rep in zip(index, reports, strict=True)]


def numpy_device() -> tuple:
    """(hooks, launched): runtime.regions.run_regions's device hooks on numpy (runtime/host.py: one byte arena,
    tensors are views at their planned offsets), each kernel computed by its kind's numpy meaning of the spec
    (checked to receive its operands in the spec's shapes); launched lists the specs run (each kernel's spec is
    its region's canonical form: backend/common/canonical.py)."""
    from polysat.runtime.host import host_memory
    launched = []

    def launch(kind, spec, tensors, env, out):
        assert all(tuple(tensors[n].shape) == s for n, s in spec.shapes(env).items() if n != spec.c)
        launched.append(spec.name)
        out[...] = kind.reference(spec, tensors, env)

    m = host_memory(launch)
    hooks = dict(alloc=m.alloc, view=m.view, copy_in=m.copy_in, copy_out=m.copy_out, launch=launch)
    return hooks, launched


def nvrtc_cubin(source: str, arch_flag: str) -> bytes:
    """The cubin the runtime's NVRTC path makes of source (cuda-python is part of polysat[test]; the CUDA
    headers come with the toolkit the nvcc compile checks already require): anything else fails."""
    from cuda.bindings import nvrtc  # noqa: F401 - its absence is a failure

    from polysat.backend.common.kernel_cache import _include_dirs, _nvrtc_cubin
    assert _include_dirs(), "no CUDA headers (cuda_fp16.h) for NVRTC: set CUDA_HOME to the toolkit nvcc comes from"
    cubin = _nvrtc_cubin(source, arch_flag)
    assert cubin is not None and cubin[:4] == b"\x7fELF", "NVRTC made no cubin"
    return cubin


def cli(argv: Sequence[str]) -> tuple:
    """polysat.cli.main in-process: (exit status, stdout, stderr)."""
    from polysat.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def diagnostics(stdout: str) -> list:
    """The diagnostics a failed ``--json`` run printed (its whole stdout is one JSON object)."""
    try:
        doc = json.loads(stdout)
    except json.JSONDecodeError:
        return []
    return doc.get("diagnostics", []) if isinstance(doc, dict) else []


def run_model(doc: "dict | str", inputs: dict, verb_args: Sequence[str] = ()) -> tuple:
    """``polysat run MODEL --inputs IN.npz --out OUT.npz --json`` on a model document (or raw text):
    (exit status, {output name: array}, [diagnostics], stderr)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.json")
        with open(path, "w", encoding="utf-8") as f:
            f.write(doc if isinstance(doc, str) else json.dumps(doc))
        np.savez(os.path.join(tmp, "in.npz"), **inputs)
        out = os.path.join(tmp, "out.npz")
        rc, stdout, stderr = cli(["run", path, "--inputs", os.path.join(tmp, "in.npz"), "--out", out, "--json",
                                  *verb_args])
        outs = {}
        if rc == 0:
            with np.load(out) as z:
                outs = {k: z[k] for k in z.files}
        return rc, outs, diagnostics(stdout), stderr


def compile_model(doc: "dict | str | bytes", *extra: str) -> tuple:
    """``polysat compile MODEL --json``: (exit status, [diagnostics], stdout + stderr)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.json")
        data = doc if isinstance(doc, (str, bytes)) else json.dumps(doc)
        with open(path, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        rc, stdout, stderr = cli(["compile", path, "--json", "--out", os.path.join(tmp, "dumps"), *extra])
        return rc, diagnostics(stdout), stdout + stderr


def onnx_compiled(data: bytes, origin: str) -> tuple:
    """(the bytes, the imported document, its ``--cost model`` Compilation): the fixture of the ONNX-graph tests."""
    import onnx

    from polysat.frontend.onnx import import_onnx
    from polysat.pipeline import Compilation
    doc = import_onnx(onnx.load_from_string(data), origin=origin)
    return data, doc, Compilation(doc, cost="model")


def the_region(regions, reduces: int) -> object:
    """The one region holding at least ``reduces`` REDUCE nodes (fails naming them when not exactly one)."""
    from polysat.ir.region import R, walk
    rs = [r for r in regions if sum(n.op == R.REDUCE for let in r.lets for n in walk(let.expr)) >= reduces]
    assert len(rs) == 1, [r.name for r in rs]
    return rs[0]


def targets_equal_onnxruntime(compiled: tuple, feed, output: str = "y", dtype: str = "fp16"):
    """The reference evaluator, playback and the host runtime (each kernel its kind's numpy meaning) against
    onnxruntime to 2 fp16 ulps at the output's scale (onnxruntime's fp16 MatMul and Sigmoid round otherwise; an
    fp32 model: 2^-16 of it, the sums' orders differing), and the kernels against the evaluator to the output
    dtype's rounding. ``compiled`` is :func:`onnx_compiled`'s triple, ``feed(name, shape, rng)`` an input's values
    (of ``dtype``). Returns the host runtime."""
    import onnxruntime as ort

    from polysat.cli import TARGETS
    from polysat.frontend import with_parameters
    from polysat.runtime.host import host_runtime
    from polysat.runtime.model import parameter_names
    data, doc, c = compiled
    rng = np.random.default_rng(1)
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    feeds = {i.name: feed(i.name, i.shape, rng).astype(NP_DTYPES[dtype]) for i in sess.get_inputs()}
    want = sess.run(None, feeds)[0].astype(np.float64)
    inputs = with_parameters(doc, feeds)
    rt = host_runtime(c.regions, parameter_names(doc), playback_only=False)
    outs = {t: TARGETS[t](c, inputs)[output] for t in ("reference", "playback")} | {"host": rt.run(inputs)[output]}
    tol = 2.0 ** (-9 if dtype == "fp16" else -16) * float(np.abs(want).max())
    for target, got in outs.items():
        err = float(np.abs(np.asarray(got, np.float64).reshape(want.shape) - want).max())
        assert err <= tol, (target, err, tol)
    for target in ("playback", "host"):
        assert_close(np.asarray(outs[target], np.float64), np.asarray(outs["reference"], np.float64), dtype, target)
    return rt


def gemm_on_gpu_matches_reference(spec, env=None, seed: int = 3) -> None:
    """The GEMM spec run by the sm80 skeleton (and on sm90 also by the sm90 one) against its numpy meaning;
    skipped only when no CUDA GPU is visible (the callers are ``gpu``-marked)."""
    import pytest

    from polysat.backend.common.gpu import cuda_available, device
    if not cuda_available():
        pytest.skip("no CUDA GPU visible")
    from polysat.backend.gemm.launch import run
    from polysat.backend.gemm.plan import search
    from polysat.backend.gemm.reference import random_inputs, reference
    x = random_inputs(spec, env, seed=seed)
    want = reference(spec, x, env)
    plans = [search(spec, device().arch, env, skeletons=("sm80",)).best]
    if device().arch == "sm90" and spec.in_dtype.itemsize == 2:  # fp32 operands (3xTF32): the sm80 skeleton only
        plans.append(search(spec, "sm90", env, skeletons=("sm90",)).best)
    for plan in plans:
        assert_close(np.asarray(run(spec, x, env, plan=plan), np.float64), want.astype(np.float64),
                     spec.out_dtype.value, plan.key())


def region_builds_for_both_skeletons(region, what: str, marker: str) -> None:
    """The region's kernel for sm80 and sm90: its text holds marker, and nvcc builds it with no spill, no stack
    frame and the skeleton's instructions."""
    from polysat.backend import stages
    from polysat.backend.common.nvcc import missing_instructions
    index = [(region.name, arch, stages.kernel_sources([region], arch)[0]) for arch in ("sm80", "sm90")]
    for label, arch, ks, rep in nvcc_builds(index, what):
        assert marker in ks.source, (label, arch)
        assert rep.ok and rep.spills == 0 and rep.stack_frame == 0, (label, arch, rep.log[-2000:])
        assert missing_instructions(rep, ks.skeleton) == [], (label, arch)
