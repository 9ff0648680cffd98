"""The model zoo: small, seeded, offline builds of real third-party architectures.

Every model is built from its library's own config classes (transformers, Keras 3) with
small sizes; nothing is downloaded. Each factory sets its seeds and returns identical
weights on every call, because Navigator rebuilds a ``file.py:factory`` source in every
worker process.

Random initialisation often gives outputs that verify at any tolerance (a softmax of 1e-3
everywhere, logits of 1e-2 that barely move between inputs). Each classifier / LM head is
therefore *standardised* inside the factory: its weight and bias are rescaled (and the bias
shifted) on a fixed seeded calibration batch so every logit channel has mean ~0 and std ~1
across rows. ``python benchmarks/zoo_models.py --check`` prints the per-output scale of the
reference outputs on the samples, which ``zoo.py`` also records from the workspace.

Public surface used by ``zoo.py``: ``MODELS`` (name -> ZooModel), ``ZooModel.samples()``,
``ZooModel.build_source(dir)`` (the thing given to ``navigator.convert``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

HERE = Path(__file__).resolve().parent
THIS_FILE = Path(__file__).resolve()

# sizes shared by the text models
VOCAB = 1000
TEXT_SHAPES = {  # batch x sequence: dynamic on both
    "min": "1x8", "opt": "8x16", "max": "16x32",
}
MAX_BATCH = 16


# --------------------------------------------------------------------------- samples
def text_batches(names=("input_ids", "attention_mask"), *, vocab=VOCAB, pad_id=0, seed=0,
                 shapes=((8, 16), (4, 32)), type_vocab=2) -> list[dict]:
    """Token ids in [1, vocab) (0 / pad_id only at padding), attention masks with padding
    at the end of every row (each row keeps at least half its tokens)."""
    rng = np.random.RandomState(seed)
    out = []
    for b, s in shapes:
        ids = rng.randint(2, vocab, size=(b, s)).astype(np.int64)
        lengths = rng.randint(s // 2, s, size=b)          # < s: every row has padding
        mask = (np.arange(s)[None, :] < lengths[:, None]).astype(np.int64)
        ids = np.where(mask == 1, ids, pad_id).astype(np.int64)
        batch = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in names:
            # segment A then segment B (0 then 1) on the real tokens, 0 on padding
            split = (lengths // 2)[:, None]
            tt = ((np.arange(s)[None, :] >= split) & (mask == 1)).astype(np.int64)
            batch["token_type_ids"] = tt
        out.append({k: batch[k] for k in names})
    return out


def _smooth_field(rng, b, c, h, w, cells=4):
    """A per-sample low-frequency random field (cells x cells, upsampled): what makes images differ
    globally, so pooled features (and so the logits) vary from sample to sample."""
    low = rng.standard_normal((b, c, cells, cells))
    ry, rx = -(-h // cells), -(-w // cells)
    return np.kron(low, np.ones((1, 1, ry, rx)))[:, :, :h, :w]


def image_batches(name="pixel_values", *, chw=(3, 64, 64), seed=0, batch_sizes=(8, 8),
                  channels_last=False) -> list[dict]:
    """Normalised-image-like tensors: a smooth per-sample field plus pixel noise (pure iid noise
    averages out in global pooling and leaves near-identical logits for every sample)."""
    rng = np.random.RandomState(seed)
    out = []
    for b in batch_sizes:
        x = (_smooth_field(rng, b, *chw) + 0.3 * rng.standard_normal((b, *chw))).astype(np.float32)
        if channels_last:
            x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        out.append({name: x})
    return out


def audio_value_batches(*, seed=0, shapes=((8, 1600), (4, 2400))) -> list[dict]:
    """Raw audio: per-sample tones (random frequencies and gains) plus noise."""
    rng = np.random.RandomState(seed)
    out = []
    for b, t in shapes:
        time_ = np.arange(t)[None, :] / 16000.0
        f = rng.uniform(100, 2000, size=(b, 3, 1))
        g = rng.uniform(0.1, 1.0, size=(b, 3, 1))
        x = (g * np.sin(2 * np.pi * f * time_[:, None, :])).sum(1) + 0.1 * rng.standard_normal((b, t))
        out.append({"input_values": x.astype(np.float32)})
    return out


def audio_feature_batches(*, mels=16, frames=64, seed=0, batch_sizes=(8, 8)) -> list[dict]:
    """Log-mel-like features: a per-sample spectral envelope (per mel bin) plus frame noise."""
    rng = np.random.RandomState(seed)
    out = []
    for b in batch_sizes:
        env = rng.standard_normal((b, mels, 1))
        x = env + 0.5 * rng.standard_normal((b, mels, frames))
        out.append({"input_features": x.astype(np.float32)})
    return out


# --------------------------------------------------------------------------- torch helpers
def _torch_seed(seed: int = 0):
    import random

    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _to_torch(batch: dict) -> dict:
    import torch

    return {k: torch.from_numpy(v) for k, v in batch.items()}


def _standardise_linear(module, head, batches: list[dict], key: str, *, target_std: float = 1.0):
    """Rescale ``head`` (an nn.Linear producing the last dim of output ``key``) so that every
    output channel has mean ~0 and std ~target_std across the rows of the calibration
    batches (padding positions included). Deterministic: a function of the weights and the
    (seeded) batches only."""
    import torch

    with torch.no_grad():
        feats = []
        hook = head.register_forward_hook(lambda m, i, o: feats.append(i[0].detach()))
        for b in batches:
            module(**_to_torch(b))
        hook.remove()
        x = torch.cat([f.reshape(-1, f.shape[-1]) for f in feats])
        y = x @ head.weight.T                                  # without the bias
        mean = y.mean(0)
        std = y.std(0).mean().clamp_min(1e-12)
        scale = target_std / std
        head.weight.mul_(scale)
        if head.bias is not None:
            head.bias.copy_(-mean * scale)
    return float(scale)


def _calibrate_batchnorm(module, batches: list[dict]):
    """Data-dependent init of BatchNorm running statistics: a forward pass in train mode over the
    (seeded) calibration batches with a cumulative average, then eval. With the default running
    stats (mean 0, var 1) a randomly initialised CNN's signal vanishes layer by layer in eval mode
    (transformers' MobileNetV2: logits ~1e-13 on every input)."""
    import torch

    bns = [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None
    module.train()
    with torch.no_grad():
        for b in batches:
            module(**_to_torch(b))
    module.eval()


class _Wrap:
    """Mixin: ``self.model`` is the HF model; ``self.keys`` the output fields returned."""

    def _pick(self, out):
        return {k: getattr(out, k) if not isinstance(out, dict) else out[k] for k in self.keys}


def _wrapper_class(signature: str):
    import torch

    class TextWrap(torch.nn.Module, _Wrap):
        def __init__(self, model, keys):
            super().__init__()
            self.model, self.keys = model, tuple(keys)

        def forward(self, input_ids, attention_mask):
            return self._pick(self.model(input_ids=input_ids, attention_mask=attention_mask))

    class TextTTWrap(TextWrap):
        def forward(self, input_ids, attention_mask, token_type_ids):
            return self._pick(self.model(input_ids=input_ids, attention_mask=attention_mask,
                                         token_type_ids=token_type_ids))

    class PixelWrap(TextWrap):
        def forward(self, pixel_values):
            return self._pick(self.model(pixel_values=pixel_values))

    class FeatureWrap(TextWrap):
        def forward(self, input_features):
            return self._pick(self.model(input_features=input_features))

    class ValueWrap(TextWrap):
        def forward(self, input_values):
            return self._pick(self.model(input_values=input_values))

    return {"text": TextWrap, "text_tt": TextTTWrap, "pixel": PixelWrap, "features": FeatureWrap,
            "values": ValueWrap}[signature]


def _finish(model, signature: str, keys, head_attr, calib: list[dict], target_std: float = 1.0,
            bn_calib: bool = True):
    """Wrap, eval, standardise the head(s) (a submodule name or a list of them) on the
    calibration batches."""
    model.eval()
    wrapped = _wrapper_class(signature)(model, keys).eval()
    wrapped.zoo_head_scales = []
    if bn_calib and calib:
        _calibrate_batchnorm(wrapped, calib)
    heads = [head_attr] if isinstance(head_attr, str) else list(head_attr or [])
    for h in heads:
        wrapped.zoo_head_scales.append(
            _standardise_linear(wrapped, model.get_submodule(h), calib, keys[0], target_std=target_std))
    return wrapped


def _text_calib(names, vocab=VOCAB, pad_id=0):
    return text_batches(names, vocab=vocab, pad_id=pad_id, seed=1234, shapes=((8, 16), (8, 24)))


# --------------------------------------------------------------------------- transformers text
# initializer_range 0.1 (transformers' default 0.02): with 0.02 the pooled output of these small
# encoders barely depends on the input and the head had to be scaled by ~40 (see _standardise_linear).
def bert():
    from transformers import BertConfig, BertForSequenceClassification

    _torch_seed(0)
    cfg = BertConfig(vocab_size=VOCAB, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=256, max_position_embeddings=64, type_vocab_size=2, num_labels=4, initializer_range=0.1)
    names = ("input_ids", "attention_mask", "token_type_ids")
    return _finish(BertForSequenceClassification(cfg), "text_tt", ["logits"], "classifier", _text_calib(names))


def distilbert():
    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    _torch_seed(0)
    cfg = DistilBertConfig(vocab_size=VOCAB, dim=128, n_layers=2, n_heads=2, hidden_dim=256,
                           max_position_embeddings=64, num_labels=4, initializer_range=0.1)
    return _finish(DistilBertForSequenceClassification(cfg), "text", ["logits"], "classifier",
                   _text_calib(("input_ids", "attention_mask")))


def roberta():
    from transformers import RobertaConfig, RobertaForSequenceClassification

    _torch_seed(0)
    cfg = RobertaConfig(vocab_size=VOCAB, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=256, max_position_embeddings=72, type_vocab_size=1, num_labels=4,
                        pad_token_id=1, initializer_range=0.1)
    return _finish(RobertaForSequenceClassification(cfg), "text", ["logits"], "classifier.out_proj",
                   _text_calib(("input_ids", "attention_mask"), pad_id=1))


def albert():
    from transformers import AlbertConfig, AlbertForSequenceClassification

    _torch_seed(0)
    cfg = AlbertConfig(vocab_size=VOCAB, embedding_size=64, hidden_size=128, num_hidden_layers=2,
                       num_attention_heads=2, intermediate_size=256, max_position_embeddings=64, num_labels=4, initializer_range=0.1)
    return _finish(AlbertForSequenceClassification(cfg), "text", ["logits"], "classifier",
                   _text_calib(("input_ids", "attention_mask")))


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    _torch_seed(0)
    cfg = GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=128, n_layer=2, n_head=2, use_cache=False,
                     tie_word_embeddings=False)
    return _finish(GPT2LMHeadModel(cfg), "text", ["logits"], "lm_head", _text_calib(("input_ids", "attention_mask")))


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    _torch_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, use_cache=False,
                      tie_word_embeddings=False)
    return _finish(LlamaForCausalLM(cfg), "text", ["logits"], "lm_head", _text_calib(("input_ids", "attention_mask")))


