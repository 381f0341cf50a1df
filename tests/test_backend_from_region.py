"""Extracted RB-SSA regions -> GemmSpec (backend/gemm/bind.py, docs/DESIGN.md §Backend).

Every recognised region is checked numerically: the spec's numpy meaning (backend/reference.py) equals CPU
playback of the region (ir/playback.py) on random inputs, rtol = atol = 1e-3. Regions come from the real
pipeline (examples and small Frontend IR models) and from a hypothesis generator of hand-built regions
(batch dims, permuted reads, broadcast operands, epilogue chains written the way the frontend lowers them).
"""
import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from polysat.backend.common.epilogue import identify

from polysat.backend.common.region_match import NoBind
from polysat.backend.gemm.bind import bind as gemm_binding
from polysat.backend.common.spec import EpilogueOp
from polysat.backend.gemm.reference import reference as gemm_reference
from polysat.ir import region as rg
from polysat.ir.dtypes import DType, round_to
from polysat.ir.expr import Expr
from polysat.ir.playback import playback
from polysat.analyses.region_validate import validate_regions
from polysat.pipeline import Compilation

F16, BF16, F32 = DType.fp16, DType.bf16, DType.fp32


# ---- helpers --------------------------------------------------------------------------------------

def model(a_shape, b_shape, dt="fp16", post=(), extra=None, trans_a=False, trans_b=False):
    """A Frontend IR GEMM followed by Elementwise ops post = [(fn, attrs, other input or None), ...]."""
    g = [{"op": "GEMM", "name": "g", "inputs": ["A", "B"], "outputs": ["C0"],
          "attrs": {"acc_dtype": "fp32", "trans_a": trans_a, "trans_b": trans_b}}]
    t = {"A": {"dtype": dt, "shape": a_shape}, "B": {"dtype": dt, "shape": b_shape}}
    ins = [{"tensor": "A"}, {"tensor": "B"}]
    cur = "C0"
    for i, (fn, attrs, other) in enumerate(post):
        g.append({"op": "Elementwise", "name": f"e{i}", "fn": fn, "inputs": [cur] + ([other] if other else []),
                  "outputs": [f"C{i + 1}"], "attrs": attrs})
        cur = f"C{i + 1}"
    for k, v in (extra or {}).items():
        t[k] = v
        ins.append({"tensor": k})
    t[cur] = {"dtype": dt}
    return {"signature": {"inputs": ins, "outputs": [{"tensor": cur}]}, "tensors": t, "graph": g}


_REGIONS: dict = {}


def regions_of(key, m):
    if key not in _REGIONS:
        _REGIONS[key] = Compilation(m).regions
    return _REGIONS[key]


def concrete(d, env):
    return d if isinstance(d, int) else int(d.evaluate(env))


def check_numerics(region, spec, env, seed=0):
    """reference(spec) == playback(region) on random inputs."""
    binding = gemm_binding(region)
    assert binding.spec == spec
    src = dict(binding.tensors)
    rng = np.random.default_rng(seed)
    k = concrete(region.axis_sizes[region.reduce_axes[0][0]], env)
    inputs = {}
    for b in region.inputs:
        shape = tuple(concrete(d, env) for d in b.memref.shape)
        x = rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)
        if b.name in (src[spec.a], src[spec.b]):
            x *= np.float32(k ** -0.25)
        inputs[b.name] = round_to(x, b.memref.dtype)
    got = playback([region], inputs, keep_all=True)[spec.c]
    ref = gemm_reference(spec, binding.arrays(inputs, env), env)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=1e-3, atol=1e-3)


def gemm_spec_from_region(region):
    binding = gemm_binding(region)
    assert not isinstance(binding, NoBind), binding
    return binding.spec


def reject_why(region) -> str:
    """The GEMM recogniser's typed no: its reason."""
    no = gemm_binding(region)
    assert isinstance(no, NoBind)
    assert no.reason.startswith("not a GEMM-family region: ")
    return no.reason


