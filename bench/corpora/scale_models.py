"""The graphs of the scale bench (bench/scale.py), written as weight-free ONNX: every weight, norm scale
and rotary table is a graph input (declared, never stored), so a file of LLaMA-2-7B at 32 layers is a few
hundred kilobytes; only shape vectors, scalars and masks are initializers. The layers are spelled as
exporters spell them (RMSNorm as ``x * 1/sqrt(mean(x²) + eps) * g``, rotary embeddings as
``x*cos + rotate_half(x)*sin``, grouped-query attention as ``repeat_kv``'s Unsqueeze/Expand/Reshape, SiLU
as ``x*sigmoid(x)``, GELU as its tanh or erf formula, BatchNormalization after each convolution).

    build("llama2_7b", layers=2)   # -> onnx.ModelProto
    GRAPHS                          # name -> builder, each taking the size it scales by

Sizes: LLaMA-2-7B (d 4096, 32 heads, FFN 11008), LLaMA-3-8B (d 4096, 32 query heads over 8 KV heads, FFN
14336), at sequence 128; GPT-2 small / medium / large / XL (d 768 / 1024 / 1280 / 1600, 12 / 24 / 36 / 48
layers) at sequence 128; ResNet-50 / 101 / 152 (bottleneck blocks 3-4-6-3, 3-4-23-3, 3-8-36-3) at batch
32, 224²; a soft mixture-of-experts layer (Puigcerver et al.: dispatch and combine softmaxes over one
logit matrix, each expert a GELU MLP on its own slots) of 256 tokens, d 768, 2 slots an expert; a U-Net
of 4 levels (64 to 512 channels, nearest-neighbour upsampling, skip concatenations) on 1x3x128x128.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from ...examples.onnx_models import G, _io


DTYPES = {"fp32": (np.float32, TensorProto.FLOAT), "fp16": (np.float16, TensorProto.FLOAT16)}


class WeightFree(G):
    """A graph whose weights are graph inputs (``inputs``), not initializers, of element type ``dtype``
    (``fp32`` or ``fp16``: a model exported in half precision, weights and activations fp16)."""

    def __init__(self, dtype: str = "fp32"):
        super().__init__(0)
        self.inputs: list = []
        self.dtype = dtype
        self.np_type, self.elem = DTYPES[dtype]

    def io(self, name: str, shape: list):
        return helper.make_tensor_value_info(name, self.elem, shape)

    def weight(self, *shape: int, scale: "float | None" = None) -> str:
        n = self.name("w")
        self.inputs.append(self.io(n, list(shape)))
        return n

    def scalar(self, v: float) -> str:
        return self.init(np.asarray(v, dtype=self.np_type), "c")

    def cast(self, x: str, up: bool) -> str:
        """``x`` of the graph's type cast up to fp32 (``up``), or an fp32 ``x`` cast back down; ``x`` itself in
        an fp32 graph."""
        return x if self.dtype == "fp32" else self.op("Cast", [x], to=TensorProto.FLOAT if up else self.elem)

    def layernorm(self, x: str, d: int) -> str:
        return self.op("LayerNormalization", [x, self.weight(d), self.weight(d)], axis=-1, epsilon=1e-5)

    def rmsnorm(self, x: str, d: int) -> str:
        """In fp32 whatever the graph's type (a half model's exporter casts up and back, as transformers'
        LlamaRMSNorm does), the scale applied in the graph's type."""
        x32 = self.cast(x, True)
        ms = self.op("ReduceMean", [self.op("Mul", [x32, x32])], axes=[-1], keepdims=1)
        one = self.init(np.asarray(1.0, dtype=np.float32), "c")
        eps = self.init(np.asarray(1e-6, dtype=np.float32), "c")
        inv = self.op("Div", [one, self.op("Sqrt", [self.op("Add", [ms, eps])])])
        return self.op("Mul", [self.cast(self.op("Mul", [x32, inv]), False), self.weight(d)])

    def softmax(self, scores: str) -> str:
        """In fp32 whatever the graph's type (cast up and back, as transformers' eager attention does)."""
        return self.cast(self.op("Softmax", [self.cast(scores, True)], axis=-1), False)

    def conv_bn(self, x: str, cin: int, cout: int, k: int, stride: int = 1, relu: bool = True) -> str:
        y = self.op("Conv", [x, self.weight(cout, cin, k, k)], kernel_shape=[k, k], strides=[stride, stride],
                    pads=[k // 2] * 4)
        y = self.op("BatchNormalization", [y] + [self.weight(cout) for _ in range(4)], epsilon=1e-5)
        return self.op("Relu", [y]) if relu else y

    def matmul(self, x: str, din: int, dout: int) -> str:
        return self.op("MatMul", [x, self.weight(din, dout)])

    def swiglu(self, h: str, d: int, ffn: int) -> str:
        """LLaMA's MLP: ``(SiLU(h @ W_gate) * (h @ W_up)) @ W_down``, SiLU as ``x*sigmoid(x)``."""
        gate = self.matmul(h, d, ffn)
        return self.matmul(self.op("Mul", [self.op("Mul", [gate, self.op("Sigmoid", [gate])]), self.matmul(h, d, ffn)]),
                           ffn, d)

    def slice(self, x: str, lo: int, hi: int, axis: int) -> str:
        return self.op("Slice", [x, self.ints(lo), self.ints(hi), self.ints(axis)])

    def built(self, inputs: list, output: str, shape: list, name: str):
        return self.model(inputs + self.inputs, [self.io(output, shape)], name)


def _ids(s: int):
    return helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, s])