def llama_large_logits():
    """Diagnostic: the same Llama with its LM head scaled to logits of std 10 (max ~50), the scale of
    a trained LM's logits, to see whether fp16 / int8 verification at a fixed atol holds there."""
    from transformers import LlamaConfig, LlamaForCausalLM

    _torch_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, use_cache=False,
                      tie_word_embeddings=False)
    return _finish(LlamaForCausalLM(cfg), "text", ["logits"], "lm_head", _text_calib(("input_ids", "attention_mask")),
                   target_std=10.0)


def t5_encoder():
    from transformers import T5Config, T5EncoderModel

    _torch_seed(0)
    cfg = T5Config(vocab_size=VOCAB, d_model=128, d_kv=32, d_ff=256, num_layers=2, num_heads=4,
                   use_cache=False)
    # base model: last_hidden_state is an RMS-normed hidden state, O(1) by construction
    return _finish(T5EncoderModel(cfg), "text", ["last_hidden_state"], None, [])


# --------------------------------------------------------------------------- transformers vision
def _pix_calib(chw):
    return image_batches(chw=chw, seed=1234, batch_sizes=(16,))


def vit():
    from transformers import ViTConfig, ViTForImageClassification

    _torch_seed(0)
    cfg = ViTConfig(image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=128, num_labels=10, initializer_range=0.1)
    return _finish(ViTForImageClassification(cfg), "pixel", ["logits"], "classifier", _pix_calib((3, 32, 32)))


