"""The models whose every region must get a kernel (bench/kinds_build.py, tests/test_simt_cover.py).

``frontend_op_models()``: one or more Frontend IR models per frontend op (every op of the lowering table,
the op's edge cases as tests/test_frontend_ops.py draws them: odd sizes, 1-D GEMM operands (vecmat,
matvec), broadcast batch axes, transposed operands, mixed dtypes, symbolic dims, reductions and
softmax / layernorm over every axis, grouped / dilated / strided convolutions, pooling windows with
padding, causal attention with M != N, movement ops, a small pipeline). ``groups()`` names every set:
the examples, the bench MLP stack (2 layers) and transformer (1 block), the ONNX and torch.export
architectures of examples/, and the frontend op models.

Models whose regions read through run-time indices (Gather / GatherElements with an index input) are
listed too: their gathering regions bind to the SIMT kind like every other region.
"""
from __future__ import annotations

import pathlib
import re

HERE = pathlib.Path(__file__).resolve().parent
FLOATS = ("fp32", "fp16", "bf16")


def _model(inputs: dict, graph: list, outputs: list, tensors: dict | None = None) -> dict:
    table = {k: {"dtype": dt, "shape": list(shape)} for k, (dt, shape) in inputs.items()}
    table.update(tensors or {})
    return {"signature": {"inputs": [{"tensor": k} for k in inputs], "outputs": [{"tensor": o} for o in outputs]},
            "tensors": table, "graph": graph}


def _node(kind: str, inputs: list, output: str, **attrs) -> dict:
    d = {"op": kind, "name": output, "inputs": list(inputs), "outputs": [output], "attrs": attrs}
    if kind == "Elementwise":
        d["fn"] = d["attrs"].pop("fn")
    return d


def _one(kind: str, inputs: dict, out_dt: "str | None" = None, **attrs) -> dict:
    return _model(inputs, [_node(kind, list(inputs), "Out", **attrs)], ["Out"], {"Out": {"dtype": out_dt}} if out_dt else None)


def _gemm() -> dict:
    out = {}
    for dt in FLOATS:
        out[f"gemm_{dt}_13x37x5"] = _one("GEMM", {"A": (dt, [13, 37]), "B": (dt, [37, 5])})
    out["gemm_vecmat"] = _one("GEMM", {"A": ("fp16", [37]), "B": ("fp16", [37, 9])})
    out["gemm_matvec"] = _one("GEMM", {"A": ("fp16", [9, 37]), "B": ("fp16", [37])})
    out["gemm_dot"] = _one("GEMM", {"A": ("fp32", [7]), "B": ("bf16", [7])})
    out["gemm_batch_broadcast"] = _one("GEMM", {"A": ("fp16", [3, 1, 5, 7]), "B": ("fp16", [2, 7, 6])})
    out["gemm_trans_ab_mixed"] = _one("GEMM", {"A": ("fp32", [7, 5]), "B": ("bf16", [6, 7])}, trans_a=True, trans_b=True)
    out["gemm_fp16_out"] = _one("GEMM", {"A": ("fp16", [13, 37]), "B": ("fp16", [37, 5])}, out_dt="fp16")
    out["gemm_symbolic"] = _model({"A": ("fp16", ["M", "K"]), "B": ("bf16", ["K", "N"])},
                                  [_node("GEMM", ["A", "B"], "C")], ["C"], {"C": {"dtype": "fp32", "shape": ["M", "N"]}})
    out["gemm_large_fp16"] = _one("GEMM", {"A": ("fp16", [256, 512]), "B": ("fp16", [512, 384])})
    out["einsum_bij_bjk"] = _one("Einsum", {"A": ("fp16", [2, 5, 7]), "B": ("fp16", [2, 7, 3])}, equation="bij,bjk->bik")
    out["einsum_outer"] = _one("Einsum", {"A": ("fp32", [5]), "B": ("fp32", [7])}, equation="i,j->ij")
    return out


