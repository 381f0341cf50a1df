"""Model formats in: Frontend IR JSON, Tiny IR JSON and ONNX files (imported to Frontend IR), lowered to
Tiny IR. An imported model's document carries its weights under ``"parameters"`` (name -> array):
:func:`with_parameters` adds them to the inputs a target runs on."""
from __future__ import annotations

import json
import os
import sys
from typing import Any

from ..ir.diagnostics import PolysatError, fail
from ..ir.tiny import Program


def read_json(path: str) -> Any:
    """A model file's JSON; a missing file or bad syntax is a coded diagnostic."""
    if not os.path.isfile(path):
        fail("FileNotFound", path, f"no such file: {path}")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except UnicodeDecodeError as e:
        fail("MalformedJSON", path, f"not UTF-8 text: {e.reason}")
    except json.JSONDecodeError as e:
        fail("MalformedJSON", f"{path}:{e.lineno}:{e.colno}", e.msg)
    except RecursionError:  # json's reader recurses once per level
        fail("MalformedJSON", path, f"nested deeper than the JSON reader allows (Python's recursion limit, "
             f"{sys.getrecursionlimit()} levels)", "A model nests a few levels; flatten the document.")


def read_model(path: str, bind: "dict | None" = None) -> Any:
    """A model file's document: JSON as parsed, an ``.onnx`` file imported to Frontend IR. An ONNX model whose shape
    computations need static sizes (a Shape of an input with a dim_param: an exporter's dynamic axes) is imported
    again at the sizes ``bind`` (--bind) gives its dim_params, when it gives them."""
    if path.lower().endswith(".onnx"):
        from .onnx import SYMBOLIC_SHAPE, load_onnx
        try:
            return load_onnx(path)
        except PolysatError as e:
            if not bind or SYMBOLIC_SHAPE not in e.diagnostics[0].why:
                raise
            doc = load_onnx(path, sizes=bind)
            doc["fixed_sizes"] = dict(bind)  # the symbols imported at their --bind sizes: no longer the model's
            return doc
    return read_json(path)


def with_parameters(doc: Any, inputs: dict) -> dict:
    """The inputs a target runs on: the document's parameter arrays (an imported model's weights), the defaults
    of inputs that have one (an ONNX initializer named like a graph input, IR >= 4), then the user's inputs,
    which override a default."""
    params = doc.get("parameters") if isinstance(doc, dict) else None
    narrowed = doc.get("narrowed_inputs", {}) if isinstance(doc, dict) else {}
    defaults = doc.get("input_defaults") if isinstance(doc, dict) else None  # ONNX: an initializer named like an input
    return {**(params or {}), **(defaults or {}),
            **{k: narrow_index(v, k) if k in narrowed else v for k, v in inputs.items()}}


def check_int_inputs(program: Program, inputs: dict) -> dict:
    """inputs, with every array an i32 input takes checked to hold int32 values exactly (E1011 UnsupportedDtype for
    an integer outside int32 or a float that is not an integer: never wrapped or truncated)."""
    import numpy as np
    from ..ir.diagnostics import fail
    from ..ir.dtypes import DType
    for n in program.inputs:
        name = n.arg["tensor_id"]
        if n.dtype != DType.i32 or name not in inputs:
            continue
        a = np.asarray(inputs[name])
        if a.size == 0 or a.dtype == np.int32 or a.dtype.kind == "b":
            continue
        if a.dtype.kind == "f" and not np.all(np.isfinite(a) & (np.trunc(a) == a)):
            fail("UnsupportedDtype", name, f"i32 input {name!r} is given as {a.dtype} with values that are not "
                 "integers", "Give integer arrays for integer inputs (indices are never rounded).")
        if a.dtype.kind in "iuf" and (a.min() < -2**31 or a.max() >= 2**31):
            fail("UnsupportedDtype", name, f"i32 input {name!r} holds {a.dtype} values outside int32 "
                 f"([{a.min()}, {a.max()}]); they would wrap", "Pass values that fit int32.")
    return inputs


def narrow_index(v: Any, name: str) -> Any:
    """An int64 index input as the i32 it is computed in (an importer narrowed its type): exact, or E1011."""
    import numpy as np
    from ..ir.diagnostics import fail
    a = np.asarray(v)
    if a.dtype.kind not in "iu":
        return v
    if a.size and (a.min() < -2**31 or a.max() >= 2**31):
        fail("UnsupportedDtype", name, f"index input {name!r} holds {a.dtype} values outside int32 "
             f"([{a.min()}, {a.max()}]); polysat reads indices as i32",
             "Indices into a tensor of fewer than 2**31 elements fit int32; pass such values.")
    return a.astype(np.int32)


def load_model(model: "str | dict") -> Program:
    """A model file's path, or its parsed document, -> Program (see :func:`program_from_doc`)."""
    if isinstance(model, str):
        return program_from_doc(read_model(model), model)
    return program_from_doc(model, "model")


def program_from_doc(doc: Any, origin: str = "model") -> Program:
    """Frontend IR ({"signature", "tensors", "graph"}) or Tiny IR ({"uops": [...]}) -> Program."""
    from ..ir.tiny_json import load_tiny
    from .lower import lower
    from .model import parse_frontend
    if isinstance(doc, dict) and "uops" in doc:
        return load_tiny(doc, origin)
    return lower(parse_frontend(doc, origin))


def frontend_from_doc(doc: Any, origin: str = "model"):
    """The parsed Frontend IR graph (for dumps), or None for a Tiny IR model."""
    from .model import parse_frontend
    if isinstance(doc, dict) and "uops" in doc:
        return None
    return parse_frontend(doc, origin)
