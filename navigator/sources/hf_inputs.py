"""The inputs of a Hugging Face model per task, and samples that look like real ones.

Text models take ``input_ids`` (bounded by the vocabulary), ``attention_mask`` (0/1) and,
where the model has a type vocabulary, ``token_type_ids``; image models ``pixel_values``
(channels x height x width); speech encoders raw ``input_values`` or ``input_features``
(mel bins x frames). Dims are dynamic where the model accepts other sizes: the batch
always, the sequence up to the longest the model (or its tokenizer) takes, pixels and
feature frames from the nominal size to twice it where the model runs at both, raw audio
from the shortest that gives two frames (torch.export specialises a dim of size 1, so every
range starts where intermediate dims are at least 2) to ten seconds.

Generated samples are made informative, because random inputs of a randomly initialised
model otherwise give near-identical outputs that no check can tell apart (docs/concepts/
verification.md): token rows are padded at the tokenizer's side with the pad id under a
zero mask (the first row full), two segments of token types, images a smooth per-sample
field plus noise, audio a few tones plus noise. numpy only; torch runs inside the probes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from navigator.errors import UserInputError
from navigator.sources import hf_support as hs

log = logging.getLogger(__name__)

MAX_TEXT = 512          # sequence length cap of the default profile (--max-shapes raises it)
AUDIO_SECONDS = 10      # longest raw audio of the default profile
TEXT_SAMPLES = ((8, 16), (4, 32))      # (batch, sequence) of the two generated text samples
IMAGE_BATCHES = (8, 8)


@dataclass
class HFInput:
    """One input: its dtype and role, per non-batch axis a fixed size or a dynamic [lo, hi],
    the non-batch shape of each generated sample, and how its values are generated."""

    name: str
    dtype: str
    role: str                       # ids | mask | type_ids | pixels | values | features
    dims: list                      # int (fixed) or [lo, hi] (dynamic) per non-batch axis
    samples: list = field(default_factory=list)     # (batch, non-batch shape) per generated sample
    bound: int | None = None        # integer inputs: values in [0, bound)
    value_range: tuple | None = None

    def dynamic_axes(self) -> dict[int, tuple[int, int]]:
        """{axis of the full shape (batch = 0): (lo, hi)} for the dynamic non-batch axes."""
        return {i + 1: (d[0], d[1]) for i, d in enumerate(self.dims) if isinstance(d, (list, tuple))}


def _int(value) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (list, tuple)) and value:
        value = value[0]
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


# ------------------------------------------------------------------ probes
def _feeds(inputs: list[HFInput], batch: int, sizes: dict[str, tuple]) -> dict:
    import numpy as np

    rng = np.random.default_rng(0)
    feeds = {}
    for spec in inputs:
        shape = (batch, *sizes[spec.name])
        if spec.role == "ids":
            feeds[spec.name] = rng.integers(1 if spec.bound > 1 else 0, spec.bound, size=shape).astype(spec.dtype)
        elif spec.role == "mask":
            feeds[spec.name] = np.ones(shape, dtype=spec.dtype)
        elif spec.role == "type_ids":
            feeds[spec.name] = np.zeros(shape, dtype=spec.dtype)
        else:
            feeds[spec.name] = rng.standard_normal(shape).astype(spec.dtype)
    return feeds


def _probe(model, fixed, inputs: list[HFInput], batch: int, sizes: dict) -> str | None:
    return hs.runs(model, _feeds(inputs, batch, sizes), fixed)


# ------------------------------------------------------------------ text
def _text_max(config, tokenizer_config: dict, notes: list) -> int:
    """The longest sequence of the default profile: the position table's length and the
    tokenizer's ``model_max_length`` (the smaller), capped at MAX_TEXT."""
    positions = next((v for a in ("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length",
                                  "seq_length") if (v := _int(getattr(config, a, None)))), None)
    tok = _int(tokenizer_config.get("model_max_length"))   # 1e30 when the tokenizer sets no limit
    limits = [v for v in (positions, tok) if v and 1 < v < 1_000_000]
    longest = min(limits) if limits else MAX_TEXT
    if longest > MAX_TEXT:
        notes.append(f"the model takes sequences up to {longest} tokens; the default profile stops at {MAX_TEXT} "
                     f"(--min-shapes/--max-shapes change it)")
        longest = MAX_TEXT
    return longest


