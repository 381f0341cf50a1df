"""Attention with rotary embeddings as exporters write it, with 4 KV heads and grouped-query (2 KV heads read in
place by 2 query heads each, never a repeat_kv copy) (bench/corpora/scale_models.py's fp16 LLaMA at toy sizes:
Q and K rotated in fp16, ``cast:fp16(Q K^T) / sqrt(d)`` in fp16, a boolean causal mask tensor, softmax in fp32,
the heads merged): the attention kind binds the region with Q/K prologues (backend/attention/prologue.py), a score
program and a mask tensor.

* the prologues compute exactly numpy's fp16 rotary embedding (an independent oracle: numpy rounds each fp16
  op), and the kernel's numpy meaning equals CPU playback of the region (within the fp16 output rounding: the
  region rounds P at the running max);
* a prologue that reads outside its projection's rows where no guard discards the value is refused;
* the spec survives its JSON form; softmax_scores refuses score programs and mask tensors;
* the generated kernels build with nvcc for sm_80 and sm_90a (the sm80 skeleton: the sm90 one refuses
  prologues) without spills.
"""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

from polysat.backend import kinds
from polysat.backend.attention import prologue
from polysat.backend.attention.plan import choose_plan
from polysat.backend.attention.render import render
from polysat.backend.attention.spec import AttentionSpec
from polysat.ir.dtypes import DType
from polysat.ir.playback import playback

HERE = pathlib.Path(__file__).parent
_spec = importlib.util.spec_from_file_location("polysat_test_oracle", HERE / "oracle.py")
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)

S, DH, HEADS = 16, 16, 4


@pytest.fixture(scope="module", params=[HEADS, 2], ids=["mha", "gqa"])
def compiled(request):
    import onnx
    from polysat.bench.corpora.scale_models import llama
    from polysat.frontend.onnx import import_onnx
    from polysat.pipeline import Compilation
    m = llama(1, d=DH * HEADS, heads=HEADS, kv=request.param, ffn=128, s=S, vocab=100, dtype="fp16")
    return Compilation(import_onnx(onnx.load_from_string(m.SerializeToString()), origin="rope.onnx"), cost="model")


@pytest.fixture(scope="module")
def region(compiled):
    (r,) = [r for r in compiled.regions if any(x.name.startswith("rope_cos") for x in r.inputs)]
    return r


def _inputs(r, rng):
    out = {}
    for x in r.inputs:
        shape = tuple(x.memref.shape)
        if x.memref.dtype == DType.bool:
            out[x.name] = np.tril(np.ones((shape[-2], shape[-1]), bool)).reshape(shape)
        else:
            out[x.name] = rng.uniform(-2, 2, shape).astype(np.float16)
    return out


def test_rope_attention_binds_the_attention_kind_with_prologues(region):
    kind, b = kinds.bind(region)
    assert kind.name == "attention"
    s = b.spec
    assert s.q_pro is not None and s.k_pro is not None and s.mask is not None and s.fn
    assert s.batch == (HEADS,) and s.d == DH and s.cols[3] == (0, HEADS * DH, DH)
    kv = region.inputs[[x.name for x in region.inputs].index(s.q)].memref.shape[-1] // DH - HEADS  # K and V heads
    assert s.kv_rep == HEADS // (kv // 2)  # grouped-query: each KV head read in place by kv_rep query heads
    assert {x.role for x in s.q_pro.sources} == {"win", "mk", "col"}  # x, cos/sin, rotate_half's halves
    assert AttentionSpec.from_json(s.to_json()) == s


