"""Generated CUDA text -> cubin, cached on disk by source hash + arch.

NVRTC (cuda-python) compiles when it and the CUDA headers are installed, nvcc otherwise (and where NVRTC
refuses a kernel). The cache lives in
``$POLYSAT_KERNEL_CACHE`` (default ``~/.cache/polysat/kernels``); a kernel's source already names
every specialisation parameter, so the hash is the whole key.

The cache is untrusted: a file is read without following links and used only when it is a cubin (ELF magic,
at least an ELF header long), otherwise the kernel is compiled again; a cubin is written to a fresh temporary
file (``O_CREAT | O_EXCL | O_NOFOLLOW``) renamed into place, under a name that is a hash (no folder part); a
cache folder that cannot be made or written is a warning and the kernel runs uncached.
"""
from __future__ import annotations

import hashlib
import os
import re
import secrets
import subprocess
import sys
import tempfile

from ... import knobs
from ...ir.diagnostics import PolysatError, fail
from .nvcc import ARCH_FLAGS, nvcc_path
from .render import KernelSource


CUBIN_NAME = re.compile(r"[0-9a-f]{40}\.cubin")  # cubin_name's form
PLAIN_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}")  # a file name in its folder: no separator, no '..'
ELF_HEADER = 64  # bytes of an ELF64 header: a shorter file is no cubin


def kernel_cache_dir() -> "str | None":
    """The kernel cache folder, made when missing; None (with a warning) when it cannot be made."""
    d = knobs.kernel_cache_dir()
    try:
        os.makedirs(d, exist_ok=True)
    except OSError as e:
        _warn(f"the kernel cache {d} cannot be used ({e.strerror or e}); kernels are compiled uncached")
        return None
    return d


_WARNED: set = set()


def _warn(text: str) -> None:
    if text not in _WARNED:
        _WARNED.add(text)
        print(f"polysat: warning: {text}", file=sys.stderr)


def is_cubin(data: bytes) -> bool:
    return len(data) >= ELF_HEADER and data[:4] == b"\x7fELF"


def read_confined(folder: str, name: str, limit: int = 1 << 30) -> "bytes | None":
    """The bytes of file ``name`` in ``folder`` (a plain name, no link followed), or None."""
    if not PLAIN_NAME.fullmatch(name or ""):
        return None
    try:
        fd = os.open(os.path.join(folder, name), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    return data if len(data) <= limit else None


def write_confined(folder: str, name: str, data: bytes) -> None:
    """Write ``name`` in ``folder`` atomically: a fresh temporary file (O_EXCL | O_NOFOLLOW: never through a link)
    renamed over it. OSError when the folder is not writable."""
    if not PLAIN_NAME.fullmatch(name or ""):
        raise OSError(f"refusing to write {name!r}: not a cache file name")
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, os.path.join(folder, name))
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def store_cubin(name: str, data: bytes) -> None:
    """Put a cubin into the kernel cache (when there is a usable one; a failure is a warning)."""
    d = kernel_cache_dir()
    if d is None or not is_cubin(data):
        return
    try:
        write_confined(d, name, data)
    except OSError as e:
        _warn(f"the kernel cache {d} cannot be written ({e.strerror or e}); kernels are compiled uncached")


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
    name = cubin_name(ks, dev_arch, cc)
    folder = kernel_cache_dir()
    cached = read_confined(folder, name) if folder else None
    if cached is not None and is_cubin(cached):
        return cached
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
    store_cubin(name, cubin)
    return cubin
