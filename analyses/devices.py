"""The device table: sm80 (A100) and sm90 (H100, H200), the one home of every hardware number the cost
model, the backend's plan searches and the roofline (:mod:`.roofline`) use (docs/DESIGN.md §Cost model).

Rates are *measured ceilings* where public measurements exist (what cuBLAS and a device-to-device copy
reach), not datasheet peaks; each number says where it comes from. Numbers without a measurement are
marked "estimate" with the reasoning.

A tiny contraction can be modelled slower on tensor cores than on the FP32 pipes, and that is physical: the
MMA kinds' tiles (64x8 and up on sm90, the conv kind's plan 128x64) put conv3x3_s2_silu's 2.4 MFLOP and
57 KB on 2 of H100's 132 SMs, the SIMT kind spreads it over 128 CTAs. With each busy SM drawing memory at its
64 B/clk load port (117 GB/s at 1.83 GHz, so 26 SMs saturate the 3.0 TB/s DRAM) and its 4 tensor cores at
989.4/132 = 7.5 TFLOP/s, the 2-CTA MMA kernel is modelled 0.30 µs above the 2.0 µs launch, the SIMT one 0.07 µs:
tile quantization. (It was 2.2 µs above launch before: DRAM taken as a 2/132 pro-rata share, 45 GB/s, and a
[32, 16, 3, 3] weight counted one 32-byte sector per 6-byte row.)
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.diagnostics import fail


@dataclass(frozen=True)
class Device:
    name: str
    arch: str  # "sm80" | "sm90": which template path (cp.async+mma.sync, or TMA+wgmma)
    sms: int
    tensor_tflops: float  # dense fp16/bf16 tensor-core peak, fp32 accumulation
    mma_eff: float  # fraction of tensor_tflops the template's datapath reaches at best
    fp32_tflops: float  # SIMT fp32 (FMA counted as 2 FLOPs)
    sfu_ratio: float  # SFU (exp2, rsqrt) throughput relative to fp32
    dram_tbps: float  # measured copy bandwidth (read+write counted)
    l2_tbps: float  # L2 -> SM bandwidth
    l2_mb: float
    smem_per_sm_kb: int
    smem_per_cta_kb: int
    regs_per_sm: int
    max_threads_per_sm: int
    max_ctas_per_sm: int
    launch_us: float  # per kernel launch + tail drain
    clock_ghz: float  # SM clock under tensor-core load
    sm80_path_eff: float  # fraction of tensor_tflops the sm80 datapath (cp.async + mma.sync) reaches here
    smem_bytes_per_clk: int = 128  # shared-memory bandwidth per SM
    # estimate: bytes per clock one SM's load path takes from L2 (one 128-byte L1 line every two clocks; the
    # A100 L2 delivers 5120 B/clk to 108 SMs, 47 B/clk each when every SM pulls at once): the ceiling of
    # what one SM draws from DRAM or L2 when few SMs are busy
    sm_load_bytes_per_clk: int = 64

    @property
    def sm_load_gbps(self) -> float:
        """GB/s one SM's load path takes (H100: 64 B x 1.83 GHz = 117 GB/s)."""
        return self.sm_load_bytes_per_clk * self.clock_ghz

    def sms_to_saturate(self, tbps: float) -> float:
        """How many busy SMs saturate a memory level of `tbps` (H100: 3.0 TB/s DRAM / 117 GB/s = 26 SMs of
        132; its 10 TB/s L2: 85). A kernel of fewer CTAs than that is bounded by its SMs' load paths,
        not by a pro-rata share of the device's bandwidth."""
        return min(self.sms, tbps * 1e3 / self.sm_load_gbps)

    def mma_eff_of(self, skeleton: str) -> float:
        """The fraction of tensor_tflops a skeleton's datapath reaches on this device at best."""
        return self.mma_eff if skeleton == self.arch else self.sm80_path_eff

    @property
    def smem_per_cta(self) -> int:
        return self.smem_per_cta_kb * 1024

    @property
    def smem_per_sm(self) -> int:
        return self.smem_per_sm_kb * 1024

    def to_json(self) -> dict:
        return dict(self.__dict__)


