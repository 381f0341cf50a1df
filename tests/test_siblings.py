"""Sibling GEMMs (rules/siblings.egg): contractions that read one operand get the alternative of one
materialized concatenation along N whose slices are the original values; the rules are sound, fire
on sibling_gemms and on the bench transformer's Q/K/V, and the merged partition computes what the
reference evaluator computes."""
from __future__ import annotations

import numpy as np
import pytest

from polysat.backend.common.gpu import cuda_available, device
from polysat.bench.models import sibling_gemms, transformer
from polysat.checker import check_rules
from polysat.egraph.cost import SizeCost
from polysat.egraph.extract import extract_classes
from polysat.egraph.graph import export
from polysat.egraph.region_synth import synthesize
from polysat.egraph.totiny import to_tiny
from polysat.ir.evaluate import evaluate
from polysat.ir.playback import playback
from polysat.ir.region_narrow import narrow_boundaries
from polysat.pipeline import Compilation


def _concats(view) -> dict:
    """Mat class of each concatenation the rules made -> the value classes holding a slice of it."""
    def is_cat(c):
        return any(n.op == "View" and any(b.op == "Binary" and b.args[0] == "ADD" for b in view.classes[n.children[0]])
                   for n in view.classes[c])
    out: dict = {}
    for cid, ns in view.classes.items():
        for n in ns:
            if n.op == "Read":
                mem = view.classes[n.children[0]]
                if any(m.op == "Mat" and is_cat(m.children[0]) for m in mem):
                    out.setdefault(n.children[0], set()).add(cid)
    return out


class _Merged(SizeCost):
    """Size, with every other spelling of a sibling's value priced out: the merged partition."""
    name = "merged-siblings"

    def __init__(self, view, cats: dict):
        self.slices = {c for cs in cats.values() for c in cs}
        self.mats = set(cats)
        self.view = view

    def enode_cost(self, node, view) -> float:
        if node.eclass in self.slices and not (node.op == "Read" and node.children[0] in self.mats):
            return 1e6
        return super().enode_cost(node, view)


def _merged_partition(doc: dict):
    c = Compilation(doc, cost="model")
    st, report = c.saturated
    view = export(st)
    cats = _concats(view)
    roots = [view.by_index[st.index[nid]] for _, nid in st.program.outputs]
    chosen, _ = extract_classes(view, roots, _Merged(view, cats))
    prog, part = to_tiny(st, view, chosen, roots)
    return c, report, cats, prog, part


def _inputs(program, rng) -> dict:
    return {n.arg["tensor_id"]: (rng.standard_normal(tuple(int(d) for d in n.shape)) * 0.5).astype(n.dtype.np)
            for n in program.inputs}


def _check_playback(c, prog, part, rng) -> None:
    xs = _inputs(c.program, rng)
    want = evaluate(c.program, xs)
    got = playback(narrow_boundaries(synthesize(prog, part)), xs)
    for name, _ in c.program.outputs:
        np.testing.assert_allclose(np.asarray(got[name], np.float32), np.asarray(want[name], np.float32), rtol=1e-3, atol=1e-3)


def test_the_sibling_rules_are_sound_and_exercised():
    rep = check_rules(cases=3, seed=5, budget=3, only=["siblings"])
    assert rep.exit_status == 0, rep.format()
    assert {v.rule.name for v in rep.verdicts} == {"mark-sibling-candidate", "mark-sibling-gemm", "mark-sibling-gemm-fp32",
                                                 "mark-sibling-group", "sibling-gemms-concat2", "sibling-gemms-concat3"}


def _fp32_read_back(width: int = 32) -> dict:
    """Q/K/V-like fp32 projections of one X, each read by a consumer (an fp32 model, as ONNX exports one)."""
    doc = sibling_gemms(tokens=8, width=width, dtype="fp32")
    doc["graph"] += [{"op": "Elementwise", "name": "relu_a", "fn": "relu", "inputs": ["Ya"], "outputs": ["Ra"]},
                     {"op": "Elementwise", "name": "mix", "fn": "mul", "inputs": ["Ra", "Yb"], "outputs": ["Z"]}]
    doc["tensors"].update(Ra={"dtype": "fp32"}, Z={"dtype": "fp32"})
    doc["signature"]["outputs"] = [{"tensor": "Z"}]
    return doc