# ---- regions from the pipeline -----------------------------------------------------------------------

SQ = {"dtype": "fp16"}
PIPELINE_CASES = {
    # key: (model, {symbol: value}, [expected spec fields per region])
    "gemm_bias_relu": ("examples/gemm_bias_relu.json", {"M": 37, "N": 45, "K": 29},
                       [dict(m="M", n="N", k="K", a="A", b="B", c="C2", epilogue=["bias:n:bias", "relu"])]),
    "mlp": ("examples/mlp.json", {"T": 19},
            [dict(m="T", n=1024, k=256, a="X", b="W1", epilogue=["bias:n:b1", "gelu_tanh"]),
             dict(m="T", n=256, k=1024, b="W2", c="Y", epilogue=["bias:n:b2", "residual:X"])]),
    "batched": (model([3, 2, 40, 24], [3, 2, 24, 56]), {}, [dict(batch=(3, 2), m=40, n=56, k=24)]),
    "broadcast_b": (model([3, 40, 24], [24, 56]), {}, [dict(batch=(3,), b_broadcast=True, a_broadcast=False)]),
    "broadcast_a": (model([40, 24], [3, 24, 56]), {}, [dict(batch=(3,), a_broadcast=True, b_broadcast=False)]),
    "bf16_symbolic": (model(["M", "K"], ["K", "N"], "bf16", post=[("add", {}, "bias")],
                            extra={"bias": {"dtype": "bf16", "shape": ["N"]}}), {"M": 33, "N": 70, "K": 41},
                      [dict(m="M", n="N", k="K", in_dtype=BF16, out_dtype=BF16, epilogue=["bias:n:bias"])]),
    "trans_a": (model([24, 40], [24, 56], trans_a=True), {}, [dict(a_layout="col", b_layout="row", m=40)]),
    "trans_b": (model([40, 24], [56, 24], trans_b=True), {}, [dict(a_layout="row", b_layout="col", n=56)]),
    "trans_ab_batched": (model([2, 24, 40], [2, 56, 24], trans_a=True, trans_b=True), {},
                         [dict(a_layout="col", b_layout="col", batch=(2,))]),
    "silu": (model([40, 24], [24, 56], post=[("silu", {}, None)]), {}, [dict(epilogue=["silu"])]),
    "sigmoid": (model([40, 24], [24, 56], post=[("sigmoid", {}, None)]), {}, [dict(epilogue=["sigmoid"])]),
    "gelu_erf": (model([40, 24], [24, 56], post=[("gelu", {"approximate": "none"}, None)]), {},
                 [dict(epilogue=["gelu_erf"])]),
    "bias_m_relu": (model([40, 24], [24, 56], post=[("add", {}, "bm"), ("relu", {}, None)],
                          extra={"bm": {"dtype": "fp16", "shape": [40, 1]}}), {}, [dict(epilogue=["bias:m:bm", "relu"])]),
}


def _ops(spec):
    out = []
    for op in spec.epilogue:
        out.append({"bias": f"bias:{op.axis}:{op.tensor}", "residual": f"residual:{op.tensor}"}.get(op.kind, op.kind))
    return out


@pytest.mark.parametrize("key", list(PIPELINE_CASES))
def test_pipeline_region_becomes_the_expected_gemm_spec_and_means_the_same(key):
    m, env, expected = PIPELINE_CASES[key]
    regions = regions_of(key, m)
    assert len(regions) == len(expected)
    for r, want in zip(regions, expected):
        spec = gemm_spec_from_region(r)
        assert spec.name == r.name and spec.c == r.outputs[0].name
        for field, value in want.items():
            got = _ops(spec) if field == "epilogue" else getattr(spec, field)
            assert got == value, (key, r.name, field, got, value)
        if "epilogue" not in want:
            assert spec.epilogue == ()
        check_numerics(r, spec, env)


