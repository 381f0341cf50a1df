"""Hand-built candidate regions in polyhedral form, and the one-kernel-per-op split of a region.

They are the regions of docs/DESIGN.md §Examples (GEMM+bias+ReLU, Conv 3×3 with
padding and stride, Conv+ReLU+MaxPool with compute-at, row softmax, layernorm, attention
QKᵀ/softmax/PV, GEMM→GELU→GEMM→residual), written with :func:`stmt` so an access reads like the
math: ``stmt("S", {"m": "M", "k": "K"}, ["A[m, k]"], "C[m]", combine="sum")``. Tests, benchmarks and
``--explain`` use them; the pipeline builds regions from Poly-View instead.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from polysat.ir.dtypes import DType
from polysat.analyses.poly_region import Access, PolyRegion, Statement, TensorInfo

F16, F32 = DType.fp16, DType.fp32


def stmt(name: str, dims: Mapping[str, object], reads: Sequence[str], write: str, *, flops: int = 1,
         unit: str = "fp32", combine: str | None = None, where: str = "", loop_order: Sequence[str] = (), params: Sequence[str] = ()) -> Statement:
    """A statement over the box ``0 <= d < size`` (sizes are ints or symbols). An access is
    ``"T[exprs]"`` or ``"T[exprs] : guard"`` (a guard makes a padded read piecewise)."""
    syms = sorted({str(v) for v in dims.values() if not isinstance(v, int)} | set(params))
    pre = f"[{', '.join(syms)}] -> " if syms else ""
    head = f"{name}[{', '.join(dims)}]"
    cs = [f"0 <= {d} < {v}" for d, v in dims.items()] + ([where] if where else [])
    dom = f"{pre}{{ {head} : {' and '.join(cs)} }}"

    def acc(text: str) -> Access:
        body, _, guard = text.partition(":")
        tensor = body.split("[", 1)[0].strip()
        return Access(tensor, f"{pre}{{ {head} -> {body.strip()}" + (f" : {guard.strip()} }}" if guard else " }"))
    return Statement(name, dom, tuple(acc(r) for r in reads), acc(write), flops, unit, combine, tuple(loop_order))


def T(name: str, shape, dtype: DType = F16, role: str = "input") -> TensorInfo:
    return TensorInfo(name, tuple(shape), dtype, role)


def gemm(M=256, N=256, K=256) -> PolyRegion:
    return PolyRegion("gemm", [T("A", ("M", "K")), T("B", ("K", "N")), T("C", ("M", "N"), F32, "output")],
                      [stmt("gemm", {"m": "M", "n": "N", "k": "K"}, ["A[m, k]", "B[k, n]"], "C[m, n]",
                            flops=2, unit="tensor", combine="sum")], {"M": M, "N": N, "K": K})


def gemm_bias_relu(M=256, N=256, K=256) -> PolyRegion:
    return PolyRegion("gemm_bias_relu",
                      [T("X", ("M", "K")), T("W", ("K", "N")), T("bias", ("N",)),
                       T("acc", ("M", "N"), F32, "internal"), T("Y", ("M", "N"), F16, "output")],
                      [stmt("gemm", {"m": "M", "n": "N", "k": "K"}, ["X[m, k]", "W[k, n]"], "acc[m, n]",
                            flops=2, unit="tensor", combine="sum"),
                       stmt("bias_relu", {"m": "M", "n": "N"}, ["acc[m, n]", "bias[n]"], "Y[m, n]", flops=2)],
                      {"M": M, "N": N, "K": K})


def _conv_stmt(name: str, inp: str, out: str, stride: int, pad: int, R: int = 3) -> Statement:
    h, w = f"{stride}*h + r - {pad}", f"{stride}*w + s - {pad}"
    guard = f"0 <= {h} < H and 0 <= {w} < W" if pad else ""
    read = f"{inp}[n, c, {h}, {w}]" + (f" : {guard}" if guard else "")
    return stmt(name, {"n": "N", "k": "K", "h": "Ho", "w": "Wo", "c": "C", "r": R, "s": R},
                [read, "Wt[k, c, r, s]"], f"{out}[n, k, h, w]", flops=2, unit="tensor", combine="sum",
                params=("H", "W") if pad else ())


def _conv_params(N, C, K, H, W, stride, pad, R=3) -> dict:
    return {"N": N, "C": C, "K": K, "H": H, "W": W, "Ho": (H + 2 * pad - R) // stride + 1,
            "Wo": (W + 2 * pad - R) // stride + 1}


def conv(N=1, C=64, K=64, H=32, W=32, stride=1, pad=1) -> PolyRegion:
    """Conv 3×3 NCHW; padding is a guard on the input read (piecewise access)."""
    return PolyRegion(f"conv_s{stride}_p{pad}",
                      [T("I", ("N", "C", "H", "W")), T("Wt", ("K", "C", 3, 3)), T("O", ("N", "K", "Ho", "Wo"), F32, "output")],
                      [_conv_stmt("conv", "I", "O", stride, pad)], _conv_params(N, C, K, H, W, stride, pad))


def conv_relu(N=1, C=64, K=64, H=32, W=32, stride=1, pad=1) -> PolyRegion:
    return PolyRegion(f"conv_relu_s{stride}_p{pad}",
                      [T("I", ("N", "C", "H", "W")), T("Wt", ("K", "C", 3, 3)),
                       T("O", ("N", "K", "Ho", "Wo"), F32, "internal"), T("R", ("N", "K", "Ho", "Wo"), F16, "output")],
                      [_conv_stmt("conv", "I", "O", stride, pad),
                       stmt("relu", {"n": "N", "k": "K", "h": "Ho", "w": "Wo"}, ["O[n, k, h, w]"], "R[n, k, h, w]")],
                      _conv_params(N, C, K, H, W, stride, pad))


def maxpool(N=1, C=64, H=32, W=32, win=2, stride=2) -> PolyRegion:
    """MaxPool NCHW."""
    return PolyRegion("maxpool", [T("X", ("N", "C", "H", "W")), T("P", ("N", "C", "Po", "Qo"), F16, "output")],
                      [stmt("pool", {"n": "N", "c": "C", "ph": "Po", "pw": "Qo", "i": win, "j": win},
                            [f"X[n, c, {stride}*ph + i, {stride}*pw + j]"], "P[n, c, ph, pw]", combine="max")],
                      {"N": N, "C": C, "H": H, "W": W, "Po": (H - win) // stride + 1, "Qo": (W - win) // stride + 1})


def conv_relu_maxpool(N=1, C=64, K=64, H=32, W=32, stride=1, pad=1, win=2, pstride=2) -> PolyRegion:
    """Conv(pad)+ReLU+MaxPool in one kernel: a pool tile drives the conv tile (compute-at, docs/DESIGN.md §Fusion)."""
    p = _conv_params(N, C, K, H, W, stride, pad)
    p.update(Po=(p["Ho"] - win) // pstride + 1, Qo=(p["Wo"] - win) // pstride + 1)
    return PolyRegion("conv_relu_maxpool",
                      [T("I", ("N", "C", "H", "W")), T("Wt", ("K", "C", 3, 3)),
                       T("O", ("N", "K", "Ho", "Wo"), F32, "internal"), T("R", ("N", "K", "Ho", "Wo"), F16, "internal"),
                       T("P", ("N", "K", "Po", "Qo"), F16, "output")],
                      [_conv_stmt("conv", "I", "O", stride, pad),
                       stmt("relu", {"n": "N", "k": "K", "h": "Ho", "w": "Wo"}, ["O[n, k, h, w]"], "R[n, k, h, w]"),
                       stmt("pool", {"n": "N", "k": "K", "ph": "Po", "pw": "Qo", "i": win, "j": win},
                            [f"R[n, k, {pstride}*ph + i, {pstride}*pw + j]"], "P[n, k, ph, pw]", combine="max")], p)


def softmax(R=1024, C=1024) -> PolyRegion:
    rc = {"r": "R", "c": "C"}
    return PolyRegion("softmax",
                      [T("x", ("R", "C")), T("mx", ("R",), F32, "internal"), T("e", ("R", "C"), F32, "internal"),
                       T("sm", ("R",), F32, "internal"), T("y", ("R", "C"), F16, "output")],
                      [stmt("rowmax", rc, ["x[r, c]"], "mx[r]", combine="max"),
                       stmt("exp", rc, ["x[r, c]", "mx[r]"], "e[r, c]", flops=2, unit="sfu"),
                       stmt("rowsum", rc, ["e[r, c]"], "sm[r]", combine="sum"),
                       stmt("div", rc, ["e[r, c]", "sm[r]"], "y[r, c]")], {"R": R, "C": C})


def layernorm(R=1024, C=1024) -> PolyRegion:
    rc = {"r": "R", "c": "C"}
    return PolyRegion("layernorm",
                      [T("x", ("R", "C")), T("g", ("C",)), T("b", ("C",)), T("mu", ("R",), F32, "internal"),
                       T("d", ("R", "C"), F32, "internal"), T("var", ("R",), F32, "internal"),
                       T("y", ("R", "C"), F16, "output")],
                      [stmt("mean", rc, ["x[r, c]"], "mu[r]", combine="sum"),
                       stmt("center", rc, ["x[r, c]", "mu[r]"], "d[r, c]", flops=2),
                       stmt("variance", rc, ["d[r, c]"], "var[r]", flops=2, combine="sum"),
                       stmt("scale", rc, ["d[r, c]", "var[r]", "g[c]", "b[c]"], "y[r, c]", flops=5)],
                      {"R": R, "C": C})


def attention(S=512, D=64) -> PolyRegion:
    """One head: QKᵀ -> row softmax -> PV (scale folded into Q)."""
    return PolyRegion("attention",
                      [T("Q", ("S", "D")), T("K", ("S", "D")), T("V", ("S", "D")),
                       T("s", ("S", "S"), F32, "internal"), T("m", ("S",), F32, "internal"),
                       T("p", ("S", "S"), F16, "internal"), T("l", ("S",), F32, "internal"),
                       T("o", ("S", "D"), F32, "internal"), T("y", ("S", "D"), F16, "output")],
                      [stmt("qk", {"q": "S", "k": "S", "d": "D"}, ["Q[q, d]", "K[k, d]"], "s[q, k]",
                            flops=2, unit="tensor", combine="sum"),
                       stmt("rowmax", {"q": "S", "k": "S"}, ["s[q, k]"], "m[q]", combine="max"),
                       stmt("exp", {"q": "S", "k": "S"}, ["s[q, k]", "m[q]"], "p[q, k]", flops=2, unit="sfu"),
                       stmt("rowsum", {"q": "S", "k": "S"}, ["p[q, k]"], "l[q]", combine="sum"),
                       stmt("pv", {"q": "S", "e": "D", "k": "S"}, ["p[q, k]", "V[k, e]"], "o[q, e]",
                            flops=2, unit="tensor", combine="sum"),
                       stmt("norm", {"q": "S", "e": "D"}, ["o[q, e]", "l[q]"], "y[q, e]")], {"S": S, "D": D})


def mlp_residual(M=256, D=256, H=512) -> PolyRegion:
    """GEMM -> GELU -> GEMM -> residual add."""
    return PolyRegion("mlp_residual",
                      [T("X", ("M", "D")), T("W1", ("D", "H")), T("W2", ("H", "D")),
                       T("h", ("M", "H"), F32, "internal"), T("g", ("M", "H"), F16, "internal"),
                       T("z", ("M", "D"), F32, "internal"), T("Y", ("M", "D"), F16, "output")],
                      [stmt("gemm1", {"m": "M", "j": "H", "k": "D"}, ["X[m, k]", "W1[k, j]"], "h[m, j]",
                            flops=2, unit="tensor", combine="sum"),
                       stmt("gelu", {"m": "M", "j": "H"}, ["h[m, j]"], "g[m, j]", flops=8),
                       stmt("gemm2", {"m": "M", "n": "D", "j": "H"}, ["g[m, j]", "W2[j, n]"], "z[m, n]",
                            flops=2, unit="tensor", combine="sum"),
                       stmt("residual", {"m": "M", "n": "D"}, ["z[m, n]", "X[m, n]"], "Y[m, n]")],
                      {"M": M, "D": D, "H": H})


EXAMPLES = {"gemm": gemm, "gemm_bias_relu": gemm_bias_relu, "conv": conv, "conv_relu": conv_relu,
            "maxpool": maxpool, "conv_relu_maxpool": conv_relu_maxpool, "softmax": softmax,
            "layernorm": layernorm, "attention": attention, "mlp_residual": mlp_residual}


def split_per_statement(region: PolyRegion) -> list:
    """One region per statement (one kernel per op): every internal tensor becomes a device-memory
    output of its writer and an input of its readers."""
    out = []
    for s in region.statements:
        names = [a.tensor for a in s.reads] + [s.write.tensor]
        ts = []
        for t in region.tensors:
            if t.name not in names:
                continue
            role = "output" if t.name == s.write.tensor else "input"
            ts.append(TensorInfo(t.name, t.shape, t.dtype, role))
        out.append(PolyRegion(f"{region.name}.{s.name}", ts, [s], region.params))
    return out


def merge(regions: Sequence[PolyRegion], name: str | None = None) -> PolyRegion:
    """The fusion of consecutive regions into one kernel: tensors written by one and read by a later
    one become internal (deferred) unless they are outputs of the whole chain (`keep`)."""
    stmts = [s for r in regions for s in r.statements]
    written = {s.write.tensor for s in stmts}
    final_outs = {t.name for t in regions[-1].tensors if t.role == "output"}
    read_later = {a.tensor for s in stmts for a in s.reads}
    ts, seen = [], set()
    for r in regions:
        for t in r.tensors:
            if t.name in seen:
                continue
            seen.add(t.name)
            if t.name not in written:
                role = "input"
            elif t.name in final_outs or t.name not in read_later:
                role = "output"
            else:
                role = "internal"
            ts.append(TensorInfo(t.name, t.shape, t.dtype, role))
    params: dict = {}
    for r in regions:
        params.update(dict(r.params))
    return PolyRegion(name or "+".join(r.name for r in regions), ts, stmts, params)
