"""The streamed softmax-weighted sum in Tiny IR: how ``SoftmaxSum(p, passes, s, v)`` is spelled, and
how the stages after extraction find it again (docs/DESIGN.md §Streaming, ``rules/streaming.egg``).

Tiny IR has no streaming op, so an extracted ``SoftmaxSum`` is spelled by its meaning (what the
reference evaluator computes, and what the soundness checker compares):

    m = max_j s;  e = exp2((s - m)·log2 e);  l = sum_j e
    passes 1:  out[.., d] = (sum_j f32(round_p(e_j)) v[.., d, j]) / l
    passes 2:  out[.., d] =  sum_j f32(round_p(e_j / l)) v[.., d, j]

and every node of that spelling carries the tag ``softmax_sum:<group>:<role>``. A kernel that holds a
whole group runs it while walking the keys (once, or twice for passes 2: :mod:`polysat.ir.playback`):
region synthesis emits the RB-SSA ``online_softmax_sum`` for it, the legality check does not read its
internal max/sum as broadcast reductions, and Poly Core prices its internal values per key block.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..ir.dtypes import DType
from ..ir.stream_tags import TAG, parse_tag
from ..ir.tiny import Ops, Program

LOG2E = 1.4426950408889634
BLOCK = 64  # keys per step of the recurrence (playback; the kernel picks its own)


def tag(group: str, role: str) -> str:
    return f"{TAG}:{group}:{role}"


def spell(add: Callable, s, v, p: DType, passes: int, group: str):
    """The Tiny IR of SoftmaxSum(p, passes, s, v): ``add(op, src, arg, tag, final)`` builds one node (the
    last, role ``out``, is final). s: [*x, N] fp32, v: [*x, Dv, N] fp32 -> [*x, Dv] fp32."""
    r = s.ndim
    x, n, dv = tuple(s.shape[:-1]), s.shape[-1], v.shape[-2]

    def node(role, op, src, arg=None):
        return add(op, src, arg or {}, tag(group, role), role == "out")

    def widen(role, val, shape):  # [*x] -> [*x, k]
        row = node(f"{role}_row", Ops.RESHAPE, [val], {"result_shape": x + (1,)})
        return row if row.shape == shape else node(f"{role}_b", Ops.EXPAND, [row], {"result_shape": shape})

    m = node("max", Ops.REDUCE, [s], {"op": "MAX", "axes": (r - 1,), "dtype": DType.fp32})
    d = node("shift", Ops.SUB, [s, widen("max", m, x + (n,))])
    c = node("log2e", Ops.CONST, [], {"value": LOG2E, "dtype": DType.fp32, "shape": x + (n,)})
    e = node("exp", Ops.EXP2, [node("scaled", Ops.MUL, [d, c])])
    total = node("sum", Ops.REDUCE, [e], {"op": "SUM", "axes": (r - 1,), "dtype": DType.fp32})
    q = e if passes == 1 else node("norm", Ops.FDIV, [e, widen("sum", total, x + (n,))])
    pf = node("pf", Ops.CAST, [node("p", Ops.CAST, [q], {"to": p})], {"to": DType.fp32})
    pb = node("p_row", Ops.RESHAPE, [pf], {"result_shape": x + (1, n)})
    if pb.shape != tuple(v.shape):
        pb = node("p_b", Ops.EXPAND, [pb], {"result_shape": tuple(v.shape)})
    acc_arg = {"op": "SUM", "axes": (r,), "dtype": DType.fp32}
    if passes == 2:
        return node("out", Ops.REDUCE, [node("prod", Ops.MUL, [pb, v])], acc_arg)
    acc = node("acc", Ops.REDUCE, [node("prod", Ops.MUL, [pb, v])], acc_arg)
    return node("out", Ops.FDIV, [acc, widen("sum", total, x + (dv,))])


@dataclass(frozen=True)
class Group:
    """One spelled SoftmaxSum in a program: its nodes by role, its operands s and v, P's dtype, passes."""
    key: str
    roles: dict  # role -> node id
    s: str  # the scores node (read by the max and the shift)
    v: str  # the values node (the contraction's second operand)
    p: DType
    passes: int  # 1: online (P rounded at the running max); 2: max and sum first, then P·V

    @property
    def nodes(self) -> frozenset:
        return frozenset(self.roles.values())

    @property
    def out(self) -> str:
        return self.roles["out"]

    @property
    def acc(self) -> str:
        """The weighted-sum REDUCE (P·V)."""
        return self.roles["acc" if self.passes == 1 else "out"]

    @property
    def reduces(self) -> tuple:
        """The three running reductions: max, sum and the weighted sum."""
        return self.roles["max"], self.roles["sum"], self.acc


