"""Poly Core's counts without isl's counting (analyses/settext.py, analyses/footprint.py) give exactly what isl
gives: extents, cardinalities and sectors, on random sets of every shape the fast paths take or refuse, and on a
sample of the sets the scale graphs (LLaMA-7B, ResNet-152) price."""
from __future__ import annotations

import gzip
import json
import pathlib
import random
import re

import islpy as isl

from polysat.analyses import footprint as fp
from polysat.analyses.isl_util import val_int
from polysat.analyses.settext import box_of_text, peeled, separable_count

DATA = pathlib.Path(__file__).parent / "data" / "settext_sets.json.gz"


def _isl_extents(s: isl.Set) -> tuple:
    n = s.dim(isl.dim_type.set)
    if s.is_empty():
        return ((0, -1),) * n
    return tuple((val_int(s.dim_min_val(k)), val_int(s.dim_max_val(k))) for k in range(n))


def _isl_card(s: isl.Set) -> int:
    return 0 if s.is_empty() else val_int(s.count_val())


def _isl_sectors(s: isl.Set, itemsize: int, sector: int, merged: tuple) -> int:
    """footprint._sectors as isl computes it (no text: the set's image under the sector map, counted)."""
    return fp._sectors(s, "", itemsize, sector, merged)


def _check(text: str, kinds=("extents", "card", "sectors4,32", "sectors2,32")) -> None:
    s = isl.Set(text)
    for kind in kinds:
        if kind == "extents":
            got, want = fp._extents(s, str(s)), _isl_extents(s)
        elif kind == "card":
            got, want = fp._card(s, str(s)), _isl_card(s)
        else:
            m = re.match(r"sectors(\d+),(\d+)(?:,(\(.*\)))?$", kind)
            merged = tuple(int(x) for x in re.findall(r"-?\d+", m.group(3))) if m.group(3) else ()
            got = fp._sectors(s, str(s), int(m.group(1)), int(m.group(2)), merged)
            want = _isl_sectors(s, int(m.group(1)), int(m.group(2)), merged)
        assert got == want, f"{kind} of {text}: fast {got}, isl {want}"


def _random_set(rng: random.Random) -> str:
    """A small set: a box, a box with fixed dims, a coupled pair (a conv's padded window), a stride, a union,
    or a half-open bound."""
    n = rng.randint(1, 4)
    names = [f"i{k}" for k in range(n)]
    head = [f"{d} = {rng.randint(-3, 5)}" if rng.random() < 0.2 else d for d in names]
    cons = []
    for k, d in enumerate(names):
        if "=" in head[k]:
            continue
        lo = rng.randint(-4, 6)
        hi = lo + rng.randint(-1, 9)  # an empty dim now and then
        cons.append(rng.choice([f"{lo} <= {d} <= {hi}", f"{d} >= {lo} and {d} < {hi + 1}", f"{lo - 1} < {d} <= {hi}"]))
    free = [d for k, d in enumerate(names) if "=" not in head[k]]
    shape = rng.random()
    if len(free) >= 2 and shape < 0.25:
        a, b = rng.sample(free, 2)
        cons.append(f"-{rng.randint(1, 3)}{a} < {b}")
    elif free and shape < 0.4:
        cons.append(f"({rng.choice(free)}) mod {rng.randint(2, 3)} = 0")
    body = f"T[{', '.join(head)}]" + (f" : {' and '.join(cons)}" if cons else "")
    text = "{ " + body + " }"
    if shape > 0.9:
        return str(isl.Set(text).union(isl.Set(_shifted(text))).coalesce())  # two boxes, often not one
    return str(isl.Set(text))


def _shifted(text: str) -> str:
    return re.sub(r"<= (-?\d+) }", lambda m: f"<= {int(m.group(1)) + 3} }}", text)


def test_random_sets_match_isl():
    rng = random.Random(0)
    boxes = 0
    for _ in range(400):
        text = _random_set(rng)
        boxes += box_of_text(text) is not None
        _check(text)
    assert 100 < boxes < 400  # both paths taken