def test_fp32_siblings_read_back_become_one_kernel_equal_to_the_reference():
    c, report, cats, prog, part = _merged_partition(_fp32_read_back())
    assert report.rules["mark-sibling-gemm-fp32"].matches >= 2 and report.rules["sibling-gemms-concat2"].matches >= 1
    assert len(cats) == 1 and len(next(iter(cats.values()))) == 2
    gemm = [k for k in part.kernels if sum(prog[i].op.name == "REDUCE" for i in k.nodes) == 2]
    assert len(gemm) == 1 and list(gemm[0].inputs).count("X") == 1
    _check_playback(c, prog, part, np.random.default_rng(0))


def test_two_sibling_gemms_become_one_kernel_reading_x_once():
    c, report, cats, prog, part = _merged_partition(sibling_gemms(tokens=8, width=32))
    assert report.rules["sibling-gemms-concat2"].matches >= 1
    assert len(cats) == 1 and len(next(iter(cats.values()))) == 2  # Ya and Yb are slices of one buffer
    gemm = [k for k in part.kernels if sum(prog[i].op.name == "REDUCE" for i in k.nodes) == 2]
    assert len(gemm) == 1 and list(gemm[0].inputs).count("X") == 1  # one kernel computes both, X read once
    _check_playback(c, prog, part, np.random.default_rng(0))


def test_q_k_v_of_the_transformer_concatenate_into_one_gemm():
    c, report, cats, prog, part = _merged_partition(transformer(1, d_model=64, heads=2, d_ff=128, seq=16))
    assert report.rules["sibling-gemms-concat3"].matches >= 1
    assert report.rules["sibling-gemms-concat2"].matches == 0  # the group of three is concatenated once, whole
    assert report.stop.value == "saturated"
    (slices,) = cats.values()  # one concatenation; Q, K, V and their consumers' views read slices of it
    assert len(slices) >= 3
    weights = {"b0_Wq", "b0_Wk", "b0_Wv"}
    gemms = [k for k in part.kernels if weights & set(k.inputs)]
    assert len(gemms) == 1 and weights <= set(gemms[0].inputs)  # one kernel computes Q, K and V
    (out,) = gemms[0].outputs
    assert tuple(prog[out].shape) == (16, 3 * 64)  # ... into one [S, 3 d_model] buffer
    _check_playback(c, prog, part, np.random.default_rng(1))


# ---- the backend: the merged region binds as one GEMM whose B is the weights' concatenation -------------

def _qkv(widths: list, tokens: int = 80, d: int = 64) -> dict:
    """X @ Wq, X @ Wk, X @ Wv with output widths `widths` (fp16)."""
    names = ["q", "k", "v"][:len(widths)]
    tensors = {"X": {"dtype": "fp16", "shape": [tokens, d]}}
    inputs, graph, outputs = [{"tensor": "X"}], [], []
    for n, w in zip(names, widths):
        tensors["W" + n] = {"dtype": "fp16", "shape": [d, w]}
        tensors["Y" + n] = {"dtype": "fp16"}
        inputs.append({"tensor": "W" + n, "role": "param"})
        graph.append({"op": "GEMM", "name": n, "inputs": ["X", "W" + n], "outputs": ["Y" + n]})
        outputs.append({"tensor": "Y" + n})
    return {"signature": {"inputs": inputs, "outputs": outputs}, "tensors": tensors, "graph": graph}


def _merged_gemm(doc: dict):
    """(compilation, the merged region's GemmSpec, its binding)."""
    from polysat.backend.kinds import bind
    c, _, _, prog, part = _merged_partition(doc)
    bound = [bind(r) for r in narrow_boundaries(synthesize(prog, part))]
    gemms = [b for kind, b in bound if kind.name == "gemm" and b.spec.b_pieces]
    assert len(gemms) == 1, [(k.name, getattr(b, "spec", b)) for k, b in bound]
    return c, gemms[0].spec, gemms[0]