def _elementwise() -> dict:
    from ..frontend.lower_elementwise import FNS
    out = {}
    binary = ("add", "sub", "mul", "div", "max", "min", "pow")
    compare = ("gt", "ge", "lt", "le", "eq", "ne")
    for fn in FNS:
        if fn in binary:
            out[f"ew_{fn}"] = _one("Elementwise", {"A": ("fp16", [3, 1, 7]), "B": ("bf16", [5, 1])}, fn=fn)
        elif fn in compare:
            out[f"ew_{fn}"] = _one("Elementwise", {"A": ("fp32", [4, 7]), "B": ("fp16", [7])}, fn=fn)
        elif fn in ("mod", "fmod"):
            out[f"ew_{fn}"] = _one("Elementwise", {"A": ("fp16", [3, 1, 7]), "B": ("fp32", [5, 1])}, fn=fn)
            out[f"ew_{fn}_i32"] = _one("Elementwise", {"A": ("i32", [4, 7]), "B": ("i32", [7])}, fn=fn)
        elif fn == "where":
            out["ew_where"] = _one("Elementwise", {"Cd": ("bool", [5, 1]), "X": ("fp16", [3, 5, 6]), "Y": ("fp32", [6])},
                                   fn="where")
        elif fn == "cast":
            for src, to in (("fp32", "fp16"), ("fp32", "bf16"), ("fp16", "fp32"), ("fp32", "i32"), ("bf16", "i32"),
                            ("fp32", "bool"), ("i32", "fp32")):
                out[f"ew_cast_{src}_{to}"] = _one("Elementwise", {"X": (src, [4, 7])}, fn="cast", to=to)
        else:
            for dt in FLOATS:
                out[f"ew_{fn}_{dt}"] = _one("Elementwise", {"X": (dt, [3, 17])}, fn=fn)
    out["ew_gelu_tanh"] = _one("Elementwise", {"X": ("fp16", [3, 17])}, fn="gelu", approximate="tanh")
    out["ew_relu_i32"] = _one("Elementwise", {"X": ("i32", [5, 9])}, fn="relu")
    out["ew_where_fp32_cond"] = _one("Elementwise", {"Cd": ("fp32", [5, 1]), "X": ("fp16", [3, 5, 6]),
                                                     "Y": ("fp32", [6])}, fn="where")
    out["ew_large_fp16_add"] = _one("Elementwise", {"A": ("fp16", [512, 1024]), "B": ("fp16", [1024])}, fn="add")
    return out


def _rows() -> dict:
    out = {}
    shape = [2, 3, 5, 7]
    for op in ("sum", "max", "min", "mean"):
        for axes in ([0], [1], [3], [1, 2], [0, 3], [0, 1, 2, 3]):
            out[f"reduce_{op}_{'_'.join(map(str, axes))}"] = _one("Reduce", {"X": ("fp16", shape)}, op=op, axes=axes)
    out["reduce_mean_keepdim_bf16"] = _one("Reduce", {"X": ("bf16", shape)}, op="mean", axes=[-1, 1], keepdim=True)
    out["reduce_mean_symbolic"] = _one("Reduce", {"X": ("fp16", ["M", "N"])}, op="mean", axes=[1])
    for axis in (-1, 0, 1):
        for dt in FLOATS:
            out[f"softmax_axis{axis}_{dt}"] = _one("Softmax", {"X": (dt, [5, 11, 3])}, axis=axis)
    for dt, axis, params, eps in (("fp32", -1, 2, 1e-5), ("fp16", -1, 1, 1e-3), ("bf16", -1, 0, 1e-5),
                                  ("fp32", 1, 2, 1e-6), ("fp16", 2, 0, 1e-5)):
        shape = [2, 3, 13]
        norm = shape[axis % 3:]
        names = ["X", "G", "Bt"][:1 + params]
        ins = {"X": (dt, shape), "G": (dt, norm), "Bt": (dt, norm)}
        out[f"layernorm_{dt}_axis{axis}_p{params}"] = _one("LayerNorm", {k: ins[k] for k in names}, axis=axis, eps=eps)
    out["layernorm_softmax_symbolic"] = _model({"X": ("fp32", ["R", "C"])},
                                               [_node("LayerNorm", ["X"], "L", eps=1e-5), _node("Softmax", ["L"], "Y", axis=-1)],
                                               ["Y", "L"])
    out["softmax_large_fp16"] = _one("Softmax", {"X": ("fp16", [256, 2048])}, axis=-1)
    return out


