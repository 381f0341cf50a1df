"""The disk cache of compiled models (runtime/cache.py, runtime/compiled.py; docs/DESIGN.md §Runtime), with
entries built for real by NVRTC/nvcc (no GPU needed): a second compile of the same model at the same shapes
runs neither the e-graph nor a compiler; a change of model, shapes, arch or polysat's source is a miss; a
damaged entry is a miss. `polysat run --target cuda --compile-only` stores and then loads an entry; without a
GPU a plain `run --target cuda` is E1502 naming --compile-only.
"""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from polysat import cli
from polysat.backend.common import kernel_cache
from polysat.pipeline import Compilation
from polysat.runtime import cache
from polysat.runtime.compiled import compile_model
from polysat.runtime.kernels import source
from polysat.runtime.model import steps_of

MODEL = "examples/gemm_bias_relu.json"


@pytest.fixture()
def dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("POLYSAT_MODEL_CACHE", str(tmp_path / "models"))
    monkeypatch.setenv("POLYSAT_KERNEL_CACHE", str(tmp_path / "kernels"))
    monkeypatch.setenv("POLYSAT_MEASURE_LOG", str(tmp_path / "log.csv"))
    return tmp_path


def _inputs(m=40, n=56, k=24):
    rng = np.random.default_rng(0)
    return {"A": rng.standard_normal((m, k)).astype(np.float32), "B": rng.standard_normal((k, n)).astype(np.float32),
            "bias": rng.standard_normal(n).astype(np.float32)}


def _no_compiling(monkeypatch):
    """From here on the e-graph and the kernel compilers fail the test if they run."""
    made = Compilation.get  # every stage is made through Compilation.get (pipeline.py); the regions must not be
    monkeypatch.setattr(Compilation, "get", lambda self, stage: pytest.fail("the model was compiled again")
                        if stage.name == "region" else made(self, stage))
    monkeypatch.setattr(kernel_cache, "_nvcc_cubin", lambda *a: pytest.fail("nvcc ran"))
    monkeypatch.setattr(kernel_cache, "_nvrtc_cubin", lambda *a: pytest.fail("NVRTC ran"))


def test_a_second_compile_loads_the_entry_and_runs_no_compiler(dirs, monkeypatch):
    ins = _inputs()
    c = Compilation(MODEL, arch="sm80")
    first = compile_model(c, ins, "sm80", (8, 0))
    want_regions = c.regions
    assert not first.from_cache and os.path.isdir(first.directory)
    (k,) = first.kernels
    assert k["kind"] == "gemm" and k["plan"]["arch"] == "sm80" and "tile" in k["plan"]
    with open(os.path.join(first.directory, k["cubin"]), "rb") as f:
        assert f.read(4) == b"\x7fELF"  # a real cubin, built by NVRTC or nvcc
    assert first.memory["arena"]["peak_bytes"] > 0 and first.params == {"bias"} and first.env == {"M": 40, "N": 56, "K": 24}
    assert first.prices["k0"]["flops"] >= 2 * 40 * 56 * 24

    shutil.rmtree(dirs / "kernels")  # the cubin must come from the entry
    _no_compiling(monkeypatch)
    again = compile_model(Compilation(MODEL, arch="sm80"), ins, "sm80", (8, 0))
    assert again.from_cache and again.key == first.key and again.kernels == first.kernels
    assert again.regions == want_regions and again.memory == first.memory
    b = steps_of(again.regions)[0].binding
    ks = source("gemm", b.spec, again.env, "sm80")
    assert kernel_cache.cubin_for(ks, "sm80", (8, 0))[:4] == b"\x7fELF"  # found in the kernel cache: no compiler ran


