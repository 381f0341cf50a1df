"""The conv runtime's host side, which needs no GPU: the launch it prepares (grid, block, smem and the
packed arguments in the kernel's ABI order), the tensor checks, and coded diagnostics for what the
kernels cannot address. The driver is only stubbed where a function would be loaded."""
import ctypes
import math

import pytest

from polysat.backend.conv import launch as crt
from polysat.backend.common.gpu import cuda_available, Device, device
from polysat.backend.conv.render import render as render_conv
from polysat.backend.conv.plan import search as conv_search
from polysat.backend.conv_pool.spec import ConvPoolSpec
from polysat.backend.conv.spec import ConvSpec
from polysat.backend.common.spec import EpilogueOp
from polysat.ir.diagnostics import PolysatError
from polysat.ir.dtypes import DType


class FakeCuda:
    def __init__(self, shape, typestr="<f2", ptr=4096):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False), "version": 3,
                                         "strides": None}


SM80 = Device(0, "sm80", 108, None)


def _tensors(spec, ptrs=None):
    out = {}
    for k, (name, shape) in enumerate(spec.shapes().items()):
        ts = {DType.fp16: "<f2", DType.bf16: "<V2", DType.fp32: "<f4"}[spec.dtypes()[name]]
        out[name] = FakeCuda(shape, ts, (ptrs or {}).get(name, 4096 * (k + 1)))
    return out


def _args(launch) -> list[int]:
    return [int(c.value) for c in launch.storage]


@pytest.fixture
def no_driver(monkeypatch):
    monkeypatch.setattr(crt, "load_function", lambda ks, dev: ("fn", ks.name))


def test_conv_launch_packs_the_abi_in_order(no_driver):
    spec = ConvSpec("c", 2, 16, 19, 17, 40, 3, 3, pad=(1, 1, 1, 1), groups=2,
                    epilogue=(EpilogueOp("bias", "b", dtype=DType.fp16), EpilogueOp("relu")))
    plan = conv_search(spec, "sm80").best
    tensors = _tensors(spec)
    launch = crt.prepare(spec, tensors, plan=plan, dev=SM80)
    ks = launch.kernel
    assert [p.ident for p in ks.params] == ["X", "W", "Y", "t_b", "N", "C", "H", "W_", "Co", "Ho", "Wo", "groups"]
    ptr = {n: t.__cuda_array_interface__["data"][0] for n, t in tensors.items()}
    assert _args(launch) == [ptr["X"], ptr["W"], ptr["Y"], ptr["b"], 2, 16, 19, 17, 40, 19, 17, 2]
    bm, bn, _ = plan.tile
    assert launch.grid == (math.ceil(20 / bn), math.ceil(2 * 19 * 17 / bm), 2)
    assert launch.block == (plan.threads, 1, 1) and launch.smem == plan.smem_bytes
    assert launch.fn == ("fn", ks.name) and isinstance(launch.argv, ctypes.Array) and len(launch.argv) == 12


def test_conv_pool_launch_counts_pool_tiles(no_driver):
    spec = ConvPoolSpec(ConvSpec("cp", 3, 8, 34, 30, 24, 3, 3, pad=(1, 1, 1, 1)), (34, 30), (3, 3), (2, 2), (1, 1))
    plan = conv_search(spec, "sm80").best
    launch = crt.prepare(spec, _tensors(spec), plan=plan, dev=SM80)
    hp, wp = spec.out_hw
    tph, tpw = plan.pool_tile
    assert _args(launch)[-10:] == [3, 8, 34, 30, 24, 34, 30, 1, hp, wp]
    assert launch.grid == (1, 3 * math.ceil(hp / tph) * math.ceil(wp / tpw), 1)


def test_bad_tensors_and_sizes_are_coded_diagnostics(no_driver):
    spec = ConvSpec("c", 1, 16, 9, 9, 16, 3, 3)
    plan = conv_search(spec, "sm80").best
    with pytest.raises(PolysatError, match="aligned"):
        crt.prepare(spec, _tensors(spec, {"W": 4098}), plan=plan, dev=SM80)  # W's cp.async needs 16 B
    with pytest.raises(PolysatError) as e:
        crt.prepare(spec, {k: v for k, v in _tensors(spec).items() if k != "W"}, plan=plan, dev=SM80)
    assert e.value.diagnostics[0].code == "E1111"
    huge = ConvSpec("huge", 1, 4, 32768, 32768, 4, 1, 1)  # Cg*H*W = 2^32: beyond the gather's 32-bit offsets
    with pytest.raises(PolysatError) as e:
        crt.prepare(huge, {}, plan=conv_search(huge, "sm80").best, dev=SM80)
    assert e.value.diagnostics[0].kind == "UnaddressableShape"


def test_sm90_plans_are_refused_on_older_gpus(no_driver):
    spec = ConvSpec("c", 1, 16, 9, 9, 64, 3, 3)
    plan = conv_search(spec, "sm90").best
    assert plan.skeleton == "sm90"
    with pytest.raises(PolysatError, match="sm90 plan"):
        crt.prepare(spec, _tensors(spec), plan=plan, dev=SM80)
    assert render_conv(spec, plan).tma[0].dims == ("k", "cog")


def test_running_without_a_gpu_is_reported():
    if cuda_available():
        assert device().arch in ("sm80", "sm90")  # test_backend_conv_gpu.py runs the kernels there
    else:
        with pytest.raises(PolysatError) as e:
            crt.run(ConvSpec("c", 1, 4, 5, 5, 4, 3, 3), {})
        assert e.value.diagnostics[0].code == "E1502"
