"""What pricing one region keeps across regions and tiles equals what isl computes afresh
(docs/DESIGN.md §Cost model): footprints of a tensor its writer covers, dependences and their domains kept by
text under other statement names, and the texts held for renamed isl objects (never printed)."""
import islpy as isl
import pytest

from polysat.analyses import isl_util
from polysat.analyses.footprint import (covering, footprint, full_footprint, image, make_tile, pre_images, readers_of,
                                        tile_footprint)
from polysat.analyses.poly_region import PolyRegion, renamed
from polysat.analyses.polycore import driver_reach
from polysat.tests.poly_examples import (T, attention, conv_relu_maxpool, gemm_bias_relu, layernorm, mlp_residual,
                                         softmax, stmt)

REGIONS = [gemm_bias_relu(M=256, N=256, K=64), mlp_residual(M=128, D=64, H=128), layernorm(R=64, C=256),
           softmax(R=64, C=256), conv_relu_maxpool(N=1, C=3, K=4, H=32, W=32)]


def _tiles(b):
    par = b.driver.parallel_dims
    for n in (1, 16, 64):
        t = make_tile(b, {d: n for d in par})
        if t is not None:
            yield t


def _swapped(region: PolyRegion) -> PolyRegion:
    """The region with its statements and tensors under other names (a canonical renaming, reversed)."""
    names = [s.name for s in region.statements] + [t.name for t in region.tensors]
    return renamed(region, {n: f"z{k}_{n}" for k, n in enumerate(reversed(names))}, region.name + "_z")


@pytest.mark.parametrize("region", REGIONS, ids=lambda r: r.name)
def test_covered_tensor_footprints_are_the_union_of_every_access(region):
    """A tensor its writer covers has the writer's image as its footprint; the union of every access's image
    (footprint()) is the same set on every tile and on the whole region."""
    b = region.bind()
    covered = [t.name for t in region.tensors if covering(region, t.name) is not None]
    assert covered  # every example has an internal tensor its writer covers
    for t in _tiles(b):
        for x in region.tensors:
            assert tile_footprint(b, t, x.name).is_equal(footprint(b, t.slices, x.name)), (x.name, t.sizes)
    for x in region.tensors:
        assert full_footprint(b, x.name).is_equal(footprint(b, b.domains, x.name)), x.name


def test_a_read_past_what_its_writer_writes_is_not_covered():
    """A consumer reading twice the rows its producer writes: the footprint is the union, larger than the write."""
    r = PolyRegion("half", [T("x", (128, 64)), T("h", (128, 64), role="internal"), T("y", (128, 64), role="output")],
                   [stmt("half", {"i": 64, "j": 64}, ["x[i, j]"], "h[i, j]"),
                    stmt("all", {"i": 128, "j": 64}, ["h[i, j]"], "y[i, j]")])
    b = r.bind()
    assert covering(r, "h") is None
    t = make_tile(b, {"i": 128, "j": 64})
    fp = tile_footprint(b, t, "h")
    assert fp.is_equal(footprint(b, t.slices, "h"))
    assert not fp.is_equal(image(t.slices["half"], b.stmt("half").write))


@pytest.mark.parametrize("region", REGIONS + [attention(S=128, D=64)], ids=lambda r: r.name)
def test_dependences_kept_under_other_names_equal_fresh_ones(region):
    """pre_images and readers_of of a region bound under other names (met first under the first names, so kept
    by text and renamed) equal the compositions isl makes afresh, and are held under their own text."""
    for reg in (region, _swapped(region)):
        b = reg.bind()
        for s in b.statements:
            got = dict((p.name, m) for p, m in pre_images(reg, s.name))
            for tensor, read in s.reads:
                p = b.writer(tensor)
                if p is None or p.index >= s.index:
                    continue
                fresh = read.apply_range(p.write.reverse()).intersect_range(p.domain)
                assert got[p.name].is_equal(fresh) and got[p.name].get_space() == fresh.get_space()
                assert isl_util.held(got[p.name])[2] == str(got[p.name])
                fresh_readers = p.domain.apply(p.write).apply(read.reverse()).intersect(s.domain)
                mine = readers_of(read, p)
                assert mine.is_equal(fresh_readers) and mine.get_tuple_name() == s.name
                assert isl_util.held(mine)[2] == str(mine)


@pytest.mark.parametrize("region", REGIONS, ids=lambda r: r.name)
def test_driver_reach_under_other_names_is_the_same(region):
    """driver_reach (forward images, the first step kept by text) is the same set under other names."""
    other = _swapped(region)
    ren = {s.name: o.name for s, o in zip(region.statements, other.statements, strict=True)}
    for s in region.statements:
        a, z = driver_reach(region, s.name), driver_reach(other, ren[s.name])
        assert (a is None) == (z is None)
        if a is not None:
            assert a.set_tuple_name(z.get_tuple_name()).is_equal(z)


def test_renamed_objects_hold_the_text_isl_prints():
    """Statements bound under other names and images renamed from kept ones are held with exactly the text isl
    prints for them (the keys of the caches kept by text)."""
    for region in REGIONS:
        for reg in (region, _swapped(region)):
            b = reg.bind()
            for s in b.statements:
                for obj in (s.domain, s.write, *(m for _, m in s.reads)):
                    assert isl_util.held(obj)[2] == str(obj)
            for t in _tiles(b):
                for x in reg.tensors:
                    fp = tile_footprint(b, t, x.name)
                    assert isl_util.held(fp)[2] == str(fp)
                    assert isl_util.held_parts(fp) == isl_util.tuple_template(str(fp))


@pytest.mark.parametrize("region", REGIONS, ids=lambda r: r.name)
def test_reach_of_a_covered_tensor_is_its_writers_write(region):
    """reach() of a covered tensor (its writer's path and write alone) is the union over every access."""
    from polysat.analyses.footprint import _paths, reach
    b, paths = region.bind(), _paths(region)
    if paths is None:
        return
    checked = 0
    for x in region.tensors:
        if covering(region, x.name) is None:
            continue
        ms = [paths[n].apply_range(m) for n, m in b.accesses(x.name) if n in paths]
        union = ms[0]
        for m in ms[1:]:
            union = union.union(m)
        assert reach(region, x.name).is_equal(union), x.name
        checked += 1
    assert checked
