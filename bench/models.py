"""Generated Frontend IR models for the benches: a deep MLP stack and a transformer stack."""
from __future__ import annotations


def _t(dtype: str, shape: list) -> dict:
    return {"dtype": dtype, "shape": shape}


def mlp_stack(layers: int = 12, width: int = 1024, tokens: "int | str" = "T", dtype: str = "fp16") -> dict:
    """X -> [GEMM + bias + GELU] x layers."""
    tensors = {"X": _t(dtype, [tokens, width])}
    graph, inputs, x = [], [{"tensor": "X"}], "X"
    for i in range(layers):
        w, b = f"W{i}", f"b{i}"
        tensors[w], tensors[b] = _t(dtype, [width, width]), _t(dtype, [width])
        inputs += [{"tensor": w, "role": "param"}, {"tensor": b, "role": "param"}]
        tensors[f"h{i}"] = {"dtype": dtype}
        graph += [
            {"op": "GEMM", "name": f"fc{i}", "inputs": [x, w], "outputs": [f"g{i}"]},
            {"op": "Elementwise", "name": f"bias{i}", "fn": "add", "inputs": [f"g{i}", b], "outputs": [f"a{i}"]},
            {"op": "Elementwise", "name": f"gelu{i}", "fn": "gelu", "inputs": [f"a{i}"], "outputs": [f"h{i}"],
             "attrs": {"approximate": "tanh"}},
        ]
        x = f"h{i}"
    return {"signature": {"inputs": inputs, "outputs": [{"tensor": x}]}, "tensors": tensors, "graph": graph}


def transformer(blocks: int = 12, d_model: int = 768, heads: int = 12, d_ff: int = 3072,
                seq: "int | str" = "S", dtype: str = "fp16") -> dict:
    """Pre-LN transformer blocks: LN -> QKV GEMMs -> causal attention -> out proj + residual ->
    LN -> GEMM + GELU -> GEMM + residual."""
    dh = d_model // heads
    tensors = {"X": _t(dtype, [seq, d_model])}
    inputs, graph, x = [{"tensor": "X"}], [], "X"

    def param(name: str, shape: list) -> str:
        tensors[name] = _t(dtype, shape)
        inputs.append({"tensor": name, "role": "param"})
        return name

    def op(kind: str, name: str, ins: list, attrs: dict | None = None, fn: str | None = None) -> str:
        node = {"op": kind, "name": name, "inputs": ins, "outputs": [name + "_o"], "attrs": attrs or {}}
        if fn:
            node["fn"] = fn
        graph.append(node)
        tensors[name + "_o"] = {"dtype": dtype}
        return name + "_o"

    for i in range(blocks):
        p = f"b{i}_"
        h = op("LayerNorm", p + "ln1", [x, param(p + "g1", [d_model]), param(p + "be1", [d_model])])
        heads_of = []
        for n in "qkv":
            t = op("GEMM", p + n, [h, param(p + "W" + n, [d_model, d_model])])
            t = op("Reshape", p + n + "_r", [t], {"shape": [seq, heads, dh]})
            heads_of.append(op("Transpose", p + n + "_t", [t], {"perm": [1, 0, 2]}))
        q, k, v = (op("Reshape", p + n + "_4", [t], {"shape": [1, heads, seq, dh]}) for n, t in zip("qkv", heads_of))
        a = op("Attention", p + "attn", [q, k, v], {"causal": True})
        a = op("Reshape", p + "attn_r", [op("Transpose", p + "attn_t", [op("Reshape", p + "attn_3", [a],
               {"shape": [heads, seq, dh]})], {"perm": [1, 0, 2]})], {"shape": [seq, d_model]})
        o = op("GEMM", p + "proj", [a, param(p + "Wo", [d_model, d_model])])
        x = op("Elementwise", p + "res1", [o, x], fn="add")
        h = op("LayerNorm", p + "ln2", [x, param(p + "g2", [d_model]), param(p + "be2", [d_model])])
        h = op("GEMM", p + "ff1", [h, param(p + "W1", [d_model, d_ff])])
        h = op("Elementwise", p + "ff1b", [h, param(p + "c1", [d_ff])], fn="add")
        h = op("Elementwise", p + "gelu", [h], {"approximate": "tanh"}, fn="gelu")
        h = op("GEMM", p + "ff2", [h, param(p + "W2", [d_ff, d_model])])
        x = op("Elementwise", p + "res2", [h, x], fn="add")
    return {"signature": {"inputs": inputs, "outputs": [{"tensor": x}]}, "tensors": tensors, "graph": graph}


