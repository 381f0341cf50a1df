"""Small real model architectures written as ONNX graphs in code, randomly initialized (no downloads):
a ResNet-style CNN, a BERT-style encoder layer, a GPT-2-style decoder block and an MLP-Mixer.

They are written the way exporters write them (torch.onnx's patterns): shape computations through
``Shape -> Gather -> Concat -> Reshape``, GELU as its Erf or Tanh formula, BatchNormalization after
convolutions, causal masks as a constant ``Where``. ``build(name)`` returns an ``onnx.ModelProto``
(opset 17); ``MODELS`` lists the names.
"""
from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class G:
    """A graph under construction: nodes, initializers and fresh names."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.k = 0

    def name(self, hint: str) -> str:
        self.k += 1
        return f"{hint}_{self.k}"

    def op(self, op: str, inputs: list, n_out: int = 1, **attrs) -> "str | list":
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=self.name(op), **attrs))
        return outs[0] if n_out == 1 else outs

    def init(self, arr: np.ndarray, hint: str = "w") -> str:
        n = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), n))
        return n

    def weight(self, *shape: int, scale: float | None = None) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        s = scale if scale is not None else 1.0 / math.sqrt(fan_in)
        return self.init((self.rng.standard_normal(shape) * s).astype(np.float32))

    def ints(self, *v: int) -> str:
        return self.init(np.asarray(v, dtype=np.int64), "shape")

    def scalar(self, v: float) -> str:
        return self.init(np.asarray(v, dtype=np.float32), "c")

    def model(self, inputs: list, outputs: list, name: str):
        g = helper.make_graph(self.nodes, name, inputs, outputs, initializer=self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="polysat.examples")
        m.ir_version = 8
        return m

    # ---- layers ------------------------------------------------------------------------------
    def linear(self, x: str, din: int, dout: int) -> str:
        return self.op("Add", [self.op("MatMul", [x, self.weight(din, dout)]), self.weight(dout, scale=0.1)])

    def layernorm(self, x: str, d: int) -> str:
        g = self.init((1 + 0.1 * self.rng.standard_normal(d)).astype(np.float32), "ln_g")
        b = self.init((0.1 * self.rng.standard_normal(d)).astype(np.float32), "ln_b")
        return self.op("LayerNormalization", [x, g, b], axis=-1, epsilon=1e-5)

    def gelu_erf(self, x: str) -> str:
        e = self.op("Erf", [self.op("Div", [x, self.scalar(math.sqrt(2.0))])])
        return self.op("Mul", [self.op("Mul", [x, self.op("Add", [e, self.scalar(1.0)])]), self.scalar(0.5)])

    def gelu_tanh(self, x: str) -> str:
        cube = self.op("Pow", [x, self.scalar(3.0)])
        inner = self.op("Mul", [self.op("Add", [x, self.op("Mul", [cube, self.scalar(0.044715)])]),
                                self.scalar(math.sqrt(2.0 / math.pi))])
        return self.op("Mul", [self.op("Mul", [x, self.scalar(0.5)]), self.op("Add", [self.op("Tanh", [inner]),
                                                                                     self.scalar(1.0)])])

    def conv_bn(self, x: str, cin: int, cout: int, k: int, stride: int = 1, relu: bool = True) -> str:
        y = self.op("Conv", [x, self.weight(cout, cin, k, k)], kernel_shape=[k, k], strides=[stride, stride],
                    pads=[k // 2] * 4)
        c = cout
        bn = [self.init((1 + 0.1 * self.rng.standard_normal(c)).astype(np.float32), "bn_g"),
              self.init((0.1 * self.rng.standard_normal(c)).astype(np.float32), "bn_b"),
              self.init((0.1 * self.rng.standard_normal(c)).astype(np.float32), "bn_mean"),
              self.init((0.5 + self.rng.random(c)).astype(np.float32), "bn_var")]
        y = self.op("BatchNormalization", [y] + bn, epsilon=1e-5)
        return self.op("Relu", [y]) if relu else y

    def heads(self, x: str, s: int, h: int, dh: int) -> str:
        """(B, S, H*Dh) -> (B, H, S, Dh), the reshape target assembled from Shape like an exporter."""
        shp = self.op("Shape", [x])
        b = self.op("Gather", [shp, self.ints(0)], axis=0)
        target = self.op("Concat", [b, self.ints(s, h, dh)], axis=0)
        return self.op("Transpose", [self.op("Reshape", [x, target])], perm=[0, 2, 1, 3])

    def merge_heads(self, x: str, s: int, d: int) -> str:
        return self.op("Reshape", [self.op("Transpose", [x], perm=[0, 2, 1, 3]), self.ints(1, s, d)])

    def attention(self, q: str, k: str, v: str, dh: int, mask: str | None = None) -> str:
        scores = self.op("Div", [self.op("MatMul", [q, self.op("Transpose", [k], perm=[0, 1, 3, 2])]),
                                 self.scalar(math.sqrt(dh))])
        if mask is not None:
            scores = self.op("Where", [mask, scores, self.scalar(-np.inf)])
        return self.op("MatMul", [self.softmax(scores), v])

    def softmax(self, scores: str) -> str:
        return self.op("Softmax", [scores], axis=-1)


def _io(name: str, shape: list):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def resnet_cnn(seed: int = 0):
    """Stem conv-BN-ReLU, a basic residual block, a strided block with a 1x1 projection, max-pool,
    global average pool and a linear classifier. Input (1, 3, 32, 32) -> logits (1, 10)."""
    g = G(seed)
    x = g.conv_bn("image", 3, 16, 3)
    y = g.conv_bn(g.conv_bn(x, 16, 16, 3), 16, 16, 3, relu=False)
    x = g.op("Relu", [g.op("Add", [x, y])])
    y = g.conv_bn(g.conv_bn(x, 16, 32, 3, stride=2), 32, 32, 3, relu=False)
    proj = g.conv_bn(x, 16, 32, 1, stride=2, relu=False)
    x = g.op("Relu", [g.op("Add", [proj, y])])
    x = g.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
    g.nodes.append(helper.make_node("Gemm", [x, g.weight(10, 32), g.weight(10, scale=0.1)], ["logits"], transB=1,
                                    name="classifier"))
    return g.model([_io("image", [1, 3, 32, 32])], [_io("logits", [1, 10])], "resnet_cnn")


def _ids(s: int):
    return helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, s])


def bert_encoder(seed: int = 1, s: int = 16, d: int = 64, h: int = 4, vocab: int = 100):
    """Token ids looked up in a word embedding (a Gather by run-time indices) plus learned position
    embeddings, one post-LN encoder layer (multi-head self-attention, Erf GELU MLP)."""
    g = G(seed)
    dh = d // h
    words = g.op("Gather", [g.weight(vocab, d, scale=0.5), "input_ids"], axis=0)
    x = g.layernorm(g.op("Add", [words, g.weight(1, s, d, scale=0.1)]), d)
    q, k, v = (g.heads(g.linear(x, d, d), s, h, dh) for _ in range(3))
    a = g.linear(g.merge_heads(g.attention(q, k, v, dh), s, d), d, d)
    x = g.layernorm(g.op("Add", [x, a]), d)
    m = g.linear(g.gelu_erf(g.linear(x, d, 4 * d)), 4 * d, d)
    out = g.layernorm(g.op("Add", [x, m]), d)
    g.nodes.append(helper.make_node("Identity", [out], ["hidden"], name="out"))
    return g.model([_ids(s)], [_io("hidden", [1, s, d])], "bert_encoder")


def gpt2_block(seed: int = 2, s: int = 16, d: int = 64, h: int = 4, vocab: int = 100):
    """Token embedding (a Gather by the run-time token ids) plus position embedding (a Gather by the
    constant positions 0..s-1), then a pre-LN decoder block: fused QKV projection split in three, causal
    self-attention (a constant lower-triangular mask), tanh-GELU MLP, both residuals."""
    g = G(seed)
    dh = d // h
    positions = g.init(np.arange(s, dtype=np.int64).reshape(1, s), "position_ids")
    x = g.op("Add", [g.op("Gather", [g.weight(vocab, d, scale=0.5), "input_ids"], axis=0),
                     g.op("Gather", [g.weight(s, d, scale=0.1), positions], axis=0)])
    qkv = g.linear(g.layernorm(x, d), d, 3 * d)
    q, k, v = (g.heads(t, s, h, dh) for t in g.op("Split", [qkv, g.ints(d, d, d)], n_out=3, axis=2))
    mask = g.init(np.tril(np.ones((s, s), dtype=bool)).reshape(1, 1, s, s), "causal_mask")
    a = g.linear(g.merge_heads(g.attention(q, k, v, dh, mask), s, d), d, d)
    x = g.op("Add", [x, a])
    m = g.linear(g.gelu_tanh(g.linear(g.layernorm(x, d), d, 4 * d)), 4 * d, d)
    g.nodes.append(helper.make_node("Add", [x, m], ["hidden_out"], name="residual_2"))
    return g.model([_ids(s)], [_io("hidden_out", [1, s, d])], "gpt2_block")


def mlp_mixer(seed: int = 3, patch: int = 8, c: int = 32, depth: int = 1):
    """Patch embedding (a strided conv), `depth` mixer layers (token MLP across patches, channel MLP),
    mean over patches and a linear head. Input (1, 3, 32, 32) -> logits (1, 10)."""
    g = G(seed)
    p = (32 // patch) ** 2
    x = g.op("Conv", ["image", g.weight(c, 3, patch, patch), g.weight(c, scale=0.1)], kernel_shape=[patch, patch],
             strides=[patch, patch])
    x = g.op("Transpose", [g.op("Reshape", [x, g.ints(1, c, p)])], perm=[0, 2, 1])  # (1, P, C)
    for _ in range(depth):
        t = g.op("Transpose", [g.layernorm(x, c)], perm=[0, 2, 1])  # (1, C, P)
        t = g.linear(g.gelu_erf(g.linear(t, p, 2 * p)), 2 * p, p)
        x = g.op("Add", [x, g.op("Transpose", [t], perm=[0, 2, 1])])
        m = g.linear(g.gelu_erf(g.linear(g.layernorm(x, c), c, 4 * c)), 4 * c, c)
        x = g.op("Add", [x, m])
    x = g.op("ReduceMean", [g.layernorm(x, c)], axes=[1], keepdims=0)
    g.nodes.append(helper.make_node("Gemm", [x, g.weight(c, 10), g.weight(10, scale=0.1)], ["logits"], name="head"))
    return g.model([_io("image", [1, 3, 32, 32])], [_io("logits", [1, 10])], "mlp_mixer")


MODELS = {"resnet_cnn": resnet_cnn, "bert_encoder": bert_encoder, "gpt2_block": gpt2_block, "mlp_mixer": mlp_mixer}


def build(name: str):
    return MODELS[name]()