def text_inputs(model, tokenizer_config: dict, fixed: dict, where: str, notes: list) -> list[HFInput]:
    config = model.config
    params = hs.forward_parameters(model)
    vocab = _int(getattr(config, "vocab_size", None))
    if not vocab:
        raise UserInputError(f"{where}: config.json has no vocab_size, so token ids cannot be bounded",
                             hint="give samples (--samples DIR)")
    inputs = [HFInput("input_ids", "int64", "ids", [[1, 1]], bound=vocab)]
    if "attention_mask" in params:
        inputs.append(HFInput("attention_mask", "int64", "mask", [[1, 1]], value_range=(0, 2)))
    types = _int(getattr(config, "type_vocab_size", None))
    if "token_type_ids" in params and types and types > 1:
        inputs.append(HFInput("token_type_ids", "int64", "type_ids", [[1, 1]], bound=types))
    longest = _text_max(config, tokenizer_config, notes)
    why = _probe(model, fixed, inputs, 1, {i.name: (longest,) for i in inputs})
    pad = _int(getattr(config, "pad_token_id", None))
    if why and pad is not None and longest - pad - 1 > 1:
        # position ids counted from the padding index (RoBERTa): the table holds pad + 1 fewer positions
        shorter = longest - pad - 1
        if _probe(model, fixed, inputs, 1, {i.name: (shorter,) for i in inputs}) is None:
            longest, why = shorter, None
    if why:
        raise UserInputError(f"{where}: the model does not run at sequence length {longest} ({why})",
                             hint="give --min-shapes/--max-shapes within the lengths it takes")
    shortest = next((n for n in (1, 2) if _probe(model, fixed, inputs, 1, {i.name: (n,) for i in inputs}) is None),
                    None)
    if shortest is None:
        raise UserInputError(f"{where}: the model does not run on a sequence of 1 or 2 tokens",
                             hint="give --min-shapes/--max-shapes within the lengths it takes")
    samples = []
    for batch, length in TEXT_SAMPLES:
        samples.append((batch, (max(shortest, min(length, longest)),)))
    if samples[0][1] == samples[1][1] and longest > shortest:   # a short model: two lengths anyway
        samples[0] = (samples[0][0], (max(shortest, longest // 2),))
    for spec in inputs:
        spec.dims = [[shortest, longest]]
        spec.samples = samples
    return inputs


# ------------------------------------------------------------------ images and audio
def _image_size(config, preprocessor: dict) -> tuple[int, int]:
    size = getattr(config, "image_size", None)
    if isinstance(size, (list, tuple)) and len(size) == 2:
        return int(size[0]), int(size[1])
    if _int(size):
        return _int(size), _int(size)
    for key in ("crop_size", "size"):
        value = preprocessor.get(key)
        if isinstance(value, dict):
            if "height" in value and "width" in value:
                return int(value["height"]), int(value["width"])
            if "shortest_edge" in value:
                return int(value["shortest_edge"]), int(value["shortest_edge"])
        elif _int(value):
            return _int(value), _int(value)
    return 224, 224


def _dynamic(model, fixed, spec: HFInput, nominal: tuple, axes: tuple[int, ...], lo: tuple, hi: tuple) -> list:
    """``spec.dims`` with ``axes`` dynamic over [lo, hi] when the model runs at both ends, else fixed."""
    def at(values):
        shape = list(nominal)
        for a, v in zip(axes, values):
            shape[a] = v
        return {spec.name: tuple(shape)}

    ok = _probe(model, fixed, [spec], 1, at(lo)) is None and _probe(model, fixed, [spec], 1, at(hi)) is None
    dims = list(nominal)
    if ok:
        for a, low, h in zip(axes, lo, hi):
            dims[a] = [low, h]
    return dims


def image_inputs(model, preprocessor: dict, fixed: dict, where: str) -> list[HFInput]:
    config = model.config
    channels = _int(getattr(config, "num_channels", None)) or 3
    h, w = _image_size(config, preprocessor)
    spec = HFInput("pixel_values", "float32", "pixels", [channels, h, w], value_range=(-1.0, 1.0))
    why = _probe(model, fixed, [spec], 1, {spec.name: (channels, h, w)})
    if why:
        raise UserInputError(f"{where}: the model does not run on {channels}x{h}x{w} images ({why})",
                             hint="give samples (--samples DIR) or --shapes")
    spec.dims = _dynamic(model, fixed, spec, (channels, h, w), (1, 2), (h, w), (2 * h, 2 * w))
    spec.samples = [(b, (channels, h, w)) for b in IMAGE_BATCHES]
    return [spec]


def _receptive_field(config, frames: int = 2) -> int:
    """The shortest raw audio a convolutional feature encoder maps to ``frames`` frames."""
    kernels, strides = getattr(config, "conv_kernel", None), getattr(config, "conv_stride", None)
    if not kernels or not strides:
        return 400 + 320 * (frames - 1)     # wav2vec2's encoder: 25 ms windows every 20 ms at 16 kHz
    length = frames
    for k, s in reversed(list(zip(kernels, strides))):
        length = (length - 1) * int(s) + int(k)
    return length


def audio_inputs(model, preprocessor: dict, fixed: dict, where: str) -> list[HFInput]:
    config = model.config
    rate = _int(preprocessor.get("sampling_rate")) or 16000
    spec = HFInput("input_values", "float32", "values", [[1, 1]], value_range=(-1.0, 1.0))
    shortest = _receptive_field(config)
    while _probe(model, fixed, [spec], 1, {spec.name: (shortest,)}) is not None:
        if shortest >= rate:
            raise UserInputError(f"{where}: the model does not run on {shortest} audio samples",
                                 hint="give samples (--samples DIR) or --shapes")
        shortest *= 2
    longest = AUDIO_SECONDS * rate
    why = _probe(model, fixed, [spec], 1, {spec.name: (longest,)})
    if why:
        raise UserInputError(f"{where}: the model does not run on {AUDIO_SECONDS} s of audio ({why})",
                             hint="give --min-shapes/--max-shapes within the lengths it takes")
    spec.dims = [[shortest, longest]]
    spec.samples = [(8, (max(shortest, rate),)), (4, (max(shortest, rate * 3 // 2),))]
    return [spec]


def feature_inputs(model, preprocessor: dict, fixed: dict, where: str) -> list[HFInput]:
    config = model.config
    bins = (_int(getattr(config, "num_mel_bins", None)) or _int(preprocessor.get("feature_size"))
            or _int(getattr(config, "input_feat_per_channel", None)) or 80)
    positions = _int(getattr(config, "max_source_positions", None))
    frames = 2 * positions if positions else 100     # Whisper: two frames per encoder position
    spec = HFInput("input_features", "float32", "features", [bins, frames], value_range=(-1.0, 1.0))
    why = _probe(model, fixed, [spec], 1, {spec.name: (bins, frames)})
    if why:
        raise UserInputError(f"{where}: the model does not run on {bins}x{frames} input features ({why})",
                             hint="give samples (--samples DIR) or --shapes")
    spec.dims = _dynamic(model, fixed, spec, (bins, frames), (1,), (frames,), (2 * frames,))
    spec.samples = [(8, (bins, frames)), (8, (bins, frames))]
    return [spec]


def plan(model, folder, fixed: dict, where: str, notes: list) -> list[HFInput]:
    """The inputs of ``model`` by its main input, probed for the sizes it accepts."""
    main = getattr(model, "main_input_name", None)
    tokenizer_config = folder.tokenizer_config if folder is not None else {}
    preprocessor = folder.preprocessor if folder is not None else {}
    if main == hs.TEXT:
        return text_inputs(model, tokenizer_config, fixed, where, notes)
    if main == hs.IMAGE:
        return image_inputs(model, preprocessor, fixed, where)
    if main == hs.AUDIO:
        return audio_inputs(model, preprocessor, fixed, where)
    if main == hs.FEATURES:
        return feature_inputs(model, preprocessor, fixed, where)
    raise UserInputError(f"{where}: {type(model).__name__} takes {main!r}, an input Navigator cannot generate",
                         hint="give samples (--samples DIR or an iterable of dicts)")


def nominal_feeds(inputs: list[HFInput], batch: int = 2) -> dict:
    """Feeds at the first sample's shape (for the probe that finds the output fields)."""
    return _feeds(inputs, batch, {i.name: tuple(i.samples[0][1]) for i in inputs})


# ------------------------------------------------------------------ informative samples
def fill(batch: dict, inputs: list[HFInput], *, seed: int, keep: set, pad_id: int, padding_side: str) -> dict:
    """Make a generated batch look real (in place; returns it). ``keep``: inputs whose values the
    user set with --value-ranges (left as generated)."""
    import numpy as np

    rng = np.random.default_rng(seed + 7919)
    roles = {i.role: i for i in inputs if i.name in batch}
    if "mask" in roles or "ids" in roles:
        any_name = next(iter(roles[r].name for r in ("ids", "mask", "type_ids") if r in roles))
        b, s = batch[any_name].shape
        lengths = rng.integers(max(1, -(-s // 2)), s + 1, size=b)
        lengths[0] = s                                       # one full row: the longest case is exercised
        pos = np.arange(s)[None, :]
        real = pos >= (s - lengths)[:, None] if padding_side == "left" else pos < lengths[:, None]
        mask = roles.get("mask")
        if mask is not None and mask.name not in keep:
            batch[mask.name] = real.astype(batch[mask.name].dtype)
        masked = mask is not None and mask.name not in keep
        ids = roles.get("ids")
        if ids is not None and ids.name not in keep and masked:
            arr = batch[ids.name]
            bound = ids.bound or int(arr.max()) + 1
            arr = np.where(arr == pad_id, (pad_id + 1) % max(bound, 2), arr)   # the pad id only at padding
            batch[ids.name] = np.where(real, arr, pad_id).astype(arr.dtype)
        types = roles.get("type_ids")
        if types is not None and types.name not in keep and (types.bound or 0) > 1:
            start = (s - lengths if padding_side == "left" else np.zeros(b, dtype=int))[:, None]
            second = pos >= start + (lengths // 2)[:, None]             # segment A, then segment B
            batch[types.name] = (second & real).astype(batch[types.name].dtype)
    for role, make in (("pixels", _image), ("values", _audio), ("features", _spectrum)):
        spec = roles.get(role)
        if spec is not None and spec.name not in keep:
            lo, hi = spec.value_range or (-1.0, 1.0)
            x = make(rng, batch[spec.name].shape)
            x = lo + (hi - lo) * (np.tanh(x) + 1) / 2                   # into [lo, hi]
            top = np.nextafter(np.float32(hi), np.float32(lo))
            batch[spec.name] = np.minimum(x, top).astype(batch[spec.name].dtype)
    return batch


def _image(rng, shape):
    """A colour cast and a low-frequency random field per sample (4x4 cells, upsampled) plus pixel
    noise: global pooling would average iid noise away and give every sample the same logits."""
    import numpy as np

    b, c, h, w = shape
    low = rng.standard_normal((b, c, 4, 4))
    field_ = np.kron(low, np.ones((1, 1, -(-h // 4), -(-w // 4))))[:, :, :h, :w]
    cast = rng.standard_normal((b, c, 1, 1))
    return 0.5 * cast + 0.8 * field_ + 0.3 * rng.standard_normal(shape)


def _audio(rng, shape):
    """Three tones of random pitch and gain per sample, plus noise."""
    import numpy as np

    b, t = shape
    time_ = np.arange(t)[None, None, :] / 16000.0
    freq = rng.uniform(100, 2000, size=(b, 3, 1))
    gain = rng.uniform(0.2, 1.0, size=(b, 3, 1))
    return (gain * np.sin(2 * np.pi * freq * time_)).sum(1) + 0.1 * rng.standard_normal((b, t))


def _spectrum(rng, shape):
    """A spectral envelope per sample (one level per mel bin) plus frame noise."""
    b, bins, frames = shape
    return rng.standard_normal((b, bins, 1)) + 0.5 * rng.standard_normal((b, bins, frames))