# ---- decoders ---------------------------------------------------------------------------------------

def _rotary(g: WeightFree, x: str, cos: str, sin: str, dh: int) -> str:
    half = dh // 2
    rot = g.op("Concat", [g.op("Neg", [g.slice(x, half, dh, 3)]), g.slice(x, 0, half, 3)], axis=-1)
    return g.op("Add", [g.op("Mul", [x, cos]), g.op("Mul", [rot, sin])])


def _repeat_kv(g: WeightFree, x: str, kv: int, rep: int, s: int, dh: int) -> str:
    if rep == 1:
        return x
    y = g.op("Expand", [g.op("Unsqueeze", [x, g.ints(2)]), g.ints(1, kv, rep, s, dh)])
    return g.op("Reshape", [y, g.ints(1, kv * rep, s, dh)])


def llama(layers: int, d: int = 4096, heads: int = 32, kv: int = 32, ffn: int = 11008, s: int = 128,
          vocab: int = 32000, name: str = "llama", dtype: str = "fp32"):
    """Token embedding, ``layers`` pre-RMSNorm decoder layers (rotary q/k, causal GQA attention, SiLU-gated
    MLP, both residuals), the final RMSNorm; weights, activations and the rotary tables of type ``dtype``."""
    g = WeightFree(dtype)
    dh, rep = d // heads, heads // kv
    cos, sin = "rope_cos", "rope_sin"
    mask = g.init(np.tril(np.ones((s, s), dtype=bool)).reshape(1, 1, s, s), "causal_mask")
    x = g.op("Gather", [g.weight(vocab, d), "input_ids"], axis=0)
    for _ in range(layers):
        h = g.rmsnorm(x, d)
        q = _rotary(g, g.heads(g.matmul(h, d, heads * dh), s, heads, dh), cos, sin, dh)
        k = _rotary(g, g.heads(g.matmul(h, d, kv * dh), s, kv, dh), cos, sin, dh)
        v = g.heads(g.matmul(h, d, kv * dh), s, kv, dh)
        a = g.attention(q, _repeat_kv(g, k, kv, rep, s, dh), _repeat_kv(g, v, kv, rep, s, dh), dh, mask)
        x = g.op("Add", [x, g.matmul(g.merge_heads(a, s, d), d, d)])
        x = g.op("Add", [x, g.swiglu(g.rmsnorm(x, d), d, ffn)])
    out = g.op("Identity", [g.rmsnorm(x, d)])
    g.nodes[-1].output[0] = "hidden"
    return g.built([_ids(s), g.io(cos, [1, 1, s, dh]), g.io(sin, [1, 1, s, dh])], "hidden", [1, s, d], name)