def sibling_gemms(tokens: "int | str" = "T", width: int = 768, dtype: str = "fp16") -> dict:
    """Ya = X @ Wa; Yb = X @ Wb: two GEMMs that read one input (the Q/K/V pattern)."""
    tensors = {"X": _t(dtype, [tokens, width]), "Wa": _t(dtype, [width, width]), "Wb": _t(dtype, [width, width]),
               "Ya": {"dtype": dtype}, "Yb": {"dtype": dtype}}
    graph = [{"op": "GEMM", "name": "ga", "inputs": ["X", "Wa"], "outputs": ["Ya"]},
             {"op": "GEMM", "name": "gb", "inputs": ["X", "Wb"], "outputs": ["Yb"]}]
    return {"signature": {"inputs": [{"tensor": "X"}, {"tensor": "Wa", "role": "param"}, {"tensor": "Wb", "role": "param"}],
                          "outputs": [{"tensor": "Ya"}, {"tensor": "Yb"}]}, "tensors": tensors, "graph": graph}


def conv_relu_conv(channels: int = 16, size: int = 32, residual: bool = False, dtype: str = "fp16") -> dict:
    """Conv3x3 -> ReLU -> Conv3x3 (with residual: + X -> ReLU, a ResNet basic block without norms)."""
    c, s = channels, size
    tensors = {"X": _t(dtype, [1, c, s, s]), "W1": _t(dtype, [c, c, 3, 3]), "W2": _t(dtype, [c, c, 3, 3])}
    conv = {"stride": 1, "pad": [1, 1, 1, 1]}
    graph = [{"op": "Conv2D", "name": "conv1", "inputs": ["X", "W1"], "outputs": ["Y1"], "attrs": conv},
             {"op": "Elementwise", "name": "relu1", "fn": "relu", "inputs": ["Y1"], "outputs": ["R1"]},
             {"op": "Conv2D", "name": "conv2", "inputs": ["R1", "W2"], "outputs": ["Y2"], "attrs": conv}]
    out = "Y2"
    if residual:
        graph += [{"op": "Elementwise", "name": "res", "fn": "add", "inputs": ["Y2", "X"], "outputs": ["Y3"]},
                  {"op": "Elementwise", "name": "relu2", "fn": "relu", "inputs": ["Y3"], "outputs": ["Y4"]}]
        out = "Y4"
    for t in ("Y1", "R1", "Y2", "Y3", "Y4"):
        tensors.setdefault(t, {"dtype": dtype})
    return {"signature": {"inputs": [{"tensor": "X"}, {"tensor": "W1", "role": "param"}, {"tensor": "W2", "role": "param"}],
                          "outputs": [{"tensor": out}]}, "tensors": tensors, "graph": graph}


def softmax_axis(shape: list, axis: int, dtype: str = "fp16") -> dict:
    """Softmax of one tensor over any axis."""
    return {"signature": {"inputs": [{"tensor": "X"}], "outputs": [{"tensor": "Y"}]},
            "tensors": {"X": _t(dtype, shape), "Y": {"dtype": dtype}},
            "graph": [{"op": "Softmax", "name": "softmax", "inputs": ["X"], "outputs": ["Y"], "attrs": {"axis": axis}}]}
