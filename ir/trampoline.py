"""Recursion without Python frames: a walk written as generators, driven by an explicit stack.

A recursive walk over a model (a demand that follows a chain of 5,000 ops, a cost walk through a region's lets)
would need as many Python frames as the model is deep, and Python stops at 1,000. Written as a generator, the
walk keeps its shape: each recursive call ``f(x)`` becomes ``(yield f(x))`` (the generator of the call), and
``run`` steps the innermost generator, handing each finished call's return value to its caller. The depth then
costs heap, not stack (docs/DESIGN.md §Diagnostics: no recursion proportional to the input).

    def depth(n):
        best = 0
        for c in n.children:
            best = max(best, (yield depth(c)))
        return best + 1

    run(depth(root))
"""
from __future__ import annotations

from types import GeneratorType
from typing import Any, Generator

Walk = Generator[Any, Any, Any]  # a step of a walk: yields the walks it calls, returns its value to run()


def run(walk: "Generator | Any") -> Any:
    """The return value of the generator ``walk``, every generator it yields run the same way first (its
    value sent back in); anything else yielded is sent straight back. ``walk`` that is not a generator is
    its own value (a walk may return early without yielding)."""
    if not isinstance(walk, GeneratorType):
        return walk
    stack = [walk]
    value: Any = None
    error: "BaseException | None" = None
    while stack:
        top = stack[-1]
        try:
            got = top.throw(error) if error is not None else top.send(value)
        except StopIteration as stop:
            stack.pop()
            value, error = stop.value, None
            continue
        except BaseException as e:  # noqa: BLE001 — propagated to the caller's generator, as a call would
            stack.pop()
            if not stack:
                raise
            value, error = None, e
            continue
        if isinstance(got, GeneratorType):
            stack.append(got)
            value = None
        else:
            value = got
    return value


def json_text(doc: Any, indent: int = 1) -> str:
    """``json.dumps(doc, indent=indent, ensure_ascii=False)`` by a walk that costs no frame per level (json's
    own encoder recurses once per nesting level: a region's expression tree is as deep as the chain it fused)."""
    out: list = []
    run(_json(doc, indent, 0, out))
    return "".join(out)


def _json(x: Any, indent: int, level: int, out: list):
    import json
    if isinstance(x, dict) and x:
        items, ends = [(json.dumps(_key(k), ensure_ascii=False) + ": ", v) for k, v in x.items()], "{}"
    elif isinstance(x, (list, tuple)) and x:
        items, ends = [("", v) for v in x], "[]"
    else:
        out.append(json.dumps(x, ensure_ascii=False))
        return
    pad = "\n" + " " * (indent * (level + 1))
    out.append(ends[0])
    for k, (key, v) in enumerate(items):
        out.append(("," if k else "") + pad + key)
        yield _json(v, indent, level + 1, out)
    out.append("\n" + " " * (indent * level) + ends[1])


def _key(k: Any) -> str:
    """A key as json writes it: str as is, numbers and None as their JSON text."""
    import json
    return k if isinstance(k, str) else json.dumps(k)
