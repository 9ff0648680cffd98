"""The tokenizer in front of a Hugging Face text model: ``navigator triton WS --tokenizer``.

For a workspace converted from a Hugging Face folder that holds ``tokenizer.json``, whose
model takes what a tokenizer makes (``input_ids``, ``attention_mask``, ``token_type_ids``),
the served model becomes an ensemble (:mod:`navigator.triton.ensemble`): a first step that
takes text (BYTES: ``text``; ``question`` and ``context`` for question answering) and
tokenizes it with the ``tokenizers`` library, the verified format, and for classification a
last step that adds the label of the largest logit from ``config.id2label``. The steps are
one generated file (``tokenizer_step.py.tmpl`` with its SETTINGS) plus a copy of
``tokenizer.json`` in the tokenizer step's version folder.

On by default where it applies (off with ``--no-tokenizer`` or when ``--preprocess`` gives
a first step of the user's). SETTINGS follow the tokenizer's own files: padding from
tokenizer.json's ``padding`` (else the request's longest row, at tokenizer_config.json's
``padding_side``, with its ``pad_token``), truncation from tokenizer.json's ``truncation``
(to the shape profile's longest sequence; without it a longer text is refused with the
reason, never cut silently); rows are never longer than the profile's longest sequence,
since nothing longer was verified.
"""

from __future__ import annotations

import logging
import pprint
import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from navigator.errors import UserInputError

log = logging.getLogger(__name__)

PLACEHOLDER = "__NAVIGATOR_SETTINGS__"
STEP_FILE = "tokenizer_step.py"
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
LABELLED = ("text-classification", "token-classification")
# probe texts: short, so that every tokenizer keeps them inside any profile
EXAMPLES = [["hello world", "the quick brown fox"], ["a short text", "hi", "one more example"]]
PAIR_EXAMPLES = [[("what is it?", "it is a test"), ("who?", "nobody knows")],
                 [("where", "here and there"), ("why not?", "because"), ("how", "like this")]]
_STRATEGIES = {"LongestFirst": "longest_first", "OnlyFirst": "only_first", "OnlySecond": "only_second"}


@dataclass
class TokenizerSteps:
    """What the repository writer adds: the step file for both steps, and tokenizer.json."""

    step: Path                  # the generated step file (in a temporary folder during emit)
    tokenizer: Path             # the model folder's tokenizer.json
    labels: bool                # a label step after the model


def why_not(st) -> str | None:
    """Why the workspace cannot have a tokenizer step (None: it can)."""
    hf = st.model.huggingface
    if not hf:
        return "the workspace's model is not a Hugging Face model"
    names = st.signature.input_names
    if "input_ids" not in names or any(n not in MODEL_INPUTS for n in names):
        return f"the model takes {', '.join(names)}, not what a tokenizer makes ({', '.join(MODEL_INPUTS)})"
    if not st.model.path:
        return "the workspace records no model folder (a live PreTrainedModel): convert the saved folder"
    folder = Path(st.model.path)
    if not (folder / "tokenizer.json").is_file():
        return f"{folder} has no tokenizer.json (a fast tokenizer saved with save_pretrained)"
    return None


def steps(st, opts, tmp: Path, notes: list[str]) -> TokenizerSteps | None:
    """The tokenizer steps for ``st`` when ``opts.tokenizer`` asks for them (True) or leaves it to
    the workspace (None: where it applies and no --preprocess is given); the step file is written
    into ``tmp`` (with a copy of tokenizer.json, for the probe)."""
    if opts.tokenizer is False:
        return None
    reason = why_not(st)
    if opts.tokenizer is None:
        if reason or opts.preprocess:
            return None
    elif reason:
        raise UserInputError(f"--tokenizer: {reason}")
    if opts.preprocess:
        raise UserInputError("--tokenizer and --preprocess both make the ensemble's first step; choose one "
                             "(--no-tokenizer keeps --preprocess)")
    folder = Path(st.model.path)
    _check_unchanged(st, folder)
    settings = _settings(st, folder, labels=opts.postprocess is None and st.model.huggingface["task"] in LABELLED)
    text = render(settings)
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / STEP_FILE).write_text(text, encoding="utf-8")
    shutil.copyfile(folder / "tokenizer.json", tmp / "tokenizer.json")
    how = "truncates" if settings["truncation"] else "refuses"
    notes.append(f"tokenizer step: {' and '.join(settings['text_inputs'])} (BYTES) -> "
                 f"{', '.join(settings['model_inputs'])} "
                 f"with {folder.name}/tokenizer.json; rows padded to the request's longest "
                 f"({settings['padding']['side']} side), at most {settings['max_length']} tokens (the profile's "
                 f"longest): it {how} longer texts" + (" (tokenizer.json enables truncation)" if settings["truncation"]
                                                      else " (tokenizer.json enables no truncation)"))
    if settings.get("labels") is not None:
        notes.append(f"label step: label = config.id2label[argmax(logits)] ({len(settings['labels'])} labels)")
    return TokenizerSteps(step=tmp / STEP_FILE, tokenizer=folder / "tokenizer.json",
                          labels=settings.get("labels") is not None)