def resnet():
    from transformers import ResNetConfig, ResNetForImageClassification

    _torch_seed(0)
    cfg = ResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], layer_type="basic",
                       num_labels=10)
    return _finish(ResNetForImageClassification(cfg), "pixel", ["logits"], "classifier.1", _pix_calib((3, 64, 64)))


def convnext():
    from transformers import ConvNextConfig, ConvNextForImageClassification

    _torch_seed(0)
    cfg = ConvNextConfig(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], num_labels=10, image_size=64)
    return _finish(ConvNextForImageClassification(cfg), "pixel", ["logits"], "classifier", _pix_calib((3, 64, 64)))


def swin():
    from transformers import SwinConfig, SwinForImageClassification

    _torch_seed(0)
    cfg = SwinConfig(image_size=32, patch_size=2, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4,
                     num_labels=10, initializer_range=0.1)
    return _finish(SwinForImageClassification(cfg), "pixel", ["logits"], "classifier", _pix_calib((3, 32, 32)))


def mobilenet_v2():
    from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

    _torch_seed(0)
    cfg = MobileNetV2Config(image_size=64, depth_multiplier=0.35, num_labels=10)
    # transformers' init N(0, 0.02) with BatchNorm's default running stats: the signal dies through the 17
    # inverted residual blocks (logits ~1e-13). _finish calibrates the BatchNorm statistics first.
    return _finish(MobileNetV2ForImageClassification(cfg), "pixel", ["logits"], "classifier", _pix_calib((3, 64, 64)))


