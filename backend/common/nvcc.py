"""Compile checks without a GPU: build each kernel with nvcc, read ptxas' report.

One nvcc call per (source, arch) builds the cubin with ``-Xptxas -v`` and keeps the PTX
(``--keep``), so the report (registers, spill bytes, smem) and the instruction mix come from the
same build. Results are cached by the hash of (source, flags, nvcc version) under
``$POLYSAT_NVCC_CACHE`` (default: the system temp dir), and :func:`check_many` builds in parallel
with a small pool (CI has 2 cores).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import lru_cache

from ... import knobs

ARCH_FLAGS = {
    "sm80": ["-arch=sm_80"],
    "sm90": ["-gencode=arch=compute_90a,code=sm_90a"],  # wgmma and setmaxnreg need sm_90a
}
TF32_MMA = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"
# instructions each skeleton's PTX must contain
REQUIRED_PTX = {
    "sm80": ("mma.sync", "ldmatrix", "cp.async"),
    "sm90": ("wgmma.mma_async", "cp.async.bulk.tensor", "mbarrier"),
    # the sm80 skeleton on fp32 operands: 4-byte fragment loads, the tf32 split and m16n8k8 tf32 MMAs (3xTF32)
    "sm80_tf32x3": (TF32_MMA, "cvt.rna.tf32.f32", "cp.async"),
}


@dataclass(frozen=True)
class NvccReport:
    arch: str
    ok: bool
    registers: int
    spill_stores: int
    spill_loads: int
    stack_frame: int
    ptx_counts: tuple[tuple[str, int], ...]   # (instruction prefix, occurrences)
    log: str
    seconds: float
    cached: bool = False

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads

    def count(self, instr: str) -> int:
        return dict(self.ptx_counts).get(instr, 0)


def nvcc_path() -> str | None:
    return knobs.nvcc()


@lru_cache(maxsize=None)
def nvcc_version() -> str:
    exe = nvcc_path()
    if not exe:
        return ""
    return subprocess.run([exe, "--version"], capture_output=True, text=True, check=False).stdout.strip().splitlines()[-1]


def cache_dir() -> str:
    d = knobs.nvcc_cache_dir()
    os.makedirs(d, exist_ok=True)
    return d


PTX_PATTERNS = ("mma.sync", "ldmatrix", "cp.async.cg", "cp.async.ca", "cp.async.commit_group", "cp.async.wait_group",
                "cp.async.bulk.tensor", "wgmma.mma_async", "wgmma.fence", "wgmma.commit_group", "wgmma.wait_group",
                "mbarrier.try_wait", "mbarrier.arrive", "mbarrier.init", "setmaxnreg", "st.global", "cp.async", "mbarrier",
                "fence.proxy.async", TF32_MMA, "cvt.rna.tf32.f32")

_REGS = re.compile(r"Used (\d+) registers")
_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def _parse(arch: str, ok: bool, log: str, ptx: str, seconds: float) -> NvccReport:
    regs = max((int(x) for x in _REGS.findall(log)), default=0)
    frames = _SPILL.findall(log)
    stack = max((int(a) for a, _, _ in frames), default=0)
    st = sum(int(b) for _, b, _ in frames)
    ld = sum(int(c) for _, _, c in frames)
    counts = tuple((p, ptx.count(p)) for p in PTX_PATTERNS)
    return NvccReport(arch, ok, regs, st, ld, stack, counts, log, seconds)


def compile_check(source: str, arch: str, extra: tuple[str, ...] = ()) -> NvccReport:
    """Build source for arch (sm80 | sm90) into a cubin with ptxas -v, keeping the PTX."""
    exe = nvcc_path()
    if exe is None:
        raise FileNotFoundError("nvcc not found (set POLYSAT_NVCC or put nvcc on PATH)")
    flags = ["-cubin", "-Xptxas", "-v", "-std=c++17", *ARCH_FLAGS[arch], *extra]
    key = hashlib.sha256(json.dumps([source, flags, nvcc_version(), PTX_PATTERNS]).encode()).hexdigest()[:32]
    cached = os.path.join(cache_dir(), f"{key}.json")
    if os.path.exists(cached):
        with open(cached, encoding="utf-8") as f:
            d = json.load(f)
        d["ptx_counts"] = tuple(tuple(x) for x in d["ptx_counts"])
        return NvccReport(**{**d, "cached": True})
    with tempfile.TemporaryDirectory(prefix="polysat-nvcc-") as tmp:
        src = os.path.join(tmp, "k.cu")
        with open(src, "w", encoding="utf-8") as f:
            f.write(source)
        t0 = time.perf_counter()
        p = subprocess.run([exe, *flags, "--keep", "--keep-dir", tmp, "-o", os.path.join(tmp, "k.cubin"), src],
                           capture_output=True, text=True, check=False, cwd=tmp)
        seconds = time.perf_counter() - t0
        ptx = ""
        for name in os.listdir(tmp):
            if name.endswith(".ptx"):
                with open(os.path.join(tmp, name), encoding="utf-8") as f:
                    ptx += f.read()
    rep = _parse(arch, p.returncode == 0, p.stdout + p.stderr, ptx, seconds)
    if rep.ok:
        with open(cached + ".tmp", "w", encoding="utf-8") as f:
            json.dump(asdict(rep), f)
        os.replace(cached + ".tmp", cached)
    return rep


def check_many(jobs: list[tuple[str, str]], workers: int | None = None) -> list[NvccReport]:
    """compile_check over (source, arch) pairs with a small thread pool (nvcc runs as subprocesses)."""
    workers = workers or max(1, min(4, os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as ex:
        return list(ex.map(lambda j: compile_check(*j), jobs))


def missing_instructions(rep: NvccReport, skeleton: str) -> list[str]:
    """The instructions REQUIRED_PTX[skeleton] names that the PTX lacks; an sm80 kernel on fp32 operands is
    checked as ``sm80_tf32x3``."""
    if skeleton == "sm80" and rep.count(TF32_MMA):
        skeleton = "sm80_tf32x3"
    return [i for i in REQUIRED_PTX[skeleton] if rep.count(i) == 0]