def test_prologue_is_numpys_fp16_rotary_embedding(region):
    _, b = kinds.bind(region)
    s = b.spec
    ins = b.arrays(_inputs(region, np.random.default_rng(0)))
    for pro, rows in ((s.q_pro, S), (s.k_pro, S)):
        got = prologue.evaluate(pro, ins, rows, HEADS, DH, DType.fp16)
        off, ld, hs = pro.window()
        x = np.asarray(ins[pro.sources[0].tensor]).reshape(rows, ld)
        tabs = [t for t in pro.sources if t.role == "mk"]
        cos, sin = (np.asarray(ins[t.tensor]).reshape(rows, t.ld)[:, :DH] for t in tabs)
        for h in range(HEADS):
            at = off + (h // pro.rep) * hs
            xh = x[:, at: at + DH]  # fp16: numpy rounds each op to fp16
            rot = np.concatenate([-xh[:, DH // 2:], xh[:, :DH // 2]], axis=-1)
            want = xh * cos + rot * sin
            np.testing.assert_array_equal(got[h], want.astype(np.float32), err_msg=f"head {h}")


@pytest.mark.parametrize("seed", [0, 1])
def test_kernel_meaning_equals_playback(region, seed):
    kind, b = kinds.bind(region)
    ins = _inputs(region, np.random.default_rng(seed))
    want = playback([region], ins, keep_all=True)[region.outputs[0].name]
    got = np.asarray(kind.reference(b.spec, b.arrays(ins))).reshape(want.shape)
    oracle.assert_close(got, want, "fp16", f"rope attention, seed {seed}")


def test_layer_on_the_host_runtime_equals_the_reference_evaluator(compiled):
    """The whole toy layer, each kernel computed by its kind's numpy meaning (runtime/host.py), RoPE + attention
    by the attention kind: the reference evaluator's answer within half an fp16 ulp of the output's scale."""
    from polysat.cli import random_inputs
    from polysat.ir.evaluate import evaluate
    from polysat.runtime.host import host_runtime
    from polysat.runtime.model import parameter_names
    ins = {k: (v * 0.5).astype(v.dtype) if v.dtype == np.float16 else v
           for k, v in random_inputs(compiled.program, {}, 0).items()}
    rt = host_runtime(compiled.regions, parameter_names(compiled.doc), playback_only=False)
    got, ref = rt.run(ins), evaluate(compiled.program, ins)
    assert [st.kind.name for st in rt.steps if not st.on_cpu].count("attention") == 1
    for k, want in ref.items():
        w = want.astype(np.float64)
        assert np.abs(got[k].astype(np.float64) - w).max() <= 2.0 ** -11 * np.abs(w).max(), k


def test_unguarded_reads_outside_the_row_are_refused():
    win = prologue.Src("X", "win", DType.fp16, off=-4, ld=32, hs=16)
    shifted = prologue.OperandPrologue((win,), (("round_fp16", (("x", 0),)),))
    assert prologue._reads_outside_unguarded(shifted, 2, 16, DType.fp16)
    guard = prologue.Src("", "col", DType.bool, guards=((1, -4),))  # c >= 4: the shifted read stays in the row
    guarded = prologue.OperandPrologue((win, guard), (("select", (("p", 1), ("x", 0), ("c", 0.0))),
                                                     ("round_fp16", (("s", 0),))))
    assert not prologue._reads_outside_unguarded(guarded, 2, 16, DType.fp16)


def test_kernels_build_without_spills(region):
    _, b = kinds.bind(region)
    index = []
    for arch in ("sm80", "sm90"):
        ks = render(b.spec, choose_plan(b.spec, arch))
        assert ks.skeleton == "sm80"  # the sm90 skeleton takes no prologue
        assert [p.ident for p in ks.params][3:6] == ["X0", "X1", "X2"]
        index.append((f"rope/{arch}", arch, ks))
    for label, arch, ks, rep in oracle.nvcc_builds(index, "rope attention kernels"):
        assert rep.ok, f"{label}:\n{rep.log[-3000:]}"
        assert rep.spills == 0 and rep.stack_frame == 0, f"{label} spills:\n{rep.log}"
        assert rep.count("mma.sync") > 0


@pytest.mark.gpu
@pytest.mark.parametrize("algo", ["online_softmax", "streaming_softmax_2pass"])
def test_rope_attention_on_the_gpu_equals_its_meaning(region, algo):
    """The generated kernel (prologue tiles, score program, mask tensor) on a CUDA GPU against the spec's numpy
    meaning: within P's rounding at the running max (online) and the fp16 output rounding."""
    from polysat.backend.common.gpu import cuda_available
    if not cuda_available():
        pytest.skip("no CUDA GPU visible")
    from polysat.backend.attention.launch import run
    kind, b = kinds.bind(region)
    ins = b.arrays(_inputs(region, np.random.default_rng(3)))
    got = run(b.spec, ins, algo=algo)
    want = kind.reference(b.spec, ins)
    oracle.assert_close(np.asarray(got).reshape(want.shape), want, "fp16", f"rope attention on the GPU, {algo}")
