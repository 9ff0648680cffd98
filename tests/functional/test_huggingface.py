"""Hugging Face model folders (and live PreTrainedModels) end to end with real transformers,
torch and onnxruntime: the task from config.json, the inputs with their bounds and dynamic
dims, informative samples, outputs named after the model's fields, workers rebuilding the
module from the folder, remote code and pickled weights refused unless allowed.

Folders are built offline by tests/hf_models.py (tiny configs, a tokenizer trained here).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from ..conftest import ROOT, stage_times

_MISSING = [m for m in ("torch", "transformers", "tokenizers", "onnxruntime", "onnxscript")
            if importlib.util.find_spec(m) is None]
pytestmark = [pytest.mark.functional,
              pytest.mark.skipif(bool(_MISSING), reason=f"needs {', '.join(_MISSING)} "
                                                        "(pip install 'navigator[torch,hf,cpu]')")]

sys.path.insert(0, str(ROOT / "tests"))
import hf_models  # noqa: E402

FAST = ["--no-profile", "--targets", "onnx", "--runners", "onnxruntime,torch"]
# per task: the outputs and, per output, the dims that must stay dynamic (-1)
OUTPUTS = {
    "text-classification": {"logits": [-1, 3]},
    "token-classification": {"logits": [-1, -1, 5]},
    "question-answering": {"start_logits": [-1, -1], "end_logits": [-1, -1]},
    "fill-mask": {"logits": [-1, -1, 300]},
    "text-generation": {"logits": [-1, -1, 320]},
    "feature-extraction": {"last_hidden_state": [-1, -1, 32], "pooler_output": [-1, 32]},
    "image-classification": {"logits": [-1, 4]},
    "object-detection": {"logits": [-1, 5, 4], "pred_boxes": [-1, 5, 4]},
    "automatic-speech-recognition": {"logits": [-1, -1, 32]},
    "audio-classification": {"logits": [-1, 4]},
}
# model -> (its input names, dtypes and shapes)
INPUTS = {
    "bert_classifier": {"input_ids": [-1, -1], "attention_mask": [-1, -1], "token_type_ids": [-1, -1]},
    "roberta_tagger": {"input_ids": [-1, -1], "attention_mask": [-1, -1]},
    "bert_qa": {"input_ids": [-1, -1], "attention_mask": [-1, -1], "token_type_ids": [-1, -1]},
    "distilbert_mlm": {"input_ids": [-1, -1], "attention_mask": [-1, -1]},
    "gpt2_lm": {"input_ids": [-1, -1], "attention_mask": [-1, -1]},
    "llama_lm": {"input_ids": [-1, -1], "attention_mask": [-1, -1]},
    "bert_features": {"input_ids": [-1, -1], "attention_mask": [-1, -1], "token_type_ids": [-1, -1]},
    "vit_classifier": {"pixel_values": [-1, 3, 32, 32]},          # the patch grid fixes the size
    "convnext_classifier": {"pixel_values": [-1, 3, -1, -1]},     # a CNN takes other sizes
    "yolos_detector": {"pixel_values": [-1, 3, -1, -1]},          # position embeddings interpolated
    "wav2vec2_ctc": {"input_values": [-1, -1]},
    "wav2vec2_audio_classifier": {"input_values": [-1, -1]},
    "whisper_audio_classifier": {"input_features": [-1, 16, 32]},  # Whisper wants exactly 2 x positions
}


@pytest.fixture(scope="session")
def hf_root(tmp_path_factory):
    return tmp_path_factory.mktemp("hf_models")


def _cli(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "navigator", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=600)


def _status(workdir: Path, name: str) -> dict:
    return yaml.safe_load((workdir / f"{name}.nav.workspace" / "status.yaml").read_text())


def _verified(st: dict) -> dict:
    """{(format, runner): verify status}, every output check conclusive where ok."""
    out = {}
    for key, f in st["formats"].items():
        for runner, r in f["runners"].items():
            v = r["verify"]
            out[(key, runner)] = v["status"]
            if v["status"] == "ok":
                assert all(o["conclusive"] for o in v["outputs"].values()), (key, runner, v["outputs"])
    return out


# --------------------------------------------------------------------------- the CLI on a text classifier
def test_text_classifier_folder_converts_with_no_shapes_or_samples(hf_root, tmp_path):
    folder = hf_models.build("bert_classifier", hf_root)
    proc = _cli("convert", folder, "--workdir", tmp_path / "wd", *FAST, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    st = _status(tmp_path / "wd", "bert_classifier")
    assert st["model"]["huggingface"] == {
        "task": "text-classification", "chosen_by": "config.architectures BertForSequenceClassification",
        "architecture": "BertForSequenceClassification", "model_type": "bert", "dtype": "float32",
        "weights": ["model.safetensors"], "tokenizer": "tokenizer.json", "trust_remote_code": False}
    assert st["model"]["path"] == str(folder.resolve()) and st["config"]["trust_remote_code"] is False
    sig = st["signature"]
    assert [(i["name"], i["dtype"], i["shape"]) for i in sig["inputs"]] == [
        ("input_ids", "int64", [-1, -1]), ("attention_mask", "int64", [-1, -1]), ("token_type_ids", "int64", [-1, -1])]
    assert [(o["name"], o["shape"]) for o in sig["outputs"]] == [("logits", [-1, 3])]
    # bounds from the config: vocabulary 300, type vocabulary 2, masks 0/1
    assert st["samples"]["value_ranges"] == {"input_ids": [0.0, 300.0], "attention_mask": [0.0, 2.0],
                                             "token_type_ids": [0.0, 2.0]}
    # the sequence runs from 1 to the 64 positions the model has, and both corners were verified
    profile = st["shape_profiles"][0]["input_ids"]
    assert profile["min"] == [1, 1] and profile["max"][1] == 64
    lengths = {shape["input_ids"][1] for shape in st["samples"]["shapes"]}
    assert {1, 64} <= lengths and len(lengths) >= 3
    assert _verified(st) == {("torch", "torch-cpu"): "ok", ("onnx", "onnxruntime-cpu"): "ok"}
    ws = tmp_path / "wd" / "bert_classifier.nav.workspace"
    record = json.loads((ws / "formats" / "torch" / "source.json").read_text())
    assert record["kind"] == "huggingface" and record["folder"] == str(folder.resolve())
    assert record["outputs"] == ["logits"] and record["fixed"] == {}
    # the samples look like a tokenizer's output: right padding with the pad id under a zero mask
    sample = np.load(ws / "samples" / "inputs" / "000.npz")
    mask, ids = sample["attention_mask"], sample["input_ids"]
    assert mask[0].all() and not mask.all()
    assert (ids[mask == 0] == 0).all() and (ids[mask == 1] != 0).all()
    assert all((np.diff(row) <= 0).all() for row in mask)          # 1 … 1 0 … 0
    # the critical path: the source's child converts as soon as the reference is stored, beside the
    # source's own verification, not after it
    times = stage_times(ws)
    if "up to 1 format workers" not in (ws / "navigator.log").read_text():   # a one-core machine: in turn
        assert times["onnx convert"]["started"] < times["torch verify [torch-cpu]"]["ended"], times
    # a re-run finds the folder unchanged and reuses every step
    again = _cli("convert", folder, "--workdir", tmp_path / "wd", *FAST, cwd=tmp_path)
    assert again.returncode == 0 and "resuming" in again.stdout + again.stderr


# --------------------------------------------------------------------------- every task
# The suite runs one folder per input kind (text with token types, causal text with left padding, an
# image CNN with dynamic height and width, raw audio); NAVIGATOR_TEST_EVERY_TASK=1 runs all 13 folders
# (benchmarks/hf_tasks.py measures them all: benchmarks/results/hf_tasks_cpu.md).
EVERY_TASK = os.environ.get("NAVIGATOR_TEST_EVERY_TASK") == "1"
SUITE_TASKS = ("bert_classifier", "gpt2_lm", "convnext_classifier", "wav2vec2_ctc")


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in INPUTS if EVERY_TASK or n in SUITE_TASKS])
def test_every_task_converts_to_onnx_verified(name, hf_root, tmp_path):
    """Each task's folder through the API with no shapes and no samples: the inputs, their dynamic
    dims, the outputs by field name, and onnx verified conclusively against eager torch (rebuilt
    from the folder in the worker)."""
    import navigator

    folder = hf_models.build(name, hf_root)
    task = next(t for t, builders in hf_models.BUILDERS.items() if any(b.__name__ == name for b in builders))
    result = navigator.convert(str(folder), workdir=str(tmp_path), targets=["onnx"], no_profile=True,
                               runners=["onnxruntime", "torch"])
    st = result.status
    assert result.ok, result.failures
    assert st.model.huggingface["task"] == task
    assert {i.name: i.shape for i in st.signature.inputs} == INPUTS[name]
    assert {o.name: o.shape for o in st.signature.outputs} == OUTPUTS[task]
    assert _verified(yaml.safe_load((result.workspace / "status.yaml").read_text())) == {
        ("torch", "torch-cpu"): "ok", ("onnx", "onnxruntime-cpu"): "ok"}
    # every dynamic non-batch dim was verified at both ends of its range
    for spec in st.signature.inputs:
        profile = st.shape_profiles[0][spec.name]
        for axis, d in enumerate(spec.shape):
            if d == -1 and axis > 0:
                seen = {shape[spec.name][axis] for shape in st.samples.shapes}
                assert {profile["min"][axis], profile["max"][axis]} <= seen, (spec.name, axis, seen)


@pytest.mark.slow
def test_default_targets_with_no_other_flag(hf_root, tmp_path):
    """`navigator convert DIR` alone (profiling aside): every default PyTorch format of a causal LM."""
    folder = hf_models.build("gpt2_lm", hf_root)
    proc = _cli("convert", folder, "--workdir", tmp_path / "wd", "--no-profile", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    verdicts = _verified(_status(tmp_path / "wd", "gpt2_lm"))
    assert set(verdicts.values()) == {"ok"}
    assert {k for k, _ in verdicts} == {"torch", "torchscript", "torch_export", "onnx", "onnx-optimized"}


# --------------------------------------------------------------------------- the task, loading, trust
def test_task_override_loads_another_head_and_says_it_is_new(hf_root, tmp_path):
    folder = hf_models.build("bert_features", hf_root)
    proc = _cli("convert", folder, "--workdir", tmp_path / "wd", "--task", "question-answering", "--targets",
                "torch", "--no-profile", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "--task question-answering added a new, untrained head" in proc.stdout + proc.stderr
    st = _status(tmp_path / "wd", "bert_features")
    assert st["model"]["huggingface"]["chosen_by"] == "--task"
    assert [o["name"] for o in st["signature"]["outputs"]] == ["start_logits", "end_logits"]


@pytest.mark.parametrize("case, expected", [
    ("seq2seq", "T5ForConditionalGeneration is a seq to seq causal lm model; supported tasks: text-classification"),
    ("no_weights", "no PyTorch weights (model.safetensors or pytorch_model.bin)"),
    ("bad_task", "--task 'translation' is not supported; supported tasks: text-classification"),
    ("task_on_onnx", "--task fill-mask: applies to Hugging Face models only"),
    ("lying_config", "config.json names model_type 'roberta', but the checkpoint does not fit it"),
])
def test_bad_input_is_one_error_line(case, expected, hf_root, tmp_path):
    if case == "seq2seq":
        import torch
        from transformers import T5Config, T5ForConditionalGeneration

        torch.manual_seed(0)
        T5ForConditionalGeneration(T5Config(vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_layers=1,
                                            num_heads=2)).save_pretrained(tmp_path / "t5")
        args = [tmp_path / "t5"]
    elif case == "no_weights":
        (tmp_path / "cfg").mkdir()
        shutil.copy(hf_models.build("bert_classifier", hf_root) / "config.json", tmp_path / "cfg")
        args = [tmp_path / "cfg"]
    elif case == "lying_config":   # a BERT checkpoint under a RoBERTa config: every weight would be random
        source = hf_models.build("bert_classifier", hf_root)
        (tmp_path / "lie").mkdir()
        shutil.copy(source / "model.safetensors", tmp_path / "lie")
        config = json.loads((source / "config.json").read_text())
        config.update(model_type="roberta", architectures=["RobertaForSequenceClassification"])
        (tmp_path / "lie" / "config.json").write_text(json.dumps(config))
        args = [tmp_path / "lie"]
    elif case == "bad_task":
        args = [hf_models.build("bert_classifier", hf_root), "--task", "translation"]
    else:
        args = [ROOT / "examples" / "tiny_classifier.onnx", "--task", "fill-mask"]
    proc = _cli("convert", *args, "--workdir", tmp_path / "wd", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and expected in lines[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert not list((tmp_path / "wd").glob("*")) if (tmp_path / "wd").exists() else True   # nothing left behind


def _remote_folder(hf_root, dest: Path, code: str) -> Path:
    """bert_classifier whose config names a class in the folder's own modeling_my.py."""
    source = hf_models.build("bert_classifier", hf_root)
    dest.mkdir()
    config = json.loads((source / "config.json").read_text())
    config.update(model_type="mybert", architectures=["MyBert"],
                  auto_map={"AutoConfig": "modeling_my.MyConfig",
                            "AutoModelForSequenceClassification": "modeling_my.MyBert"})
    (dest / "config.json").write_text(json.dumps(config))
    shutil.copy(source / "model.safetensors", dest)
    (dest / "modeling_my.py").write_text(code)
    return dest


