"""The disk cache of compiled models (docs/DESIGN.md §Runtime): ``$POLYSAT_MODEL_CACHE/<key>/`` holds
``entry.json`` (the RB-SSA regions, the memory plan, every kernel's Schedule Plan and Poly Core price at the
bound shapes) and the kernels' cubins, so a second ``run --target cuda`` of the same model at the same shapes
skips the e-graph, the plan searches and nvcc.

The key (:func:`model_key`) is a hash of the model's bytes, the input shapes and dtypes, the arch the cubins are
built for, the compile options (cost model, ``--bind``, extra rule files and their text) and polysat's own source
(:func:`source_hash`: every ``.py``, ``.egg``, ``.j2`` and ``.cuh`` file of the package), so a change to any of
them is a miss. Entries are written to a temporary directory and renamed: a reader never sees half an entry.

An entry is untrusted input: it is used only when ``entry.json`` has this polysat's :data:`SCHEMA` and the
fields a compiled model needs with their types, its key is the one asked for, and every cubin it names is a
plain cache name (:data:`~polysat.backend.common.kernel_cache.CUBIN_NAME`, no folder part) holding a cubin, read
without following links; anything else is a miss.
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
from ..ir.trampoline import json_text, json_value

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCHEMA = "polysat-compiled-model/1"  # entry.json's "schema": another value is a miss
_FIELDS = {"model": str, "arch": str, "env": dict, "params": list, "regions": (list, dict), "memory": dict, "kernels": list,
           "prices": dict}
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
    """(entry document, cubin name -> bytes) of a stored entry, or None (missing, unreadable, of another schema,
    naming a file outside the entry or holding no cubin: a miss)."""
    from ..backend.common.kernel_cache import CUBIN_NAME, is_cubin, read_confined
    d = os.path.join(cache_dir(), key)
    raw = read_confined(d, "entry.json", limit=256 << 20)
    try:
        doc = json_value(raw.decode("utf-8")) if raw is not None else None
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or doc.get("key") != key:
        return None
    if any(not isinstance(doc.get(f), t) for f, t in _FIELDS.items()):
        return None
    cubins = {}
    for k in doc["kernels"]:
        if not isinstance(k, dict) or not isinstance(k.get("region"), str) or not isinstance(k.get("kind"), str):
            return None
        name = k.get("cubin")
        if name is None and k["kind"] == "playback":
            continue
        if not isinstance(name, str) or not CUBIN_NAME.fullmatch(name):
            return None
        data = read_confined(d, name)
        if data is None or not is_cubin(data):
            return None
        cubins[name] = data
    return doc, cubins


def store(key: str, doc: dict, cubins: Mapping[str, bytes]) -> str:
    """Write the entry atomically; returns its directory (OSError when the cache directory is not writable)."""
    from ..backend.common.kernel_cache import write_confined
    root = cache_dir()
    os.makedirs(root, exist_ok=True)
    final = os.path.join(root, key)
    tmp = tempfile.mkdtemp(prefix=f".{key}-", dir=root)
    try:
        for name, data in cubins.items():
            write_confined(tmp, name, data)
        write_confined(tmp, "entry.json", json_text({**doc, "key": key, "schema": SCHEMA}).encode())
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