def _int_inputs(program, rng) -> dict:
    """Small integers: every product and sum is exact in fp16 inputs and fp32 accumulation."""
    return {n.arg["tensor_id"]: rng.integers(-3, 4, tuple(int(d) for d in n.shape)).astype(np.float16) for n in program.inputs}


def test_the_merged_region_binds_as_one_gemm_over_the_concatenated_weights():
    from polysat.backend.gemm.reference import reference
    c, spec, binding = _merged_gemm(_qkv([64, 128, 64]))
    assert spec.b_pieces == (("Wk", 128), ("Wq", 64), ("Wv", 64))  # weight-name order
    assert (spec.m, spec.n, spec.k, spec.a) == (80, 256, 64, "X")
    xs = _inputs(c.program, np.random.default_rng(2))
    want = evaluate(c.program, xs)
    got = reference(spec, binding.arrays(xs))  # the spec's numpy meaning on the region's tensors
    np.testing.assert_allclose(got.astype(np.float32), np.concatenate([want["Yk"], want["Yq"], want["Yv"]], axis=1).astype(np.float32),
                               rtol=1e-3, atol=1e-3)


def test_a_tile_never_straddles_two_pieces_of_b():
    from polysat.backend.gemm.plan import search
    from polysat.backend.gemm.spec import GemmSpec
    spec = GemmSpec("qkv", 256, 192, 64, b="Wa|Wb", b_pieces=(("Wa", 64), ("Wb", 128)))
    for arch in ("sm80", "sm90"):
        res = search(spec, arch)
        assert all(64 % p.tile[1] == 0 for p in res.ranked)
        assert any("straddle" in p.reason for p in res.pruned)


def test_the_merged_gemm_builds_for_sm80_and_sm90a_without_spills():
    from polysat.backend.common.nvcc import check_many, missing_instructions
    from polysat.backend.gemm.plan import search
    from polysat.backend.gemm.render import render
    _, spec, _ = _merged_gemm(_qkv([64, 128, 64]))
    kernels = [render(spec, search(spec, arch).best) for arch in ("sm80", "sm90")]
    assert [k.skeleton for k in kernels] == ["sm80", "sm90"]
    assert [p.ident for p in kernels[0].params][:5] == ["A", "B0", "B1", "B2", "C"]
    for ks, rep in zip(kernels, check_many([(k.source, k.arch) for k in kernels], workers=2)):
        assert rep.ok, rep.log[-3000:]
        assert rep.spills == 0 and rep.stack_frame == 0, rep.log
        assert missing_instructions(rep, ks.skeleton) == []
        assert rep.count("wgmma.mma_async" if ks.skeleton == "sm90" else "mma.sync") > 0


def test_host_emulation_of_the_merged_gemm_equals_the_reference_evaluator(tmp_path):
    """The sm80 skeleton's own index helpers (b_piece, tile_origin, copy_coord, swz_offset, frag_coord,
    b_pick, acc_coord) on the CPU against the hardware model of tests/test_backend_emulate.py, each N
    tile reading its piece of B, compared with ir/evaluate.py on the sibling program."""
    import os
    import subprocess
    import importlib.util
    spec_ = importlib.util.spec_from_file_location("emulate", os.path.join(os.path.dirname(__file__), "test_backend_emulate.py"))
    emulate = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(emulate)  # its EMULATOR: the hardware model and the tile loader
    from polysat.backend.common.nvcc import nvcc_path
    from polysat.backend.common.render import TEMPLATES
    c, spec, binding = _merged_gemm(_qkv([64, 128, 64]))
    xs = _int_inputs(c.program, np.random.default_rng(3))
    arrays = binding.arrays(xs)
    src = emulate.EMULATOR.split("int main()")[0] + PIECES_MAIN
    (tmp_path / "pieces.cu").write_text(src)
    build = subprocess.run([nvcc_path(), "-std=c++17", "-O1", "-I", TEMPLATES, "-I", os.path.dirname(__file__),
                            "-o", str(tmp_path / "pieces"), str(tmp_path / "pieces.cu")], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-4000:]
    widths = [w for _, w in spec.b_pieces]
    head = [spec.m, spec.k, len(widths), *widths]
    data = [*arrays[spec.a].ravel()] + [v for p, _ in spec.b_pieces for v in arrays[p].ravel()]
    text = " ".join(map(str, head)) + " " + " ".join(str(float(v)) for v in data)
    run = subprocess.run([str(tmp_path / "pieces")], input=text, capture_output=True,
                         text=True, timeout=300, env={**os.environ, "LC_ALL": "C"})
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    got = np.array(run.stdout.split(), np.float32).reshape(spec.m, spec.n)
    want = evaluate(c.program, xs)
    np.testing.assert_array_equal(got, np.concatenate([want["Yk"], want["Yq"], want["Yv"]], axis=1).astype(np.float32))


