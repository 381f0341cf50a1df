"""``--dump=roofline``: every kernel of the chosen partition on the device's roofline. A point is a
kernel at its arithmetic intensity (modelled FLOPs / device-memory bytes, x) and the throughput its
modelled time implies (FLOPs / time, y), labelled with its name and modelled time; the lines are the
device's DRAM bandwidth slope and its tensor-core and SIMT fp32 peaks. A kernel with a measured time
(``measured``: name -> microseconds) is drawn a second time, hollow, at its measured throughput.
"""
from __future__ import annotations

import math

from .svg import Svg

W, H, LEFT, TOP = 720.0, 440.0, 80.0, 62.0
COLORS = {"compute": "#c92a2a", "memory": "#1864ab", "latency": "#5f3dc4"}


def roofline_svg(priced: list, dev, measured: "dict | None" = None, title: str = "") -> str:
    """priced: pricing.kernels.Priced per kernel; dev: analyses.devices.Device."""
    pts = [(p.kernel.name, p.cost) for p in priced if p.cost is not None and p.cost.time_est_us > 0]
    ai = [max(c.flops, 1) / max(c.bytes, 1) for _, c in pts] or [1.0]
    perf = [max(c.flops, 1) / (c.time_est_us * 1e-6) / 1e12 for _, c in pts] or [1.0]
    bw = dev.dram_tbps  # TB/s = 1e12 B/s: TFLOP/s = AI * bw
    x_lo = 10 ** math.floor(math.log10(max(min(ai) / 2, 1e-3)))
    x_hi = 10 ** math.ceil(math.log10(max(max(ai) * 2, dev.tensor_tflops / bw * 4)))
    y_lo = 10 ** math.floor(math.log10(max(min(perf) / 2, 1e-6)))
    y_hi = 10 ** math.ceil(math.log10(dev.tensor_tflops * 1.5))

    def px(v: float) -> float:
        return LEFT + W * (math.log10(v) - math.log10(x_lo)) / (math.log10(x_hi) - math.log10(x_lo))

    def py(v: float) -> float:
        return TOP + H - H * (math.log10(v) - math.log10(y_lo)) / (math.log10(y_hi) - math.log10(y_lo))

    svg = Svg()
    svg.text(10, 20, title or f"roofline: {len(pts)} kernels on {dev.name}", size=13, bold=True)
    svg.text(10, 36, "x: arithmetic intensity (FLOP / DRAM byte), y: TFLOP/s = modelled FLOPs / modelled time; "
             "label: kernel, modelled time", size=11, fill="#555")
    svg.rect(LEFT, TOP, W, H, fill="#fff", stroke="#333", rx=0)
    for e in range(int(math.log10(x_lo)), int(math.log10(x_hi)) + 1):
        v = 10.0 ** e
        svg.line(px(v), TOP, px(v), TOP + H, stroke="#e9ecef")
        svg.text(px(v), TOP + H + 16, f"{v:g}", size=10, anchor="middle")
    for e in range(int(math.log10(y_lo)), int(math.log10(y_hi)) + 1):
        v = 10.0 ** e
        svg.line(LEFT, py(v), LEFT + W, py(v), stroke="#e9ecef")
        svg.text(LEFT - 6, py(v) + 4, f"{v:g}", size=10, anchor="end")
    svg.text(LEFT + W / 2, TOP + H + 34, "FLOP / byte", size=11, anchor="middle")
    svg.text(LEFT - 6, TOP - 8, "TFLOP/s", size=11, anchor="end")
    for peak, name, dash in ((dev.tensor_tflops, "tensor cores", False), (dev.fp32_tflops, "SIMT fp32", True)):
        knee = peak / bw
        x0 = max(x_lo, y_lo / bw)
        svg.line(px(x0), py(max(x0 * bw, y_lo)), px(min(knee, x_hi)), py(min(peak, x_hi * bw)), stroke="#343a40",
                 width=1.6, dash=dash)
        svg.line(px(min(knee, x_hi)), py(peak), px(x_hi), py(peak), stroke="#343a40", width=1.6, dash=dash)
        svg.text(px(x_hi) - 4, py(peak) - 5, f"{name} {peak:g} TFLOP/s", size=10, anchor="end")
    svg.text(px(x_lo) + 6, py(max(x_lo * bw * 1.5, y_lo * 2)) - 6, f"DRAM {bw:g} TB/s", size=10)
    measured = measured or {}
    placed: list = []
    for (name, c), a, p in zip(pts, ai, perf):
        x, y = px(a), py(max(p, y_lo))
        tip = (f"{name}: {c.time_est_us:.4g} us modelled, {c.flops} FLOPs, {c.bytes} bytes, AI {a:.3g}, "
               f"{c.bound}-bound, occupancy {c.occupancy:.2f}")
        svg.circle(x, y, 5, fill=COLORS.get(c.bound, "#495057"), title=tip)
        label = f"{name} {c.time_est_us:.3g} us"
        spot = next((ly for ly in (y - 4, y + 8, y - 14, y + 18) if not any(
            abs(ly - oy) < 10 and abs(x - ox) < 6 * max(len(label), ol) for ox, oy, ol in placed)), None)
        if spot is not None:  # a label that would overlap others is left to the point's tooltip
            svg.text(x + 7, spot, label, size=9, fill="#212529")
            placed.append((x, spot, len(label)))
        if name in measured and measured[name] > 0:
            mp = max(c.flops, 1) / (measured[name] * 1e-6) / 1e12
            svg.circle(x, py(max(mp, y_lo)), 5, fill="none", title=f"{name}: {measured[name]:.4g} us measured")
    ly = TOP + 10
    for bound, col in COLORS.items():
        svg.circle(LEFT + W + 20, ly, 5, fill=col)
        svg.text(LEFT + W + 30, ly + 4, f"{bound}-bound", size=10)
        ly += 18
    return svg.render()
