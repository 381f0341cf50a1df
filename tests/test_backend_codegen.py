"""CUDA text from the one template: deterministic, standalone, parameterised only by spec + plan."""
import os

from hypothesis import given, strategies as st

from polysat.backend.stages import write_kernel
from polysat.backend.common.render import TEMPLATES
from polysat.backend.gemm.render import render
from polysat.backend.common.spec import EpilogueOp
from polysat.backend.gemm.spec import GemmSpec
from polysat.backend.gemm.plan import search
from polysat.ir.dtypes import DType


def test_one_template_family_over_the_handwritten_skeleton():
    """Every kernel template (GEMM, conv, ...) only fills parameters into the one hand-written skeleton it
    inlines ({{ header }}); none carries inline PTX of its own."""
    files = sorted(os.listdir(TEMPLATES))
    kernels = [f for f in files if f.endswith(".cu.j2")]
    assert {"gemm.cu.j2", "conv.cu.j2"} <= set(kernels)
    assert {"polysat_gemm.cuh", "polysat_wgmma.cuh"} <= set(files)
    for f in kernels:
        with open(os.path.join(TEMPLATES, f), encoding="utf-8") as fh:
            text = fh.read()
        assert "{{ header }}" in text and "asm" not in text, f


def test_source_is_standalone_and_deterministic():
    spec = GemmSpec("g", 512, 512, 512, epilogue=(EpilogueOp("bias", "bias", dtype=DType.fp16), EpilogueOp("relu")))
    a, b = (render(spec, search(spec, "sm90").best) for _ in range(2))
    assert a.source == b.source and a.digest == b.digest
    assert '#include "' not in a.source  # the skeleton header is inlined
    assert "polysat::gemm_sm90<" in a.source and "__grid_constant__ const CUtensorMap" not in a.source.split("namespace {")[0]
    assert "const __grid_constant__ CUtensorMap tmA" in a.source
    assert [p.ident for p in a.params] == ["tmA", "tmB", "C", "t_bias", "M", "N", "K", "batch", "c_ld", "c_bstride"]
    c = render(spec, search(spec, "sm80").best)
    assert [p.kind for p in c.params] == ["ptr", "ptr", "ptr", "ptr", "i32", "i32", "i32", "i32"] + ["i64"] * 6
    assert [p.ident for p in c.params][-6:] == ["a_bstride", "b_bstride", "a_ld", "b_ld", "c_ld", "c_bstride"]
    assert "polysat::gemm_sm80<" in c.source and c.digest != a.digest


def test_dumps_write_files(tmp_path):
    spec = GemmSpec("my model/layer 1", 100, 64, 32)
    res = search(spec, "sm80")
    ks = render(spec, res.best)
    path = write_kernel(ks, str(tmp_path))
    assert os.path.basename(path).startswith("polysat_my_model_layer_1_")
    assert open(path, encoding="utf-8").read() == ks.source
    assert res.to_json(spec)["chosen"]["cache"][0]["tensor"] == spec.a


@given(kinds=st.lists(st.sampled_from(["relu", "gelu_tanh", "gelu_erf", "silu", "sigmoid", "scale", "cast", "bias_m", "bias_n",
                                       "residual"]), max_size=6),
       arch=st.sampled_from(["sm80", "sm90"]), dt=st.sampled_from([DType.fp16, DType.bf16]))
def test_every_epilogue_op_is_rendered_in_order(kinds, arch, dt):
    ops = []
    for i, kd in enumerate(kinds):
        if kd.startswith("bias"):
            ops.append(EpilogueOp("bias", f"b{i}", kd[-1], DType.fp32))
        elif kd == "residual":
            ops.append(EpilogueOp("residual", f"r{i}", dtype=dt))
        elif kd == "scale":
            ops.append(EpilogueOp("scale", value=0.25 * (i + 1)))
        elif kd == "cast":
            ops.append(EpilogueOp("cast", dtype=DType.bf16))
        else:
            ops.append(EpilogueOp(kd))
    spec = GemmSpec("g", 256, 128, 64, in_dtype=dt, epilogue=tuple(ops))
    src = render(spec, search(spec, arch).best).source
    gen = src[src.index("_epi {"):]
    body = gen[gen.index("float apply("):gen.index("return v;")]
    lines = [ln.strip() for ln in body.splitlines()[1:] if ln.strip() and not ln.strip().startswith("(void)")]
    assert len(lines) == len(ops)
    for ln, op in zip(lines, ops, strict=True):
        if op.kind == "bias":
            assert ln.endswith(f"[{op.axis}]);")
        elif op.kind == "scale":
            assert ln.startswith("v *=") and float(ln.split("=")[1].strip(" f;")) == op.value
        elif op.kind == "residual":
            assert "* ldc + n]" in ln  # C's (and the residual's) row stride
        elif op.kind == "cast":
            assert "round_to<__nv_bfloat16>" in ln
        else:
            assert f"act_{op.kind}(v)" in ln


def test_shapes_with_one_plan_share_one_kernel():
    plan = search(GemmSpec("g", 1000, 512, 512), "sm90").best
    a = render(GemmSpec("g", 1000, 512, 512), plan)
    b = render(GemmSpec("g", 3000, 4096, 64), plan)  # sizes are runtime arguments
    c = render(GemmSpec("g", 1000, 512, 512, out_dtype=DType.fp32), plan)
    assert a.source == b.source and a.name == b.name
    assert c.name != a.name
