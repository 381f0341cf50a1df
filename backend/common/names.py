"""C identifiers from user names (the kernel ABI): no model name can change the generated code.

A user's tensor or kernel name is reduced to ``[A-Za-z0-9_]``, prefixed so it can never be a C/CUDA
keyword or start with a digit, shortened, and suffixed with a hash of the original whenever anything
was changed, so two different names never collide. Only sanitized names reach the CUDA text.
"""
from __future__ import annotations

import hashlib
import re

_BAD = re.compile(r"[^A-Za-z0-9_]")
_RUNS = re.compile(r"__+")
MAX_LEN = 40


def c_ident(name: str, prefix: str) -> str:
    raw = str(name)
    clean = _BAD.sub("_", raw)[:MAX_LEN]
    ident = _RUNS.sub("_", f"{prefix}{clean}")  # "__" is reserved in C++
    if ident != f"{prefix}{raw}":
        digest = hashlib.sha256(raw.encode("utf-8")).hexdigest()[:8]
        ident = _RUNS.sub("_", f"{ident}_{digest}")
    return ident


def unique_idents(names: list[str], prefix: str) -> list[str]:
    """c_ident for each name, made distinct (equal sanitized forms get a running suffix)."""
    out: list[str] = []
    for n in names:
        ident = c_ident(n, prefix)
        base, i = ident, 1
        while ident in out:
            ident = f"{base}_{i}"
            i += 1
        out.append(ident)
    return out