def _windows() -> dict:
    out = {}
    conv = {"conv_grouped_strided_dilated": ([1, 6, 9, 8], [4, 3, 3, 2], dict(stride=[2, 1], pad=[1, 0, 2, 1], dilation=[1, 2], groups=2)),
            "conv_bias_1x1": ([2, 3, 5, 7], [5, 3, 1, 1], dict()),
            "conv_depthwise": ([1, 6, 7, 8], [12, 1, 3, 3], dict(groups=6, pad=[1, 1, 1, 1], dilation=[2, 1])),
            "conv_64ch": ([2, 64, 16, 16], [64, 64, 3, 3], dict(pad=[1, 1, 1, 1]))}
    for dt in FLOATS:
        for name, (xs, ws, attrs) in conv.items():
            ins = {"X": (dt, xs), "W": (dt, ws)} | ({"bias": (dt, [ws[0]])} if name == "conv_bias_1x1" else {})
            out[f"{name}_{dt}"] = _one("Conv2D", ins, **attrs)
    out["conv_symbolic_silu"] = _model({"X": ("fp16", ["N", 4, "H", "W"]), "W": ("fp16", [6, 4, 3, 3]), "bias": ("fp16", [6])},
                                       [_node("Conv2D", ["X", "W", "bias"], "Yc", stride=[2, 2], pad=[1, 1, 1, 1]),
                                        _node("Elementwise", ["Yc"], "Y", fn="silu")], ["Y"],
                                       {"Y": {"dtype": "fp16", "shape": ["N", 6, "Ho", "Wo"]}})
    out["conv3d"] = _one("Conv3D", {"X": ("fp16", [1, 4, 5, 6, 7]), "W": ("fp16", [4, 2, 2, 3, 1])}, pad=[1, 0, 1],
                         stride=[1, 2, 1], groups=2)
    for dt in FLOATS:
        out[f"maxpool_{dt}"] = _one("MaxPool2D", {"X": (dt, [2, 3, 9, 8])}, kernel=[3, 2], stride=[2, 3], pad=[1, 1, 1, 0])
        out[f"avgpool_{dt}"] = _one("AvgPool2D", {"X": (dt, [2, 3, 9, 8])}, kernel=[3, 3], stride=[2, 2], pad=1,
                                    count_include_pad=False)
    out["maxpool_k1"] = _one("MaxPool2D", {"X": ("fp16", [1, 2, 5, 5])}, kernel=[1, 1])
    out["avgpool_ceil_tail"] = _one("AvgPool2D", {"X": ("fp32", [1, 2, 7, 7])}, kernel=2, extra=[1, 1],
                                    count_include_pad=True)
    out["maxpool3d"] = _one("MaxPool3D", {"X": ("fp16", [1, 2, 5, 6, 7])}, kernel=[2, 2, 3], pad=[1, 0, 1])
    out["avgpool3d"] = _one("AvgPool3D", {"X": ("fp32", [1, 2, 5, 6, 7])}, kernel=2)
    return out


def _attention() -> dict:
    out = {}
    for dt in FLOATS:
        for causal in (False, True):
            out[f"attention_{dt}_{'causal' if causal else 'full'}"] = _one(
                "Attention", {"Q": (dt, [2, 2, 5, 8]), "K": (dt, [2, 2, 9, 8]), "V": (dt, [2, 2, 9, 3])}, causal=causal)
    out["attention_scale_d1"] = _one("Attention", {"Q": ("fp16", [1, 1, 3, 1]), "K": ("fp16", [1, 1, 4, 1]),
                                                   "V": ("fp16", [1, 1, 4, 2])}, scale=0.5)
    out["attention_symbolic_causal"] = _model(
        {"Q": ("fp16", [1, 2, "M", 16]), "K": ("fp16", [1, 2, "N", 16]), "V": ("fp16", [1, 2, "N", 16])},
        [_node("Attention", ["Q", "K", "V"], "O", causal=True)], ["O"], {"O": {"dtype": "fp32"}})
    out["attention_d64"] = _one("Attention", {"Q": ("fp16", [1, 4, 128, 64]), "K": ("fp16", [1, 4, 128, 64]),
                                              "V": ("fp16", [1, 4, 128, 64])}, causal=True)
    return out