def mobilenet_v2_default_init():
    """Diagnostic, deliberately degenerate: transformers' own initialisation, unchanged (logits ~1e-13
    on every input). Any format verifies against it at any tolerance."""
    from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

    _torch_seed(0)
    cfg = MobileNetV2Config(image_size=64, depth_multiplier=0.35, num_labels=10)
    return _finish(MobileNetV2ForImageClassification(cfg), "pixel", ["logits"], None, [], bn_calib=False)


def yolos():
    from transformers import YolosConfig, YolosForObjectDetection

    _torch_seed(0)
    cfg = YolosConfig(image_size=[64, 64], patch_size=16, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=128, num_detection_tokens=10, num_labels=5,
                      initializer_range=0.2)   # at 0.02 the detection tokens barely see the image
    m = YolosForObjectDetection(cfg)
    # class logits standardised; pred_boxes = sigmoid(MLP): at init the MLP gives ~0, so every box is
    # (0.5, 0.5, 0.5, 0.5) +- 4e-4; its last layer is standardised too so the boxes spread over (0, 1)
    return _finish(m, "pixel", ["logits", "pred_boxes"],
                   ["class_labels_classifier.layers.2", "bbox_predictor.layers.2"], _pix_calib((3, 64, 64)))


# --------------------------------------------------------------------------- audio
def whisper_encoder():
    from transformers import WhisperConfig, WhisperForAudioClassification

    _torch_seed(0)
    cfg = WhisperConfig(vocab_size=VOCAB, num_mel_bins=16, d_model=64, encoder_layers=2, encoder_attention_heads=2,
                        decoder_layers=1, decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=128,
                        max_source_positions=32, max_target_positions=32, num_labels=6, classifier_proj_size=32,
                        init_std=0.2)   # at 0.02 the pooled encoder output barely depends on the input
    calib = audio_feature_batches(seed=1234, batch_sizes=(16,))
    return _finish(WhisperForAudioClassification(cfg), "features", ["logits"], "classifier", calib)