def test_remote_code_never_runs_without_the_flag(hf_root, tmp_path):
    marker = tmp_path / "code-ran"
    folder = _remote_folder(hf_root, tmp_path / "remote",
                            f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n")
    proc = _cli("convert", folder, "--workdir", tmp_path / "wd", "--targets", "torch", cwd=tmp_path)
    assert proc.returncode == 2
    assert "the model's code ships in the folder (modeling_my.MyBert, modeling_my.MyConfig); Navigator runs such " \
           "code only with --trust-remote-code" in proc.stderr
    assert not marker.exists()


def test_remote_code_runs_with_the_flag_and_status_says_so(hf_root, tmp_path):
    code = ("from transformers import BertConfig, BertForSequenceClassification\n\n\n"
            "class MyConfig(BertConfig):\n    model_type = 'mybert'\n\n\n"
            "class MyBert(BertForSequenceClassification):\n    config_class = MyConfig\n")
    folder = _remote_folder(hf_root, tmp_path / "remote", code)
    proc = _cli("convert", folder, "--workdir", tmp_path / "wd", "--trust-remote-code", *FAST, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    st = _status(tmp_path / "wd", "remote")
    assert st["config"]["trust_remote_code"] is True
    assert st["model"]["huggingface"]["trust_remote_code"] is True
    assert st["model"]["huggingface"]["architecture"] == "MyBert"
    assert _verified(st) == {("torch", "torch-cpu"): "ok", ("onnx", "onnxruntime-cpu"): "ok"}


def _bin_folder(dest: Path, state) -> Path:
    import torch
    from transformers import BertConfig

    dest.mkdir()
    BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
               max_position_embeddings=32, initializer_range=0.2,
               architectures=["BertForMaskedLM"]).save_pretrained(dest)
    torch.save(state, dest / "pytorch_model.bin")
    return dest


class _Payload:
    """Unpickling this runs code: what weights_only=True must refuse."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def test_pickled_checkpoint_loads_weights_only(tmp_path):
    import torch
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                       intermediate_size=32, max_position_embeddings=32, initializer_range=0.2))
    good = _bin_folder(tmp_path / "good", model.state_dict())
    proc = _cli("convert", good, "--workdir", tmp_path / "wd", *FAST, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _status(tmp_path / "wd", "good")["model"]["huggingface"]["weights"] == ["pytorch_model.bin"]

    marker = tmp_path / "unpickled"
    evil = _bin_folder(tmp_path / "evil", {"bert.embeddings.word_embeddings.weight": _Payload(marker)})
    proc = _cli("convert", evil, "--workdir", tmp_path / "wd", cwd=tmp_path)
    assert proc.returncode == 2
    assert "pytorch_model.bin holds objects other than tensors, which Navigator does not unpickle" in proc.stderr
    assert not marker.exists()


# --------------------------------------------------------------------------- the API: live models, samples
def test_live_model_with_and_without_tokenizer_batches(hf_root, tmp_path):
    import navigator
    from transformers import AutoModelForSequenceClassification, PreTrainedTokenizerFast

    folder = hf_models.build("bert_classifier", hf_root)
    model = AutoModelForSequenceClassification.from_pretrained(folder)
    result = navigator.convert(model, workdir=str(tmp_path / "a"), targets=["onnx"], no_profile=True,
                               runners=["onnxruntime", "torch"])
    assert result.ok and result.status.formats["torch"].isolated is False
    assert result.status.model.huggingface["chosen_by"] == "config.architectures BertForSequenceClassification"
    assert result.status.signature.input_names == ["input_ids", "attention_mask", "token_type_ids"]

    tok = PreTrainedTokenizerFast.from_pretrained(folder)
    texts = hf_models.SENTENCES
    batches = [tok(texts[:4], padding=True, return_tensors="pt"), tok(texts[4:7], padding=True, return_tensors="pt")]
    result = navigator.convert(model, batches, workdir=str(tmp_path / "b"), targets=["onnx"], no_profile=True,
                               runners=["onnxruntime", "torch"])
    assert result.ok and result.status.samples.source == "iterable"
    # the keys the batches hold (input_ids, token_type_ids, attention_mask), in the order of the model's forward
    assert result.status.signature.input_names == ["input_ids", "attention_mask", "token_type_ids"]
    with result.runner("onnx") as run:
        feed = {k: v.numpy() for k, v in batches[0].items()}
        logits = run(feed)["logits"]
    import torch

    with torch.no_grad():
        expected = model(**batches[0]).logits.numpy()
    np.testing.assert_allclose(logits, expected, atol=1e-4)

    from navigator.errors import UserInputError

    with pytest.raises(UserInputError, match="converted for its own head"):
        navigator.convert(model, workdir=str(tmp_path / "c"), task="fill-mask")


def test_folder_with_tokenizer_batches_through_the_api(hf_root, tmp_path):
    """A folder (prepared in a worker) with BatchEncoding samples: the keys they hold are the inputs."""
    import navigator
    from transformers import PreTrainedTokenizerFast

    folder = hf_models.build("bert_classifier", hf_root)
    tok = PreTrainedTokenizerFast.from_pretrained(folder)
    batches = [tok(hf_models.SENTENCES[:4], padding=True, return_tensors="np"),
               tok(hf_models.SENTENCES[4:6], padding=True, return_tensors="np")]
    result = navigator.convert(str(folder), batches, workdir=str(tmp_path), targets=["onnx"], no_profile=True,
                               runners=["onnxruntime", "torch"])
    assert result.ok and result.status.samples.source == "iterable"
    assert result.status.signature.input_names == ["input_ids", "attention_mask", "token_type_ids"]
    assert result.status.formats["torch"].isolated is not False


def test_npz_samples_folder_sets_the_inputs(hf_root, tmp_path):
    from transformers import PreTrainedTokenizerFast

    folder = hf_models.build("gpt2_lm", hf_root)
    tok = PreTrainedTokenizerFast.from_pretrained(folder)
    (tmp_path / "samples").mkdir()
    for i, texts in enumerate((hf_models.SENTENCES[:3], hf_models.SENTENCES[3:8])):
        enc = tok(texts, padding=True, return_tensors="np")
        np.savez(tmp_path / "samples" / f"{i:03d}.npz", input_ids=enc["input_ids"].astype(np.int64))
    proc = _cli("convert", folder, "--workdir", tmp_path / "wd", "--samples", tmp_path / "samples", *FAST,
                cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    st = _status(tmp_path / "wd", "gpt2_lm")
    assert [i["name"] for i in st["signature"]["inputs"]] == ["input_ids"]
    assert st["samples"]["source"] == "folder"
    assert _verified(st) == {("torch", "torch-cpu"): "ok", ("onnx", "onnxruntime-cpu"): "ok"}
