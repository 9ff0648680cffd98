"""Text in, answers out: a Hugging Face text model's Triton ensemble with the tokenizer in front.

The step is checked in process against transformers' own tokenizer (padding sides,
truncation, text pairs, labels), then end to end through the real Triton server
(`navigator serve --cpu-backends`): a string in, the eager model's logits on the same
text out; a too-long text refused with the reason, or truncated where tokenizer.json
enables truncation.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from navigator.errors import UserInputError
from navigator.types import ModelSignature, TensorSpec
from navigator.workspace.status import ModelInfo, Status

from ..conftest import ROOT

_MISSING = [m for m in ("torch", "transformers", "tokenizers", "onnxruntime", "onnxscript", "tritonclient")
            if importlib.util.find_spec(m) is None]
pytestmark = [pytest.mark.functional,
              pytest.mark.skipif(bool(_MISSING), reason=f"needs {', '.join(_MISSING)} "
                                                        "(pip install 'navigator[torch,hf,cpu,serve]')")]

sys.path.insert(0, str(ROOT / "tests"))
import hf_models  # noqa: E402

TEXTS = ["hello world", "the quick brown fox jumps over the lazy dog", "hi", "models are exported to onnx"]
LONG = " ".join(["navigator converts trained models"] * 20)


@pytest.fixture(scope="session")
def hf_root(tmp_path_factory):
    return tmp_path_factory.mktemp("hf_triton_models")


def _status(folder: Path, task: str, inputs: list[str], classes: int = 3, longest: int = 64) -> Status:
    """The record a conversion of ``folder`` leaves (what the tokenizer step reads), without converting."""
    profile = {n: {"min": [1, 1], "opt": [8, 16], "max": [64, longest]} for n in inputs}
    outputs = [TensorSpec("logits", "float32", [-1, classes] if task == "text-classification" else [-1, -1, classes])]
    return Status(model=ModelInfo(name=folder.name, source_format="torch", path=str(folder), sha256=None,
                                  huggingface={"task": task, "architecture": "x", "dtype": "float32",
                                               "trust_remote_code": False, "tokenizer": "tokenizer.json"}),
                  signature=ModelSignature(inputs=[TensorSpec(n, "int64", [-1, -1]) for n in inputs], outputs=outputs),
                  batch_dim=0, shape_profiles=[profile])


def _step(st: Status, tmp: Path, *, postprocess=None):
    """The generated step module, imported from its folder (tokenizer.json beside it)."""
    from navigator.triton import tokenizer
    from navigator.triton.options import TritonOptions
    from navigator.userfile import import_file

    steps = tokenizer.steps(st, TritonOptions(tokenizer=True, postprocess=postprocess), tmp, [])
    return import_file(steps.step, what="step", prefix="hf_step", keep=False), steps


def _texts(values) -> np.ndarray:
    return np.array([v.encode() for v in values], dtype=object)


# --------------------------------------------------------------------------- the step in process
@pytest.mark.parametrize("name, side", [("bert_classifier", "right"), ("gpt2_lm", "left")])
def test_step_tokenizes_as_transformers_does(name, side, hf_root, tmp_path):
    from transformers import PreTrainedTokenizerFast

    source = hf_models.build(name, hf_root)
    folder = tmp_path / name
    shutil.copytree(source, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["padding_side"] = side
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    inputs = ["input_ids", "attention_mask"] + (["token_type_ids"] if name.startswith("bert") else [])
    task = "text-classification" if name.startswith("bert") else "text-generation"
    module, steps = _step(_status(folder, task, inputs), tmp_path / "step")
    out = module.preprocess(text=_texts(TEXTS))
    expected = PreTrainedTokenizerFast.from_pretrained(folder)(TEXTS, padding=True, return_tensors="np")
    assert set(out) == set(inputs)
    for key in inputs:
        assert out[key].dtype == np.int64
        np.testing.assert_array_equal(out[key], expected[key], err_msg=key)
    mask = out["attention_mask"]
    assert (mask[:, 0] == 0).any() if side == "left" else (mask[:, -1] == 0).any()   # the padding side was used
    assert steps.labels is (task == "text-classification")


def test_too_long_text_is_refused_unless_tokenizer_json_truncates(hf_root, tmp_path):
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    folder = tmp_path / "bert"
    shutil.copytree(hf_models.build("bert_classifier", hf_root), folder)
    st = _status(folder, "text-classification", ["input_ids", "attention_mask", "token_type_ids"], longest=32)
    module, _ = _step(st, tmp_path / "refuse")
    with pytest.raises(ValueError, match=r"text 1 has \d+ tokens; the model was verified for at most 32 and the "
                                         "tokenizer enables no truncation"):
        module.preprocess(text=_texts(["hi", LONG]))

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.enable_truncation(max_length=512)                    # the tokenizer truncates; the profile is shorter
    tok.save(str(folder / "tokenizer.json"))
    module, _ = _step(st, tmp_path / "truncate")
    out = module.preprocess(text=_texts(["hi", LONG]))
    expected = PreTrainedTokenizerFast.from_pretrained(folder)(["hi", LONG], padding=True, truncation=True,
                                                               max_length=32, return_tensors="np")
    assert out["input_ids"].shape == (2, 32)
    np.testing.assert_array_equal(out["input_ids"], expected["input_ids"])
    np.testing.assert_array_equal(out["attention_mask"], expected["attention_mask"])


def test_question_answering_takes_question_and_context(hf_root, tmp_path):
    from transformers import PreTrainedTokenizerFast

    folder = hf_models.build("bert_qa", hf_root)
    st = _status(folder, "question-answering", ["input_ids", "attention_mask", "token_type_ids"])
    module, steps = _step(st, tmp_path)
    questions, contexts = ["what is it?", "who"], ["it is a test of pairs", "nobody knows"]
    out = module.preprocess(question=_texts(questions), context=_texts(contexts))
    expected = PreTrainedTokenizerFast.from_pretrained(folder)(questions, contexts, padding=True, return_tensors="np")
    for key in ("input_ids", "attention_mask", "token_type_ids"):
        np.testing.assert_array_equal(out[key], expected[key], err_msg=key)
    assert out["token_type_ids"].max() == 1 and not steps.labels      # the second segment is marked


def test_labels_follow_id2label_per_row_and_per_token(hf_root, tmp_path):
    folder = hf_models.build("bert_classifier", hf_root)
    module, _ = _step(_status(folder, "text-classification", ["input_ids", "attention_mask"]), tmp_path / "a")
    logits = np.array([[0.1, 2.0, -1.0], [3.0, 0.0, 0.0]], np.float32)
    out = module.postprocess(logits=logits)
    assert out["label"].tolist() == [b"neutral", b"negative"]
    np.testing.assert_array_equal(out["logits"], logits)
    assert out["label"].dtype == np.dtype("S8")            # one width for any request: one dtype for Triton
    tagger = hf_models.build("roberta_tagger", hf_root)
    module, _ = _step(_status(tagger, "token-classification", ["input_ids", "attention_mask"], classes=5),
                      tmp_path / "b")
    per_token = np.zeros((2, 3, 5), np.float32)
    per_token[0, 1, 4] = 1.0
    assert module.postprocess(logits=per_token)["label"].tolist() == [[b"LABEL_0", b"LABEL_4", b"LABEL_0"]] + \
        [[b"LABEL_0"] * 3]


def test_tokenizer_flag_says_why_it_cannot_apply(hf_root, tmp_path):
    from navigator.triton import tokenizer
    from navigator.triton.options import TritonOptions

    folder = tmp_path / "no_tokenizer"
    shutil.copytree(hf_models.build("bert_classifier", hf_root), folder)
    (folder / "tokenizer.json").unlink()
    st = _status(folder, "text-classification", ["input_ids", "attention_mask"])
    with pytest.raises(UserInputError, match="no_tokenizer has no tokenizer.json"):
        tokenizer.steps(st, TritonOptions(tokenizer=True), tmp_path / "s", [])
    assert tokenizer.steps(st, TritonOptions(), tmp_path / "s", []) is None          # by default: silently off
    image = _status(folder, "image-classification", ["pixel_values"])
    assert "not what a tokenizer makes" in tokenizer.why_not(image)
    with pytest.raises(UserInputError, match="--tokenizer and --preprocess both make the ensemble's first step"):
        shutil.copyfile(hf_models.build("bert_classifier", hf_root) / "tokenizer.json", folder / "tokenizer.json")
        tokenizer.steps(st, TritonOptions(tokenizer=True, preprocess="pre.py"), tmp_path / "s", [])


# --------------------------------------------------------------------------- through the real Triton server
def _infer(client_mod, url: str, model: str, texts: list[str], outputs: list[str]) -> dict:
    client = client_mod.InferenceServerClient(url)
    try:
        data = _texts(texts).reshape(-1, 1)
        tensor = client_mod.InferInput("text", list(data.shape), "BYTES")
        tensor.set_data_from_numpy(data)
        result = client.infer(model, [tensor], outputs=[client_mod.InferRequestedOutput(o) for o in outputs])
        return {o: result.as_numpy(o) for o in outputs}
    finally:
        client.close()


@pytest.mark.slow
def test_text_in_logits_and_labels_out_through_triton(hf_root, tmp_path):
    """bert_classifier (labels; tokenizer.json without truncation: long texts refused) and roberta_tagger
    (tokenizer.json truncating: long texts cut to the profile's 64 tokens) in one repository, served by the
    real Triton server; every answer compared with the eager transformers model on the same text."""
    import torch
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    from tokenizers import Tokenizer
    from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification, \
        PreTrainedTokenizerFast

    import navigator
    from navigator.triton import emit
    from navigator.triton.server import TritonServer, prepare

    prepare(quiet=True)
    classifier = hf_models.build("bert_classifier", hf_root)
    tagger = tmp_path / "roberta_tagger"
    shutil.copytree(hf_models.build("roberta_tagger", hf_root), tagger)
    tok = Tokenizer.from_file(str(tagger / "tokenizer.json"))
    tok.enable_truncation(max_length=512)
    tok.save(str(tagger / "tokenizer.json"))
    repo = tmp_path / "repo"
    for folder in (classifier, tagger):
        result = navigator.convert(str(folder), workdir=str(tmp_path / "wd"), targets=["onnx"], no_profile=True,
                                   runners=["onnxruntime"])
        assert result.ok
        emitted = emit(result.workspace, {"repo": str(repo)})        # the tokenizer is on by default
        assert sorted(m.role for m in emitted.models) == ["ensemble", "model", "postprocess", "preprocess"]
    eager = {"bert_classifier": AutoModelForSequenceClassification.from_pretrained(classifier),
             "roberta_tagger": AutoModelForTokenClassification.from_pretrained(tagger)}
    tokenizers = {name: PreTrainedTokenizerFast.from_pretrained(folder)
                  for name, folder in (("bert_classifier", classifier), ("roberta_tagger", tagger))}
    with TritonServer(repo, cpu_backends=True) as server:
        for name in eager:
            for mod, url in ((httpclient, server.http_url), (grpcclient, server.grpc_url)):
                texts = TEXTS + ([LONG] if name == "roberta_tagger" else [])
                out = _infer(mod, url, name, texts, ["logits", "label"])
                enc = tokenizers[name](texts, padding=True, truncation=True, max_length=64, return_tensors="pt")
                with torch.no_grad():
                    expected = eager[name](**enc).logits.numpy()
                assert out["logits"].shape == expected.shape
                scale = np.percentile(np.abs(expected), 99)
                np.testing.assert_allclose(out["logits"], expected, rtol=1e-4, atol=1e-4 * scale, err_msg=name)
                id2label = eager[name].config.id2label
                labels = np.vectorize(lambda i: id2label[int(i)].encode())(expected.argmax(-1))
                np.testing.assert_array_equal(out["label"].reshape(labels.shape), labels)
        with pytest.raises(Exception, match="the model was verified for at most 64 and the tokenizer enables no "
                                            "truncation"):
            _infer(httpclient, server.http_url, "bert_classifier", ["hi", LONG], ["logits"])
