"""The disk cache of compiled models (docs/DESIGN.md §Runtime): ``$POLYSAT_MODEL_CACHE/<key>/`` holds
``entry.json`` (the RB-SSA regions, the memory plan, every kernel's Schedule Plan and Poly Core price at the
bound shapes) and the kernels' cubins, so a second ``run --target cuda`` of the same model at the same shapes
skips the e-graph, the plan searches and nvcc.

The key (:func:`model_key`) is a hash of the model's bytes, the input shapes and dtypes, the arch the cubins are
built for, the compile options (cost model, ``--bind``, extra rule files and their text) and polysat's own source
(:func:`source_hash`: every ``.py``, ``.egg``, ``.j2`` and ``.cuh`` file of the package), so a change to any of
them is a miss. Entries are written to a temporary directory and renamed: a reader never sees half an entry.
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import tempfile
from functools import lru_cache
from typing import Any, Mapping

import numpy as np

from .. import knobs

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCE_SUFFIXES = (".py", ".egg", ".j2", ".cuh")
_SKIP = ("tests", "bench", "docs", "examples", ".venv", "build", ".git")


@lru_cache(maxsize=1)
def source_hash() -> str:
    """sha256 of polysat's compiler source (path and text of every file that shapes a compiled model)."""
    h = hashlib.sha256()
    for p in sorted(ROOT.rglob("*")):
        rel = p.relative_to(ROOT)
        if p.suffix in SOURCE_SUFFIXES and p.is_file() and rel.parts[0] not in _SKIP and "__pycache__" not in rel.parts:
            h.update(str(rel).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def _dir_text(d: str) -> str:
    return "".join(f"{p}\0{p.read_text(encoding='utf-8', errors='replace')}\0"
                   for p in sorted(pathlib.Path(d).glob("*.egg")))


def model_key(model_bytes: bytes, inputs: Mapping[str, Any], arch_flag: str, options: Mapping[str, Any]) -> str:
    """The cache key: model bytes, input shapes and dtypes, arch, options (rule directories by content), source."""
    shapes = {k: [list(np.shape(v)), str(np.asarray(v).dtype)] for k, v in sorted(inputs.items())}
    opts = dict(options)
    opts["rules"] = [_dir_text(d) for d in opts.get("rules", ())]
    doc = json.dumps({"shapes": shapes, "arch": arch_flag, "options": opts, "source": source_hash()},
                     sort_keys=True, default=str)
    return hashlib.sha256(hashlib.sha256(model_bytes).digest() + doc.encode()).hexdigest()[:32]


def cache_dir() -> str:
    return knobs.model_cache_dir()


def load(key: str) -> "tuple[dict, dict[str, bytes]] | None":
    """(entry document, cubin name -> bytes) of a stored entry, or None (missing or unreadable: a miss)."""
    d = os.path.join(cache_dir(), key)
    try:
        with open(os.path.join(d, "entry.json"), encoding="utf-8") as f:
            doc = json.load(f)
        cubins = {}
        for k in doc.get("kernels", ()):
            if k.get("cubin"):
                with open(os.path.join(d, k["cubin"]), "rb") as f:
                    cubins[k["cubin"]] = f.read()
    except (OSError, ValueError):
        return None
    return (doc, cubins) if doc.get("key") == key else None


def store(key: str, doc: dict, cubins: Mapping[str, bytes]) -> str:
    """Write the entry atomically; returns its directory (OSError when the cache directory is not writable)."""
    root = cache_dir()
    os.makedirs(root, exist_ok=True)
    final = os.path.join(root, key)
    tmp = tempfile.mkdtemp(prefix=f".{key}-", dir=root)
    try:
        for name, data in cubins.items():
            with open(os.path.join(tmp, name), "wb") as f:
                f.write(data)
        with open(os.path.join(tmp, "entry.json"), "w", encoding="utf-8") as f:
            json.dump({**doc, "key": key}, f, indent=1)
        if os.path.isdir(final):
            shutil.rmtree(final, ignore_errors=True)
        try:
            os.replace(tmp, final)
        except OSError:
            if not os.path.isdir(final):  # else another process stored the same entry first: keep theirs
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
