"""One device table and one roofline for the cost model and every kind's plan search; the backend stages
plan for the sizes the caller binds."""
import pytest

from polysat.analyses.devices import DEVICES, H100_SM80_PATH, device
from polysat.analyses.roofline import clock_time, dram_time, roofline, smem_time, tensor_time
from polysat.backend import stages
from polysat.backend.common.region_match import NoBind
from polysat.backend.gemm.bind import bind as gemm_bind
from polysat.backend.gemm.plan import search
from polysat.backend.gemm.spec import GemmSpec
from polysat.ir.diagnostics import PolysatError
from polysat.pipeline import Compilation


def test_roofline_composes_the_terms_in_either_unit():
    dev = device("sm80")
    # max(limits) + serial - hidden + penalties + launch, launch from the device table
    assert roofline(dev, (1.0, 3.0, 2.0), serial=(0.5,), hidden=0.25, penalties=(0.125,), unit="us") == \
        3.0 + 0.5 - 0.25 + 0.125 + dev.launch_us
    assert roofline(dev, (2e-6,)) == pytest.approx(2e-6 + dev.launch_us * 1e-6)


def test_rates_come_from_the_device_table():
    for arch in ("sm80", "sm90", "h200"):
        d = device(arch)
        assert dram_time(1e12, d) == pytest.approx(1.0 / d.dram_tbps)
        assert tensor_time(2e12, d, 0.5) == pytest.approx(2.0 / (d.tensor_tflops * 0.5))
        assert smem_time(1e9, d) == pytest.approx(1e9 / (d.smem_bytes_per_clk * d.sms * d.clock_ghz * 1e9))
        assert clock_time(16e9, 16, d) == pytest.approx(1.0 / (d.sms * d.clock_ghz))


def test_the_sm80_datapath_on_hopper_is_one_number():
    h100 = DEVICES["sm90"]
    assert h100.mma_eff_of("sm90") == h100.mma_eff and h100.mma_eff_of("sm80") == h100.sm80_path_eff
    assert H100_SM80_PATH.mma_eff == h100.sm80_path_eff < h100.mma_eff
    a100 = DEVICES["sm80"]
    assert a100.mma_eff_of("sm80") == a100.mma_eff


def test_gemm_estimate_prices_memory_with_the_table_bandwidth():
    """A K=16 GEMM of 4096x4096 moves ~32 MiB and does little math: its memory term is its bytes at the
    table's DRAM rate (computed here from the shapes, not read from the estimate)."""
    spec = GemmSpec("g", 4096, 4096, 16)
    for arch in ("sm80", "sm90"):
        res = search(spec, arch)
        est = dict(res.best.est)
        a, b, c = 4096 * 16 * 2, 16 * 4096 * 2, 4096 * 4096 * 2
        assert est["bytes"] >= a + b + c
        assert est["t_mem_s"] == pytest.approx(est["bytes"] / (device(arch).dram_tbps * 1e12))
        top = max(est["t_compute_s"], est["t_mem_s"], est["t_smem_s"]) + device(arch).launch_us * 1e-6
        assert top - est["t_mem_s"] <= est["time_s"] <= top  # loads hidden under the epilogue: at most t_mem


def test_bind_changes_the_plan():
    """plan_json / gpu_json / write_cu search plans for the sizes bound by the caller (the user's --bind)."""
    regions = Compilation("examples/gemm_bias_relu.json", cost="size").regions
    default = stages.plan_json(regions, "sm90")["plans"][0]["chosen"]["tile"]
    small = stages.plan_json(regions, "sm90", {"M": 64, "N": 64, "K": 4096})["plans"][0]["chosen"]["tile"]
    assert default != small and small[:2] == [64, 64]
    ks_default, = stages.kernel_sources(regions, "sm90")
    ks_small, = stages.kernel_sources(regions, "sm90", {"M": 64, "N": 64, "K": 4096})
    assert ks_default.name != ks_small.name and "M" in [p.ident for p in ks_small.params]  # still generic in M


def test_a_region_no_kind_binds_is_e1504_with_every_kinds_reason():
    from polysat.ir.region import region_json
    from polysat.ir.region_load import region_from_json
    (soft,) = Compilation("examples/softmax.json", cost="size").regions
    assert isinstance(gemm_bind(soft), NoBind)
    doc = region_json(soft)  # the SIMT kind takes softmax; with a column-major output no kind does
    doc["region"]["outputs"][0]["memref"]["layout"] = {"kind": "col_major"}
    with pytest.raises(PolysatError) as e:
        stages.plan_json([region_from_json(doc)], "sm80")
    d = e.value.diagnostics[0]
    assert (d.code, d.kind) == ("E1504", "NoKernelTemplate")
    for kind in ("GEMM-family", "attention", "softmax_scores", "conv", "SIMT"):
        assert f"not a {kind} region" in d.why or f"not an {kind} region" in d.why
