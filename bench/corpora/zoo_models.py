"""The model zoo's architectures, built in code from their libraries with random weights (no downloads).

``transformers`` models come from their configs at tiny sizes (hidden 64, 2 layers, sequence 16, images 32 px;
models made from a config fetch nothing), ``torchvision`` models with ``weights=None`` and 10 classes at 32-64 px, and onnx's light
models (the ONNX model zoo's graphs shipped without weights in the onnx package's backend test data) with seeded
weights. Each entry builds ``(module or ModelProto, example inputs)``; torch modules are in eval mode, their
BatchNorm statistics calibrated on one seeded batch so that outputs carry signal (``_alive``).

    build("llama")       # -> (torch.nn.Module, (input_ids,))
    build("onnx_vgg19")  # -> (onnx.ModelProto, {input name: array})
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

SEQ, VOCAB = 16, 256


@dataclass(frozen=True)
class Entry:
    name: str
    family: str                    # transformers | torchvision | onnx
    make: Callable[[], Any]
    quick: bool = False            # in the CI form (bench/zoo.py --quick)


def _ids(seed: int = 0, batch: int = 1, low: int = 3):
    import torch
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, VOCAB, (batch, SEQ), generator=g)


def _image(px: int, seed: int = 0, channels: int = 3):
    import torch
    return torch.randn(1, channels, px, px, generator=torch.Generator().manual_seed(seed))


def _first_tensor(module):
    import torch

    class First(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, *args):
            out = self.m(*args)
            if isinstance(out, torch.Tensor):
                return out
            if isinstance(out, (tuple, list)):
                return out[0]
            return out[0] if not hasattr(out, "last_hidden_state") else out.last_hidden_state
    return First(module).eval()


# inputs whose statistics a BatchNorm keeps: with 4, statistics that fit them alone blew EfficientNet-B0's
# activations up to logits of 9.5e4 (ill-conditioned: eager fp32 itself off by 2.2 from float64), ResNet-50's
# and MobileNetV3's to ~110; with 16 they are 234, 1.9 and 1.3
CALIBRATION = 16


def _alive(m, x: tuple):
    """m with outputs that carry signal, as a trained model's do: random weights alone give some architectures an
    output of ~0 (MobileViT: 0, MobileNetV2/V3 ~1e-10, EfficientNet ~1e-14: the fan-out init shrinks a depthwise
    conv's output several-fold and eval-mode BatchNorm with fresh statistics does not restore it; ViT-B/16's head
    is zero-initialised), and an output of zeros would pass any comparison. Every BatchNorm's running statistics
    are set from one seeded batch of CALIBRATION inputs shaped like x (the calibration a deployed model has), and
    a Linear whose weight is all zero is drawn seeded normal(0, 1/fan-in). Returns m in eval mode."""
    import torch
    g = torch.Generator().manual_seed(1)
    for mod in m.modules():
        if isinstance(mod, torch.nn.Linear) and not mod.weight.detach().any():
            with torch.no_grad():
                mod.weight.copy_(torch.randn(mod.weight.shape, generator=g) / mod.weight.shape[1] ** 0.5)
    bns = [b for b in m.modules() if isinstance(b, torch.nn.modules.batchnorm._BatchNorm)]
    if bns and all(t.is_floating_point() for t in x):
        for b in bns:
            b.reset_running_stats()
            b.momentum = None  # a cumulative average: after one batch, exactly its statistics
        batch = tuple(torch.randn((CALIBRATION,) + tuple(t.shape[1:]), generator=g) for t in x)
        m.train()
        with torch.no_grad():
            m(*batch)
        for b in bns:
            b.momentum = 0.1
    return m.eval()


def _hf(model_cls: str, config_cls: str, inputs: Callable[[], tuple], **cfg):
    def make():
        import torch
        import transformers
        torch.manual_seed(0)
        config = getattr(transformers, config_cls)(**cfg)
        config._attn_implementation = "eager"
        m = getattr(transformers, model_cls)(config).eval()
        x = inputs()
        return _alive(_first_tensor(m), x), x
    return make


_TEXT = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128, vocab_size=VOCAB,
             max_position_embeddings=64)
_DECODER = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=64)


def _whisper():
    import torch
    import transformers
    torch.manual_seed(0)
    cfg = transformers.WhisperConfig(d_model=64, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
                                     decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=128,
                                     num_mel_bins=16, max_source_positions=16, vocab_size=VOCAB, pad_token_id=0,
                                     bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    cfg._attn_implementation = "eager"
    enc = transformers.WhisperModel(cfg).encoder.eval()
    x = torch.randn(1, 16, 32, generator=torch.Generator().manual_seed(0))
    return _first_tensor(enc), (x,)


def _tv(builder: str, px: int, **kw):
    def make():
        import torch
        import torchvision
        torch.manual_seed(0)
        # nn.MultiheadAttention's inference fast path (ViT-B/16) is one fused op, aten::_native_multi_head_attention,
        # that torch's ONNX exporter (opset 17) refuses; with it off the model runs as its modules say (the same
        # math, op by op), in eager, the exporters and torch.compile alike
        torch.backends.mha.set_fastpath_enabled(False)
        m = getattr(torchvision.models, builder)(weights=None, **kw).eval()
        x = (_image(px),)
        return _alive(m, x), x
    return make


def _light(name: str):
    """An onnx light model with seeded weights. The light files keep biases and other small initializers, and
    make each weight with ``ConstantOfShape(shape)`` (one value everywhere); each such node becomes a seeded
    initializer of its shape (normal, scaled by 1/sqrt(fan-in) so activations stay finite through deep stacks;
    BatchNorm variances positive)."""
    def make():
        import onnx
        from onnx import helper, numpy_helper
        path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", f"light_{name}.onnx")
        m = onnx.load(path, load_external_data=False)
        rng = np.random.default_rng(0)
        inits = {t.name: t for t in m.graph.initializer}
        variances = {n.input[4] for n in m.graph.node if n.op_type == "BatchNormalization" and len(n.input) > 4}
        keep, seeded = [], []
        for n in m.graph.node:
            if n.op_type == "ConstantOfShape" and n.input and n.input[0] in inits:
                dims = tuple(int(d) for d in numpy_helper.to_array(inits[n.input[0]]))
                value = helper.get_attribute_value(n.attribute[0]) if n.attribute else None
                dt = helper.tensor_dtype_to_np_dtype(value.data_type) if value is not None else np.float32
                fan_in = int(np.prod(dims[1:])) if len(dims) > 1 else 1
                arr = rng.standard_normal(dims) / np.sqrt(max(fan_in, 1))
                if n.output[0] in variances:  # a BatchNorm variance is positive
                    arr = np.abs(arr) + 0.5
                seeded.append(numpy_helper.from_array(arr.astype(dt), n.output[0]))
            else:
                keep.append(n)
        used = {x for n in keep for x in n.input}
        del m.graph.node[:]
        m.graph.node.extend(keep)
        rest = [t for t in m.graph.initializer if t.name in used]
        del m.graph.initializer[:]
        m.graph.initializer.extend(rest + seeded)
        names = {t.name for t in m.graph.initializer}
        inputs = [i for i in m.graph.input if i.name in names or i.name not in inits]  # dropped shapes leave too
        if m.ir_version < 4:  # an initializer is a graph input there too (onnx's version converter asks so)
            inputs += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in seeded]
        del m.graph.input[:]
        m.graph.input.extend(inputs)
        feeds = {}
        for i in m.graph.input:
            if i.name not in names:
                shape = [d.dim_value or 1 for d in i.type.tensor_type.shape.dim]
                feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
        return m, feeds
    return make


ENTRIES = [
    Entry("bert", "transformers", _hf("BertModel", "BertConfig", lambda: (_ids(),), **_TEXT), quick=True),
    Entry("roberta", "transformers", _hf("RobertaModel", "RobertaConfig", lambda: (_ids(),), pad_token_id=1, **_TEXT)),
    Entry("distilbert", "transformers", _hf("DistilBertModel", "DistilBertConfig", lambda: (_ids(),), dim=64, n_layers=2,
                                            n_heads=2, hidden_dim=128, vocab_size=VOCAB, max_position_embeddings=64)),
    Entry("gpt2", "transformers", _hf("GPT2Model", "GPT2Config", lambda: (_ids(),), n_embd=64, n_layer=2, n_head=2,
                                      vocab_size=VOCAB, n_positions=64, bos_token_id=0, eos_token_id=0), quick=True),
    Entry("llama", "transformers", _hf("LlamaModel", "LlamaConfig", lambda: (_ids(),), **_DECODER), quick=True),
    Entry("mistral", "transformers", _hf("MistralModel", "MistralConfig", lambda: (_ids(),), **_DECODER)),
    Entry("qwen2", "transformers", _hf("Qwen2Model", "Qwen2Config", lambda: (_ids(),), **_DECODER)),
    # a second new-user trial's finds: a router's top-k (Mixtral, Qwen2-MoE), a fully rotated head's empty slice (Phi-3),
    # layer_norm without a weight (OLMo), grouped 1-D convs and indexing by two tensors in the mask (SqueezeBERT)
    Entry("mixtral", "transformers", _hf("MixtralModel", "MixtralConfig", lambda: (_ids(),), experts_implementation="batched_mm",
                                         num_local_experts=4, num_experts_per_tok=2, **_DECODER)),
    Entry("qwen2_moe", "transformers", _hf("Qwen2MoeModel", "Qwen2MoeConfig", lambda: (_ids(),),
                                           experts_implementation="batched_mm", num_experts=4, num_experts_per_tok=2,
                                           moe_intermediate_size=64, shared_expert_intermediate_size=64, **_DECODER)),
    Entry("phi3", "transformers", _hf("Phi3Model", "Phi3Config", lambda: (_ids(),), pad_token_id=0, **_DECODER)),
    Entry("olmo", "transformers", _hf("OlmoModel", "OlmoConfig", lambda: (_ids(),), pad_token_id=0, **_DECODER)),
    Entry("squeezebert", "transformers", _hf("SqueezeBertModel", "SqueezeBertConfig", lambda: (_ids(),), embedding_size=64,
                                             q_groups=2, k_groups=2, v_groups=2, post_attention_groups=2,
                                             intermediate_groups=2, output_groups=2, **_TEXT)),
    Entry("t5_encoder", "transformers", _hf("T5EncoderModel", "T5Config", lambda: (_ids(),), d_model=64, d_ff=128,
                                            num_layers=2, num_heads=2, d_kv=32, vocab_size=VOCAB)),
    Entry("vit", "transformers", _hf("ViTModel", "ViTConfig", lambda: (_image(32),), image_size=32, patch_size=8,
                                     **{k: v for k, v in _TEXT.items() if k not in ("vocab_size", "max_position_embeddings")})),
    Entry("whisper_encoder", "transformers", _whisper),
    Entry("swin", "transformers", _hf("SwinModel", "SwinConfig", lambda: (_image(32),), image_size=32, patch_size=4,
                                      embed_dim=32, depths=[1, 1], num_heads=[2, 2], window_size=4)),
    Entry("mobilevit", "transformers", _hf("MobileViTModel", "MobileViTConfig", lambda: (_image(64),), image_size=64,
                                           hidden_sizes=[32, 48, 64], neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64],
                                           num_attention_heads=2)),
    Entry("convnext", "transformers", _hf("ConvNextModel", "ConvNextConfig", lambda: (_image(32),), hidden_sizes=[16, 32],
                                          depths=[1, 1], num_stages=2, image_size=32)),
    Entry("resnet18", "torchvision", _tv("resnet18", 32, num_classes=10), quick=True),
    Entry("resnet50", "torchvision", _tv("resnet50", 32, num_classes=10)),
    Entry("mobilenet_v2", "torchvision", _tv("mobilenet_v2", 32, num_classes=10)),
    Entry("mobilenet_v3", "torchvision", _tv("mobilenet_v3_small", 32, num_classes=10)),
    Entry("efficientnet_b0", "torchvision", _tv("efficientnet_b0", 32, num_classes=10)),
    Entry("shufflenet_v2", "torchvision", _tv("shufflenet_v2_x0_5", 32, num_classes=10)),
    Entry("squeezenet", "torchvision", _tv("squeezenet1_1", 64, num_classes=10)),
    Entry("densenet121", "torchvision", _tv("densenet121", 32, num_classes=10)),
    Entry("regnet", "torchvision", _tv("regnet_y_400mf", 32, num_classes=10)),
    Entry("vit_b_16", "torchvision", _tv("vit_b_16", 32, num_classes=10, image_size=32)),
    Entry("alexnet", "torchvision", _tv("alexnet", 64, num_classes=10)),
    Entry("vgg19", "torchvision", _tv("vgg19", 32, num_classes=10)),
    Entry("inception_v1", "torchvision", _tv("googlenet", 64, num_classes=10, aux_logits=False, init_weights=True)),
    Entry("onnx_alexnet", "onnx", _light("bvlc_alexnet")),
    Entry("onnx_densenet121", "onnx", _light("densenet121")),
    Entry("onnx_inception_v1", "onnx", _light("inception_v1")),
    Entry("onnx_inception_v2", "onnx", _light("inception_v2")),
    Entry("onnx_resnet50", "onnx", _light("resnet50")),
    Entry("onnx_shufflenet", "onnx", _light("shufflenet")),
    Entry("onnx_squeezenet", "onnx", _light("squeezenet")),
    Entry("onnx_vgg19", "onnx", _light("vgg19")),
    Entry("onnx_zfnet512", "onnx", _light("zfnet512")),
]
BY_NAME = {e.name: e for e in ENTRIES}


def build(name: str) -> tuple[Any, Any]:
    return BY_NAME[name].make()