def llama2_7b(layers: int, dtype: str = "fp32"):
    return llama(layers, name=f"llama2_7b_L{layers}" + ("" if dtype == "fp32" else f"_{dtype}"), dtype=dtype)


def llama3_8b(layers: int, dtype: str = "fp32"):
    return llama(layers, kv=8, ffn=14336, vocab=128256, name=f"llama3_8b_L{layers}" + ("" if dtype == "fp32" else
                                                                                        f"_{dtype}"), dtype=dtype)


GPT2 = {"small": (768, 12, 12), "medium": (1024, 16, 24), "large": (1280, 20, 36), "xl": (1600, 25, 48)}


def gpt2(size: str, layers: "int | None" = None, s: int = 128, vocab: int = 50257):
    """Token and position embeddings, pre-LN decoder blocks (fused QKV split in three, causal attention,
    tanh-GELU MLP), the final LayerNorm; ``layers`` (default: the size's own count)."""
    d, h, n = GPT2[size]
    n = layers or n
    g = WeightFree()
    dh = d // h
    positions = g.init(np.arange(s, dtype=np.int64).reshape(1, s), "position_ids")
    mask = g.init(np.tril(np.ones((s, s), dtype=bool)).reshape(1, 1, s, s), "causal_mask")
    x = g.op("Add", [g.op("Gather", [g.weight(vocab, d), "input_ids"], axis=0),
                     g.op("Gather", [g.weight(1024, d), positions], axis=0)])
    for _ in range(n):
        qkv = g.linear(g.layernorm(x, d), d, 3 * d)
        q, k, v = (g.heads(t, s, h, dh) for t in g.op("Split", [qkv, g.ints(d, d, d)], n_out=3, axis=2))
        x = g.op("Add", [x, g.linear(g.merge_heads(g.attention(q, k, v, dh, mask), s, d), d, d)])
        x = g.op("Add", [x, g.linear(g.gelu_tanh(g.linear(g.layernorm(x, d), d, 4 * d)), 4 * d, d)])
    g.op("Identity", [g.layernorm(x, d)])
    g.nodes[-1].output[0] = "hidden"
    return g.built([_ids(s)], "hidden", [1, s, d], f"gpt2_{size}_L{n}")


# ---- convolutional networks ---------------------------------------------------------------------------

RESNET = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}


def resnet(depth: int, batch: int = 32, hw: int = 224):
    """Stem (7x7/2 conv-BN-ReLU, 3x3/2 max-pool), bottleneck stages (1x1, 3x3 strided, 1x1 with a
    projection on each stage's first block), global average pool, a 1000-way classifier."""
    g = WeightFree()
    x = g.conv_bn("image", 3, 64, 7, stride=2)
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, blocks in enumerate(RESNET[depth]):
        mid = 64 * 2 ** stage
        for b in range(blocks):
            stride = 2 if b == 0 and stage > 0 else 1
            y = g.conv_bn(g.conv_bn(g.conv_bn(x, cin, mid, 1), mid, mid, 3, stride), mid, 4 * mid, 1, relu=False)
            short = g.conv_bn(x, cin, 4 * mid, 1, stride, relu=False) if b == 0 else x
            x, cin = g.op("Relu", [g.op("Add", [short, y])]), 4 * mid
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
    g.nodes.append(helper.make_node("Gemm", [x, g.weight(1000, cin), g.weight(1000)], ["logits"], transB=1,
                                    name="fc"))
    return g.built([_io("image", [batch, 3, hw, hw])], "logits", [batch, 1000], f"resnet{depth}_b{batch}")