def wav2vec2():
    from transformers import Wav2Vec2Config, Wav2Vec2ForSequenceClassification

    _torch_seed(0)
    cfg = Wav2Vec2Config(vocab_size=32, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=128, conv_dim=(32, 32, 32), conv_stride=(5, 4, 2),
                         conv_kernel=(10, 8, 4), num_feat_extract_layers=3, num_conv_pos_embeddings=16,
                         num_conv_pos_embedding_groups=4, classifier_proj_size=32, num_labels=6,
                         feat_extract_norm="group", do_stable_layer_norm=False, initializer_range=0.2)
    calib = audio_value_batches(seed=1234, shapes=((16, 1600),))
    return _finish(Wav2Vec2ForSequenceClassification(cfg), "values", ["logits"], "classifier", calib)


# --------------------------------------------------------------------------- Keras 3 (TF backend)
HEAD_SCALES: dict[str, list[float]] = {}     # Keras model name -> head scale factors (for --check)


def _keras():
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras

    keras.utils.set_random_seed(0)
    return keras


def _keras_calibrate_batchnorm(model, batches: list[dict]):
    """BatchNormalization moving statistics from the data (one training-mode pass with momentum 0),
    as _calibrate_batchnorm does for torch: with the default stats (mean 0, var 1) a random Keras
    MobileNetV2 / EfficientNet's signal dies (head scale factors of 1e10 / 1e5 were needed)."""
    keras = _keras()
    bns = [l for l in model._flatten_layers() if isinstance(l, keras.layers.BatchNormalization)]
    if not bns:
        return
    x = np.concatenate([next(iter(b.values())) for b in batches])
    saved = [bn.momentum for bn in bns]
    for bn in bns:
        bn.momentum = 0.0
    model(x, training=True)
    for bn, m in zip(bns, saved):
        bn.momentum = m


def _keras_standardise(model, batches: list[dict]):
    """Calibrate BatchNorm statistics, then rescale the last Dense layer so its outputs have
    mean ~0, std ~1 per channel."""
    keras = _keras()
    if len(batches[0]) == 1:
        _keras_calibrate_batchnorm(model, batches)
    head = [l for l in model.layers if isinstance(l, keras.layers.Dense)][-1]
    feat = keras.Model(model.inputs, head.input)
    x = np.concatenate([np.asarray(feat.predict(b if len(b) > 1 else next(iter(b.values())), verbose=0))
                        .reshape(-1, head.input.shape[-1]) for b in batches])
    k = head.kernel.numpy()
    y = x @ k
    mean, std = y.mean(0), max(float(y.std(0).mean()), 1e-12)
    head.kernel.assign(k / std)
    head.bias.assign(-mean / std)
    HEAD_SCALES[model.name] = [1.0 / std]
    return model


def keras_mobilenet_v2():
    keras = _keras()
    inp = keras.Input((96, 96, 3), name="pixel_values")
    m = keras.applications.MobileNetV2(input_tensor=inp, weights=None, classes=10, classifier_activation=None,
                                       alpha=0.35)
    return _keras_standardise(m, image_batches(chw=(3, 96, 96), channels_last=True, seed=1234, batch_sizes=(16,)))


def keras_resnet50():
    keras = _keras()
    inp = keras.Input((64, 64, 3), name="pixel_values")
    m = keras.applications.ResNet50(input_tensor=inp, weights=None, classes=10, classifier_activation=None)
    return _keras_standardise(m, image_batches(chw=(3, 64, 64), channels_last=True, seed=1234, batch_sizes=(16,)))


