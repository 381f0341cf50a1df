"""The ``fn`` epilogue op: any read-free function of the accumulator, as a straight-line program in fp32.

The named epilogue ops (scale, relu, gelu, silu, sigmoid) cover the activations a frontend spells; every other
elementwise function of the accumulator (``y * y``, ``y * sigmoid(1.702 y)``, ``min(max(y, a), b)``, a value read
several times) is its RB-SSA ops copied as a program: one step per op, in dependency order, each step's
arguments the input value ``("v",)``, an earlier step ``("s", i)``, an fp32 constant ``("c", x)``, a bool one
``("b", p)`` or, in a program of several inputs (a GEMM's A-operand prologue, backend/gemm/prologue.py), the
input ``("x", j)`` (a float) or ``("p", j)`` (a bool: an index guard an attention operand prologue evaluates,
backend/attention/prologue.py). An op the program computes in fp16 or bf16 (a half-precision model's SiLU or ``y * y``) is its
fp32 op followed by a rounding step (``round_fp16`` / ``round_bf16``: to the 16-bit type and back): a 16-bit
add, mul, div or sqrt so computed is the correctly rounded 16-bit result (fp32 carries more than twice the
16-bit significand), which is how the reference evaluator computes 16-bit ops too. The same program is the kernel's C code (:func:`c_lines`), the numpy meaning (:func:`evaluate`,
in the input's float type) and the probe the peeler recognises the named ops by (``epilogue.py``).
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ...ir import trampoline
from ...ir.dtypes import DType, round_to
from ...ir.region import R, RNode
from ...ir.trampoline import Walk

UNARY = {"neg": np.negative, "relu": lambda x: np.maximum(x, x.dtype.type(0)), "exp2": np.exp2, "log2": np.log2,
         "sqrt": np.sqrt, "rsqrt": lambda x: x.dtype.type(1) / np.sqrt(x), "reciprocal": lambda x: x.dtype.type(1) / x,
         "cast": None, "round_fp16": lambda x: _rounded(x, DType.fp16), "round_bf16": lambda x: _rounded(x, DType.bf16)}
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "max": np.maximum,
          "min": np.minimum, "pow": np.power, "cmplt": np.less, "cmpeq": np.equal, "cmpne": np.not_equal}
_C_UNARY = {"neg": "(-{0})", "relu": "fmaxf({0}, 0.0f)", "exp2": "exp2f({0})", "log2": "log2f({0})",
            "sqrt": "sqrtf({0})", "rsqrt": "(1.0f / sqrtf({0}))", "reciprocal": "(1.0f / {0})",
            "cast": "({0} ? 1.0f : 0.0f)", "round_fp16": "polysat::round_to<__half>({0})",
            "round_bf16": "polysat::round_to<__nv_bfloat16>({0})"}
_C_BINARY = {"add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
             "max": "fmaxf({0}, {1})", "min": "fminf({0}, {1})", "pow": "powf({0}, {1})", "cmplt": "({0} < {1})",
             "cmpeq": "({0} == {1})", "cmpne": "({0} != {1})"}
COMPARE = ("cmplt", "cmpeq", "cmpne")
ROUND = {DType.fp16: "round_fp16", DType.bf16: "round_bf16"}  # the step that rounds to a 16-bit type and back
FLOATS = (DType.fp32, *ROUND)
MAX_STEPS = 64  # a longer chain is no epilogue (and would bloat every kernel's register budget)

Arg = tuple
Step = tuple  # (op, (arg, ...))


def _rounded(x: np.ndarray, dtype: DType) -> np.ndarray:
    """x rounded to the 16-bit dtype, back in x's own float type."""
    return round_to(x, dtype).astype(np.asarray(x).dtype)


