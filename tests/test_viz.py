"""The picture dumps: ``--dump=egraph_svg,regions_svg,roofline`` write well-formed standalone SVG that
names the user's ops and tensors, highlights exactly the extracted term, puts each tensor's bytes
(computed here from the model's shapes) on the partition's arrows, and plots one point per kernel.
"""
from __future__ import annotations

import importlib.util
import pathlib
import xml.etree.ElementTree as ET

import pytest

_spec = importlib.util.spec_from_file_location("polysat_test_oracle", pathlib.Path(__file__).with_name("oracle.py"))
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)

EX = pathlib.Path(__file__).resolve().parent.parent / "examples"
NS = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def pictures(tmp_path_factory):
    out = tmp_path_factory.mktemp("viz")
    rc, stdout, stderr = oracle.cli(["compile", str(EX / "conv_relu_maxpool.json"), "--cost=model",
                                     "--dump=egraph_svg,regions_svg,roofline", "--out", str(out)])
    assert rc == 0, stdout + stderr
    return {p.stem: ET.parse(p).getroot() for p in out.glob("*.svg")}


def _texts(root) -> list:
    return ["".join(t.itertext()) for t in root.iter(f"{NS}text")]


def test_three_standalone_svgs_are_written(pictures):
    assert set(pictures) == {"egraph_svg", "regions_svg", "roofline"}
    for root in pictures.values():
        assert root.tag == f"{NS}svg" and float(root.get("width")) > 100 and float(root.get("height")) > 100


def test_egraph_picture_names_the_users_ops_and_highlights_the_extracted_term(pictures):
    root = pictures["egraph_svg"]
    text = " ".join(_texts(root))
    for op in ("conv", "relu", "pool"):
        assert op in text
    header = _texts(root)[0]
    n_classes = int(header.split(": ")[1].split(" e-classes")[0])
    clusters = [r for r in root.iter(f"{NS}rect") if r.get("rx") == "6"]
    assert len(clusters) == n_classes  # small e-graph: every class drawn
    chosen = [r for r in root.iter(f"{NS}rect") if r.get("fill") == "#ffd8a8"]
    assert 0 < len(chosen) < len([r for r in root.iter(f"{NS}rect") if r.get("rx") == "3"])


def test_regions_picture_labels_tensors_with_their_bytes(pictures):
    text = _texts(pictures["regions_svg"])
    # X is fp16[1, 16, 34, 34], W fp16[32, 16, 3, 3], the output P fp16[1, 32, 17, 17]
    assert f"reads X {1 * 16 * 34 * 34 * 2 / 1024:.1f} KiB" in text
    assert f"reads W {32 * 16 * 9 * 2 / 1024:.1f} KiB" in text
    assert f"P {32 * 17 * 17 * 2 / 1024:.1f} KiB (output)" in text
    # the one kernel's ops: the reduction normal form (R3) moves the relu after the pool's max, and the node
    # the rule makes is named after the value it computes (pool), so the label lists conv and pool
    assert any(t.startswith("conv, pool") or t.startswith("conv, relu, pool") for t in text)


def test_roofline_has_one_point_per_kernel(pictures):
    root = pictures["roofline"]
    labels = [t for t in _texts(root) if t.startswith("k") and t.endswith(" us")]
    points = [c for c in root.iter(f"{NS}circle") if c.find(f"{NS}title") is not None]
    assert len(labels) == len(points) >= 1
