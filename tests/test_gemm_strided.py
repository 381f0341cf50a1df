"""GEMM operands stored in another order than the packed one (a transposed or permuted layout).

The bench transformer's attention P.V region under ``--cost size`` reads V as a column window of [S, 768]
(viewed [S, heads, 64]: the heads are the batch, in the middle) and writes O with the heads interleaved
([S, heads, 64]): it binds to the GEMM kind with strided B and C, its GemmSpec's numpy meaning equals the
reference evaluator's playback of the region, its kernels build on the tensor-core path, and the sm80
skeleton's index helpers, run on the host against the mma model, compute the region's output.
"""
from __future__ import annotations

import importlib.util
import pathlib
import subprocess

import numpy as np
import pytest

from polysat.backend.common.gpu import cuda_available
from polysat.backend.common.spec import EpilogueOp
from polysat.backend.gemm.reference import random_inputs, reference
from polysat.backend.gemm.spec import GemmSpec
from polysat.backend.kinds import bind
from polysat.bench.models import transformer
from polysat.ir.diagnostics import PolysatError
from polysat.ir.dtypes import DType
from polysat.ir.playback import bind_region_symbols, playback
from polysat.ir.region import R, walk
from polysat.pipeline import Compilation

_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)


def _pv(regions):
    """The regions with a contraction whose output is a Transpose of it (P.V written heads-interleaved)."""
    def transposed(r) -> bool:
        nodes = [n for let in r.lets for n in walk(let.expr)]
        return any(n.op == R.REDUCE for n in nodes) and r.let_map[r.yields[0].src].op == R.TRANSPOSE
    got = [r for r in regions if transposed(r)]
    assert got, [r.name for r in regions]
    return got


@pytest.fixture(scope="module")
def pv():
    return _pv(Compilation(transformer(1), cost="size").regions)


def test_attention_pv_binds_to_gemm_with_strided_v_and_output(pv):
    for r in pv:
        kind, b = bind(r)
        assert kind.name == "gemm", r.name
        s = b.spec
        assert s.batch == (12,) and s.n == 64 and s.m == s.k == "S", s
        assert s.strided and s.b_dims == ("k", "b0", "n") and s.c_dims == ("m", "b0", "n"), s
        env = {"S": 40}
        assert s.shapes(env)[s.c] == (40, 12, 64)


def test_strided_gemm_reference_equals_playback_of_the_region(pv):
    rng = np.random.default_rng(1)
    for r in pv:
        kind, b = bind(r)
        x = {buf.name: rng.uniform(-1, 1, tuple(d if isinstance(d, int) else 37 for d in buf.memref.shape))
             .astype(np.float16) for buf in r.inputs}
        env = bind_region_symbols([r], x)
        want = playback([r], x, keep_all=True)[r.outputs[0].name]
        got = kind.reference(b.spec, b.arrays(x, env), env)
        oracle.assert_close(np.asarray(got).reshape(want.shape), want.astype(np.float64), "fp16", r.name)


def _einsum_term(dims: tuple) -> str:
    return "".join({"m": "m", "n": "n", "k": "k", "b0": "x", "b1": "y"}[d] for d in dims)


@pytest.mark.parametrize("a_dims,b_dims,c_dims", [
    ((), ("k", "b0", "n"), ("m", "b0", "n")),                  # attention P.V: heads interleaved
    (("m", "b0", "k"), ("b0", "n", "k"), ()),                   # Q.K^T read from [S, heads, d]
    (("k", "b0", "b1", "m"), (), ("m", "b0", "b1", "n")),       # two batch dims, A col-major
])
def test_permuted_operands_mean_the_einsum(a_dims, b_dims, c_dims):
    nb = 2 if "b1" in a_dims + b_dims + c_dims else 1
    a_layout = "col" if a_dims and a_dims.index("k") < a_dims.index("m") else "row"
    b_layout = "col" if b_dims and b_dims.index("n") < b_dims.index("k") else "row"
    s = GemmSpec("g", 24, 16, 40, batch=(3, 2)[:nb], a_layout=a_layout, b_layout=b_layout,
                 a_dims=a_dims, b_dims=b_dims, c_dims=c_dims)
    assert s.strided
    x = random_inputs(s)
    terms = [_einsum_term(s.dims(r)) for r in "abc"]
    want = np.einsum(f"{terms[0]},{terms[1]}->{terms[2]}", x["A"].astype(np.float64), x["B"].astype(np.float64))
    got = reference(s, x)
    assert got.shape == want.shape == s.shapes()["C"]
    oracle.assert_close(got, want, "fp16", str(s.dims("c")))


