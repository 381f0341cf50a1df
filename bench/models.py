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