def keras_efficientnet_b0():
    keras = _keras()
    inp = keras.Input((96, 96, 3), name="pixel_values")
    m = keras.applications.EfficientNetB0(input_tensor=inp, weights=None, classes=10, classifier_activation=None)
    # EfficientNet rescales 0..255 inputs itself: feed image-like values
    b = image_batches(chw=(3, 96, 96), channels_last=True, seed=1234, batch_sizes=(16,))
    return _keras_standardise(m, [{k: (v * 40 + 128).astype(np.float32)} for bb in b for k, v in bb.items()])


def keras_text_gelu():
    keras = _keras()
    ids = keras.Input((None,), dtype="int32", name="input_ids")
    x = keras.layers.Embedding(VOCAB, 64)(ids)
    x = keras.layers.Dense(128, activation="gelu")(x)     # exact gelu: erf / erfc in the TF graph
    x = keras.layers.LayerNormalization()(x)
    x = keras.layers.GlobalAveragePooling1D()(x)
    out = keras.layers.Dense(4, name="logits")(x)
    m = keras.Model(ids, out, name="keras_text_gelu")
    calib = [{"input_ids": b["input_ids"].astype(np.int32)} for b in _text_calib(("input_ids", "attention_mask"))]
    return _keras_standardise(m, calib)


# --------------------------------------------------------------------------- ONNX files made by other tools
def _run(cmd: list[str], log: Path):
    with open(log, "w") as f:
        subprocess.run(cmd, check=True, stdout=f, stderr=subprocess.STDOUT)


def onnx_tf2onnx_mobilenet_v2(out_dir: Path) -> Path:
    """Keras MobileNetV2 -> SavedModel (model.export) -> tf2onnx CLI -> model.onnx."""
    out = out_dir / "keras_mobilenet_v2_tf2onnx.onnx"
    if out.exists():
        return out
    sm = out_dir / "keras_mobilenet_v2_savedmodel"
    keras_mobilenet_v2().export(str(sm), verbose=False)
    _run([sys.executable, "-m", "tf2onnx.convert", "--saved-model", str(sm), "--output", str(out), "--opset", "17"],
         out_dir / "tf2onnx.log")
    return out


def onnx_keras_export_efficientnet(out_dir: Path) -> Path:
    """Keras 3's own exporter: model.export(path, format="onnx")."""
    out = out_dir / "keras_efficientnet_b0_export.onnx"
    if out.exists():
        return out
    m = keras_efficientnet_b0()
    m.predict(np.zeros((1, 96, 96, 3), np.float32), verbose=0)   # Keras: "The model provided has never called"
    m.export(str(out), format="onnx", verbose=False)
    return out


def onnx_torch_distilbert(out_dir: Path) -> Path:
    """transformers DistilBERT written to a file by torch.onnx.export (dynamo exporter, dynamic batch and
    sequence)."""
    import torch

    out = out_dir / "distilbert_torch_export.onnx"
    if out.exists():
        return out
    m = distilbert()
    b = _to_torch(text_batches(("input_ids", "attention_mask"), seed=7, shapes=((4, 16),))[0])
    batch, seq = torch.export.Dim("batch", min=1, max=64), torch.export.Dim("seq", min=2, max=64)
    with torch.no_grad():
        torch.onnx.export(m, (), str(out), kwargs=b, input_names=["input_ids", "attention_mask"],
                          output_names=["logits"], dynamic_shapes={"input_ids": {0: batch, 1: seq},
                                                                   "attention_mask": {0: batch, 1: seq}},
                          dynamo=True, external_data=False)
    return out


# --------------------------------------------------------------------------- the registry


def _text_profile(names) -> dict:
    return {f"{k}_shapes": ",".join(f"{n}:{TEXT_SHAPES[k]}" for n in names) for k in ("min", "opt", "max")}