def test_merged_sectors_match_isl():
    """A run over trailing axes spanned whole: one contiguous range per outer point."""
    for text, merged in (("{ T[i0, i1, i2] : 0 <= i0 <= 2 and 3 <= i1 <= 5 and 0 <= i2 <= 6 }", (8, 7)),
                         ("{ T[i0, i1, i2] : 1 <= i0 <= 2 and 0 <= i1 <= 2 and 0 <= i2 <= 2 }", (4, 3, 3)),
                         ("{ T[i0, i1] : 0 <= i0 <= 9 and 0 <= i1 <= 2 }", (10, 3))):
        for itemsize in (1, 2, 4):
            _check(text, (f"sectors{itemsize},32,{merged}",))


def test_not_a_box_is_refused():
    for text in ("{ T[i0, i1] : 0 <= i0 <= 3 and 0 <= i1 <= i0 }", "{ T[i0] : 0 <= i0 <= 8 and (i0) mod 2 = 0 }",
                 "{ T[i0] : 0 <= 2i0 <= 8 }", "[n] -> { T[i0] : 0 <= i0 < n }", "{ T[i0] : 0 <= i0 <= 3; U[i0] : i0 = 0 }",
                 "{ T[i0] : exists (e0 : i0 = 2e0 and 0 <= i0 <= 8) }", "{ T[i0, i1] : 0 <= i0 <= 3 }"):
        assert box_of_text(text) is None, text
    assert box_of_text("{ S[i0 = 15, 31, i2] : -2 < i2 <= 55 }") == ((15, 15), (31, 31), (-1, 55))


def test_separable_count_is_the_product_of_its_groups():
    text = ("{ S[i0 = 15, i1, i2, i3, r0, r1] : 0 <= i1 <= 63 and 0 <= i2 <= 55 and 0 <= i3 <= 55 and r0 >= 0 and "
            "-2i2 < r0 <= 2 and r1 >= 0 and -2i3 < r1 <= 2 }")
    s = isl.Set(text)
    assert separable_count(s) == 64 * 167 * 167 == _isl_card(s)
    assert separable_count(isl.Set("{ T[i0, i1] : 0 <= i0 <= 3 and 0 <= i1 <= i0 }")) is None  # one group


def test_scale_graph_sets_match_isl():
    """A sample of the sets LLaMA-7B (1 layer) and ResNet-152 price (their footprint memo's keys), boxes and not."""
    for kind, text in json.loads(gzip.decompress(DATA.read_bytes())):
        _check(text, (kind,))


def test_peeled_dims_leave_the_count_unchanged():
    """A rotate-half footprint (a union of floors of i2 alone) peels its fixed and row dims: the count of what is
    left times the intervals' points is isl's count; a dim that a piece constrains with another is kept."""
    rope = ("{ T0[0, i1, i2] : 0 <= i1 <= 127 and -64 <= i2 <= 4095 and ((i2 >= 0 and 128*floor((i2)/128) <= -64 + i2)"
            " or (i2 <= 4031 and 128*floor((64 + i2)/128) <= i2)) }")
    n, rest = peeled(isl.Set(rope))
    assert n == 128 and rest.dim(isl.dim_type.set) == 1
    assert n * _isl_card(rest) == _isl_card(isl.Set(rope)) == fp._card(isl.Set(rope), rope)
    tri = "{ T[i0, i1, i2] : 0 <= i0 <= 3 and 0 <= i1 <= i0 and 0 <= i2 <= 4 }"
    n, rest = peeled(isl.Set(tri))
    assert n == 5 and rest.dim(isl.dim_type.set) == 2  # i2 peeled (5 points); i0, i1 coupled
    gap = "{ T[i0, i1] : 0 <= i0 <= 3 and (0 <= i1 <= 2 or 5 <= i1 <= 6) }"
    n, rest = peeled(isl.Set(gap))
    assert n == 4 and rest.dim(isl.dim_type.set) == 1  # i0 peeled; i1 is no whole interval
    rng = random.Random(1)
    for _ in range(150):
        s = isl.Set(_random_set(rng))
        if s.is_empty():
            continue
        n, rest = peeled(s)
        assert n * _isl_card(rest) == _isl_card(s), str(s)
