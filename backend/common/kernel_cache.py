"""Generated CUDA text -> cubin, cached on disk by source hash + arch.

NVRTC (cuda-python) compiles when it and the CUDA headers are installed, nvcc otherwise (and where NVRTC
refuses a kernel). The cache lives in
``$POLYSAT_KERNEL_CACHE`` (default ``~/.cache/polysat/kernels``); a kernel's source already names
every specialisation parameter, so the hash is the whole key.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile

from ... import knobs
from ...ir.diagnostics import PolysatError, fail
from .nvcc import ARCH_FLAGS, nvcc_path
from .render import KernelSource


def kernel_cache_dir() -> str:
    d = knobs.kernel_cache_dir()
    os.makedirs(d, exist_ok=True)
    return d


def _gpu_arch_flag(skeleton: str, dev_arch: str, cc: tuple[int, int] | None = None) -> str:
    """sm_90a on Hopper for both skeletons (the sm80 one is Hopper's tail branch); elsewhere the device's own
    sm_XY (a cubin only loads on its major version: an sm_80 cubin does not run on sm_100 / sm_120)."""
    if dev_arch == "sm90":
        return "sm_90a"
    return f"sm_{cc[0]}{cc[1]}" if cc is not None else "sm_80"


def _nvcc_arch(arch_flag: str) -> list[str]:
    if arch_flag == "sm_90a":
        return list(ARCH_FLAGS["sm90"])
    return [f"-arch={arch_flag}"]


def _include_dirs() -> list[str]:
    dirs = [os.path.join(c, "include") for c in knobs.cuda_roots()]
    try:
        import nvidia  # pip wheels of the CUDA toolkit put their headers under nvidia/*/include
        for root in getattr(nvidia, "__path__", []):
            for sub in sorted(os.listdir(root)):
                dirs.append(os.path.join(root, sub, "include"))
    except ImportError:
        pass
    return [d for d in dirs if os.path.exists(os.path.join(d, "cuda_fp16.h"))]


def _nvrtc_cubin(source: str, arch_flag: str) -> bytes | None:
    try:
        from cuda.bindings import nvrtc
        err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"polysat.cu", 0, [], [])
    except Exception:  # noqa: BLE001 - NVRTC library missing: fall back to nvcc
        return None
    if int(err) != 0:
        return None
    opts = [f"--gpu-architecture={arch_flag}".encode(), b"-std=c++17", b"-default-device"]
    opts += [f"-I{d}".encode() for d in _include_dirs()]
    (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    if int(err) != 0:
        _, n = nvrtc.nvrtcGetProgramLogSize(prog)
        log = b" " * n
        nvrtc.nvrtcGetProgramLog(prog, log)
        fail("InternalError", "NVRTC", f"generated kernel failed to compile:\n{log.decode(errors='replace')[:4000]}")
    _, n = nvrtc.nvrtcGetCUBINSize(prog)
    cubin = b" " * n
    nvrtc.nvrtcGetCUBIN(prog, cubin)
    nvrtc.nvrtcDestroyProgram(prog)
    return cubin


def _nvcc_cubin(source: str, arch_flag: str) -> bytes:
    exe = nvcc_path()
    if exe is None:
        fail("UnknownTarget", "--target cuda", "neither NVRTC nor nvcc is available to compile kernels",
             "Install cuda-python with NVRTC (pip install 'polysat[cuda]') or the CUDA toolkit.")
    with tempfile.TemporaryDirectory(prefix="polysat-rt-") as tmp:
        src, out = os.path.join(tmp, "k.cu"), os.path.join(tmp, "k.cubin")
        with open(src, "w", encoding="utf-8") as f:
            f.write(source)
        p = subprocess.run([exe, "-cubin", "-std=c++17", *_nvcc_arch(arch_flag), "-o", out, src],
                           capture_output=True, text=True, check=False)
        if p.returncode != 0:
            fail("InternalError", "nvcc", f"generated kernel failed to compile:\n{p.stderr[:4000]}")
        with open(out, "rb") as f:
            return f.read()


def cubin_name(ks: KernelSource, dev_arch: str, cc: tuple[int, int] | None = None) -> str:
    """The cubin's file name in the cache: a hash of the arch flag and the source."""
    arch_flag = _gpu_arch_flag(ks.skeleton, dev_arch, cc)
    return hashlib.sha256(f"{arch_flag}\n{ks.source}".encode()).hexdigest()[:40] + ".cubin"


def cubin_for(ks: KernelSource, dev_arch: str, cc: tuple[int, int] | None = None) -> bytes:
    arch_flag = _gpu_arch_flag(ks.skeleton, dev_arch, cc)
    path = os.path.join(kernel_cache_dir(), cubin_name(ks, dev_arch, cc))
    if os.path.exists(path):
        with open(path, "rb") as f:
            return f.read()
    # NVRTC needs the CUDA headers (cuda_fp16.h); without them nvcc, which knows its own, compiles. A kernel
    # NVRTC refuses goes to nvcc too where there is one (the templates include no C library header, which
    # NVRTC does not ship; tests/test_backend_runtime.py builds every kind there).
    cubin = None
    if _include_dirs():
        try:
            cubin = _nvrtc_cubin(ks.source, arch_flag)
        except PolysatError:
            if nvcc_path() is None:
                raise
    cubin = cubin or _nvcc_cubin(ks.source, arch_flag)
    with open(path + ".tmp", "wb") as f:
        f.write(cubin)
    os.replace(path + ".tmp", path)
    return cubin