def test_model_shapes_arch_and_source_changes_are_misses(dirs, monkeypatch, tmp_path):
    ins = _inputs()
    base = compile_model(Compilation(MODEL, arch="sm80"), ins, "sm80", (8, 0))
    keys = {base.key}
    other_shapes = compile_model(Compilation(MODEL, arch="sm80"), _inputs(m=72), "sm80", (8, 0))
    assert not other_shapes.from_cache and other_shapes.env["M"] == 72
    keys.add(other_shapes.key)
    hopper = compile_model(Compilation(MODEL, arch="sm80"), ins, "sm90", (9, 0))
    assert not hopper.from_cache and hopper.arch == "sm90"
    keys.add(hopper.key)
    copy = tmp_path / "model.json"
    copy.write_text(json.dumps(json.load(open(MODEL)), indent=3))  # the same graph, other bytes
    edited = compile_model(Compilation(str(copy), arch="sm80"), ins, "sm80", (8, 0))
    assert not edited.from_cache
    keys.add(edited.key)
    monkeypatch.setattr(cache, "source_hash", lambda: "another polysat")
    newer = compile_model(Compilation(MODEL, arch="sm80"), ins, "sm80", (8, 0))
    assert not newer.from_cache
    keys.add(newer.key)
    assert len(keys) == 5


def test_a_damaged_entry_is_a_miss(dirs):
    ins = _inputs()
    first = compile_model(Compilation(MODEL, arch="sm80"), ins, "sm80", (8, 0))
    with open(os.path.join(first.directory, "entry.json"), "w") as f:
        f.write("{ half an entry")
    again = compile_model(Compilation(MODEL, arch="sm80"), ins, "sm80", (8, 0))
    assert not again.from_cache and again.kernels == first.kernels


def test_the_source_hash_covers_the_compiler_files():
    h = cache.source_hash()
    assert len(h) == 64 and h == cache.source_hash()


def test_cli_compile_only_stores_then_loads(dirs, monkeypatch):
    from polysat.backend.common import gpu
    monkeypatch.setattr(gpu, "cuda_available", lambda: False)  # no GPU: --arch decides what the cubins are for
    np.savez(dirs / "in.npz", **_inputs())
    argv = ["run", MODEL, "--inputs", str(dirs / "in.npz"), "--target", "cuda", "--compile-only", "--arch", "sm80"]
    rc, out, err = _cli(argv)
    assert rc == 0 and "compiled model stored in" in err and "1 kernel(s) for sm80" in err, err
    _no_compiling(monkeypatch)
    rc, out, err = _cli(argv)
    assert rc == 0 and "compiled model loaded from" in err, err
    rc, out, err = _cli(["run", MODEL, "--inputs", str(dirs / "in.npz"), "--compile-only"])
    assert rc == 1 and "E1" in err and "--compile-only" in err


def test_run_target_cuda_without_a_gpu_is_e1502_before_compiling(dirs, monkeypatch):
    from polysat.backend.common import gpu
    monkeypatch.setattr(gpu, "cuda_available", lambda: False)  # no GPU, whatever this machine has
    np.savez(dirs / "in.npz", **_inputs())
    _no_compiling(monkeypatch)
    rc, out, err = _cli(["run", MODEL, "--inputs", str(dirs / "in.npz"), "--target", "cuda", "--out", str(dirs / "o.npz")])
    assert rc == 1 and "E1502" in err and "--compile-only" in err and "Traceback" not in err
    assert not (dirs / "log.csv").exists()


def _cli(argv):
    import contextlib
    import io
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(argv)
    return rc, out.getvalue(), err.getvalue()


def test_an_unwritable_cache_warns_and_the_compiled_model_is_still_made(dirs, monkeypatch, capsys):
    (dirs / "blocked").write_text("a file where the cache directory should be")
    monkeypatch.setenv("POLYSAT_MODEL_CACHE", str(dirs / "blocked" / "models"))
    cm = compile_model(Compilation(MODEL, arch="sm80"), _inputs(), "sm80", (8, 0))
    assert not cm.from_cache and cm.directory == "" and cm.kernels[0]["kind"] == "gemm"
    assert "could not be stored" in capsys.readouterr().err


def test_a_kernel_nvrtc_refuses_is_built_by_nvcc(dirs, monkeypatch):
    from polysat.ir.diagnostics import fail

    def refuse(*_):
        fail("InternalError", "NVRTC", "cannot open source file \"stdint.h\"")
    monkeypatch.setattr(kernel_cache, "_nvrtc_cubin", refuse)
    b = steps_of(Compilation("examples/softmax.json").regions)[0].binding
    ks = source("simt", b.spec, {"R": 3, "C": 40}, "sm80")
    assert kernel_cache.cubin_for(ks, "sm80", (8, 0))[:4] == b"\x7fELF"