def unet(levels: int = 4, ch: int = 64, hw: int = 128):
    """Two 3x3 conv-BN-ReLU per level, 2x2 max-pool down, nearest-neighbour 2x upsampling (Reshape/Expand/
    Reshape) and a skip concatenation up, a 1x1 head to 2 classes."""
    g = WeightFree()

    def double(x: str, cin: int, cout: int) -> str:
        return g.conv_bn(g.conv_bn(x, cin, cout, 3), cout, cout, 3)
    x, cin, skips, size = "image", 3, [], hw
    for lv in range(levels):
        x = double(x, cin, ch * 2 ** lv)
        skips.append((x, ch * 2 ** lv, size))
        x, cin, size = g.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2]), ch * 2 ** lv, size // 2
    x = double(x, cin, ch * 2 ** levels)
    cin = ch * 2 ** levels
    for skip, c, sz in reversed(skips):
        up = g.op("Reshape", [g.op("Expand", [g.op("Reshape", [x, g.ints(1, cin, sz // 2, 1, sz // 2, 1)]),
                                              g.ints(1, cin, sz // 2, 2, sz // 2, 2)]), g.ints(1, cin, sz, sz)])
        up = g.conv_bn(up, cin, c, 1, relu=False)
        x, cin = double(g.op("Concat", [skip, up], axis=1), 2 * c, c), c
    g.nodes.append(helper.make_node("Conv", [x, g.weight(2, cin, 1, 1)], ["mask"], kernel_shape=[1, 1], name="head"))
    return g.built([_io("image", [1, 3, hw, hw])], "mask", [1, 2, hw, hw], f"unet_{levels}")


def swiglu_mlp(d: int = 4096, ffn: int = 11008, s: int = 16, dtype: str = "fp16"):
    """LLaMA's MLP alone on ``s`` tokens: x (1, s, d) -> y (1, s, d), no residual."""
    g = WeightFree(dtype)
    g.op("Identity", [g.swiglu("x", d, ffn)])
    g.nodes[-1].output[0] = "y"
    return g.built([g.io("x", [1, s, d])], "y", [1, s, d], f"swiglu_mlp_{d}x{ffn}_s{s}_{dtype}")


# ---- mixture of experts -------------------------------------------------------------------------------

def soft_moe(experts: int, tokens: int = 256, d: int = 768, hidden: "int | tuple" = 3072, slots: int = 2,
             layers: int = 1):
    """``layers`` soft mixture-of-experts layers in depth, each: logits = LN(x) Φ; dispatch D = softmax over the
    tokens, combine C = softmax over the slots; each expert's slots (Dᵀ x, sliced) through its own erf-GELU MLP
    (of width ``hidden``, or ``hidden[e]`` for expert e); the experts' outputs concatenated and combined, C Y,
    plus the residual."""
    g = WeightFree()
    x = "tokens"
    for _ in range(layers):
        h = g.layernorm(x, d)
        logits = g.matmul(h, d, experts * slots)  # (1, T, E*p)
        dispatch = g.op("Softmax", [logits], axis=1)
        combine = g.op("Softmax", [logits], axis=2)
        slotted = g.op("MatMul", [g.op("Transpose", [dispatch], perm=[0, 2, 1]), h])  # (1, E*p, d)
        outs = []
        for e in range(experts):
            xe = g.slice(slotted, e * slots, (e + 1) * slots, 1)
            width = hidden[e] if isinstance(hidden, tuple) else hidden
            outs.append(g.linear(g.gelu_erf(g.linear(xe, d, width)), width, d))
        y = g.op("Concat", outs, axis=1) if experts > 1 else outs[0]
        x = g.op("Add", [x, g.op("MatMul", [combine, y])])
    g.nodes[-1].output[0] = "out"
    name = f"soft_moe_e{experts}" + (f"_L{layers}" if layers > 1 else "")
    return g.built([_io("tokens", [1, tokens, d])], "out", [1, tokens, d], name)


GRAPHS = {"llama2_7b": llama2_7b, "llama3_8b": llama3_8b, "gpt2": gpt2, "resnet": resnet, "unet": unet,
          "soft_moe": soft_moe}


def build(name: str, *args, **kw):
    return GRAPHS[name](*args, **kw)
