"""The CUDA runtime's host-side checks, which need no GPU: foreign tensors are validated with coded
diagnostics, symbols are specialised per call, and a missing GPU is reported, never a traceback."""
import importlib.util
import pathlib

import numpy as np
import pytest

from polysat.backend.common.device_tensors import device_pointer

from polysat.backend.common.gpu import cuda_available, Device, device

from polysat.backend.common.kernel_cache import cubin_for

from polysat.backend.gemm.launch import concrete_spec, prepare as prepare_gemm
from polysat.backend.gemm.spec import GemmSpec
from polysat.ir.diagnostics import PolysatError
from polysat.ir.dtypes import DType

_oracle_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_oracle_spec)
_oracle_spec.loader.exec_module(oracle)


class FakeCuda:
    def __init__(self, shape, typestr="<f2", strides=None, ptr=4096):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False), "version": 3,
                                         "strides": strides}


def _code(fn):
    with pytest.raises(PolysatError) as e:
        fn()
    return e.value.diagnostics[0].code


def test_foreign_tensors_are_checked():
    assert device_pointer("A", FakeCuda((4, 8)), (4, 8), DType.fp16)[0] == 4096
    assert device_pointer("A", FakeCuda((4, 8), strides=(16, 2)), (4, 8), DType.fp16)[0] == 4096
    assert _code(lambda: device_pointer("A", FakeCuda((4, 9)), (4, 8), DType.fp16)) == "E1002"
    assert _code(lambda: device_pointer("A", FakeCuda((4, 8), "<f4"), (4, 8), DType.fp16)) == "E1009"
    assert _code(lambda: device_pointer("A", FakeCuda((4, 8), strides=(2, 8)), (4, 8), DType.fp16)) == "E1008"
    assert _code(lambda: device_pointer("A", object(), (4, 8), DType.fp16)) == "E1008"


def test_dlpack_is_parsed_and_cpu_tensors_refused():
    a = np.zeros((3, 5), np.float16)
    with pytest.raises(PolysatError, match="not on a CUDA device"):
        device_pointer("A", a, (3, 5), DType.fp16)  # numpy exports DLPack (kDLCPU)


def test_symbols_are_specialised_per_call():
    spec = GemmSpec("g", "M", 64, "K", batch=("B",))
    c = concrete_spec(spec, {"M": 3, "K": 16, "B": 2})
    assert (c.m, c.n, c.k, c.batch) == (3, 64, 16, (2,)) and c.is_static
    assert _code(lambda: concrete_spec(spec, {"M": 3})) == "E1305"


def test_no_gpu_is_reported_not_raised():
    if cuda_available():
        assert device().arch in ("sm80", "sm90")
    else:
        assert _code(lambda: device()) == "E1502"


def test_kernels_compile_to_cached_cubins(tmp_path, monkeypatch):
    from polysat.backend.gemm.plan import search
    from polysat.backend.gemm.render import render

    monkeypatch.setenv("POLYSAT_KERNEL_CACHE", str(tmp_path))
    spec = GemmSpec("g", 96, 80, 72, in_dtype=DType.bf16)
    ks = render(spec, search(spec, "sm90").best)
    first = cubin_for(ks, "sm90")  # NVRTC when installed, else nvcc
    assert first[:4] == b"\x7fELF"
    files = list(tmp_path.iterdir())
    assert len(files) == 1 and files[0].suffix == ".cubin"
    files[0].write_bytes(b"\x7fELF-cached".ljust(64, b"\0"))
    assert cubin_for(ks, "sm90") == b"\x7fELF-cached".ljust(64, b"\0")  # keyed by source hash + arch: served from disk
    files[0].write_bytes(b"\x7fELF-c")  # a truncated cubin is compiled again
    assert cubin_for(ks, "sm90") == first


def test_a_plan_that_assumes_alignment_is_refused_for_an_unaligned_shape():
    from polysat.backend.gemm.plan import search

    spec = GemmSpec("g", "M", 64, "K")
    plan = search(spec, "sm80").best  # planned for symbols: assumes K % 8 == 0
    assert plan.assumes == ("K % 8 == 0",)
    with pytest.raises(PolysatError, match="vector widths"):
        prepare_gemm(spec, {}, {"M": 4, "K": 12}, plan=plan, dev=Device(0, "sm80", 108, None))


def test_cubins_are_built_for_the_device_they_load_on():
    """A cubin only loads on its own major version: Hopper gets sm_90a, every other device its own sm_XY."""
    from polysat.backend.common.kernel_cache import _gpu_arch_flag, _nvcc_arch
    assert _gpu_arch_flag("sm90", "sm90", (9, 0)) == "sm_90a"
    assert _gpu_arch_flag("sm80", "sm90", (9, 0)) == "sm_90a"
    assert _gpu_arch_flag("sm80", "sm80", (8, 6)) == "sm_86"
    assert _gpu_arch_flag("sm80", "sm80", (12, 0)) == "sm_120"
    assert _nvcc_arch("sm_90a") == ["-gencode=arch=compute_90a,code=sm_90a"]
    assert _nvcc_arch("sm_120") == ["-arch=sm_120"]


@pytest.mark.parametrize("example, cost", [("gemm_bias_relu", "model"), ("mlp", "size"), ("mlp", "model"),
                                           ("conv3x3_s2_silu", "model"), ("conv_relu_maxpool", "model"),
                                           ("attention", "model"), ("attention", "size"), ("softmax", "model"),
                                           ("layernorm", "size"), ("conv_relu_maxpool", "size")])
def test_nvrtc_compiles_every_kinds_example_kernels(example, cost):
    """The runtime compiles with NVRTC (cuda-python, a test dependency; no GPU needed): each example's
    region kernels (GEMM family, conv, conv + pool, flash attention under --cost=model, the two-region
    attention of --cost=size: softmax scores + batched GEMM, and SIMT: row statistics on any axis, a
    max-pool window; NVRTC has no C library headers) build there for
    sm_80 and sm_90a, not only with nvcc, and come out as cubins."""
    import os

    from polysat.backend import stages
    from polysat.pipeline import Compilation
    path = os.path.join(os.path.dirname(__file__), "..", "examples", f"{example}.json")
    regions = Compilation(path, cost=cost).regions
    for arch, flag in (("sm80", "sm_80"), ("sm90", "sm_90a")):
        sources = stages.kernel_sources(regions, arch)
        assert sources, example
        for ks in sources:
            oracle.nvrtc_cubin(ks.source, flag)