@dataclass
class ZooModel:
    name: str
    family: str                   # text | vision | detection | audio | keras | onnx
    kind: str                     # torch (file.py:factory) | keras (live model) | onnx (a file made here)
    builder: str                  # function name in this module
    samples: Callable[[], list[dict]]
    options: dict = field(default_factory=dict)     # navigator.convert options
    ci: bool = False
    notes: str = ""
    generated_samples: bool = False                 # let Navigator generate the samples (options give shapes)

    def build_source(self, out_dir: Path) -> Any:
        """What navigator.convert takes: 'zoo_models.py:fn', a live Keras model, or an .onnx path."""
        if self.kind == "torch":
            return f"{THIS_FILE}:{self.builder}"
        fn = globals()[self.builder]
        if self.kind == "keras":
            return fn()
        if self.kind == "onnx":
            out_dir.mkdir(parents=True, exist_ok=True)
            return str(fn(out_dir))
        raise ValueError(self.kind)


def _text(name, builder, names=("input_ids", "attention_mask"), pad_id=0, ci=False, notes=""):
    vr = {"input_ids": (0, VOCAB), "attention_mask": (0, 2)}
    if "token_type_ids" in names:
        vr["token_type_ids"] = (0, 2)
    return ZooModel(name, "text", "torch", builder, lambda: text_batches(names, pad_id=pad_id),
                    {**_text_profile(names), "value_ranges": vr, "max_batch_size": MAX_BATCH}, ci=ci, notes=notes)


def _pixel(name, builder, hw, family="vision", ci=False, notes=""):
    return ZooModel(name, family, "torch", builder, lambda: image_batches(chw=(3, hw, hw)),
                    {"max_batch_size": MAX_BATCH}, ci=ci, notes=notes)


def _keras_img(name, builder, hw, scale=None, notes=""):
    def samples():
        b = image_batches(chw=(3, hw, hw), channels_last=True)
        if scale:
            b = [{k: (v * scale[0] + scale[1]).astype(np.float32)} for bb in b for k, v in bb.items()]
        return b
    return ZooModel(name, "keras", "keras", builder, samples, {"max_batch_size": MAX_BATCH}, notes=notes)


MODELS: dict[str, ZooModel] = {m.name: m for m in [
    _text("bert", "bert", ("input_ids", "attention_mask", "token_type_ids")),
    _text("distilbert", "distilbert", ci=True),
    _text("roberta", "roberta", pad_id=1),
    _text("albert", "albert"),
    _text("gpt2", "gpt2", notes="LM head, logits [B,S,1000]"),
    _text("llama", "llama", notes="LlamaForCausalLM, GQA, RoPE"),
    _text("t5-encoder", "t5_encoder", notes="T5EncoderModel, last_hidden_state"),
    _text("llama-large-logits", "llama_large_logits",
          notes="diagnostic: the llama with logits of std 10 (a trained LM's scale)"),
    ZooModel("bert-generated", "text", "torch", "bert", lambda: [],
             {"shapes": "input_ids:8x16,attention_mask:8x16,token_type_ids:8x16",
              "max_shapes": "input_ids:64x128,attention_mask:64x128,token_type_ids:64x128",
              "dtypes": "input_ids:int64,attention_mask:int64,token_type_ids:int64", "max_batch_size": 64},
             generated_samples=True,
             notes="the CLI path: generated samples, --shapes 8x16 --max-shapes 64x128, no value ranges"),
    _pixel("vit", "vit", 32),
    _pixel("resnet", "resnet", 64, ci=True),
    _pixel("convnext", "convnext", 64),
    _pixel("swin", "swin", 32),
    _pixel("mobilenet-v2", "mobilenet_v2", 64),
    _pixel("mobilenet-v2-default-init", "mobilenet_v2_default_init", 64, family="diagnostic",
           notes="diagnostic: transformers' default init left as is (logits ~1e-13): a vacuous reference"),
    _pixel("yolos", "yolos", 64, family="detection", notes="logits + pred_boxes (sigmoid)"),
    ZooModel("whisper-encoder", "audio", "torch", "whisper_encoder", lambda: audio_feature_batches(),
             {"max_batch_size": MAX_BATCH}, notes="WhisperForAudioClassification: the encoder + a pooled head"),
    ZooModel("wav2vec2", "audio", "torch", "wav2vec2", lambda: audio_value_batches(),
             {"min_shapes": "input_values:1x800", "opt_shapes": "input_values:8x1600",
              "max_shapes": "input_values:16x3200", "max_batch_size": MAX_BATCH},
             notes="raw audio, dynamic length; weight-norm positional conv"),
    _keras_img("keras-mobilenet-v2", "keras_mobilenet_v2", 96),
    _keras_img("keras-resnet50", "keras_resnet50", 64),
    _keras_img("keras-efficientnet-b0", "keras_efficientnet_b0", 96, scale=(40, 128)),
    ZooModel("keras-text-gelu", "keras", "keras", "keras_text_gelu",
             lambda: [{"input_ids": b["input_ids"].astype(np.int32)} for b in text_batches()],
             {"max_batch_size": MAX_BATCH, "value_ranges": {"input_ids": (0, VOCAB)}},
             notes="Dense(activation='gelu'): exact gelu"),
    ZooModel("onnx-tf2onnx-mobilenet-v2", "onnx", "onnx", "onnx_tf2onnx_mobilenet_v2",
             lambda: image_batches(chw=(3, 96, 96), channels_last=True), {"max_batch_size": MAX_BATCH},
             notes="Keras MobileNetV2 -> SavedModel -> tf2onnx 1.17 CLI (opset 17)"),
    ZooModel("onnx-keras-export-efficientnet", "onnx", "onnx", "onnx_keras_export_efficientnet",
             lambda: [{k: (v * 40 + 128).astype(np.float32)} for b in image_batches(chw=(3, 96, 96),
                                                                                    channels_last=True)
                      for k, v in b.items()],
             {"max_batch_size": MAX_BATCH}, notes="Keras 3 model.export(format='onnx')"),
    ZooModel("onnx-torch-distilbert", "onnx", "onnx", "onnx_torch_distilbert",
             lambda: text_batches(), {**_text_profile(("input_ids", "attention_mask")),
                                      "value_ranges": {"input_ids": (0, VOCAB), "attention_mask": (0, 2)},
                                      "max_batch_size": MAX_BATCH},
             ci=True, notes="torch.onnx.export(dynamo=True) of the transformers DistilBERT"),
]}


