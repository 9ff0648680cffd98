"""Hugging Face transformers glue for the ``huggingface`` source: which task a checkpoint
is for, loading it safely, the module Navigator converts (named inputs in, the task's
output fields out) and the inputs each task takes.

transformers and torch are imported inside functions only. Loading never runs code from
the folder unless the user said ``--trust-remote-code``, never downloads
(``local_files_only``), reads safetensors, or a pickled ``pytorch_model.bin`` with
``weights_only=True``, and keeps the dtype the weights were saved in (``dtype="auto"``)
until the module is made float32 for the reference.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import pickle
from dataclasses import dataclass
from typing import Any

from navigator.errors import UserInputError

log = logging.getLogger(__name__)

TEXT, IMAGE, AUDIO, FEATURES = "input_ids", "pixel_values", "input_values", "input_features"


@dataclass(frozen=True)
class Task:
    """One task: the auto-mapping that lists its architectures (model_type -> class names in
    ``transformers.models.auto.modeling_auto``), the auto class that loads a checkpoint for
    it, the output fields it returns (``optional``: only when the model has them) and the
    main inputs it takes (``model.main_input_name``)."""

    name: str
    mapping: str
    auto_class: str
    outputs: tuple[str, ...]
    main_inputs: tuple[str, ...]
    optional: tuple[str, ...] = ()


# Detection tries them in this order: a class listed under a head task wins over the base
# mapping (feature extraction), which lists every base model. Names follow Optimum's tasks.
TASKS: dict[str, Task] = {t.name: t for t in (
    Task("text-classification", "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
         "AutoModelForSequenceClassification", ("logits",), (TEXT,)),
    Task("token-classification", "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES", "AutoModelForTokenClassification",
         ("logits",), (TEXT,)),
    Task("question-answering", "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES", "AutoModelForQuestionAnswering",
         ("start_logits", "end_logits"), (TEXT,)),
    Task("fill-mask", "MODEL_FOR_MASKED_LM_MAPPING_NAMES", "AutoModelForMaskedLM", ("logits",), (TEXT,)),
    Task("text-generation", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "AutoModelForCausalLM", ("logits",), (TEXT,)),
    Task("image-classification", "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES", "AutoModelForImageClassification",
         ("logits",), (IMAGE,)),
    Task("object-detection", "MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES", "AutoModelForObjectDetection",
         ("logits", "pred_boxes"), (IMAGE,)),
    Task("automatic-speech-recognition", "MODEL_FOR_CTC_MAPPING_NAMES", "AutoModelForCTC", ("logits",),
         (AUDIO, FEATURES)),
    Task("audio-classification", "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES", "AutoModelForAudioClassification",
         ("logits",), (AUDIO, FEATURES)),
    Task("feature-extraction", "MODEL_MAPPING_NAMES", "AutoModel", ("last_hidden_state",),
         (TEXT, IMAGE, AUDIO, FEATURES), optional=("pooler_output",)),
)}
TEXT_TASKS = tuple(t.name for t in TASKS.values() if t.main_inputs == (TEXT,))


def supported() -> str:
    return ", ".join(TASKS)


def is_hf_model(obj: Any) -> bool:
    """True for a transformers ``PreTrainedModel``, without importing transformers."""
    return any(c.__name__ == "PreTrainedModel" and c.__module__.startswith("transformers.")
               for c in type(obj).__mro__)


# ------------------------------------------------------------------ the task
def _class_names(mapping: dict) -> set[str]:
    names = set()
    for value in mapping.values():
        names.update(value if isinstance(value, (tuple, list)) else (value,))
    return names


def _what_else(arch: str) -> str | None:
    """The kind of head ``arch`` is, from the auto mappings of tasks Navigator does not support
    (``MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES`` -> "seq to seq causal lm")."""
    from transformers.models.auto import modeling_auto

    supported_maps = {t.mapping for t in TASKS.values()} | {"MODEL_FOR_PRETRAINING_MAPPING_NAMES",
                                                             "MODEL_WITH_LM_HEAD_MAPPING_NAMES"}
    for name in sorted(dir(modeling_auto)):
        if name.endswith("_MAPPING_NAMES") and name not in supported_maps:
            mapping = getattr(modeling_auto, name)
            if isinstance(mapping, dict) and arch in _class_names(mapping):
                return name.removeprefix("MODEL_FOR_").removesuffix("_MAPPING_NAMES").replace("_", " ").lower()
    return None


def detect_task(config: dict, requested: str | None, where: str) -> tuple[Task, str]:
    """(the task, how it was chosen): ``--task`` when given, else the first of the config's
    ``architectures`` that a supported task lists (or, for remote code, names in ``auto_map``)."""
    if requested is not None:
        if requested not in TASKS:
            raise UserInputError(f"--task {requested!r} is not supported; supported tasks: {supported()}")
        return TASKS[requested], "--task"
    from transformers.models.auto import modeling_auto

    archs = [a for a in (config.get("architectures") or []) if isinstance(a, str)]
    for arch in archs:
        for task in TASKS.values():
            if arch in _class_names(getattr(modeling_auto, task.mapping, {})):
                return task, f"config.architectures {arch}"
    auto_map = config.get("auto_map") or {}
    for task in TASKS.values():
        if task.auto_class in auto_map:
            return task, f"config.auto_map {task.auto_class}"
    if not archs:
        raise UserInputError(f"{where}: config.json names no architectures, so the task is unknown",
                             hint=f"--task one of {supported()}")
    kind = _what_else(archs[0])
    what = f"a {kind} model" if kind else "an architecture no supported task lists"
    raise UserInputError(f"{where}: {archs[0]} is {what}; supported tasks: {supported()}",
                         hint="--task T loads the checkpoint for one of them")


# ------------------------------------------------------------------ loading
@contextlib.contextmanager
def _quiet_transformers():
    """transformers' own warnings (unused weights, newly initialised heads) go to our log,
    where the source turns what matters into one note."""
    from transformers.utils import logging as tlog

    level, bars = tlog.get_verbosity(), tlog.is_progress_bar_enabled()
    tlog.set_verbosity_error()
    tlog.disable_progress_bar()
    try:
        yield
    finally:
        tlog.set_verbosity(level)
        if bars:
            tlog.enable_progress_bar()


def _remote_code_error(folder) -> UserInputError:
    names = sorted(set(map(str, (folder.config.get("auto_map") or {}).values())))
    what = f" ({', '.join(names[:3])})" if names else ""
    return UserInputError(f"{folder.path}: the model's code ships in the folder{what}; Navigator runs such code "
                          "only with --trust-remote-code", hint="read the folder's *.py files first")


def load_model(folder, task: Task, trust_remote_code: bool = False) -> tuple[Any, dict]:
    """The checkpoint of ``folder`` (an :class:`~navigator.sources.hf_folder.HFFolder`) loaded
    for ``task``, in eval mode, in the dtype it was saved in; and what loading found
    (``dtype``, ``missing``: weights the checkpoint lacks, initialised at random)."""
    import torch
    import transformers

    where = str(folder.path)
    try:
        # weights the checkpoint lacks (a head --task adds) are drawn at random: from a fixed seed, so the
        # workers that rebuild the model draw the same ones; the caller's random state is left as it was
        with _quiet_transformers(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            config = transformers.AutoConfig.from_pretrained(folder.path, trust_remote_code=trust_remote_code,
                                                             local_files_only=True)
            auto = getattr(transformers, task.auto_class)
            model, info = auto.from_pretrained(folder.path, config=config, dtype="auto",
                                               use_safetensors=folder.safetensors, weights_only=True,
                                               trust_remote_code=trust_remote_code, local_files_only=True,
                                               output_loading_info=True)
    except UserInputError:
        raise
    except pickle.UnpicklingError as e:
        log.info("weights_only refused %s: %s", folder.weights, e)
        raise UserInputError(f"{where}: {folder.weights[0]} holds objects other than tensors, which Navigator "
                             "does not unpickle (torch.load with weights_only=True refused it)",
                             hint="save the weights as safetensors (save_pretrained does by default)") from None
    except ValueError as e:
        if "trust_remote_code" in str(e):
            raise _remote_code_error(folder) from None
        raise UserInputError(f"{where}: transformers cannot load it for {task.name} "
                             f"({type(e).__name__}: {' '.join(str(e).split())[:300]})") from None
    except (OSError, KeyError, TypeError, RuntimeError, ImportError, AttributeError) as e:
        raise UserInputError(f"{where}: transformers cannot load it for {task.name} "
                             f"({type(e).__name__}: {' '.join(str(e).split())[:300]})") from None
    model.eval()
    missing = sorted(info.get("missing_keys") or [])
    _refuse_mismatched_weights(model, missing, info.get("unexpected_keys") or [], where, config)
    return model, {"dtype": str(model.dtype).removeprefix("torch."), "missing": missing}


def _refuse_mismatched_weights(model, missing: list[str], unexpected: list[str], where: str, config) -> None:
    """A checkpoint that leaves most of the model's weights random (config.json names another
    architecture than the weights were saved from) is no trained model: verifying its random
    copy would say nothing about the user's. A task head the checkpoint lacks stays a note."""
    sizes = {name: p.numel() for name, p in model.state_dict().items()}
    total = sum(sizes.values()) or 1
    random_share = sum(sizes.get(name, 0) for name in missing) / total
    if random_share >= 0.5:
        raise UserInputError(
            f"{where}: config.json names model_type {getattr(config, 'model_type', '?')!r}, but the checkpoint does "
            f"not fit it: {random_share:.0%} of the weights ({len(missing)} tensors) are not in it and would be "
            f"random" + (f", and {len(unexpected)} of its tensors are unused" if unexpected else ""),
            hint="check that config.json belongs to these weights")