@pytest.mark.parametrize("example,why", [
    ("softmax", "2 reductions"),
    ("layernorm", "the reduction keeps axes [t], the output has [t, i1]"),  # its variance's mean: an operand statistic
    ("conv3x3_s2_silu", "binds 3 axes"),
    ("attention", "3 reductions"),
])
def test_non_gemm_example_regions_get_no_kernel_template(example, why):
    regions = regions_of(example, f"examples/{example}.json")
    assert why in reject_why(regions[0])


def test_attention_second_region_is_a_batched_gemm():
    r = regions_of("attention", "examples/attention.json")[1]
    spec = gemm_spec_from_region(r)
    assert len(spec.batch) == 2 and spec.a_layout == spec.b_layout == "row"
    check_numerics(r, spec, {"B": 2, "H": 3, "M": 17, "N": 21})


def test_tensor_multiplier_in_the_epilogue_is_rejected():
    m = model([40, 24], [24, 56], post=[("mul", {}, "s")], extra={"s": {"dtype": "fp16", "shape": [1]}})
    assert "not a bias, residual, cast or read-free fp32 function" in reject_why(regions_of("mul_tensor", m)[0])


SELF_GRAM = {"signature": {"inputs": [{"tensor": "X"}], "outputs": [{"tensor": "G"}]},
             "tensors": {"X": {"dtype": "fp16", "shape": [40, 24]}, "G": {"dtype": "fp16"}},
             "graph": [{"op": "GEMM", "name": "g", "inputs": ["X", "X"], "outputs": ["G"], "attrs": {"trans_b": True}}]}


def test_a_tensor_in_two_roles_is_bound_under_an_alias():
    """x @ x^T and x @ W + x: the template binds each parameter once, so the second role gets an alias that
    the binding maps back to the region's tensor."""
    r = regions_of("self_gram", SELF_GRAM)[0]
    b = gemm_binding(r)
    assert (b.spec.a, b.spec.b, b.spec.b_layout) == ("X", "X.b", "col") and b.tensors == (("X", "X"), ("X.b", "X"))
    check_numerics(r, b.spec, {})
    m = model([40, 24], [24, 24], post=[("add", {}, "A")])
    r = regions_of("self_residual", m)[0]
    b = gemm_binding(r)
    assert _ops(b.spec) == ["residual:A.residual"] and dict(b.tensors)["A.residual"] == "A"
    check_numerics(r, b.spec, {})


# ---- hand-built regions ---------------------------------------------------------------------------------

LOG2E = 1.0 / math.log(2.0)


class _RB:
    """Builds epilogue expressions the way frontend/lower_elementwise.py writes them."""

    def __init__(self):
        self.lets = []

    def let(self, e):
        name = f"v{len(self.lets)}"
        self.lets.append(rg.Let(name, e))
        return rg.ref(name, e)

    def c(self, v):
        return rg.const(v, F32)

    def op(self, fn, a, b=None):
        a = self.c(a) if isinstance(a, float) else a
        if b is None:
            return self.let(rg.unary(fn, a, F32))
        b = self.c(b) if isinstance(b, float) else b
        return self.let(rg.binary(fn, a, b, DType.bool if fn.startswith("cmp") else F32))

    def sigmoid(self, x):
        return self.op("reciprocal", self.op("add", self.op("exp2", self.op("mul", x, -LOG2E)), 1.0))

    def tanh(self, x):
        return self.op("sub", self.op("mul", self.sigmoid(self.op("mul", x, 2.0)), 2.0), 1.0)

    def erf(self, x):
        ax = self.op("max", x, self.op("neg", x))
        t = self.op("reciprocal", self.op("add", self.op("mul", ax, 0.3275911), 1.0))
        poly = self.c(1.061405429)
        for a in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
            poly = self.op("add", self.op("mul", poly, t), a)
        poly = self.op("mul", poly, t)
        e = self.op("exp2", self.op("mul", self.op("neg", self.op("mul", x, x)), LOG2E))
        y = self.op("sub", self.c(1.0), self.op("mul", poly, e))
        neg = self.op("cmplt", x, 0.0)
        return self.let(rg.select(neg, self.op("neg", y), y, F32))

    def act(self, kind, x):
        if kind == "relu":
            return self.op("max", x, 0.0)
        if kind == "sigmoid":
            return self.sigmoid(x)
        if kind == "silu":
            return self.op("mul", x, self.sigmoid(x))
        if kind == "gelu_tanh":
            inner = self.op("mul", self.op("add", x, self.op("mul", self.op("mul", self.op("mul", x, x), x), 0.044715)),
                            math.sqrt(2.0 / math.pi))
            return self.op("mul", self.op("mul", x, 0.5), self.op("add", self.tanh(inner), 1.0))
        if kind == "gelu_erf":
            return self.op("mul", self.op("mul", x, 0.5), self.op("add", self.erf(self.op("mul", x, 1.0 / math.sqrt(2.0))), 1.0))
        raise KeyError(kind)


