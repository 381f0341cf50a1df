"""Every diagnostic polysat reports, defined once (docs/DESIGN.md §Diagnostics).

A diagnostic is a value: ``code`` (``E1001``: E = error, W = warning), ``kind`` (its name),
``at`` (the user's node or tensor, or the stage), ``why`` and ``suggestion``. Code ranges:
E10xx malformed model / shape and type rules, E11xx graph structure, E12xx index maps (IndexBook,
Poly-View), E13xx symbols and alignment, E14xx regions and rewrites, W21xx warnings.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Kind:
    code: str
    name: str
    suggestion: str  # the default advice; a raise site may give a sharper one


def _k(code: str, name: str, suggestion: str) -> Kind:
    return Kind(code, name, suggestion)


KINDS: dict[str, Kind] = {k.name: k for k in [
    # shape and type rules
    _k("E1001", "BroadcastMismatch", "Right-aligned broadcasting needs equal sizes or a 1; expand one side or fix the shapes."),
    _k("E1002", "AxisSizeMismatch", "Make the sizes agree: a reshape keeps the element count, declared shapes must equal inferred ones."),
    _k("E1003", "InvalidPermutation", "A permutation lists every axis 0..rank-1 exactly once."),
    _k("E1004", "AccDtypeMissing", "Give the REDUCE an accumulation dtype, e.g. \"dtype\": \"fp32\"."),
    _k("E1005", "AxisOutOfRange", "Axes index the input's dims: -rank <= axis < rank, each axis once."),
    _k("E1006", "ConvChannelMismatch", "X has C channels, W is (Co, C/groups, Kh, Kw), and groups divide both C and Co."),
    _k("E1007", "UnaddressableShape", "Sizes must be positive, and windows, pads and slices must stay addressable."),
    _k("E1008", "InvalidAttribute", "Check the attribute against the op's documented attributes."),
    _k("E1009", "DtypeMismatch", "Operands of one op share a dtype after promotion; insert an explicit cast."),
    _k("E1010", "WrongArity", "Check the op's number of inputs and outputs."),
    _k("E1011", "UnsupportedDtype", "polysat computes in fp16, bf16, fp32, i32 and bool; int64 is accepted only where it folds at import (shapes, constant indices). Cast the model's inputs, or keep such tensors constant."),
    # graph structure
    _k("E1101", "UnknownOp", "Use one of the documented ops (see `polysat compile --help`)."),
    _k("E1102", "UnsupportedOp", "polysat has no lowering for this imported op or attribute value; rewrite the model without it (docs/usage.md lists the ONNX ops taken)."),
    _k("E1103", "UnknownDtype", "Use one of fp16, bf16, fp32, i32, bool."),
    _k("E1104", "UnknownTensor", "Every input of a node is a signature input or an output of another node."),
    _k("E1105", "DanglingSrc", "Every src names a node id defined in the same program."),
    _k("E1106", "Cycle", "The graph must be acyclic; break the cycle."),
    _k("E1107", "OutputNeverProduced", "Each signature output must be produced by some node or be an input."),
    _k("E1108", "MalformedJSON", "Fix the JSON syntax at the reported position."),
    _k("E1109", "MalformedStructure", "A model is {\"signature\", \"tensors\", \"graph\"} (Frontend IR) or {\"uops\": [...]} (Tiny IR)."),
    _k("E1110", "DuplicateDefinition", "Each tensor and node id is defined once."),
    _k("E1111", "MissingInput", "Supply every signature input (npz key = tensor name)."),
    _k("E1112", "FileNotFound", "Check the path."),
    # index maps
    _k("E1201", "NonAffineIndex", "Index maps are affine + floordiv by positive constants in the output axes."),
    _k("E1202", "OutOfBoundsView", "A VIEW's index_map must stay inside its input; use PAD first."),
    _k("E1203", "MissingDivGuard", "Linearize then delinearize reshape/view so `%` becomes div plus a guard."),
    _k("E1204", "UnguardedAccess", "Guard every padded or partial read with a Select on its in-bounds piece."),
    # symbols
    _k("E1304", "AxisAlignmentMismatch", "One symbol names one size: check the graph signature's symbols and the inputs' shapes."),
    _k("E1305", "UnboundSymbol", "Bind every symbol from an input shape."),
    # regions and rewrites
    _k("E1401", "NonAssociativeTransform", "Only associative reduce ops (sum, max, min) may be merged or split."),
    _k("E1402", "NeutralInvalid", "A reduce's init must be its op's neutral (sum 0, max -inf, min +inf)."),
    _k("E1403", "RuleFileError", "Fix the rule file at the reported line."),
    _k("E1404", "UnsoundRule", "The rule changes the program's value; fix or remove it."),
    _k("E1405", "UnknownOpString", "Use an op string of the term language (`polysat rules` lists the shipped rules that use them)."),
    _k("E1406", "AttributeSpelling", "Spell attributes as the loader writes them: shapes [2, 3], tuples (0, 1), floats 1.0, dtypes fp16|bf16|fp32|i32|bool."),
    _k("E1407", "DuplicateRuleName", "Give every rule a name of its own (rule files are checked and reported by rule name)."),
    _k("E1408", "RulesetShadowsName", "Rename the ruleset: it must not be named like a constructor or relation of the term language."),
    _k("E1409", "CrossProductRule", "Join the query's parts on a shared variable (or split the rule): a query of independent parts matches the product of their sizes in one iteration, which no limit can stop inside egglog."),
    _k("E1501", "UnknownStage", "Choose dump stages from the list in `polysat compile --help`."),
    _k("E1502", "UnknownTarget", "Choose a target from `polysat run --help`."),
    _k("E1503", "BadInputFile", "Give an .npz file whose keys are the model's input tensor names."),
    _k("E1504", "NoKernelTemplate", "Run it with --target playback (templates: GEMM + epilogue, conv, conv + pool, attention, softmax scores, SIMT for row-major outputs)."),
    _k("E1505", "ResourceLimit", "A stage crossed its bound (time, memory or size): raise the knob the message names, or compile a smaller model."),
    _k("E1506", "BadOutputPath", "--out names the .npz file to write: a new or regular file in a writable folder (not a folder, a device or '')."),
    _k("E1999", "InternalError", "This is a polysat bug: rerun with POLYSAT_DEBUG=1 for the traceback and report it."),
    # warnings
    _k("W2101", "ExcessivePiecewise", "Simplify pad/slice chains (gist/coalesce/remove_redundancies) or cut a region boundary."),
    _k("W2102", "BoundedAnalysis", "The figure is an upper bound: isl took more operations than its quota on the region's sets (many existentials, as reshapes into windows make); a price that reads it is an upper bound too."),
]}


@dataclass(frozen=True)
class Diagnostic:
    code: str
    kind: str
    at: str
    why: str
    suggestion: str
    details: tuple = field(default=())  # ((key, json-able value), ...)

    @property
    def is_error(self) -> bool:
        return self.code.startswith("E")

    def to_json(self) -> dict[str, Any]:
        d = {"code": self.code, "kind": self.kind, "at": self.at, "why": self.why, "suggestion": self.suggestion}
        d.update(dict(self.details))
        return d

    def __str__(self) -> str:
        clauses = re.split(r"; (?=not an? )", self.why)  # E1504: one reason per kernel kind
        if len(self.why) > 100 and len(clauses) > 1:  # one reason a line
            why = "".join(f"\n  - {c}" for c in clauses)
            return f"{self.code} {self.kind} at {self.at}:{why}\n  suggestion: {self.suggestion}"
        return f"{self.code} {self.kind} at {self.at}: {self.why}\n  suggestion: {self.suggestion}"


def diag(kind: str, at: str, why: str, suggestion: str | None = None, **details: Any) -> Diagnostic:
    k = KINDS[kind]
    return Diagnostic(k.code, k.name, at, why, suggestion or k.suggestion, tuple(details.items()))


class PolysatError(Exception):
    """Raised with one or more diagnostics; the CLI prints them and exits 1."""

    def __init__(self, diagnostics: "Diagnostic | list[Diagnostic]"):
        self.diagnostics = [diagnostics] if isinstance(diagnostics, Diagnostic) else list(diagnostics)
        super().__init__("\n".join(str(d) for d in self.diagnostics))


def fail(kind: str, at: str, why: str, suggestion: str | None = None, **details: Any):
    raise PolysatError(diag(kind, at, why, suggestion, **details))


def dumps(diags: list[Diagnostic]) -> str:
    return json.dumps({"diagnostics": [d.to_json() for d in diags]}, indent=2, ensure_ascii=False)