def _movement() -> dict:
    out = {}
    out["reshape_transpose_expand"] = _model(
        {"X": ("fp32", [2, 3, 5])}, [_node("Reshape", ["X"], "R", shape=[5, -1]), _node("Transpose", ["R"], "T", perm=[-1, 0]),
                                     _node("Expand", ["T"], "E", shape=[4, 6, 5]), _node("Transpose", ["E"], "D")],
        ["E", "D", "R"])
    out["slice_negative_steps"] = _one("Slice", {"X": ("fp32", [7, 6, 5])}, starts=[-5, 1], ends=[7, -1], steps=[2, 3],
                                       axes=[0, -1])
    out["pad_flip"] = _model({"X": ("fp16", [3, 4])}, [_node("Pad", ["X"], "P", pads=[[1, 0], [2, 3]], value=-2.5),
                                                       _node("Flip", ["P"], "F", axes=[0, -1])], ["F", "P"])
    out["concat"] = _one("Concat", {"A": ("fp16", [2, 3, 4]), "B": ("fp16", [2, 5, 4])}, axis=1)
    out["constant_add"] = _model({"X": ("fp32", [3, 4])}, [_node("Constant", [], "K", value=1.5, shape=[4]),
                                                           _node("Elementwise", ["X", "K"], "Y", fn="add")], ["Y"])
    out["gather_constant_indices"] = _one("Gather", {"X": ("fp16", [6, 5])}, indices=[[0, -1], [2, 3]], axis=0)
    out["gather_runtime_indices"] = _one("Gather", {"X": ("fp32", [10, 8]), "I": ("i32", [3])}, axis=0)
    out["gather_elements"] = _one("GatherElements", {"X": ("fp32", [4, 5]), "I": ("i32", [4, 3])}, axis=1)
    out["cumsum"] = _one("CumSum", {"X": ("fp16", [3, 7])}, axis=1)
    out["cumsum_i32_exclusive_reverse"] = _one("CumSum", {"X": ("i32", [5, 4])}, axis=0, exclusive=True, reverse=True)
    # nearest x2 (half_pixel, round_prefer_floor) on H, then linear 5 -> 7 (half_pixel) on W, in fp16
    out["resize_nearest_linear"] = _model(
        {"X": ("fp16", [2, 3, 4, 5]), "W": ("fp32", [7])},
        [_node("Resize", ["X"], "H", axis=2, size=8, coord=[4, 1, 8]),
         _node("Resize", ["H", "W"], "Y", axis=3, size=7, coord=[10, -2, 14], mode="linear")], ["Y"])
    return out


def _pipelines() -> dict:
    doc = _model({"X": ("fp16", [2, 3, 10, 9]), "W": ("fp16", [4, 3, 3, 3]), "FC": ("bf16", [80, 7])},
                 [_node("Conv2D", ["X", "W"], "C", pad=[1, 1, 1, 1]), _node("Elementwise", ["C"], "R", fn="relu"),
                  _node("MaxPool2D", ["R"], "P", kernel=[2, 2]), _node("Reshape", ["P"], "F", shape=[2, -1]),
                  _node("GEMM", ["F", "FC"], "L"), _node("Softmax", ["L"], "Y", axis=-1)], ["Y"])
    gelu = _model({"A": ("bf16", ["M", "K"]), "B": ("bf16", ["K", "N"]), "bias": ("bf16", ["N"])},
                  [_node("GEMM", ["A", "B"], "C0"), _node("Elementwise", ["C0", "bias"], "C1", fn="add"),
                   _node("Elementwise", ["C1"], "Y", fn="gelu")], ["Y"])
    return {"pipeline_conv_pool_gemm_softmax": doc, "pipeline_gemm_bias_gelu_symbolic": gelu}


def frontend_op_models(full: bool = True) -> dict[str, dict]:
    """name -> Frontend IR model; every op of the lowering table appears in at least one (``ops_of``).
    ``full=False``: of the models that differ only in their float dtype (a name ending _fp32, _fp16,
    _bf16), one each, the dtypes taken in turn (the test's set; the bench takes them all)."""
    out = {**_gemm(), **_elementwise(), **_rows(), **_windows(), **_attention(), **_movement(), **_pipelines()}
    if full:
        return out
    stems: dict = {}
    for name in out:
        stems.setdefault(re.sub(r"_(fp32|fp16|bf16)$", "", name), []).append(name)
    return {names[k % len(names)]: out[names[k % len(names)]] for k, names in enumerate(stems.values())}


def ops_of(doc: dict) -> set[str]:
    return {n["op"] for n in doc["graph"]}


def onnx_models() -> dict:
    from ..examples.onnx_models import MODELS, build
    from ..frontend.onnx import import_onnx
    return {f"onnx_{n}": import_onnx(build(n)) for n in sorted(MODELS)}


def torch_models() -> dict:
    import torch

    from ..examples.torch_models import MODELS, build
    from ..frontend.torch_export import import_exported
    out = {}
    for n in sorted(MODELS):
        m, args = build(n)
        out[f"torch_{n}"] = import_exported(torch.export.export(m, args))
    return out


def bench_models() -> dict:
    from .models import mlp_stack, transformer
    return {"bench_mlp2": mlp_stack(2), "bench_transformer1": transformer(1)}


def examples() -> dict:
    return {p.stem: str(p) for p in sorted((HERE.parent / "examples").glob("*.json"))}


GROUPS = {"examples": examples, "bench": bench_models, "onnx": onnx_models, "torch": torch_models,
          "ops": frontend_op_models}


def groups(names: "list[str] | None" = None) -> dict[str, "dict | str"]:
    """name -> model (a document or a path) of every named group (default: all), in group order."""
    out: dict = {}
    for g in names or list(GROUPS):
        out.update(GROUPS[g]())
    return out
