"""GEMM operands that read only some of the batch axes (broadcast along the others).

``C[i0, i1] = A[i1] @ B[i0, i1]`` (A stored [1, 6, 128, 64]: its leading batch dim has size 1) binds to the
GEMM kind: A reads the run b1 of the batch dims, so flat batch t reads A's matrix (t / 1) % 6. Its
GemmSpec's numpy meaning equals the reference evaluator's playback of the region; the sm80 skeleton's
index helpers (batch_index, elem_offset), run on the host against the mma model with the launch's
arguments, compute the region's output; both skeletons build with tensor-core instructions and no spills.
"""
from __future__ import annotations

import importlib.util
import pathlib
import subprocess

import numpy as np
import pytest

from polysat.backend.gemm.reference import random_inputs, reference
from polysat.backend.gemm.spec import GemmSpec, batch_map
from polysat.backend.kinds import bind
from polysat.ir.diagnostics import PolysatError
from polysat.ir.playback import bind_region_symbols, playback
from polysat.pipeline import Compilation

_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)


def _bmm(a_shape: list, b_shape: list, c_shape: list) -> dict:
    return {"signature": {"inputs": [{"tensor": "A", "role": "data", "mutability": "immutable"},
                                     {"tensor": "B", "role": "data", "mutability": "immutable"}],
                          "outputs": [{"tensor": "C"}]},
            "tensors": {"A": {"dtype": "fp16", "shape": a_shape}, "B": {"dtype": "fp16", "shape": b_shape},
                        "C": {"dtype": "fp16", "shape": c_shape}},
            "graph": [{"op": "GEMM", "name": "bmm", "inputs": ["A", "B"], "outputs": ["C"],
                       "attrs": {"acc_dtype": "fp32"}}]}


