"""The Hugging Face source's pure parts: reading a folder, the task from the config, the
informative samples (padding masks, token types, images, audio) and their negative cases."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from navigator.errors import UserInputError
from navigator.sources import hf_folder, hf_inputs
from navigator.sources.hf_inputs import HFInput

from ..conftest import importable

needs_transformers = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                        reason="needs transformers (pip install 'navigator[hf]')")


# transformers' model classes, which the task is read from, import torch
needs_torch = pytest.mark.skipif(not importable("torch"), reason="needs torch (transformers' model classes import it)")


def _folder(tmp_path, config=None, files=("model.safetensors",)):
    (tmp_path / "config.json").write_text(json.dumps(config or {"model_type": "bert",
                                                                "architectures": ["BertModel"]}))
    for name in files:
        (tmp_path / name).write_bytes(b"weights")
    return tmp_path


# --------------------------------------------------------------------------- the folder
def test_folder_is_recognised_by_its_transformers_config(tmp_path):
    assert hf_folder.is_hf_folder(_folder(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"hidden": 3}))     # some other tool's config.json
    assert not hf_folder.is_hf_folder(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    assert not hf_folder.is_hf_folder(tmp_path)


def test_weights_safetensors_first_then_pickled(tmp_path):
    f = hf_folder.read_folder(_folder(tmp_path, files=("model.safetensors", "pytorch_model.bin")))
    assert (f.weights, f.safetensors) == (["model.safetensors"], True)
    (tmp_path / "model.safetensors").unlink()
    f = hf_folder.read_folder(tmp_path)
    assert (f.weights, f.safetensors) == (["pytorch_model.bin"], False)


def test_folder_without_pytorch_weights_is_one_error(tmp_path):
    with pytest.raises(UserInputError, match="no PyTorch weights.*tf_model.h5"):
        hf_folder.read_folder(_folder(tmp_path, files=("tf_model.h5",)))
    with pytest.raises(UserInputError, match="no config.json"):
        hf_folder.read_folder(tmp_path / "nowhere")


def test_sharded_index_names_a_missing_shard(tmp_path):
    _folder(tmp_path, files=("model-00001-of-00002.safetensors",))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    with pytest.raises(UserInputError, match="model-00002-of-00002.safetensors is missing"):
        hf_folder.read_folder(tmp_path)
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(b"w2")
    assert hf_folder.read_folder(tmp_path).weights == ["model.safetensors.index.json",
                                                       "model-00001-of-00002.safetensors",
                                                       "model-00002-of-00002.safetensors"]


def test_digest_follows_the_model_files_only(tmp_path):
    folder = _folder(tmp_path)
    first = hf_folder.read_folder(folder).sha256()
    (tmp_path / "trainer_state.json").write_text("{}")          # training leftovers do not count
    (tmp_path / "runs").mkdir()
    assert hf_folder.read_folder(folder).sha256() == first
    (tmp_path / "model.safetensors").write_bytes(b"other weights")
    assert hf_folder.read_folder(folder).sha256() != first
    second = hf_folder.read_folder(folder).sha256()
    (tmp_path / "tokenizer.json").write_text("{}")
    assert hf_folder.read_folder(folder).sha256() != second


# --------------------------------------------------------------------------- the task
@needs_transformers
@needs_torch
@pytest.mark.parametrize("arch, task", [
    ("BertForSequenceClassification", "text-classification"), ("RobertaForTokenClassification", "token-classification"),
    ("BertForQuestionAnswering", "question-answering"), ("DistilBertForMaskedLM", "fill-mask"),
    ("GPT2LMHeadModel", "text-generation"), ("LlamaForCausalLM", "text-generation"),
    ("BertModel", "feature-extraction"), ("ViTForImageClassification", "image-classification"),
    ("YolosForObjectDetection", "object-detection"), ("Wav2Vec2ForCTC", "automatic-speech-recognition"),
    ("Wav2Vec2ForSequenceClassification", "audio-classification"), ("Wav2Vec2Model", "feature-extraction"),
])
def test_task_from_architectures(arch, task):
    from navigator.sources import hf_support

    found, how = hf_support.detect_task({"architectures": [arch]}, None, "m")
    assert found.name == task and arch in how


@needs_transformers
@needs_torch
def test_unsupported_task_is_one_error_listing_the_supported_ones():
    from navigator.sources import hf_support

    with pytest.raises(UserInputError) as e:
        hf_support.detect_task({"architectures": ["T5ForConditionalGeneration"]}, None, "m")
    line = e.value.one_line()
    assert "T5ForConditionalGeneration is a seq to seq causal lm model" in line
    assert all(t in line for t in hf_support.TASKS) and "--task" in line
    with pytest.raises(UserInputError, match="names no architectures"):
        hf_support.detect_task({"model_type": "bert"}, None, "m")
    with pytest.raises(UserInputError, match="--task 'translation' is not supported; supported tasks: text-"):
        hf_support.detect_task({"architectures": ["BertModel"]}, "translation", "m")
    found, how = hf_support.detect_task({"architectures": ["BertForMaskedLM"]}, "text-classification", "m")
    assert (found.name, how) == ("text-classification", "--task")


# --------------------------------------------------------------------------- informative samples
def _text_inputs(types=True):
    specs = [HFInput("input_ids", "int64", "ids", [[1, 64]], bound=300),
             HFInput("attention_mask", "int64", "mask", [[1, 64]], value_range=(0, 2))]
    if types:
        specs.append(HFInput("token_type_ids", "int64", "type_ids", [[1, 64]], bound=2))
    return specs


def _random_text(b=8, s=16, seed=0):
    rng = np.random.default_rng(seed)
    return {"input_ids": rng.integers(0, 300, (b, s)), "attention_mask": rng.integers(0, 2, (b, s)),
            "token_type_ids": rng.integers(0, 2, (b, s))}


@pytest.mark.parametrize("side", ["right", "left"])
def test_text_rows_are_padded_like_a_tokenizer_pads_them(side):
    batch = hf_inputs.fill(_random_text(), _text_inputs(), seed=3, keep=set(), pad_id=0, padding_side=side)
    mask, ids, types = batch["attention_mask"], batch["input_ids"], batch["token_type_ids"]
    assert mask[0].all()                                    # the first row full: the longest case runs
    assert not mask.all()                                   # and other rows are padded
    for row in range(len(mask)):
        real = np.flatnonzero(mask[row])
        assert len(real) >= 8                               # at least half the row is text
        assert np.array_equal(real, np.arange(real[0], real[0] + len(real)))   # one contiguous run
        assert (real[0] == 0) if side == "right" else (real[-1] == mask.shape[1] - 1)
        assert (ids[row][mask[row] == 0] == 0).all()       # pad id at padding only
        assert (ids[row][mask[row] == 1] != 0).all()
        segs = types[row][real]
        assert segs[0] == 0 and segs[-1] == 1 and (np.diff(segs) >= 0).all()   # segment A then B
        assert (types[row][mask[row] == 0] == 0).all()


def test_value_ranges_the_user_gave_are_kept():
    raw = _random_text()
    batch = hf_inputs.fill({k: v.copy() for k, v in raw.items()}, _text_inputs(), seed=3,
                           keep={"attention_mask"}, pad_id=0, padding_side="right")
    assert np.array_equal(batch["attention_mask"], raw["attention_mask"])
    assert np.array_equal(batch["input_ids"], raw["input_ids"])     # no mask of ours: ids left as generated


def test_a_fully_masked_generator_would_be_caught():
    """Negative control of the padding test: random masks (what samples.generate gives) fail it."""
    mask = _random_text()["attention_mask"]
    runs = [np.flatnonzero(r) for r in mask]
    assert not all(len(r) and np.array_equal(r, np.arange(r[0], r[0] + len(r))) for r in runs)


def _pooled(x: np.ndarray, role: str) -> np.ndarray:
    """What a model keeps after global pooling: per-channel (per-bin) means; for audio, band energies."""
    if role == "values":   # each sample's share of energy per band (a spectrum shape, not a loudness)
        spectrum = np.abs(np.fft.rfft(x, axis=-1)) ** 2
        bands = np.stack([band.sum(-1) for band in np.array_split(spectrum, 8, axis=-1)], axis=-1)
        return bands / bands.sum(-1, keepdims=True)
    return x.reshape(x.shape[0], x.shape[1], -1).mean(-1)


@pytest.mark.parametrize("name, role, shape", [("pixel_values", "pixels", (8, 3, 32, 32)),
                                               ("input_values", "values", (4, 2000)),
                                               ("input_features", "features", (8, 16, 32))])
def test_float_inputs_differ_per_sample_after_pooling(name, role, shape):
    spec = HFInput(name, "float32", role, list(shape[1:]), value_range=(-1.0, 1.0))
    x = hf_inputs.fill({name: np.zeros(shape, np.float32)}, [spec], seed=0, keep=set(), pad_id=0,
                       padding_side="right")[name]
    assert x.dtype == np.float32 and x.min() >= -1.0 and x.max() < 1.0
    spread = _pooled(x, role).std(0).mean()
    # negative control: iid uniform values (samples.generate) pool to nearly the same vector for every sample
    iid = np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)
    assert spread > 5 * _pooled(iid, role).std(0).mean()


def test_receptive_field_gives_two_frames():
    class Cfg:
        conv_kernel, conv_stride = (10, 8, 4), (5, 4, 2)

    assert hf_inputs._receptive_field(Cfg(), frames=1) == 105
    assert hf_inputs._receptive_field(Cfg()) == 145          # torch.export's guard for this encoder
