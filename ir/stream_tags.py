"""The tags a streamed softmax-weighted sum's spelling carries on its Tiny IR nodes (``softmax_sum:<group>:<role>``,
egraph/stream.py builds and reads them): naming code tells a role tag from a user's op name by them."""
from __future__ import annotations

TAG = "softmax_sum"
ROLES = ("max", "max_row", "max_b", "shift", "log2e", "scaled", "exp", "sum", "sum_row", "sum_b", "norm", "p", "pf",
         "p_row", "p_b", "prod", "acc", "out")
SOFTMAX_ROLES = frozenset(ROLES[:ROLES.index("norm") + 1])  # the softmax's part: its max, exp, row sum and norm


def parse_tag(t: "str | None") -> "tuple | None":
    """(group, role) of a streaming tag, else None."""
    if not t or not t.startswith(TAG + ":"):
        return None
    _, group, role = t.split(":", 2)
    return (group, role) if role in ROLES else None