MODELS = {  # A reads the trailing batch axis only; B reads the leading one only
    "a_trailing": _bmm([1, 6, 128, 64], [4, 6, 64, 96], [4, 6, 128, 96]),
    "b_leading": _bmm([4, 6, 72, 32], [4, 1, 32, 40], [4, 6, 72, 40]),
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def region(request):
    (r,) = Compilation(MODELS[request.param], cost="size").regions
    return request.param, r


def test_a_partial_batch_operand_binds_to_gemm(region):
    case, r = region
    kind, b = bind(r)
    assert kind.name == "gemm", case
    s = b.spec
    assert s.batch == (4, 6) and not s.a_broadcast and not s.b_broadcast, s
    if case == "a_trailing":
        assert s.a_dims == ("b1", "m", "k") and s.b_dims == () and batch_map(s, "a") == (1, 6), s
    else:
        assert s.b_dims == ("b0", "k", "n") and s.a_dims == () and batch_map(s, "b") == (6, 4), s
    assert batch_map(s, "c") == (1, 24)


def test_partial_batch_reference_equals_playback_of_the_region(region):
    case, r = region
    kind, b = bind(r)
    rng = np.random.default_rng(1)
    x = {buf.name: rng.uniform(-1, 1, tuple(buf.memref.shape)).astype(np.float16) for buf in r.inputs}
    env = bind_region_symbols([r], x)
    want = playback([r], x, keep_all=True)[r.outputs[0].name]
    got = kind.reference(b.spec, b.arrays(x, env), env)
    oracle.assert_close(np.asarray(got).reshape(want.shape), want.astype(np.float64), "fp16", case)


@pytest.mark.parametrize("a_dims,b_dims", [
    (("b1", "m", "k"), ()),            # trailing run
    (("b0", "m", "k"), ("b1", "k", "n")),  # leading and trailing runs
    ((), ("b1", "b2", "k", "n")),      # two trailing of three
    (("m", "b1", "k"), ()),            # a run stored between the matrix dims
])
def test_partial_batch_spec_means_the_broadcast_einsum(a_dims, b_dims):
    nb = 3 if "b2" in b_dims else 2
    s = GemmSpec("g", 24, 16, 40, batch=(3, 2, 5)[:nb], a_dims=a_dims, b_dims=b_dims)
    x = random_inputs(s)
    letters = {"m": "m", "n": "n", "k": "k", "b0": "x", "b1": "y", "b2": "z"}
    terms = ["".join(letters[d] for d in s.dims(r)) for r in "abc"]
    want = np.einsum(f"{terms[0]},{terms[1]}->{terms[2]}", x["A"].astype(np.float64), x["B"].astype(np.float64))
    got = reference(s, x)
    assert got.shape == want.shape == s.shapes()["C"]
    oracle.assert_close(got, want, "fp16", str(a_dims + b_dims))


def test_batch_dims_that_are_not_a_run_are_refused():
    with pytest.raises(PolysatError):  # b0 and b2 without b1: no single (div, mod)
        GemmSpec("g", 16, 16, 16, batch=(2, 3, 4), a_dims=("b0", "b2", "m", "k"))
    with pytest.raises(PolysatError):  # out of order
        GemmSpec("g", 16, 16, 16, batch=(2, 3), a_dims=("b1", "b0", "m", "k"))
    with pytest.raises(PolysatError):  # the output reads every batch dim
        GemmSpec("g", 16, 16, 16, batch=(2, 3), c_dims=("b1", "m", "n"))


def test_sm90_tensor_map_batch_dim_is_the_operands_run(region):
    from polysat.backend.gemm.plan import search
    from polysat.backend.gemm.render import render
    case, r = region
    _, b = bind(r)
    ks = render(b.spec, search(b.spec, "sm90", skeletons=("sm90",)).best)
    assert ks.skeleton == "sm90"
    tm = {op.role: op for op in ks.tma}
    part, full = ("A", "B") if case == "a_trailing" else ("B", "A")
    assert tm[part].dims[-1] == f"{part.lower()}_bmod" and tm[full].dims[-1] == "batch"
    assert [p.ident for p in ks.params][-4:] == ["a_bdiv", "a_bmod", "b_bdiv", "b_bmod"]


def test_partial_batch_gemm_builds_on_the_tensor_core_path():
    from polysat.backend import stages
    from polysat.backend.common.nvcc import missing_instructions
    from polysat.backend.gemm.plan import search
    from polysat.backend.gemm.render import render
    index = []
    for case in sorted(MODELS):
        (r,) = Compilation(MODELS[case], cost="size").regions
        _, b = bind(r)
        index += [(f"{case} sm80", "sm80", stages.kernel_sources([r], "sm80")[0]),
                  (f"{case} sm90", "sm90", render(b.spec, search(b.spec, "sm90", skeletons=("sm90",)).best))]
    assert [ks.skeleton for _, _, ks in index] == ["sm80", "sm90"] * 2
    for label, arch, ks, rep in oracle.nvcc_builds(index, "partial-batch GEMMs"):
        assert rep.ok and rep.spills == 0, (label, arch, rep.log[-2000:])
        assert missing_instructions(rep, ks.skeleton) == [], (label, arch)  # mma.sync / wgmma.mma_async


EMULATOR = r"""
#include "polysat_gemm.cuh"
#include "sm80_host_emulator.cuh"
#include <cstdio>
#include <cstdlib>
#include <vector>
using namespace polysat;

// argv: M N K batch, (ld, batch stride) of A, B, C, the sizes of the A, B, C files, then a_bdiv a_bmod b_bdiv b_bmod
int main(int argc, char** argv) {
  const int M = atoi(argv[1]), N = atoi(argv[2]), K = atoi(argv[3]), batch = atoi(argv[4]);
  const long long st[6] = {atoll(argv[5]), atoll(argv[6]), atoll(argv[7]), atoll(argv[8]), atoll(argv[9]), atoll(argv[10])};
  std::vector<float> A(atoll(argv[11])), B(atoll(argv[12])), C(atoll(argv[13]), -777.0f);
  if (fread(A.data(), 4, A.size(), stdin) != A.size() || fread(B.data(), 4, B.size(), stdin) != B.size()) return 2;
  gemm_tiles<64, 64, 32, 2, 2, true, false, 8, 8>(A, B, C, M, N, K, batch, st, atoi(argv[14]), atoi(argv[15]),
                                                  atoi(argv[16]), atoi(argv[17]));
  fwrite(C.data(), 4, C.size(), stdout);
  return 0;
}
"""


def test_sm80_index_helpers_compute_the_partial_batch_region_on_the_host(tmp_path):
    """batch_index / elem_offset with the launch's arguments, on the host with the mma model: each region's
    output equals the reference evaluator's playback (small integers: exact)."""
    from polysat.backend.gemm.launch import _strides, concrete_spec
    from polysat.backend.gemm.render import BATCH_MAP
    from polysat.backend.gemm.spec import partial_batch
    exe = oracle.build_host_emulator(EMULATOR, tmp_path, "bcast")
    rng = np.random.default_rng(2)
    for case in sorted(MODELS):
        (r,) = Compilation(MODELS[case], cost="size").regions
        _, b = bind(r)
        x = {buf.name: rng.integers(-3, 4, tuple(buf.memref.shape)).astype(np.float16) for buf in r.inputs}
        env = bind_region_symbols([r], x)
        want = playback([r], x, keep_all=True)[r.outputs[0].name]
        spec = concrete_spec(b.spec, env)
        st = _strides(spec)
        bm = [v if i % 2 == 0 or partial_batch(spec, "ab"[i // 2]) else 0
              for i, v in enumerate((*batch_map(spec, "a"), *batch_map(spec, "b")))]
        assert len(bm) == len(BATCH_MAP)
        lds = [st["a_ld"], st["a_bstride"], st["b_ld"], st["b_bstride"], st["c_ld"], st["c_bstride"]]
        ins = b.arrays(x, env)
        a, bb = (np.ascontiguousarray(ins[n], np.float32) for n in (spec.a, spec.b))
        c_size = int(np.prod(spec.shapes()[spec.c]))
        sizes = spec.sizes()
        argv = [sizes[k] for k in ("m", "n", "k", "batch")] + lds + [a.size, bb.size, c_size] + bm
        run = subprocess.run([str(exe), *map(str, argv)], input=a.tobytes() + bb.tobytes(), capture_output=True,
                             check=False, timeout=300)
        assert run.returncode == 0, run.stderr[-2000:]
        got = np.frombuffer(run.stdout, np.float32)
        assert got.size == c_size
        np.testing.assert_array_equal(got.reshape(want.shape), want.astype(np.float32), err_msg=case)


@pytest.mark.gpu
@pytest.mark.parametrize("a_dims,b_dims", [(("b1", "m", "k"), ()), ((), ("b0", "k", "n"))])
def test_partial_batch_gemm_on_the_gpu_matches_the_reference(a_dims, b_dims):
    """Both skeletons (sm90: the batch coordinate of the tensor map; sm80: the batch offset) against the
    numpy meaning; M and K with tails."""
    oracle.gemm_on_gpu_matches_reference(GemmSpec("bc", 136, 96, 72, batch=(4, 6), a_dims=a_dims, b_dims=b_dims))
