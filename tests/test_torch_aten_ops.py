"""ATen ops real models meet (the model zoo: position ids, rotary tables, masks, strided views), each in a small
module through torch.export -> import_exported -> the reference evaluator and playback, against eager torch."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from polysat.cli import TARGETS
from polysat.frontend import with_parameters
from polysat.frontend.torch_export import import_exported
from polysat.pipeline import Compilation


class Positions(torch.nn.Module):  # GPT-2 / LLaMA: arange position ids, a rotary table of constant positions
    def __init__(self):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, 8, 2).float() / 8), persistent=False)

    def forward(self, x):
        pos = torch.arange(0, x.shape[1], 1)
        ang = pos[:, None].float() * self.inv_freq[None, :]
        return x * torch.cat([ang.cos(), ang.sin()], dim=-1)


class Masks(torch.nn.Module):  # RoBERTa's ids -> positions; ViT's any(); hardtanh (MobileNetV2's ReLU6)
    def forward(self, ids, x):
        keep = ids.ne(1).int()
        pos = (torch.cumsum(keep, dim=1).type_as(keep) * keep).long() + 1
        flag = (x > 2.5).any(dim=-1, keepdim=True)
        return torch.nn.functional.hardtanh(x, -0.5, 0.5) + pos[..., None].float() + flag.float()


class Views(torch.nn.Module):  # Swin's bias table indexed by constant indices; as_strided of a weight; *_like
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(9, 4))
        self.register_buffer("index", torch.tensor([[0, 4, 8], [2, 4, 6]]), persistent=False)
        self.w = torch.nn.Parameter(torch.randn(4, 6))

    def forward(self, x):
        bias = self.table[self.index.view(-1)].view(2, 3, 4)
        band = torch.as_strided(self.w, (3, 4), (6, 1), 1)
        y = (x + bias) @ band.T  # (2, 3, 3)
        return y * torch.ones_like(y[..., :1]) + y.new_zeros(y.shape[-1]) + torch.full_like(y, 0.5)


class Adaptive(torch.nn.Module):  # VGG's 7x7 and AlexNet's 6x6 adaptive pools, upsampling and uneven bins
    def forward(self, x):
        a = torch.nn.functional.adaptive_avg_pool2d(x, (7, 7))
        b = torch.nn.functional.adaptive_avg_pool2d(x, (2, 3))
        return a.sum(dim=(2, 3)) + b.mean(dim=(2, 3))



class Outside(torch.nn.Module):  # ops the zoo never met, from architectures outside it (a new-user trial)
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.GroupNorm(2, 4)  # Wav2Vec2's feature extractor: native_group_norm

    def forward(self, x, e):
        slopes = torch.pow(x.abs() + 1, e)  # BLOOM's alibi slopes: pow.Tensor_Tensor
        slopes = slopes + torch.arange(x.shape[-1]) * x  # and its int64 positions times fp32 values
        soft = torch.log1p(torch.exp(x))  # Mamba's softplus: log1p
        y = torch.zeros_like(x)
        y[:, 1:3] = x[:, 1:3] * 2  # Funnel / Swin-v2's masks: slice_scatter (and copy)
        z = x.clone()
        z[:, 3:] = 0.5
        return self.norm(slopes + soft + y + z) + x[0].repeat(2, 1, 1)  # BLOOM's alibi: repeat


class Upsample(torch.nn.Module):  # U-Net / FPN decoders, BEiT's bias table: interpolate (upsample_*)
    def forward(self, x):
        a = torch.nn.functional.interpolate(x, size=(6, 7), mode="bilinear", align_corners=False)
        b = torch.nn.functional.interpolate(x, scale_factor=2, mode="nearest")
        c = torch.nn.functional.interpolate(x, size=(3, 9), mode="bilinear", align_corners=True)
        return a * 0.5 + b[..., :6, :7] + c.mean(dim=(2, 3), keepdim=True)


class Outside2(torch.nn.Module):  # a second new-user trial: OLMo, Phi-3, transformers' mask functions
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(6, elementwise_affine=False)  # OLMo: layer_norm without a weight

    def forward(self, x, mask):
        rot, keep = x[..., :6], x[..., 6:]  # Phi-3's partial rotary with the whole head rotated: keep is empty
        y = torch.cat([self.norm(rot) * 2, keep], dim=-1)
        b, q = torch.arange(x.shape[0])[:, None, None], torch.arange(x.shape[1])[None, :, None]
        kv = torch.arange(mask.shape[1])[None, None, :]
        m = mask[b, kv]  # (2, 1, 4): two index tensors, adjacent
        w = x[b, :, torch.tensor([5, -1])[None, None, :] + 0 * q]  # two tensors separated by a slice: (2, 4, 2, 4)
        steps = torch.floor(x[..., :4] * 2.5) - torch.ceil(x[..., 1:5]) + torch.round(x[..., 2:6] * 4)  # quantizers
        return y[..., :4] + m.float() + w.sum(-1).sum(-1, keepdim=True) + steps


class Router(torch.nn.Module):  # Mixtral / Qwen2-MoE's router: top-2 of the experts' scores; argmax and max.dim
    def forward(self, x):
        w, idx = torch.topk(torch.softmax(x, dim=-1), 2, dim=-1)
        lo, at = torch.min(x, dim=1, keepdim=True)
        return (w / w.sum(-1, keepdim=True)) * idx.float() + x.argmax(-1, keepdim=True).float() \
            + (lo * at).sum(-1, keepdim=True) + torch.topk(x, 3, dim=1, largest=False)[0].sum((1, 2), keepdim=True) \
            + x.argmin().float()


class Decoder(torch.nn.Module):  # DPT / U-Net upsampling: ConvTranspose2d (strided, grouped, output_padding), 1-D too
    def __init__(self):
        super().__init__()
        self.up = torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1)
        self.grouped = torch.nn.ConvTranspose2d(6, 4, 4, stride=2, padding=1, groups=2, bias=False)
        self.line = torch.nn.ConvTranspose1d(4, 4, 2, stride=2)
        self.valid = torch.nn.Conv2d(4, 4, 1, padding="valid")  # SigLIP's patch embedding: padding [0] for both axes

    def forward(self, x):
        y = self.grouped(torch.relu(self.up(self.valid(x))))  # (1, 4, 20, 20)
        return y[..., :10, :10] + self.line(x.mean(-1)).unsqueeze(-1)[:, :, :10]


class Standardized(torch.nn.Module):  # BiT's weight-standardized conv: batch_norm on the weight's own statistics
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.gamma, self.beta = torch.nn.Parameter(torch.rand(4) + 0.5), torch.nn.Parameter(torch.randn(4))

    def forward(self, x):
        w = torch.nn.functional.batch_norm(self.conv.weight.reshape(1, 4, -1), None, None, training=True, momentum=0.0,
                                           eps=1e-6).reshape_as(self.conv.weight)
        y = torch.nn.functional.conv2d(x, w, self.conv.bias, padding=1)
        return torch.nn.functional.batch_norm(y, None, None, self.gamma, self.beta, training=True, eps=1e-5)


class Buckets(torch.nn.Module):  # CANINE's hash embeddings: ((ids + 1) * prime) % buckets; remainder and fmod of floats
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(64, 4)

    def forward(self, ids, x):
        h = self.emb(((ids + 1) * 31) % 64) + self.emb(torch.fmod(ids * -7, 32) + 31)
        return h + torch.remainder(x, 0.75) + torch.fmod(x, -1.25) + (ids % -5).float()[..., None]


class Scatters(torch.nn.Module):  # a third new-user trial: PhiMoE's and JetMoE's routers, one-hot masks of the top-k
    def forward(self, logits):
        top = torch.topk(logits, 2, dim=-1).indices
        mask = torch.zeros_like(logits).scatter(-1, top, 1.0)  # scatter.value
        src = torch.arange(logits.numel(), dtype=logits.dtype).reshape(logits.shape) * 0.5
        added = torch.zeros_like(logits).scatter_add(1, top, src[:, :2] + 1)
        over = logits.scatter(1, top, src)  # scatter.src of a source larger than the index
        peak = logits.scatter_reduce(0, top[:3] % 3, src[:3, :2], "amax")
        counts = (logits * 3).long().float()  # a float cast to int64: computed as i32
        return mask * 2 + added + over * 3 + peak + counts


class Outside3(torch.nn.Module):  # the third trial's other ops: XLM, XMOD, DeepSeek-V3, JetMoE
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(5, 5)

    def forward(self, x, ids):
        count = (ids != 0).sum(dim=0)  # XLM: a sum of bool (an int64 count), its .item() into a check
        torch._check(count.max().item() <= ids.shape[0])
        lang = torch.zeros(x.shape[0], dtype=torch.long)
        y = torch.zeros_like(x)
        y[lang == 0] = self.lin(x[lang == 0])  # XMOD's adapters: a constant boolean mask, read and written
        buf = torch.empty(x.shape, dtype=x.dtype)  # DeepSeek-V3: empty, then written whole
        buf.copy_(x * 2)
        v, i = torch.sort(x, dim=-1, descending=True)  # JetMoE's router: sort of floats and of integers
        w, j = torch.sort(ids, dim=0, stable=True)
        q = ids / 3 + torch.div(ids, -4, rounding_mode="floor") + torch.div(ids, 4, rounding_mode="trunc")
        r = torch.div(x, 0.7, rounding_mode="floor") + torch.div(x, -0.3, rounding_mode="trunc") + x // 0.5
        p = ids * 0.5 + (ids < 0.5) + torch.rsqrt(ids.abs() + 1) + torch.sigmoid(ids)  # floats of integers, as torch
        return y + buf + v + i + (w + j)[:, None] + q[:, None] + r + count + p[:, None] / torch.sqrt(torch.tensor(8))


class Sampled(torch.nn.Module):  # RAFT's correlation lookup, RT-DETR's deformable attention: grid_sample
    def forward(self, x, grid):
        a = torch.nn.functional.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=True)
        b = torch.nn.functional.grid_sample(x, grid * 1.1, mode="nearest", padding_mode="border", align_corners=False)
        c = torch.nn.functional.grid_sample(x, grid * 1.2, mode="bicubic", padding_mode="reflection", align_corners=False)
        d = torch.nn.functional.grid_sample(x, grid * 0.9, mode="bicubic", padding_mode="zeros", align_corners=True)
        volume = torch.stack([x, x * 0.5 + 1, -x], 2)  # [N, C, 3, H, W] and a grid [N, 1, H', W', 3]
        v = torch.nn.functional.grid_sample(volume, torch.cat([grid, grid[..., :1] * 0.7], -1)[:, None] * 1.1,
                                            mode="bilinear", padding_mode="reflection", align_corners=True)
        return a + b + c + d + v[:, :, 0]


class Diagonals(torch.nn.Module):  # diagonals of a data tensor: the main one, off it, of other dims, torch.diag
    def forward(self, x, m):
        a = torch.diagonal(x, 0, 1, 2)  # (2, 4)
        b = torch.diagonal(x, 1, -1, -2)  # dims swapped, above: (2, 4)
        c = torch.diagonal(x, -2, 1, 2)  # below the main diagonal: (2, 3)
        return a + b + torch.cat([c, c[:, :1]], -1) + torch.diag(m)[None] + torch.diagonal(x, 0, 0, 2)[None, :4, 0]


class ConvBN(torch.nn.Module):  # a CNN's eval-mode BatchNorm after its conv, statistics as a deployed model has them
    def __init__(self):
        super().__init__()
        self.conv, self.bn = torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4)
        with torch.no_grad():
            self.bn.running_mean.copy_(torch.randn(4))
            self.bn.running_var.copy_(torch.rand(4) + 0.5)
            self.bn.weight.copy_(torch.randn(4))
            self.bn.bias.copy_(torch.randn(4))

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


CASES = {"positions": (Positions, lambda: (torch.randn(2, 5, 8),)),
         "conv_bn": (ConvBN, lambda: (torch.randn(2, 3, 6, 6),)),
         "diagonals": (Diagonals, lambda: (torch.randn(2, 5, 4), torch.randn(4, 6))),
         "sampled": (Sampled, lambda: (torch.randn(2, 3, 5, 7), torch.rand(2, 4, 6, 2) * 2.4 - 1.2)),
         "outside3": (Outside3, lambda: (torch.randn(4, 5) * 3, torch.tensor([7, -13, 0, 13]))),
         "scatters": (Scatters, lambda: (torch.randn(6, 8),)),
         "buckets": (Buckets, lambda: (torch.randint(-3000, 3000, (2, 16)), torch.randn(2, 16, 4) * 5)),
         "outside": (Outside, lambda: (torch.randn(2, 4, 6), torch.rand(2, 4, 6))),
         "standardized": (Standardized, lambda: (torch.randn(2, 3, 6, 6),)),
         "decoder": (Decoder, lambda: (torch.randn(1, 4, 5, 5),)),
         "router": (Router, lambda: (torch.randn(3, 4, 8),)),
         "outside2": (Outside2, lambda: (torch.randn(2, 4, 6), torch.tensor([[1, 1, 0, 1], [0, 1, 1, 1]]))),
         "upsample": (Upsample, lambda: (torch.randn(1, 2, 4, 4),)),
         "masks": (Masks, lambda: (torch.tensor([[0, 5, 1, 1, 7], [1, 9, 9, 2, 1]]), torch.randn(2, 5, 3) * 2)),
         "views": (Views, lambda: (torch.randn(2, 3, 4),)),
         "adaptive": (Adaptive, lambda: (torch.randn(2, 3, 5, 4),))}


@pytest.mark.parametrize("name", sorted(CASES))
def test_aten_ops_match_eager(name):
    torch.manual_seed(0)
    cls, args = CASES[name]
    m, x = cls().eval(), args()
    with torch.no_grad():
        want = m(*x).numpy()
        ep = torch.export.export(m, x)
    doc = import_exported(ep)
    users = [s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    feeds = with_parameters(doc, {n: t.numpy() for n, t in zip(users, x)})
    c = Compilation(doc, cost="model")
    for target in ("reference", "playback"):
        got = TARGETS[target](c, feeds)[doc["signature"]["outputs"][0]["tensor"]]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{name} on {target}")



def test_an_eval_batch_norm_of_constants_folds_at_import():
    """frontend/torch_aten_nn.py ``batch_norm``: eval-mode BatchNorm whose statistics, weight and bias are the model's
    is x s + shift per channel, s = w / sqrt(var + eps) and the shift computed at import (as an ONNX exporter folds
    them into the conv): the program computes no square root, division or subtraction (case ``conv_bn`` checks the
    values against eager torch)."""
    from polysat.ir.tiny import Ops
    torch.manual_seed(0)
    m, x = ConvBN().eval(), (torch.randn(2, 3, 6, 6),)
    with torch.no_grad():
        ep = torch.export.export(m, x)
    c = Compilation(import_exported(ep), cost="model")
    ops = {n.op for n in c.program.nodes}
    assert not {Ops.SQRT, Ops.RSQRT, Ops.RECIPROCAL, Ops.FDIV, Ops.SUB} & ops, ops  # x s + shift: a MUL, an ADD
