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
from typing import Any, Callable, Generator

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


def json_text(doc: Any, indent: int = 1, default: "Callable | None" = None) -> str:
    """``json.dumps(doc, indent=indent, ensure_ascii=False, default=default)`` by a walk that costs no frame per
    level (json's own encoder recurses once per nesting level: a region's expression tree is as deep as the chain
    it fused)."""
    out: list = []
    run(_json(doc, indent, 0, out, default))
    return "".join(out)


def _json(x: Any, indent: int, level: int, out: list, default: "Callable | None"):
    import json
    if isinstance(x, dict) and x:
        items, ends = [(json.dumps(_key(k), ensure_ascii=False) + ": ", v) for k, v in x.items()], "{}"
    elif isinstance(x, (list, tuple)) and x:
        items, ends = [("", v) for v in x], "[]"
    else:
        out.append(json.dumps(x, ensure_ascii=False, default=default))
        return
    pad = "\n" + " " * (indent * (level + 1))
    out.append(ends[0])
    for k, (key, v) in enumerate(items):
        out.append(("," if k else "") + pad + key)
        yield _json(v, indent, level + 1, out, default)
    out.append("\n" + " " * (indent * level) + ends[1])


def json_value(text: str) -> Any:
    """``json.loads(text)`` by a loop with its own stack of open arrays and objects (json's decoder recurses once
    per nesting level). Malformed text raises json.JSONDecodeError, as json.loads does."""
    import json
    scalar, scanstring = json.JSONDecoder().raw_decode, json.decoder.scanstring
    stack: list = []  # [open list or dict, the key its next value goes to]
    pos = 0

    def at(p: int) -> tuple:  # (the first character from p that is not white space, its position)
        while p < len(text) and text[p] in " \t\n\r":
            p += 1
        return (text[p] if p < len(text) else ""), p

    def key(p: int) -> tuple:  # the key starting at p (white space first), and the position after its ':'
        c, p = at(p)
        if c != '"':
            raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, p)
        k, p = scanstring(text, p + 1)
        c, p = at(p)
        if c != ":":
            raise json.JSONDecodeError("Expecting ':' delimiter", text, p)
        return k, p + 1

    while True:
        c, pos = at(pos)
        if c in "[{":
            close, pos = at(pos + 1)
            if close != "]}"[c == "{"]:
                container = [] if c == "[" else {}
                k, pos = (None, pos) if c == "[" else key(pos)
                stack.append([container, k])
                continue
            v, pos = ([] if c == "[" else {}), pos + 1
        else:
            v, pos = scalar(text, pos)
        while True:  # v is complete: place it, then close what it completes
            if not stack:
                c, pos = at(pos)
                if c:
                    raise json.JSONDecodeError("Extra data", text, pos)
                return v
            top = stack[-1]
            if isinstance(top[0], list):
                top[0].append(v)
            else:
                top[0][top[1]] = v
            c, pos = at(pos)
            if c == ",":
                if isinstance(top[0], dict):
                    top[1], pos = key(pos + 1)
                else:
                    pos += 1
                break
            if c != "]}"[isinstance(top[0], dict)]:
                raise json.JSONDecodeError("Expecting ',' delimiter", text, pos)
            v, pos = stack.pop()[0], pos + 1


def _key(k: Any) -> str:
    """A key as json writes it: str as is, numbers and None as their JSON text."""
    import json
    return k if isinstance(k, str) else json.dumps(k)