def test_layouts_a_strided_operand_cannot_take_are_refused():
    with pytest.raises(PolysatError):  # batch innermost: no unit-stride rows
        GemmSpec("g", 16, 16, 16, batch=(2,), b_dims=("k", "n", "b0"))
    with pytest.raises(PolysatError):  # batch dims apart: no single batch stride
        GemmSpec("g", 16, 16, 16, batch=(2, 3), c_dims=("b0", "m", "b1", "n"))
    with pytest.raises(PolysatError):  # the output's innermost dim is n
        GemmSpec("g", 16, 16, 16, batch=(2,), c_dims=("b0", "n", "m"))


def test_sm90_tensor_maps_carry_the_strides(pv):
    """On sm90 the strided operand's tensor map gets its row and batch strides (the batch outermost); a
    strided operand whose strides depend on a symbol size leaves the sm90 skeleton, saying why."""
    from polysat.backend.gemm.plan import search
    from polysat.backend.gemm.render import render
    _, b = bind(pv[0])
    ks = render(b.spec, search(b.spec, "sm90", {"S": 128}, skeletons=("sm90",)).best)
    assert ks.skeleton == "sm90"
    tm = {op.role: op for op in ks.tma}
    assert tm["A"].strides == () and tm["A"].dims[-1] == "batch"
    assert tm["B"].strides == (768, 64) and tm["B"].dims == ("n", "k", "batch")
    assert [p.ident for p in ks.params][-2:] == ["c_ld", "c_bstride"]
    sym = GemmSpec("g", "S", 64, "D", batch=(12,), a_dims=("m", "b0", "k"))
    res = search(sym, "sm90", {"S": 1024, "D": 64})
    assert res.best.skeleton == "sm80"
    assert any("depend on symbol sizes" in str(p) for p in res.to_json(sym)["pruned"])


def test_strided_gemm_builds_on_the_tensor_core_path(pv):
    from polysat.backend import stages
    from polysat.backend.common.nvcc import missing_instructions
    from polysat.backend.gemm.plan import search
    from polysat.backend.gemm.render import render
    index = [(r.name, arch, ks) for arch in ("sm80", "sm90") for r, ks in zip(pv, stages.kernel_sources(pv, arch))]
    index += [(r.name + " sm90 skeleton", "sm90",
               render(b.spec, search(b.spec, "sm90", {"S": 128}, skeletons=("sm90",)).best))
              for r, b in ((r, bind(r)[1]) for r in pv)]
    assert {ks.skeleton for _, _, ks in index} == {"sm80", "sm90"}
    for label, arch, ks, rep in oracle.nvcc_builds(index, "strided GEMMs"):
        assert rep.ok and rep.spills == 0, (label, arch, rep.log[-2000:])
        assert missing_instructions(rep, ks.skeleton) == [], (label, arch)  # mma.sync / wgmma.mma_async


EMULATOR = r"""
#include "polysat_gemm.cuh"
#include "sm80_host_emulator.cuh"
#include <cstdio>
#include <cstdlib>
#include <vector>
using namespace polysat;

// argv: M N K batch, then (ld, batch stride) of A, B, C, then the sizes of the A, B, C files
int main(int argc, char** argv) {
  const int M = atoi(argv[1]), N = atoi(argv[2]), K = atoi(argv[3]), batch = atoi(argv[4]);
  const long long st[6] = {atoll(argv[5]), atoll(argv[6]), atoll(argv[7]), atoll(argv[8]), atoll(argv[9]), atoll(argv[10])};
  std::vector<float> A(atoll(argv[11])), B(atoll(argv[12])), C(atoll(argv[13]), -777.0f);
  if (fread(A.data(), 4, A.size(), stdin) != A.size() || fread(B.data(), 4, B.size(), stdin) != B.size()) return 2;
  gemm_tiles<64, 64, 32, 2, 2, true, false, 8, 8>(A, B, C, M, N, K, batch, st);
  fwrite(C.data(), 4, C.size(), stdout);
  return 0;
}
"""