def from_region(lets: Callable[[RNode], RNode], top: RNode, x_node: "RNode | None",
                leaves: "Callable[[RNode], Arg | None] | None" = None) -> tuple[Step, ...] | None:
    """top as a program of x_node: fp32, fp16, bf16 (and bool) constants, unary, binary and value selects only,
    each 16-bit result rounded (``ROUND``); None when top reads memory, reduces, broadcasts, guards an index
    or computes in another dtype (an integer). ``leaves(n)`` (a program of several inputs) names the nodes that
    are inputs (``("x", j)``), None for the others."""
    steps: list[Step] = []
    at: dict[int, Arg] = {}

    def rounded(a: Arg, dtype: DType) -> Arg:
        """a, then rounded to dtype when dtype is a 16-bit float."""
        if dtype not in ROUND:
            return a
        steps.append((ROUND[dtype], (a,)))
        return ("s", len(steps) - 1)

    def go(n: RNode) -> Walk:  # -> Arg | None (a walk: ir/trampoline.py, so a long chain needs no frames)
        n = lets(n)
        if n is x_node:
            return ("v",)
        if id(n) in at:
            return at[id(n)]
        leaf = leaves(n) if leaves is not None else None
        if leaf is not None:
            at[id(n)] = leaf
            return leaf
        if n.op == R.CONST and n.dtype in FLOATS:
            a: Arg = ("c", float(n.arg) if n.dtype == DType.fp32 else float(round_to(np.float32(n.arg), n.dtype)))
        elif n.op == R.CONST and n.dtype == DType.bool:
            a = ("b", bool(n.arg))
        elif n.op == R.UNARY and n.dtype in FLOATS and n.arg in UNARY and n.arg not in ROUND.values():
            src = lets(n.src[0])
            if n.arg == "cast" and src.dtype in FLOATS:
                s = yield go(src)  # to fp32 or to its own type: exact, no step; to a 16-bit type: a rounding
                a = None if s is None else s if n.dtype in (DType.fp32, src.dtype) else rounded(s, n.dtype)
            elif n.arg == "cast" and src.dtype != DType.bool:
                return None
            else:
                s = yield go(src)
                if s is None or (n.arg != "cast" and src.dtype != n.dtype):
                    return None
                steps.append((n.arg, (s,)))
                a = rounded(("s", len(steps) - 1), n.dtype)
        elif n.op == R.BINARY and n.arg in BINARY and n.dtype in (*FLOATS, DType.bool) \
                and (n.arg in COMPARE) == (n.dtype == DType.bool):
            args = []
            for s in n.src:
                args.append((yield go(s)))
            kinds = {lets(s).dtype for s in n.src}
            if any(x is None for x in args) or len(kinds) != 1 or not kinds <= set(FLOATS) \
                    or (n.dtype != DType.bool and kinds != {n.dtype}):
                return None
            steps.append((n.arg, tuple(args)))
            a = rounded(("s", len(steps) - 1), n.dtype)
        elif n.op == R.SELECT and n.dtype in FLOATS and (lets(n.src[0]).op != R.PRED or leaves is not None) \
                and lets(n.src[0]).dtype == DType.bool:
            args = []
            for s in n.src:
                args.append((yield go(s)))
            if any(x is None for x in args) or any(lets(s).dtype != n.dtype for s in n.src[1:]):
                return None
            steps.append(("select", tuple(args)))
            a = ("s", len(steps) - 1)
        else:
            return None
        if a is None or len(steps) > MAX_STEPS:
            return None
        at[id(n)] = a
        return a

    out = trampoline.run(go(top))  # top's step is the last one made (v itself or a constant is no program)
    if out is None or out != ("s", len(steps) - 1) or steps[-1][0] in COMPARE:
        return None
    return tuple(steps)


def evaluate(steps: tuple[Step, ...], v: np.ndarray, inputs: tuple = ()) -> np.ndarray:
    """The program on v (and the inputs, arrays broadcasting against v), computed in v's float type (fp32
    for the kernel's meaning, fp64 for the probe)."""
    v = np.asarray(v)
    ft = v.dtype.type
    vals: list[Any] = []

    def arg(a: Arg):
        if a[0] in ("x", "p"):
            return np.asarray(inputs[a[1]], dtype=v.dtype if a[0] == "x" else np.bool_)
        return v if a[0] == "v" else vals[a[1]] if a[0] == "s" else ft(a[1]) if a[0] == "c" else np.bool_(a[1])

    with np.errstate(all="ignore"):
        for op, args in steps:
            xs = [arg(a) for a in args]
            if op == "select":
                r = np.where(xs[0], xs[1], xs[2])
            elif op == "cast":
                r = np.asarray(xs[0], dtype=v.dtype)
            elif op in UNARY:
                r = UNARY[op](np.asarray(xs[0], dtype=v.dtype))
            else:
                r = BINARY[op](*xs)
            vals.append(np.asarray(r, dtype=np.bool_ if op in COMPARE else v.dtype))
    return np.broadcast_to(vals[-1], v.shape).astype(v.dtype)


def _literal(x: float) -> str:
    if math.isnan(x):
        return "NAN"
    if math.isinf(x):
        return "INFINITY" if x > 0 else "(-INFINITY)"
    return f"{x:.9e}f"