def build_region(nb, a_col, b_col, a_bcast, b_bcast, in_dt, out_dt, epilogue, sizes, swap_out=False):
    """A GEMM region: C[b.., m, n] = epilogue(sum_k A * B); epilogue items are (kind, arg)."""
    bat = [f"b{i}" for i in range(nb)]
    M, N, K = sizes[:3]
    bsz = list(sizes[3:3 + nb])
    axis_sizes = dict(zip(bat, bsz)) | {"m": M, "n": N, "k": K}
    names = list(axis_sizes)
    inputs = []

    def tensor(name, axes, dt):
        inputs.append(rg.Buffer(name, rg.MemRef(tuple(axis_sizes[a] for a in axes), dt)))
        return rg.read(name, [Expr.of(a) for a in axes], dt, names)

    a = tensor("A", ([] if a_bcast else bat) + (["k", "m"] if a_col else ["m", "k"]), in_dt)
    b = tensor("B", ([] if b_bcast else bat) + (["n", "k"] if b_col else ["k", "n"]), in_dt)
    rb = _RB()
    out_axes = tuple(bat + (["n", "m"] if swap_out else ["m", "n"]))
    x = rb.let(rg.reduce("sum", ("k",), rg.binary("mul", rg.unary("cast", a, F32), rg.unary("cast", b, F32), F32),
                         F32, axis_order=out_axes + ("k",)))
    for i, (kind, arg) in enumerate(epilogue):
        if kind == "bias":
            t = rb.let(rg.unary("cast", tensor(f"t{i}", [arg], F16), F32))
            x = rb.op("add", x, rg.broadcast(t, x.axes, tuple(axis_sizes[a] for a in x.axes)))
        elif kind == "residual":
            t = rb.let(rg.unary("cast", tensor(f"t{i}", list(out_axes), BF16), F32))
            x = rb.op("add", t, x)
        elif kind == "scale":
            x = rb.op("mul", rb.c(arg), x)
        elif kind == "cast":
            x = rb.op("cast", rb.let(rg.unary("cast", x, arg)))
        else:
            x = rb.act(kind, x)
    out = rg.Buffer("C", rg.MemRef(tuple(axis_sizes[a] for a in out_axes), out_dt), "gmem", True)
    return rg.Region("g", tuple((a, axis_sizes[a]) for a in out_axes), (("k", K),), tuple(inputs), (out,),
                     tuple(rb.lets), (rg.Yield(rb.lets[-1].name, "C", out_dt, out_axes),))


def _expected_ops(epilogue, swap_out):
    """The EpilogueOps the generator meant; with a swapped output the bias axes swap roles too."""
    out = []
    for i, (kind, arg) in enumerate(epilogue):
        if kind == "bias":
            out.append(EpilogueOp("bias", f"t{i}", "n" if (arg == "n") != swap_out else "m", F16))
        elif kind == "residual":
            out.append(EpilogueOp("residual", f"t{i}", dtype=BF16))
        elif kind == "scale":
            out.append(EpilogueOp("scale", value=arg))
        elif kind == "cast":
            out.append(EpilogueOp("cast", dtype=arg))
        else:
            out.append(EpilogueOp(kind))
    return out


