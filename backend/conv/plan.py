"""Schedule Plans of the implicit-GEMM conv and of conv + pool by compute-at, and their search.

A :class:`ConvPlan` is the GEMM skeleton's :class:`SchedulePlan` for the per-group implicit GEMM (A =
im2col(X) gathered MN-major into smem: ``a_kmajor`` False; B = W as [Cog, K]: K-major) plus, for conv +
pool, the pool tile a CTA owns (its conv pre-image, halo included, must fit the CTA's BM rows).

Candidates come from the MMA skeleton's tile space (common.mma_search.sm80_candidates / sm90_candidates) and are
pruned by the GEMM STOP conditions plus the conv's own: the im2col gather divides among the threads,
its staged registers fit, W's rows are 16-byte aligned for the sm90 TMA (K % 8 == 0), the pool tile's
pre-image fits BM. The survivors are ranked by :func:`estimate`: the roofline of the GEMM actually
issued (padded tiles, recomputed halo rows included), with the real tensor bytes (X once, not the
im2col matrix) and the gather's issue time.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping

from ...analyses.devices import Device, device
from ...analyses.roofline import clock_time, dram_time, roofline
from ...ir.diagnostics import fail
from ..common.mma_plan import SchedulePlan
from ..common.mma_search import (ctas_per_sm, estimate as mma_estimate, regs_estimate, sm80_candidates, sm90_candidates,
                                 sm90_tile_reason, widest_vec)
from ..common.plan_search import SearchResult, occupancy_reason, prune, rank, skeletons_for, smem_reason
from ..conv_pool.spec import ConvPoolSpec
from ..gemm.spec import GemmSpec
from .spec import ConvSpec

GATHER_ELEMS_PER_CLK = 32   # im2col elements an SM gathers per clock (2-byte loads + predicates + paired smem stores)
SM90_CHUNK = 16             # gather passes the sm90 producer keeps in flight (two taps each): the H200 ran the
                            # 7 ResNet-50 3x3 layers' plans at 8 (1 CTA an SM, 2,048 taps in flight) at 1.8-2.2
                            # taps a clock an SM, 15-17x under GATHER_ELEMS_PER_CLK, as a round trip of ~560 ns
                            # for 2,048 taps gives; 16 fits the producer's 72 registers without a spill (ptxas)
SM90_REGS = (72, 216)       # setmaxnreg of the gathering producer / the consumers: 128*72 + 256*216 = 168*384,
                            # exactly the registers a 384-thread CTA holds (setmaxnreg only moves them)


@dataclass(frozen=True)
class ConvPlan:
    gemm: SchedulePlan
    pool_tile: tuple[int, int] | None = None   # TPH, TPW pool outputs per CTA (conv + pool)
    scratch: int = 0                            # bytes of the conv tile the pool reads (smem)

    arch = property(lambda self: self.gemm.arch)
    skeleton = property(lambda self: self.gemm.skeleton)
    tile = property(lambda self: self.gemm.tile)
    stages = property(lambda self: self.gemm.stages)
    warps = property(lambda self: self.gemm.warps)
    threads = property(lambda self: self.gemm.threads)
    est = property(lambda self: self.gemm.est)

    @property
    def smem_bytes(self) -> int:
        if self.skeleton == "sm90":
            return self.gemm.smem_bytes + self.scratch
        return max(self.gemm.smem_bytes, self.scratch)  # sm80: the conv tile reuses the drained ring

    @property
    def a_passes(self) -> int:
        """Gather passes per k tile (each: two 16-bit loads and one 32-bit smem store per thread)."""
        bm, _, bk = self.tile
        threads = 128 if self.skeleton == "sm90" else self.threads
        return bk // (threads // (bm // 2))

    def key(self) -> str:
        k = self.gemm.key()
        return k + (f"_pt{self.pool_tile[0]}x{self.pool_tile[1]}" if self.pool_tile else "")

    def with_est(self, est: dict) -> "ConvPlan":
        return replace(self, gemm=replace(self.gemm, est=tuple(sorted(est.items()))))

    def to_json(self, spec: "ConvSpec | ConvPoolSpec | None" = None) -> dict[str, Any]:
        conv = spec.conv if isinstance(spec, ConvPoolSpec) else spec
        d = self.gemm.to_json(None)
        x, w = (conv.x, conv.wt) if conv else ("X", "W")
        d["cache"] = [
            {"tensor": x, "where": "smem", "at": "k.i", "pingpong": True, "producer": "im2col_gather",
             "swizzle": "xor16B" if self.skeleton == "sm80" else "128B", "major": "M"},
            {"tensor": w, "where": "smem", "at": "k.i", "pingpong": True,
             "producer": "cp.async" if self.skeleton == "sm80" else "tma", "swizzle": d["cache"][1]["swizzle"],
             "major": "K"}]
        d["vectorize"] = {"loads": [{"tensor": x, "axis": "m.i.i", "width": 2, "kind": "predicated scalar pair"},
                                    {"tensor": w, "axis": "k.i.i", "width": self.gemm.vec_b}],
                          "store": {"axis": "n.i.i", "width": 1, "layout": "NCHW"}}
        d["bind"] = {**{k: v for k, v in d["bind"].items() if k != "batch"},
                     "group": "block.z" if self.skeleton == "sm80" else "tile index (group slowest)"}
        d["layout_hints"] = {"X": "NCHW", "W": "OIHW as [G, Cog, K] K-major", "Y": "NCHW", "A_swizzle": True,
                             "B_swizzle": True, "A_major": "M (gathered)", "B_major": "K",
                             "internal_layout": "none (NHWC repack not planned)"}
        d["algo_choice"] = {"conv": "implicit_gemm"}
        d["producer_regs"] = list(SM90_REGS) if self.skeleton == "sm90" and self.warps[0] >= 2 else None
        if conv is not None:
            pt, pb, pl, pr = conv.pad
            d["halo"] = {"pad": {"top": pt, "bottom": pb, "left": pl, "right": pr},
                         "window": [conv.dilation[0] * (conv.kh - 1) + 1, conv.dilation[1] * (conv.kw - 1) + 1]}
            d["predicate_tail"] = list(self.gemm.predicate_tail) + (["pad"] if any(conv.pad) else [])
        if self.pool_tile:
            tph, tpw = self.pool_tile
            pre = spec.pre_image(self.pool_tile) if isinstance(spec, ConvPoolSpec) else None
            d["algo_choice"]["pool"] = "compute_at"
            d["compute_at"] = {"pool_tile": [tph, tpw], "conv_tile": list(pre) if pre else None,
                               "conv_rows": pre[0] * pre[1] if pre else None, "rows_per_cta": self.tile[0],
                               "halo": list(spec.halo()) if isinstance(spec, ConvPoolSpec) else None,
                               "conv_to_pool": "smem", "conv_in_gmem": False}
            d["local_edges"] = d["local_edges"] + [{"from": "epilogue", "to": "maxpool", "buffer": "smem",
                                                    "bytes": self.scratch}]
        d["smem_bytes"] = self.smem_bytes
        d["estimate"] = dict(self.est)
        return d


def planning_gemm(spec: "ConvSpec | ConvPoolSpec", m: int | None = None) -> GemmSpec:
    """The per-group GEMM the plan tiles: A gathered MN-major ("col"), B = W K-major ("col")."""
    conv = spec.conv if isinstance(spec, ConvPoolSpec) else spec
    s = conv.gemm_sizes()
    return GemmSpec(name=conv.name, m=m or s["m"], n=s["n"], k=s["k"], batch=(conv.groups,) if conv.groups > 1 else (),
                    in_dtype=conv.in_dtype, out_dtype=conv.out_dtype, a_layout="col", b_layout="col",
                    epilogue=conv.epilogue, a=conv.x, b=conv.wt, c=conv.y)


def pool_tiles(spec: ConvPoolSpec, bm: int) -> list[tuple[int, int]]:
    """Pool tiles whose conv pre-image fits bm rows, fewest CTAs first (ties: wider, for coalesced stores);
    the two best."""
    hp, wp = spec.out_hw
    cands = []
    for tph in range(1, hp + 1):
        for tpw in range(1, wp + 1):
            rh, rw = spec.pre_image((tph, tpw))
            if rh * rw <= bm:
                cands.append((math.ceil(hp / tph) * math.ceil(wp / tpw), -tpw, -tph, (tph, tpw)))
    cands.sort()
    out: list = []
    for c in cands:
        if len(out) == 2:
            break
        if c[0] not in (x[0] for x in out):
            out.append(c)
    return [c[3] for c in out]


def _rows(spec, plan: ConvPlan) -> int:
    """GEMM rows the kernel issues: N*Ho*Wo, or (conv + pool) BM per pool tile."""
    if isinstance(spec, ConvPoolSpec):
        hp, wp = spec.out_hw
        tph, tpw = plan.pool_tile
        return spec.conv.n * math.ceil(hp / tph) * math.ceil(wp / tpw) * plan.tile[0]
    return spec.gemm_sizes()["m"]


def estimate(spec: "ConvSpec | ConvPoolSpec", plan: ConvPlan, dev: Device) -> dict[str, float]:
    """The time of one conv (or conv + pool) plan on dev, with its terms."""
    conv = spec.conv if isinstance(spec, ConvPoolSpec) else spec
    rows = _rows(spec, plan)
    g = planning_gemm(spec, rows)
    sizes = g.sizes()
    r = mma_estimate(g, plan.gemm, sizes, dev)
    isz = conv.in_dtype.itemsize
    out_elems = math.prod(spec.shapes()[spec.c])
    x_bytes = conv.n * conv.cin * conv.h * conv.w * isz
    w_bytes = conv.co * conv.cg * conv.kh * conv.kw * isz
    epi = sum(math.prod(spec.shapes()[op.tensor]) * op.dtype.itemsize for op in conv.epilogue if op.tensor)
    bm, bn, bk = plan.tile
    tiles = math.ceil(rows / bm) * math.ceil(sizes["n"] / bn) * sizes["batch"]
    kpad = math.ceil(sizes["k"] / bk) * bk
    halo_rereads = 0.15 * max(0.0, tiles * bm * kpad * isz / (conv.kh * conv.kw) - x_bytes)  # X re-read per n-tile (L2 misses)
    total = x_bytes + w_bytes + out_elems * conv.out_dtype.itemsize + epi + halo_rereads
    t_mem = dram_time(total, dev)
    slots = dev.sms * max(ctas_per_sm(plan.gemm, dev), 1)
    wave_eff = tiles / (math.ceil(tiles / slots) * slots)
    t_gather = clock_time(tiles * bm * kpad, GATHER_ELEMS_PER_CLK, dev, wave_eff)
    t_pool = 0.0
    if isinstance(spec, ConvPoolSpec):  # smem round trip of the conv tile + the window max (one thread per output)
        t_pool = clock_time(tiles * (bm * bn + out_elems / max(tiles, 1) * spec.kernel[0] * spec.kernel[1]), 64, dev,
                            wave_eff)
    time = roofline(dev, (r["t_compute_s"], t_mem, r["t_smem_s"], t_gather), serial=(t_pool,))
    return {"time_s": time, "t_compute_s": r["t_compute_s"], "t_mem_s": t_mem, "t_smem_s": r["t_smem_s"],
            "t_gather_s": t_gather, "t_pool_s": t_pool, "flops": float(conv.flops()), "flops_issued": 2.0 * tiles * bm * bn * kpad,
            "bytes": float(total), "ctas_per_sm": r["ctas_per_sm"], "waves": r["waves"], "wave_eff": wave_eff,
            "regs_est": float(conv_regs(plan))}


SM80_MAX_PASSES = 8  # each staged pass holds two 16-bit taps in two registers across the MMAs


def conv_regs(plan: ConvPlan) -> int:
    """Registers per thread: the GEMM skeleton's, plus (sm80) the staged taps (two per pass) and the gather's
    pixel setup and addressing (measured with ptxas: 64x64x32, 8 passes: 128 vs the GEMM's 90)."""
    if plan.skeleton == "sm90":
        return regs_estimate(plan.gemm)
    return regs_estimate(plan.gemm) + 2 * plan.a_passes + 22


def stop_reason(spec, plan: ConvPlan, dev: Device) -> str | None:
    conv = spec.conv if isinstance(spec, ConvPoolSpec) else spec
    bm, bn, bk = plan.tile
    k = conv.gemm_sizes()["k"]
    if smem := smem_reason(plan, dev):
        return smem
    threads = 128 if plan.skeleton == "sm90" else plan.threads
    if threads % (bm // 2) or bk % (threads // (bm // 2)):
        return "the im2col gather (two rows per thread) does not divide the A tile among the threads"
    if plan.pool_tile:
        rh, rw = spec.pre_image(plan.pool_tile)
        if rh * rw > bm:
            return f"the pool tile's conv pre-image ({rh}x{rw}) exceeds the CTA's {bm} rows"
    if plan.skeleton == "sm90":
        if sm90 := sm90_tile_reason(plan.gemm, dev):
            return sm90
        if k % 8:
            return f"sm90: the TMA of W needs 16-byte rows, K = Cg*Kh*Kw = {k} is not a multiple of 8"
        if regs_estimate(plan.gemm) > SM90_REGS[1]:
            return f"sm90: accumulators exceed the consumer register budget {SM90_REGS[1]}"
        if plan.a_passes % SM90_CHUNK:
            return f"sm90: the producer's {plan.a_passes} gather passes a k tile are not chunks of {SM90_CHUNK}"
        return None
    if plan.a_passes > SM80_MAX_PASSES:
        return f"the register-staged gather needs {plan.a_passes} passes per k tile (at most {SM80_MAX_PASSES})"
    if conv_regs(plan) > 255:
        return f"registers ~{conv_regs(plan)} > 255 (spills)"
    if (bn * bk // plan.gemm.vec_b) % plan.threads:
        return "W tile copies do not divide evenly among the threads"
    if plan.gemm.vec_b < widest_vec(k):
        return f"vector width {plan.gemm.vec_b} of W shrinks below {widest_vec(k)}"
    return occupancy_reason(ctas_per_sm(plan.gemm, dev))


def _candidates(spec, arch: str, skeletons) -> list[ConvPlan]:
    conv = spec.conv if isinstance(spec, ConvPoolSpec) else spec
    g = planning_gemm(spec)
    sizes = g.sizes()
    k = sizes["k"]
    known = {"m": sizes["m"], "n": sizes["n"], "k": k}
    gemms: list[SchedulePlan] = []
    if "sm90" in skeletons and arch == "sm90":
        gemms += sm90_candidates(g, sizes, None)
    if "sm80" in skeletons:
        gemms += [replace(p, vec_a=2, vec_b=widest_vec(k)) for p in sm80_candidates(g, arch, sizes, None)]
    out = []
    osize = conv.out_dtype.itemsize
    for p in gemms:
        tail = tuple(ax for ax, t in zip(("m", "n", "k"), p.tile, strict=True) if known[ax] % t)
        p = replace(p, a_kmajor=False, b_kmajor=True, predicate_tail=tail, assumes=())
        if isinstance(spec, ConvPoolSpec):
            bm, bn, _ = p.tile
            for pt in pool_tiles(spec, bm):
                out.append(ConvPlan(replace(p, predicate_tail=tuple(x for x in tail if x != "m") + ("pool",)), pt,
                                    bn * (bm + 8) * osize))
        else:
            out.append(ConvPlan(p))
    return out


def search(spec: "ConvSpec | ConvPoolSpec", arch: str = "sm90", env: Mapping[str, int] | None = None,
           skeletons: tuple[str, ...] | None = None) -> SearchResult:
    """Rank the plans for a conv (or conv + pool) on arch: candidates, STOP pruning, :func:`estimate`.
    Conv shapes are static: env has nothing to bind."""
    dev = device(arch)
    kept, pruned = prune(_candidates(spec, arch, skeletons_for(arch, skeletons)),
                         lambda p: stop_reason(spec, p, dev))
    if not kept:
        fail("NoKernelTemplate", f"conv {spec.name!r}", "no schedule candidate survives the STOP conditions: "
             + "; ".join(sorted({x.reason for x in pruned})[:4]))
    return SearchResult(rank(kept, lambda p: estimate(spec, p, dev), ConvPlan.with_est), tuple(pruned))