def check_model(model, task: Task, where: str) -> None:
    """The model is one Navigator can convert for ``task``: an encoder (or a decoder-only LM) with
    one of the task's main inputs."""
    params = forward_parameters(model)
    if "decoder_input_ids" in params:
        raise UserInputError(f"{where}: {type(model).__name__} is an encoder-decoder model, which Navigator does not "
                             f"convert yet; supported tasks: {supported()}")
    main = getattr(model, "main_input_name", None)
    if main not in task.main_inputs:
        raise UserInputError(f"{where}: {type(model).__name__} takes {main!r}, but {task.name} takes "
                             f"{' or '.join(task.main_inputs)}", hint=f"--task one of {supported()}")


def forward_parameters(model) -> list[str]:
    try:
        params = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def fixed_arguments(model) -> dict:
    """Keyword arguments every call gets: no KV cache (``use_cache=False``: a causal LM returns
    logits only), and a ModelOutput rather than a tuple where the model still takes ``return_dict``."""
    params = forward_parameters(model)
    fixed = {}
    if "use_cache" in params:
        fixed["use_cache"] = False
    if "return_dict" in params:
        fixed["return_dict"] = True
    return fixed


# ------------------------------------------------------------------ the module Navigator converts
def task_module(model, inputs: list[str], outputs: list[str], fixed: dict):
    """``model`` behind positional tensors named ``inputs`` returning ``{field: tensor}`` for the
    task's output fields, in that order (Navigator names the outputs after the keys)."""
    import torch

    class HFTaskModule(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model
            self.input_names = tuple(inputs)
            self.output_names = tuple(outputs)
            self.fixed = dict(fixed)

        def forward(self, *args):
            out = self.model(**dict(zip(self.input_names, args)), **self.fixed)
            return {name: getattr(out, name) for name in self.output_names}

    wrapped = HFTaskModule()
    wrapped.training = False
    return wrapped


def output_fields(model, task: Task, feeds: dict, fixed: dict, where: str) -> list[str]:
    """The task's output fields this model returns (one probe run on ``feeds``)."""
    import torch

    with torch.no_grad():
        out = model(**{k: torch.from_numpy(v) for k, v in feeds.items()}, **fixed)
    if isinstance(out, tuple):
        raise UserInputError(f"{where}: {type(model).__name__} returns a tuple, not a ModelOutput with named fields")
    have = [name for name in task.outputs + task.optional if isinstance(getattr(out, name, None), torch.Tensor)]
    missing = [name for name in task.outputs if name not in have]
    if missing:
        raise UserInputError(f"{where}: {type(model).__name__} returns no {missing[0]!r} for {task.name}",
                             hint=f"--task one of {supported()}")
    return have


def runs(model, feeds: dict, fixed: dict) -> str | None:
    """None when the model runs on ``feeds``, else why not (one line)."""
    import torch

    try:
        with torch.no_grad():
            model(**{k: torch.from_numpy(v) for k, v in feeds.items()}, **fixed)
    except Exception as e:   # noqa: BLE001 - a size the model refuses is an answer, not an error
        return " ".join(f"{type(e).__name__}: {e}".split())[:200]
    return None


def rebuild(record: dict):
    """The task module a source record describes (in a worker or a reproducer): the folder
    loaded as the source loaded it, made float32."""
    from navigator.sources.hf_folder import read_folder

    folder = read_folder(record["folder"])
    model, _ = load_model(folder, TASKS[record["task"]], bool(record.get("trust_remote_code")))
    return task_module(model.float(), record["inputs"], record["outputs"], record.get("fixed") or {})