def _canonical(ops):
    """Equal meanings, equal lists: consecutive scales multiply, relu after relu or sigmoid changes nothing
    (the matcher recognises the largest pointwise block it can, so it sees these as one op)."""
    out = []
    for op in ops:
        if out and op.kind == "scale" and out[-1][0] == "scale":
            out[-1] = ("scale", round(out[-1][1] * op.value, 9))
        elif out and op.kind == "relu" and out[-1][0] in ("relu", "sigmoid"):
            continue
        else:
            out.append((op.kind, round(op.value, 9) if op.kind == "scale" else op.tensor, op.axis if op.kind == "bias" else None,
                        op.dtype))
    return [o[:2] if o[0] == "scale" else o for o in out]


EPI = st.one_of(st.tuples(st.sampled_from(["bias"]), st.sampled_from(["m", "n"])),
                st.tuples(st.just("residual"), st.none()),
                st.tuples(st.just("scale"), st.sampled_from([0.125, -2.0, 3.0])),
                st.tuples(st.just("cast"), st.sampled_from([F16, BF16])),
                st.tuples(st.sampled_from(["relu", "sigmoid", "silu", "gelu_tanh", "gelu_erf"]), st.none()))


@settings(max_examples=25)
@given(nb=st.integers(0, 2), a_col=st.booleans(), b_col=st.booleans(), bcast=st.sampled_from(["", "a", "b"]),
       in_dt=st.sampled_from([F16, BF16]), out_dt=st.sampled_from([F16, BF16, F32]),
       epilogue=st.lists(EPI, max_size=3), sizes=st.lists(st.integers(1, 9), min_size=5, max_size=5),
       swap_out=st.booleans())
def test_generated_gemm_regions_are_recognised_exactly(nb, a_col, b_col, bcast, in_dt, out_dt, epilogue, sizes, swap_out):
    bcast = bcast if nb else ""
    # relu, a negative scale, relu is the zero function: the matcher rightly sees `scale 0` (numerics below
    # still hold); such chains have no unique spelling to compare with
    assume(not any(a[0] == "relu" and b[0] == "scale" and b[1] < 0 and c[0] == "relu"
                   for a, b, c in zip(epilogue, epilogue[1:], epilogue[2:])))
    r = build_region(nb, a_col, b_col, bcast == "a", bcast == "b", in_dt, out_dt, epilogue, sizes, swap_out)
    assert not [d for d in validate_regions([r]) if d.is_error]
    spec = gemm_spec_from_region(r)
    # yield [.., n, m] makes the operand that reads n the template's A (C^T = B^T A^T)
    assert (spec.a, spec.b) == (("B", "A") if swap_out else ("A", "B"))
    assert (spec.a_broadcast, spec.b_broadcast) == ((bcast == "b", bcast == "a") if swap_out else (bcast == "a", bcast == "b"))
    assert spec.batch == tuple(sizes[3:3 + nb]) and spec.in_dtype == in_dt and spec.out_dtype == out_dt
    if not swap_out:
        assert (spec.a_layout, spec.b_layout) == ("col" if a_col else "row", "col" if b_col else "row")
        assert (spec.m, spec.n, spec.k) == tuple(sizes[:3])
    assert _canonical(spec.epilogue) == _canonical(_expected_ops(epilogue, swap_out))
    check_numerics(r, spec, {})