def test_sm80_index_helpers_compute_the_region_on_the_host(pv, tmp_path):
    """The skeleton's tile_origin / copy_coord / swz_offset / frag_coord / acc_coord and elem_offset with the
    launch's strides, on the host with the mma model: the P.V region's output equals the reference
    evaluator's playback (small integers: exact)."""
    from polysat.backend.gemm.launch import _strides, concrete_spec
    r = pv[0]
    _, b = bind(r)
    rng = np.random.default_rng(2)
    x = {buf.name: rng.integers(-3, 4, tuple(d if isinstance(d, int) else 72 for d in buf.memref.shape))
         .astype(np.float16) for buf in r.inputs}
    env = bind_region_symbols([r], x)
    want = playback([r], x, keep_all=True)[r.outputs[0].name]
    spec = concrete_spec(b.spec, env)
    ins = b.arrays(x, env)
    st = _strides(spec)
    sizes = spec.sizes()
    assert st["a_ld"] == 0 and st["b_ld"] == 768 and st["c_ld"] == 768 and st["b_bstride"] == st["c_bstride"] == 64
    lds = [st["a_ld"], st["a_bstride"], st["b_ld"], st["b_bstride"], st["c_ld"], st["c_bstride"]]
    exe = oracle.build_host_emulator(EMULATOR, tmp_path, "strided")
    a, bm = (np.ascontiguousarray(ins[n], np.float32) for n in (spec.a, spec.b))
    c_size = int(np.prod(spec.shapes()[spec.c]))
    argv = [sizes[k] for k in ("m", "n", "k", "batch")] + lds + [a.size, bm.size, c_size]
    run = subprocess.run([str(exe), *map(str, argv)], input=a.tobytes() + bm.tobytes(), capture_output=True,
                         check=False, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    got = np.frombuffer(run.stdout, np.float32)
    assert got.size == c_size
    np.testing.assert_array_equal(got.reshape(want.shape), want.astype(np.float32))


GPU_CASES = {  # (spec, env): tails in M and K, the batch in the middle of B and C, then of A, with a residual
    "pv_heads": (GemmSpec("pv", "S", 64, "S", batch=(12,), b_dims=("k", "b0", "n"), c_dims=("m", "b0", "n")),
                 {"S": 200}),
    "qk_heads": (GemmSpec("qk", 136, 72, 64, batch=(4,), b_layout="col", a_dims=("m", "b0", "k"),
                          b_dims=("b0", "n", "k"), c_dims=("m", "b0", "n"),
                          epilogue=(EpilogueOp("scale", value=0.125), EpilogueOp("residual", "r", dtype=DType.fp16))),
                 None),
}


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible")
@pytest.mark.parametrize("case", sorted(GPU_CASES))
def test_strided_gemm_on_the_gpu_matches_the_reference(case):
    """Both skeletons (sm90: the tensor maps with strides; sm80: the strided cp.async loads) against the
    numpy meaning."""
    from polysat.backend.common.gpu import device
    from polysat.backend.gemm.launch import concrete_spec, run
    from polysat.backend.gemm.plan import search
    spec, env = GPU_CASES[case]
    x = random_inputs(spec, env, seed=3)
    want = reference(spec, x, env)
    cspec = concrete_spec(spec, env)
    plans = [search(cspec, device().arch, skeletons=("sm80",)).best]
    if device().arch == "sm90":
        plans.append(search(cspec, "sm90", skeletons=("sm90",)).best)
    for plan in plans:
        got = run(spec, x, env, plan=plan)
        oracle.assert_close(np.asarray(got, np.float64), want.astype(np.float64), "fp16", f"{case} {plan.key()}")
