"""Host emulation of generated SIMT kernels (no GPU): each kernel's own ``__host__ __device__`` passes,
replayed by its ``emulate(args)`` (``-DPOLYSAT_SIMT_HOST``), in one host program built with nvcc.

``emulate_outputs([(kernel source, {tensor: array}, env), ...])`` builds one program for all the kernels
(their sources concatenated; the helper header is include-guarded), writes every input as raw bytes,
runs it and returns each kernel's outputs by name (``emulate_many``: each kernel's primary output).
"""
from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import tempfile

import numpy as np

from polysat.backend.common.nvcc import nvcc_path

HERE = pathlib.Path(__file__).parent


def load(name: str, file: str):
    """A module of this test folder by file name (the tests folder is not a package)."""
    spec = importlib.util.spec_from_file_location(name, HERE / file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


oracle = load("polysat_test_oracle", "oracle.py")

MAIN = r"""
#include <cstdio>
#include <cstdlib>
static void* load(const char* path, size_t bytes) {
  void* p = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
  FILE* f = fopen(path, "rb");
  if (!f || fread(p, 1, bytes, f) != bytes) { std::printf("FAIL read %s\n", path); std::exit(2); }
  fclose(f);
  return p;
}
static void save(const char* path, const void* p, size_t bytes) {
  FILE* f = fopen(path, "wb");
  fwrite(p, 1, bytes, f);
  fclose(f);
}
int main() {
"""


def emulate_many(jobs: list) -> list[np.ndarray]:
    """Each kernel's primary output (``spec.c``)."""
    return [outs[ks.spec.c] for outs, (ks, _a, _e) in zip(emulate_outputs(jobs), jobs, strict=True)]


def emulate_outputs(jobs: list, workdir: str | None = None) -> list[dict[str, np.ndarray]]:
    """Every output of each kernel, by region tensor name."""
    if workdir is None:  # a directory of our own, removed afterwards
        with tempfile.TemporaryDirectory(prefix="polysat-simt-emu-") as tmp:
            return emulate_outputs(jobs, tmp)
    exe = nvcc_path()
    assert exe, "nvcc is needed to build the host emulator"
    tmp = workdir
    parts, calls = [], []
    for k, (ks, arrays, env) in enumerate(jobs):
        spec = ks.spec
        if ks.source not in parts:  # the same kernel on another shape: built once
            parts.append(ks.source)
        shapes, dts = spec.shapes(env), spec.dtypes()
        args, saves = [], []
        for p in ks.params:
            if p.kind == "ptr":
                path = os.path.join(tmp, f"k{k}_{p.ident}.bin")
                nbytes = int(np.prod(shapes[p.role])) * dts[p.role].np.itemsize
                if p.role not in spec.outputs:
                    np.ascontiguousarray(np.asarray(arrays[p.role]).astype(dts[p.role].np)).tofile(path)
                    args.append(f"(decltype(Args::{p.ident}))load(\"{path}\", {nbytes})")
                else:
                    buf = f"out{k}_{p.ident}"
                    calls.append(f"  void* {buf} = aligned_alloc(64, {(nbytes + 63) // 64 * 64 + 64});")
                    args.append(f"(decltype(Args::{p.ident})){buf}")
                    saves.append(f"  save(\"{path}\", {buf}, {nbytes});")
            else:
                args.append(f"{int(env[p.role])}LL")
        ns = f"ns_{ks.name}"
        calls.append(f"  {{ using namespace {ns}; const Args a{{{', '.join(args)}}}; emulate(a); }}")
        calls += saves
    src = os.path.join(tmp, "emu.cu")
    with open(src, "w", encoding="utf-8") as f:
        f.write("\n".join(parts) + MAIN + "\n".join(calls) + "\n  std::printf(\"OK\\n\");\n  return 0;\n}\n")
    binary = os.path.join(tmp, "emu")
    build = subprocess.run([exe, "-std=c++17", "-O1", "-DPOLYSAT_SIMT_HOST", "-arch=sm_80", "-o", binary, src],
                           capture_output=True, text=True, check=False)
    assert build.returncode == 0, build.stderr[-6000:]
    run = subprocess.run([binary], capture_output=True, text=True, check=False, timeout=600)
    assert run.returncode == 0 and run.stdout.strip().endswith("OK"), run.stdout[-2000:] + run.stderr[-2000:]
    outs = []
    for k, (ks, _arrays, env) in enumerate(jobs):
        spec = ks.spec
        got = {}
        for p in ks.params:
            if p.kind == "ptr" and p.role in spec.outputs:
                path = os.path.join(tmp, f"k{k}_{p.ident}.bin")
                got[p.role] = np.fromfile(path, dtype=spec.dtypes()[p.role].np).reshape(spec.shapes(env)[p.role])
        outs.append(got)
    return outs


def check_cases(cases: list, plans, each=None) -> None:
    """cases: (label, spec, env, inputs, numpy oracle output or None); every plan ``plans(spec)`` gives is
    rendered and emulated, and its output compared with the spec's reference meaning and the oracle
    (``each(label, spec)`` first, if given)."""
    from polysat.backend.simt.reference import reference
    from polysat.backend.simt.render import render
    jobs, meta = [], []
    for label, spec, env, x, want in cases:
        if each is not None:
            each(label, spec)
        for p in plans(spec):
            jobs.append((render(spec, p), x, env))
            meta.append((f"{label} {p.key()}", spec, env, x, want))
    for got, (label, spec, env, x, want) in zip(emulate_many(jobs), meta, strict=True):
        dt = spec.dtypes()[spec.c].value
        oracle.assert_close(got, reference(spec, x, env).astype(np.float64), dt, f"{label} vs playback")
        if want is not None:
            oracle.assert_close(got, want, dt, f"{label} vs numpy")
