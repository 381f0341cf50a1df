"""The four small architectures of ``onnx_models.py`` as torch modules (randomly initialized, eval
mode), for the torch.export importer and the torch.compile backend. ``build(name)`` returns
``(module, example_inputs)``; needs the ``polysat[torch]`` extra."""
from __future__ import annotations

import math

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.proj = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.b2(self.c2(torch.relu(self.b1(self.c1(x)))))
        return torch.relu(y + (x if self.proj is None else self.proj(x)))


class ResNetCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.blocks = nn.Sequential(Block(16, 16, 1), Block(16, 32, 2), nn.MaxPool2d(2))
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class SelfAttention(nn.Module):
    def __init__(self, d: int, h: int, causal: bool, s: int):
        super().__init__()
        self.h, self.dh = h, d // h
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        if causal:
            self.register_buffer("mask", torch.tril(torch.ones(s, s, dtype=torch.bool)))
        else:
            self.mask = None

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (t.reshape(b, s, self.h, self.dh).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.dh)
        if self.mask is not None:
            scores = scores.masked_fill(~self.mask, float("-inf"))
        y = torch.softmax(scores, dim=-1) @ v
        return self.out(y.transpose(1, 2).reshape(b, s, d))


class BertEncoder(nn.Module):
    def __init__(self, s: int = 16, d: int = 64, h: int = 4, vocab: int = 100):
        super().__init__()
        self.words = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, s, d) * 0.1)
        self.ln0, self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = SelfAttention(d, h, False, s)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, ids):
        x = self.ln0(self.words(ids) + self.pos)
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.mlp(x))


class GPT2Block(nn.Module):
    def __init__(self, s: int = 16, d: int = 64, h: int = 4, vocab: int = 100):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(s, d)
        self.register_buffer("positions", torch.arange(s).reshape(1, s))
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = SelfAttention(d, h, True, s)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(self.positions)
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class MLPMixer(nn.Module):
    def __init__(self, patch: int = 8, c: int = 32, depth: int = 1):
        super().__init__()
        p = (32 // patch) ** 2
        self.embed = nn.Conv2d(3, c, patch, patch)
        self.layers = nn.ModuleList(nn.ModuleDict({
            "ln1": nn.LayerNorm(c), "tok": nn.Sequential(nn.Linear(p, 2 * p), nn.GELU(), nn.Linear(2 * p, p)),
            "ln2": nn.LayerNorm(c), "ch": nn.Sequential(nn.Linear(c, 4 * c), nn.GELU(), nn.Linear(4 * c, c)),
        }) for _ in range(depth))
        self.ln, self.head = nn.LayerNorm(c), nn.Linear(c, 10)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)  # (B, P, C)
        for m in self.layers:
            x = x + m["tok"](m["ln1"](x).transpose(1, 2)).transpose(1, 2)
            x = x + m["ch"](m["ln2"](x))
        return self.head(self.ln(x).mean(dim=1))


# name -> (module, input shape, whether the input is token ids (int64) rather than floats)
MODELS = {"resnet_cnn": (ResNetCNN, (1, 3, 32, 32), False), "bert_encoder": (BertEncoder, (1, 16), True),
          "gpt2_block": (GPT2Block, (1, 16), True), "mlp_mixer": (MLPMixer, (1, 3, 32, 32), False)}


def build(name: str, seed: int = 0) -> tuple:
    torch.manual_seed(seed)
    cls, shape, ids = MODELS[name]
    m = cls().eval()
    for mod in m.modules():  # non-trivial batch-norm statistics
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.2, 0.2)
            mod.running_var.uniform_(0.5, 1.5)
    return m, (torch.randint(0, 100, shape) if ids else torch.randn(*shape),)