# --------------------------------------------------------------------------- --check
def _check(names):
    """Build each model, run its samples eagerly, print the scale of every output."""
    import tempfile

    for name in names:
        m = MODELS[name]
        batches = m.samples()
        if not batches:
            print(f"{name}: generated samples (no check)")
            continue
        if m.kind == "torch":
            import torch

            mod = globals()[m.builder]()
            print(f"{name}: head scale factor(s) {[f'{x:.3g}' for x in getattr(mod, 'zoo_head_scales', [])]}")
            with torch.no_grad():
                outs = [{k: v.numpy() for k, v in mod(**_to_torch(b)).items()} for b in batches]
        elif m.kind == "keras":
            mod = globals()[m.builder]()
            print(f"{name}: head scale factor(s) {[f'{x:.3g}' for x in HEAD_SCALES.get(mod.name, [])]}")
            outs = [{"output": np.asarray(mod.predict(b if len(b) > 1 else next(iter(b.values())), verbose=0))}
                    for b in batches]
        else:
            import onnxruntime as ort

            path = globals()[m.builder](Path(tempfile.mkdtemp()))
            sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            onames = [o.name for o in sess.get_outputs()]
            outs = [dict(zip(onames, sess.run(None, b))) for b in batches]
        for k in outs[0]:
            arr = [o[k] for o in outs]
            flat = np.concatenate([a.reshape(a.shape[0], -1) if a.ndim > 1 else a[:, None] for a in arr
                                   if a.ndim == arr[0].ndim and a.shape[1:] == arr[0].shape[1:]])
            print(f"{name}.{k}: shape {arr[0].shape} max|x| {max(float(np.abs(a).max()) for a in arr):.3g} "
                  f"std across rows {float(flat.std(0).mean()):.3g}")


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--check", default="all")
    a = ap.parse_args()
    _check(list(MODELS) if a.check == "all" else a.check.split(","))