def c_lines(steps: tuple[Step, ...], var: str = "v", inputs: tuple[str, ...] = ()) -> list[str]:
    """The program as C statements that replace the float var by its value (names ``f0, f1, ..`` local to a
    block the caller opens); ``inputs[j]`` is the C expression of input ``("x", j)``."""
    def arg(a: Arg) -> str:
        if a[0] in ("x", "p"):
            return inputs[a[1]]
        return var if a[0] == "v" else f"f{a[1]}" if a[0] == "s" else _literal(a[1]) if a[0] == "c" else \
            ("true" if a[1] else "false")
    lines = []
    for i, (op, args) in enumerate(steps):
        xs = [arg(a) for a in args]
        if op == "select":
            expr = f"({xs[0]} ? {xs[1]} : {xs[2]})"
        else:
            expr = (_C_UNARY if op in _C_UNARY and len(xs) == 1 else _C_BINARY)[op].format(*xs)
        lines.append(f"const {'bool' if op in COMPARE else 'float'} f{i} = {expr};")
    lines.append(f"{var} = f{len(steps) - 1};")
    return lines


def check(steps: Any, n_inputs: int = 0) -> str | None:
    """Why steps is not a well-formed program (of ``v`` and n_inputs inputs ``("x", j)``), or None."""
    if not isinstance(steps, tuple) or not steps or len(steps) > MAX_STEPS:
        return f"an fn epilogue is 1 to {MAX_STEPS} steps"
    kinds: list[str] = []
    for i, st in enumerate(steps):
        if not (isinstance(st, tuple) and len(st) == 2 and isinstance(st[1], tuple)):
            return f"step {i} is not (op, args)"
        op, args = st
        arity = 3 if op == "select" else 1 if op in UNARY else 2 if op in BINARY else None
        if arity is None or len(args) != arity:
            return f"step {i}: unknown op {op!r} or wrong argument count"
        got = []
        for a in args:
            if not isinstance(a, tuple) or not a or a[0] not in ("v", "s", "c", "b", "x", "p"):
                return f"step {i}: bad argument {a!r}"
            if a[0] in ("x", "p") and not (len(a) == 2 and isinstance(a[1], int) and 0 <= a[1] < n_inputs):
                return f"step {i}: argument {a!r} is not one of the {n_inputs} inputs"
            if a[0] == "s" and not (len(a) == 2 and isinstance(a[1], int) and 0 <= a[1] < i):
                return f"step {i}: argument {a!r} is not an earlier step"
            if a[0] == "c" and not (len(a) == 2 and isinstance(a[1], float)):
                return f"step {i}: constant {a!r} is not a float"
            got.append("bool" if a[0] in ("b", "p") or (a[0] == "s" and kinds[a[1]] == "bool") else "float")
        want = (["bool", "float", "float"] if op == "select" else ["bool"] if op == "cast"
                else ["float"] * arity)
        if got != want:
            return f"step {i}: {op} takes {', '.join(want)}, got {', '.join(got)}"
        kinds.append("bool" if op in COMPARE else "float")
    if kinds[-1] != "float":
        return "an fn epilogue ends in a float"
    return None


def linear_in(steps: tuple[Step, ...], j: int) -> bool:
    """Whether the program is s * h(the other inputs) in its input ``("x", j)`` = s: s reaches the result only
    through products with values free of it, quotients by them, negations, sums and selects of such terms (no
    rounding step, no other function of it)."""
    deg: list = []  # per step: 0 free of s, 1 linear in s, None neither

    def d(a: Arg):
        return 1 if a == ("x", j) else deg[a[1]] if a[0] == "s" else 0
    for op, args in steps:
        ds = [d(a) for a in args]
        if None in ds:
            deg.append(None)
        elif op == "mul":
            deg.append(ds[0] + ds[1] if ds[0] + ds[1] <= 1 else None)
        elif op == "div":
            deg.append(ds[0] if ds[1] == 0 else None)
        elif op in ("add", "sub"):
            deg.append(ds[0] if ds[0] == ds[1] else None)
        elif op == "neg":
            deg.append(ds[0])
        elif op == "select":
            deg.append(ds[1] if ds[0] == 0 and ds[1] == ds[2] else None)
        else:
            deg.append(0 if not any(ds) else None)
    return bool(deg) and deg[-1] == 1


def to_json(steps: tuple[Step, ...]) -> list:
    return [[op, [list(a) for a in args]] for op, args in steps]


def from_json(x: Any) -> tuple[Step, ...]:
    """The program of its JSON form (checked by the spec's validation, not here)."""
    if not isinstance(x, list):
        return ()
    out = []
    for st in x:
        if not (isinstance(st, list) and len(st) == 2 and isinstance(st[1], list)):
            return ()
        out.append((st[0], tuple((a[0], float(a[1]) if a[0] == "c" else a[1]) if isinstance(a, list) and len(a) == 2
                                 else tuple(a) if isinstance(a, list) else a for a in st[1])))
    return tuple(out)