_GROUPS: dict = {}  # id(program) -> (program, its groups), the latest 8: region synthesis asks once per kernel


def groups(program: Program) -> dict:
    """group key -> Group for every complete, well-formed spelling in program (found once per program: the
    program is kept with its entry, so an id is never reused while the entry lives; do not mutate)."""
    hit = _GROUPS.get(id(program))
    if hit is not None and hit[0] is program:
        return hit[1]
    out = _groups(program)
    if len(_GROUPS) >= 8:
        _GROUPS.pop(next(iter(_GROUPS)))
    _GROUPS[id(program)] = (program, out)
    return out


def _groups(program: Program) -> dict:
    found: dict = {}
    for n in program.nodes:
        pt = parse_tag(n.tag)
        if pt is not None:
            found.setdefault(pt[0], {})[pt[1]] = n.id
    out = {}
    for key, roles in found.items():
        g = _check(program, key, roles)
        if g is not None:
            out[key] = g
    return out


_COMMON = ("max", "max_row", "shift", "log2e", "scaled", "exp", "sum", "sum_row", "p", "pf", "p_row", "prod", "out")


def _check(p: Program, key: str, roles: dict) -> "Group | None":
    """The group when its nodes are wired as :func:`spell` builds them (a tag alone proves nothing)."""
    passes = 2 if "norm" in roles else 1
    if any(r not in roles for r in _COMMON + (("acc",) if passes == 1 else ())):
        return None
    n = {r: p[i] for r, i in roles.items()}
    acc = "acc" if passes == 1 else "out"
    want = {"max": Ops.REDUCE, "shift": Ops.SUB, "scaled": Ops.MUL, "exp": Ops.EXP2, "sum": Ops.REDUCE,
            "p": Ops.CAST, "pf": Ops.CAST, "prod": Ops.MUL, acc: Ops.REDUCE, "log2e": Ops.CONST,
            **({"out": Ops.FDIV} if passes == 1 else {"norm": Ops.FDIV})}
    if any(n[r].op != op for r, op in want.items()):
        return None
    s = n["max"].src[0]
    widened_sum = roles.get("sum_b", roles["sum_row"])
    chain = [("shift", 0, s), ("shift", 1, roles.get("max_b", roles["max_row"])), ("scaled", 0, roles["shift"]),
             ("scaled", 1, roles["log2e"]), ("exp", 0, roles["scaled"]), ("sum", 0, roles["exp"]),
             ("pf", 0, roles["p"]), ("p_row", 0, roles["pf"]), ("max_row", 0, roles["max"]),
             ("sum_row", 0, roles["sum"]), ("prod", 0, roles.get("p_b", roles["p_row"])), (acc, 0, roles["prod"])]
    if passes == 1:
        chain += [("p", 0, roles["exp"]), ("out", 0, roles["acc"]), ("out", 1, widened_sum)]
    else:
        chain += [("norm", 0, roles["exp"]), ("norm", 1, widened_sum), ("p", 0, roles["norm"])]
    for role, pos, src in chain:
        if n[role].src[pos] != src:
            return None
    if n["log2e"].arg["value"] != LOG2E or n["max"].arg["op"] != "MAX" or n["sum"].arg["op"] != "SUM" \
            or n[acc].arg["op"] != "SUM":
        return None
    sv, vv = p[s], p[n["prod"].src[1]]
    if sv.ndim < 1 or vv.ndim != sv.ndim + 1 or vv.shape[:-2] != sv.shape[:-1] or vv.shape[-1] != sv.shape[-1]:
        return None
    return Group(key, dict(roles), s, n["prod"].src[1], n["p"].dtype, passes)


def group_of(program: Program) -> dict:
    """node id -> the Group it belongs to."""
    return {i: g for g in groups(program).values() for i in g.nodes}
