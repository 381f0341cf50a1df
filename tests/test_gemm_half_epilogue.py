"""The GEMM kind takes an epilogue add computed in fp16 (the bench transformer's FFN: the accumulator cast to
fp16, the fp16 bias or residual added in fp16, then GELU in fp32) as the fp32 add followed by a cast: the
binding's epilogue and the GemmSpec's numpy meaning equal CPU playback of the region, and the kernels build
on the tensor-core path (no GPU needed).
"""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np

from polysat.backend.kinds import bind
from polysat.bench.models import transformer
from polysat.ir.dtypes import DType
from polysat.ir.playback import bind_region_symbols, playback
from polysat.ir.region import R, walk
from polysat.pipeline import Compilation

_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)


def _ffn(regions) -> list:
    """The FFN's two GEMM regions: the regions with a contraction whose value is added to in fp16."""
    def adds_in_fp16(r) -> bool:
        nodes = [n for let in r.lets for n in walk(let.expr)]
        return any(n.op == R.REDUCE for n in nodes) and any(
            n.op == R.BINARY and n.arg == "add" and n.dtype == DType.fp16 for n in nodes)
    ffn = [r for r in regions if adds_in_fp16(r)]
    assert len(ffn) == 2, [r.name for r in ffn]
    return ffn


def test_fp16_bias_and_residual_adds_bind_to_the_gemm_kind_with_playbacks_meaning():
    ffn = _ffn(Compilation(transformer(1, 64, 2, 256)).regions)
    rng = np.random.default_rng(0)
    for r in ffn:
        kind, b = bind(r)
        assert kind.name == "gemm", r.name
        kinds = [op.kind for op in b.spec.epilogue]
        assert kinds[:3] == ["cast", "bias", "cast"] or kinds == ["cast", "residual"], kinds
        x = {buf.name: rng.uniform(-1, 1, tuple(d if isinstance(d, int) else 37 for d in buf.memref.shape))
             .astype(np.float16) for buf in r.inputs}
        env = bind_region_symbols([r], x)
        want = playback([r], x, keep_all=True)[r.outputs[0].name]
        got = kind.reference(b.spec, b.arrays(x, env), env)
        oracle.assert_close(np.asarray(got).reshape(want.shape), want.astype(np.float64), "fp16", r.name)


def test_the_transformer_ffn_gemms_build_on_the_tensor_core_path():
    from polysat.backend import stages
    from polysat.backend.common.nvcc import missing_instructions
    regions = _ffn(Compilation(transformer(1)).regions)
    index = [(r.name, arch, ks) for arch in ("sm80", "sm90") for r, ks in zip(regions, stages.kernel_sources(regions, arch))]
    for label, arch, ks, rep in oracle.nvcc_builds(index, "transformer FFN GEMMs"):
        assert rep.ok and rep.spills == 0, (label, arch, rep.log[-2000:])
        assert missing_instructions(rep, ks.skeleton) == [], (label, arch)  # mma.sync / wgmma.mma_async