def test_rejections_say_exactly_what_does_not_fit():
    base = build_region(0, False, False, False, False, F16, F16, [], [8, 8, 8])
    ok = gemm_spec_from_region(base)
    assert ok.epilogue == ()
    # a shifted read is not a permutation of the axes
    acc = base.lets[0].expr
    mul = acc.src[0]
    a_read = mul.src[0].src[0]
    shifted = rg.read("A", (Expr.of("m") + 1, Expr.of("k")),
                      F16, ["m", "n", "k"])
    body = rg.binary("mul", rg.unary("cast", shifted, F32), mul.src[1], F32)
    r = rg.Region("g", base.iters, base.reduce_axes, base.inputs, base.outputs,
                  (rg.Let("v0", rg.reduce("sum", ("k",), body, F32, axis_order=["m", "n", "k"])),), base.yields)
    assert "not an axis variable" in reject_why(r)
    assert a_read.arg[0] == "A"
    # fp32 operands bind (3xTF32 on the sm80 skeleton); an fp32 operand beside a widened fp16 one does not
    f32 = build_region(0, False, False, False, False, F16, F16, [], [8, 8, 8])

    def with_reads(a_dt, b_dt):
        a = rg.read("A", (Expr.of("m"), Expr.of("k")), a_dt, ["m", "n", "k"])
        return rg.Region("g", f32.iters, f32.reduce_axes,
                         (rg.Buffer("A", rg.MemRef(f32.inputs[0].memref.shape, a_dt)),
                          rg.Buffer("B", rg.MemRef(f32.inputs[1].memref.shape, b_dt))), f32.outputs,
                         (rg.Let("v0", rg.reduce("sum", ("k",), rg.binary(
                             "mul", a if a_dt == F32 else rg.unary("cast", a, F32),
                             rg.read("B", (Expr.of("k"), Expr.of("n")), F32, ["m", "n", "k"]), F32), F32,
                             axis_order=["m", "n", "k"])),), f32.yields)
    got = gemm_binding(with_reads(F32, F32))
    assert not isinstance(got, NoBind) and got.spec.in_dtype == F32, got
    assert "the operands are fp16 and fp32" in reject_why(with_reads(F16, F32))
    # a max-reduction is not a GEMM
    rmax = rg.Region("g", base.iters, base.reduce_axes, base.inputs, base.outputs,
                     (rg.Let("v0", rg.reduce("max", ("k",), mul, F32, axis_order=["m", "n", "k"])),), base.yields)
    assert "reduction is max" in reject_why(rmax)


def test_partial_batch_broadcast_reads_its_run_of_batch_axes():
    r = build_region(2, False, False, False, False, F16, F16, [], [4, 4, 4, 2, 3])
    a = r.inputs[0]
    # A reads only the second batch axis
    a2 = rg.Buffer("A", rg.MemRef((3, 4, 4), F16))
    names = ["b0", "b1", "m", "n", "k"]
    body = rg.binary("mul", rg.unary("cast", rg.read("A", [Expr.of(v) for v in ("b1", "m", "k")], F16, names), F32),
                     r.lets[0].expr.src[0].src[1], F32)
    r2 = rg.Region("g", r.iters, r.reduce_axes, (a2,) + r.inputs[1:], r.outputs,
                   (rg.Let("v0", rg.reduce("sum", ("k",), body, F32, axis_order=names)),), r.yields)
    assert a.name == "A"
    spec = gemm_spec_from_region(r2)  # A is broadcast along b0: it reads matrix b1 of the flat batch index
    assert spec.a_dims == ("b1", "m", "k") and spec.batch == (2, 3)


def test_identify_activations_on_the_probe():
    from polysat.backend.common.epilogue import activation_on as _activation, PROBE as _PROBE
    for kind in ("relu", "gelu_tanh", "gelu_erf", "silu", "sigmoid"):
        assert [op.kind for op in identify(_activation(kind, _PROBE))] == [kind]
    assert identify(_PROBE) == []
    assert identify(0.5 * _PROBE)[0].value == pytest.approx(0.5)
    assert identify(np.tanh(_PROBE)) is None
    assert identify(_activation("gelu_tanh", _PROBE) * 1.001) is None
