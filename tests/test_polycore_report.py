"""The Poly Core report (docs/DESIGN.md §Poly Core): its JSON shape, edge classes and minimal buffers for the
hand-built regions, tail axes, barrier and bank hints per arch, and failure as a diagnostic."""
import json

import pytest

from polysat.tests.poly_examples import (attention, conv_relu_maxpool, gemm, gemm_bias_relu, layernorm,
                                            mlp_residual, softmax)
from polysat.analyses.polycore import analyze
from polysat.ir.diagnostics import PolysatError


def test_gemm_report_has_the_seed_shape():
    j = analyze(gemm(M=256, N=256, K=256), "sm80", {"m": 64, "n": 64}).to_json()
    a = j["analysis"]
    assert a["parallel_axes"] == ["m", "n"]
    assert a["reduce_axes"] == ["k"]
    assert a["compute_at"]["ok"] is True
    assert a["compute_at"]["halo"] == {"bytes": 0, "per_axis": {"m": 0, "n": 0, "k": 0}}
    assert a["min_buffer"] == {"buffer": "reg", "depth": 2}
    assert a["footprints"]["A"]["tile_elems"] == 64 * 256 and a["footprints"]["A"]["total_elems"] == 256 * 256
    assert {d["kind"] for d in a["dependences"]} == {"flow", "anti", "output"}
    json.dumps(j)  # JSON-able


def test_tail_axes_follow_the_tile_and_the_k_step():
    a = analyze(gemm(M=100, N=256, K=200), "sm80", {"m": 64, "n": 64})
    assert a.tail_axes == ("m", "k")  # 100 % 64 and 200 % 32 (sm80 k-step)
    assert analyze(gemm(M=128, N=128, K=256), "sm90", {"m": 64, "n": 64}).tail_axes == ()


@pytest.mark.parametrize("region, tile, want", [
    (gemm_bias_relu(), {"m": 64, "n": 64}, {"acc": ("one_to_one", "reg")}),
    (conv_relu_maxpool(N=1, C=8, K=16, H=32, W=32), {"k": 16, "ph": 4, "pw": 4},
     {"O": ("one_to_one", "reg"), "R": ("many_to_one", "reg")}),
    (softmax(R=64, C=256), {"r": 4, "c": 256},
     {"mx": ("one_to_many", "smem_ring"), "e": ("one_to_one", "reg"), "sm": ("one_to_many", "smem_ring")}),
    (layernorm(R=64, C=256), {"r": 4, "c": 256},
     {"mu": ("one_to_many", "smem_ring"), "var": ("one_to_many", "smem_ring")}),
    (attention(S=128, D=64), {"q": 16, "e": 64},
     {"p": ("many_to_many", "smem_ring"), "m": ("one_to_many", "smem_ring"), "o": ("one_to_one", "reg")}),
    (mlp_residual(M=256, D=128, H=256), {"m": 16, "n": 128},
     {"h": ("one_to_one", "reg"), "g": ("many_to_many", "smem_ring"), "z": ("one_to_one", "reg")}),
])
def test_edge_classes_and_buffers(region, tile, want):
    rep = analyze(region, "sm90", tile)
    assert rep.compute_at_ok, rep.reasons
    got = {}
    for e in rep.edges:
        # a tensor's class is the one of its last reader (e.g. e: exp -> rowsum (many_to_one), -> div (one_to_one))
        got[e.tensor] = (e.kind, e.buffer)
    for t, kb in want.items():
        assert got[t] == kb, (t, got[t])


def test_region_min_buffer_is_the_widest_edge():
    assert analyze(gemm_bias_relu(), "sm90", {"m": 64, "n": 64}).min_buffer == {"buffer": "reg", "depth": 2}
    assert analyze(softmax(R=64, C=256), "sm90", {"r": 4, "c": 256}).min_buffer == {"buffer": "smem_ring", "depth": 2}


def test_an_edge_too_big_for_shared_memory_goes_to_device_memory():
    rep = analyze(softmax(R=64, C=65536), "sm80", {"r": 64, "c": 65536})
    assert {e.tensor: e.buffer for e in rep.edges}["e"] == "gmem"
    assert not rep.compute_at_ok
    assert rep.min_buffer["buffer"] == "gmem"


def test_barrier_hints_differ_per_arch():
    r = mlp_residual(M=256, D=128, H=256)
    h80 = analyze(r, "sm80", {"m": 16, "n": 128}).barrier_hints
    h90 = analyze(r, "sm90", {"m": 16, "n": 128}).barrier_hints
    assert any("cp.async.commit_group" in h["sync"] for h in h80)
    assert any("mbarrier" in h["sync"] for h in h90)
    # g is written by threads and read by the second GEMM's tensor cores: a proxy fence on sm90
    g90 = [h for h in h90 if h["buffers"] == ["g"]]
    assert g90 and "fence.proxy.async" in g90[0]["sync"]


def test_bank_hints_flag_128_byte_rows():
    hints = analyze(gemm(M=256, N=256, K=256), "sm90", {"m": 64, "n": 64}).bank_hints
    rows = {h["tensor"]: h for h in hints}
    assert rows["A"]["row_bytes"] == 128 and rows["A"]["conflict_ways"] == 8  # 64 fp16 of k per stage
    assert "128B swizzle" in rows["A"]["fix"]


def test_piecewise_closure_counts_pieces():
    rep = analyze(conv_relu_maxpool(N=1, C=2, K=2, H=16, W=16), "sm80", {"k": 2, "ph": 4, "pw": 4})
    assert rep.affine["ok"] and rep.affine["max_pieces"] >= 1
    assert set(rep.affine["pieces"]) == {"conv->relu", "relu->pool"}


def test_bad_tile_is_a_diagnostic():
    with pytest.raises(PolysatError) as e:
        analyze(gemm(), "sm90", {"k": 16})
    assert e.value.diagnostics[0].kind == "InvalidAttribute"
    with pytest.raises(PolysatError) as e:
        analyze(gemm(), "sm75")
    assert e.value.diagnostics[0].kind == "UnknownTarget"