def render(settings: dict) -> str:
    import ast

    text = resources.files("navigator.triton").joinpath("tokenizer_step.py.tmpl").read_text(encoding="utf-8")
    literal = pprint.pformat(settings, width=100, sort_dicts=False)
    if ast.literal_eval(literal) != settings:
        raise RuntimeError("tokenizer step settings do not survive as a Python literal")
    text = text.replace(PLACEHOLDER, literal)
    ast.parse(text)
    return text


def _check_unchanged(st, folder: Path) -> None:
    """The folder still holds what was converted: its tokenizer is what the step will run."""
    import hashlib

    from navigator.sources.hf_folder import read_folder

    now = hashlib.sha256(f"{read_folder(folder).sha256()}\0{st.model.huggingface['task']}".encode()).hexdigest()
    if st.model.sha256 and now != st.model.sha256:
        raise UserInputError(f"--tokenizer: {folder} changed since navigator convert (its config, weights or "
                             "tokenizer files differ); convert it again")


def _token(value) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _settings(st, folder: Path, *, labels: bool) -> dict:
    """SETTINGS of the step, from the tokenizer's files, config.json and the shape profile."""
    from tokenizers import Tokenizer

    from navigator.sources.hf_folder import json_object, read_folder

    info = read_folder(folder, need_weights=False)
    where = folder / "tokenizer.json"
    tok_json = json_object(where)
    try:   # the library's own parse: a file that reads as JSON may still be no tokenizer
        tokenizer = Tokenizer.from_file(str(where))
    except Exception as e:   # noqa: BLE001 - tokenizers raises plain Exception
        raise UserInputError(f"{where}: the tokenizers library cannot read it ({' '.join(str(e).split())[:200]})") \
            from None
    tok_cfg = info.tokenizer_config
    profiles = [p["input_ids"] for p in st.shape_profiles or [] if "input_ids" in p]
    if not profiles:
        raise UserInputError("--tokenizer: the workspace has no shape profile for input_ids")
    longest = max(int(p["max"][1]) for p in profiles)
    shortest = min(int(p["min"][1]) for p in profiles)
    trunc = tok_json.get("truncation")
    truncation = None
    if isinstance(trunc, dict):
        longest = min(longest, int(trunc.get("max_length") or longest))
        truncation = {"strategy": _STRATEGIES.get(trunc.get("strategy"), "longest_first"),
                      "direction": str(trunc.get("direction") or "Right").lower(),
                      "stride": int(trunc.get("stride") or 0)}
    pad = tok_json.get("padding")
    if isinstance(pad, dict):
        strategy = pad.get("strategy")
        padding = {"side": str(pad.get("direction") or "Right").lower(), "id": int(pad.get("pad_id") or 0),
                   "type_id": int(pad.get("pad_type_id") or 0),
                   "fixed": int(strategy["Fixed"]) if isinstance(strategy, dict) and "Fixed" in strategy else None}
    else:
        pad_token = _token(tok_cfg.get("pad_token"))
        pad_id = tokenizer.token_to_id(pad_token) if pad_token else None
        if pad_id is None:
            pad_id = info.config.get("pad_token_id") if isinstance(info.config.get("pad_token_id"), int) else 0
        padding = {"side": "left" if tok_cfg.get("padding_side") == "left" else "right", "id": int(pad_id),
                   "type_id": 0, "fixed": None}
    task = st.model.huggingface["task"]
    pairs = task == "question-answering"
    settings = {
        "text_inputs": ["question", "context"] if pairs else ["text"],
        "model_inputs": {t.name: t.dtype for t in st.signature.inputs},
        "max_length": longest, "min_length": shortest, "truncation": truncation, "padding": padding,
        "examples": [{"question": [q for q, _ in b], "context": [c for _, c in b]} for b in PAIR_EXAMPLES]
        if pairs else [{"text": list(b)} for b in EXAMPLES],
        "logits": "logits", "labels": None,
    }
    if labels:
        id2label = info.config.get("id2label") or {}
        classes = next((o.shape[-1] for o in st.signature.outputs if o.name == "logits"), -1)
        count = classes if classes > 0 else len(id2label)
        settings["labels"] = [str(id2label.get(str(i), id2label.get(i, f"LABEL_{i}"))) for i in range(count)]
    return settings