A100 = Device(
    name="A100-SXM4-80GB", arch="sm80", sms=108,  # datasheet
    tensor_tflops=312.0,  # datasheet: 312 TFLOP/s dense fp16/bf16
    mma_eff=0.83,  # measured: cuBLAS 258 TFLOP/s on randn data = 83% (thonking.ai); MAMF best shape 86.9%
    fp32_tflops=19.5,  # datasheet
    sfu_ratio=0.125,  # estimate: 16 SFU vs 128 FP32 lanes per SM (1/8)
    dram_tbps=1.8,  # estimate: the datasheet's 2.039 TB/s x 0.9, the measured H100 copy/datasheet ratio (3.0/3.35)
    l2_tbps=7.0,  # estimate: 5120 B/clk x 1.41 GHz L2 read bandwidth (no anchor)
    l2_mb=40.0,  # datasheet
    smem_per_sm_kb=164, smem_per_cta_kb=163,  # datasheet: up to 164 KB per SM
    regs_per_sm=65536, max_threads_per_sm=2048, max_ctas_per_sm=32,
    launch_us=2.5,  # estimate: launch + drain of a small kernel without CUDA graphs
    clock_ghz=1.41,  # datasheet boost clock
    sm80_path_eff=0.83,  # the sm80 datapath is A100's own: mma_eff
)

H100 = Device(
    name="H100-SXM5", arch="sm90", sms=132,  # datasheet
    tensor_tflops=989.4,  # datasheet: 132 SMs x 1.83 GHz x 4096 FLOP/clk
    mma_eff=0.80,  # measured: cuBLAS 798 TFLOP/s at 8192^3 = 80.7%
    fp32_tflops=66.9,  # datasheet
    sfu_ratio=0.125,  # estimate, as A100
    dram_tbps=3.0,  # measured: H100 D2D copy ~3.0 TB/s (datasheet 3.35)
    l2_tbps=10.0,  # estimate: ~3x the measured copy rate; keeps 128x256-tile GEMMs compute-bound as measured
    l2_mb=50.0,  # datasheet
    smem_per_sm_kb=228, smem_per_cta_kb=227,  # datasheet
    regs_per_sm=65536, max_threads_per_sm=2048, max_ctas_per_sm=32,
    launch_us=2.0,  # estimate
    clock_ghz=1.83,  # datasheet boost clock (the tensor_tflops above)
    sm80_path_eff=0.45,  # measured: CUTLASS 2.x (cp.async + mma.sync) kernels reach 375-495 TFLOP/s = 38-50%
)

H200 = Device(
    name="H200-SXM", arch="sm90", sms=132,  # datasheet: same GH100
    tensor_tflops=989.0,  # datasheet: ~989 dense, same GH100
    mma_eff=0.79,  # measured: cuBLAS 769-798 TFLOP/s random data (~78-80%)
    fp32_tflops=66.9,  # datasheet
    sfu_ratio=0.125,  # estimate
    dram_tbps=4.3,  # measured: copy ~4.3 TB/s (datasheet 4.8)
    l2_tbps=10.0,  # estimate, as H100
    l2_mb=60.0,  # as PyTorch reports it
    smem_per_sm_kb=228, smem_per_cta_kb=227,
    regs_per_sm=65536, max_threads_per_sm=2048, max_ctas_per_sm=32,
    launch_us=2.0,  # estimate
    clock_ghz=1.83,  # same GH100 clock
    sm80_path_eff=0.45,  # as H100
)

# The SM80 datapath (cp.async -> ldmatrix -> mma.sync) run on an H100: the device an sm80 plan targets on Hopper.
H100_SM80_PATH = Device(**{**H100.__dict__, "name": "H100-SXM5 (sm80 path)", "arch": "sm80", "mma_eff": H100.sm80_path_eff})

DEVICES = {"sm80": A100, "a100": A100, "sm90": H100, "h100": H100, "h200": H200, "h100-sm80": H100_SM80_PATH}


def tf32x3(dev: Device) -> Device:
    """dev as the sm80 skeleton runs fp32 operands on it: three tf32 MMAs per product, each at half the 16-bit
    rate (datasheets: TF32 dense is half of FP16 on A100 and H100), on the mma.sync path's efficiency."""
    return Device(**{**dev.__dict__, "name": f"{dev.name} (3xTF32, sm80 path)", "arch": "sm80",
                     "tensor_tflops": dev.tensor_tflops / 6.0, "mma_eff": dev.sm80_path_eff})


def device(arch: "str | Device") -> Device:
    """The Device for a name in DEVICES (case-insensitive) or a Device itself."""
    if isinstance(arch, Device):
        return arch
    d = DEVICES.get(str(arch).strip().lower())
    if d is None:
        fail("UnknownTarget", f"arch {arch!r}", f"no device named {arch!r}",
             f"Choose one of {sorted(DEVICES)}.")
    return d