PIECES_MAIN = r"""
// B concatenated along N from P pieces ([K, width] row-major each): every N tile reads its piece
template <int BM, int BN, int BK, int WM, int WN, int VA, int VB, int P>
static void run_pieces(int M, int K, const int (&width)[P], const std::vector<float>& A,
                       const std::vector<float> (&Bp)[P], std::vector<float>& C) {
  constexpr int THREADS = WM * WN * 32, MI = BM / WM / 16, NI = BN / WN / 8;
  int start[P], N = 0;
  for (int j = 0; j < P; ++j) { start[j] = N; N += width[j]; }
  C.assign(M * N, -777.0f);
  std::vector<float> sA, sB;
  for (int m0 = 0; m0 < M; m0 += BM)
    for (int n0 = 0; n0 < N; n0 += BN) {
      int lo;
      const int j = b_piece<P>(n0, start, lo);  // the kernel's own choice of piece
      static float acc[WM * WN][MI][NI][32][4];
      for (auto& w : acc) for (auto& x : w) for (auto& y : x) for (auto& z : y) for (float& v : z) v = 0.0f;
      for (int k0 = 0; k0 < K; k0 += BK) {
        load<BM, BK, VA, THREADS, true>(sA, A, m0, k0, M, K);
        load<BK, BN, VB, THREADS, false>(sB, Bp[j], n0 - lo, k0, width[j], K);
        mma_step<BM, BN, BK, WM, WN, true, false>(sA, sB, acc);
      }
      store_tile<BM, BN, WM, WN>(acc, C, m0, n0, M, N);
    }
}

int main() {
  int M, K, P;
  if (std::scanf("%d %d %d", &M, &K, &P) != 3 || P != 3) return 2;
  int width[3];
  for (int& w : width) std::scanf("%d", &w);
  std::vector<float> A(M * K), Bp[3], C;
  for (float& x : A) std::scanf("%f", &x);
  for (int j = 0; j < 3; ++j) { Bp[j].resize(K * width[j]); for (float& x : Bp[j]) std::scanf("%f", &x); }
  run_pieces<64, 64, 32, 2, 2, 8, 8, 3>(M, K, width, A, Bp, C);
  for (float v : C) std::printf("%g\n", v);
  return 0;
}
"""


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible")
@pytest.mark.parametrize("arch", ["sm80", "sm90"])
def test_the_merged_gemm_on_a_gpu_equals_its_numpy_meaning(arch):
    from polysat.backend.gemm.launch import run
    from polysat.backend.gemm.plan import search
    from polysat.backend.gemm.reference import random_inputs, reference
    from polysat.backend.gemm.spec import GemmSpec
    if arch == "sm90" and device().arch != "sm90":
        pytest.skip("the sm90 skeleton needs an sm90 GPU")
    for layout in ("row", "col"):
        spec = GemmSpec("qkv", 200, 320, 136, b="Wk|Wq|Wv", b_layout=layout,
                        b_pieces=(("Wk", 128), ("Wq", 64), ("Wv", 128)))
        xs = random_inputs(spec, seed=4)
        got = run(spec, xs, plan=search(spec, arch, skeletons=(arch,)).best)
        np.testing.assert_allclose(np.asarray(got, np.float32), reference(spec, xs).astype(np.float32), rtol=1e-3, atol=1e-3)
