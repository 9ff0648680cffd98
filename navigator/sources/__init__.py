"""Sources: what the user hands in (an ONNX file, a PyTorch module or file, a
SavedModel or Keras model), its signature, its samples and reference outputs.

- :mod:`~navigator.sources.base`: the ``Source`` record and the digests resuming uses;
- :mod:`~navigator.sources.onnx`, :mod:`~navigator.sources.torch`,
  :mod:`~navigator.sources.tensorflow`, :mod:`~navigator.sources.huggingface`: the kinds;
- :mod:`~navigator.sources.signature`: ONNX signatures, batch dims, index bounds;
- :mod:`~navigator.sources.samples`: sample batches and shape profiles;
- :mod:`~navigator.sources.torch_support`, :mod:`~navigator.sources.tf_support`,
  :mod:`~navigator.sources.hf_support` (+ ``hf_inputs``, ``hf_folder``): the framework
  glue, imported only when such a source is used.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from navigator.errors import UserInputError
from navigator.sources.base import Source
from navigator.sources.hf_folder import is_hf_folder
from navigator.sources.onnx import open_onnx
from navigator.sources.tensorflow import FORMAT as SAVEDMODEL
from navigator.sources.tensorflow import open_saved_model, open_tf_object, saved_model_name
from navigator.sources.tf_support import is_saved_model_dir
from navigator.sources.torch import FORMAT as TORCH
from navigator.sources.torch import open_torch, open_torch_file

HUGGINGFACE = "huggingface"   # a --model-format, not a format: the folder's source is a torch one

__all__ = ["Source", "open_source", "default_name", "is_factory_spec", "is_hf_folder_spec", "torch_file_kind",
           "path_kind", "source_format", "is_hf"]


def is_hf_folder_spec(model: Any, model_format: str | None = None) -> bool:
    """A path to a Hugging Face model folder (a ``config.json`` of transformers), or any path with
    ``--model-format huggingface``."""
    if not isinstance(model, (str, os.PathLike)) or is_factory_spec(model):
        return False
    if model_format is not None:
        return model_format == HUGGINGFACE
    path = Path(model)
    return path.is_dir() and not is_saved_model_dir(path) and is_hf_folder(path)


def torch_file_kind(model: Any, model_format: str | None = None) -> str | None:
    """``torchscript`` / ``torch_export`` for a path to a PyTorch model file (by suffix, or
    --model-format), else None: such a file unpickles when loaded, so it is opened in a worker."""
    if not isinstance(model, (str, os.PathLike)) or is_factory_spec(model):
        return None
    path = Path(model)
    if model_format is not None:
        return model_format if model_format in ("torchscript", "torch_export") else None
    from navigator import formats

    kind = formats.by_suffix(path.suffix)   # a file format that needs torch to load it (Format.preload)
    return kind if kind is not None and formats.get(kind).preload and path.is_file() else None


def is_factory_spec(model: Any) -> bool:
    """``path/to/file.py:factory``: a PyTorch factory named on the command line or to the API."""
    return isinstance(model, str) and ":" in model and model.rpartition(":")[0].endswith(".py")


def path_kind(path: Path) -> str | None:
    """What a model path holds, told from its name and folder layout (nothing is loaded): a
    format named by its suffix (``Format.source_suffixes``; a file whose format needs torch only when
    it is a file), a SavedModel or Hugging Face folder; None when none of these."""
    from navigator import formats

    fmt = formats.by_suffix(path.suffix)
    if fmt is not None and not formats.get(fmt).preload:
        return fmt
    kind = torch_file_kind(path)
    if kind is not None:
        return kind
    if is_saved_model_dir(path):
        return SAVEDMODEL
    return HUGGINGFACE if is_hf_folder_spec(path) else None


def source_format(model: Any) -> str | None:
    """The format ``model`` would be opened as, told from its name or its classes' modules alone
    (nothing opened, no framework imported); None when that does not tell."""
    if is_factory_spec(model):
        return TORCH
    if isinstance(model, (str, os.PathLike)):
        kind = path_kind(Path(model))
        return TORCH if kind == HUGGINGFACE else kind
    from navigator.sources import hf_support, tf_support, torch_support

    if tf_support.is_tf_object(model):
        return SAVEDMODEL
    return TORCH if hf_support.is_hf_model(model) or torch_support.is_torch_module(model) else None


def is_hf(model: Any) -> bool:
    """A Hugging Face folder or a live transformers model, told without loading it."""
    from navigator.sources import hf_support

    if isinstance(model, (str, os.PathLike)):
        return is_hf_folder_spec(model)
    return hf_support.is_hf_model(model)


def default_name(model: str | os.PathLike[str]) -> str:
    """The name ``open_source(model).name`` gives a model named by a path (the workspace's
    name without --model-name), found without opening the model: the file's stem, the
    factory file's stem for ``file.py:factory``, a SavedModel folder's name."""
    text = os.fspath(model)
    if is_factory_spec(text):
        return Path(text.rpartition(":")[0]).stem
    path = Path(text)
    return saved_model_name(path) if path.is_dir() else path.stem


def open_source(model: Any, model_format: str | None = None, signature_name: str | None = None, *,
                task: str | None = None, trust_remote_code: bool = False) -> Source:
    """Recognise the model: a path (ONNX file, ...) or a live framework object. ``task`` and
    ``trust_remote_code`` apply to Hugging Face models only."""
    source = _open(model, model_format, signature_name, task, trust_remote_code)
    from navigator.sources.huggingface import HFSource

    if not isinstance(source, HFSource):
        if task is not None:
            raise UserInputError(f"--task {task}: applies to Hugging Face models only (a folder with config.json, "
                                 "or a PreTrainedModel)")
        if trust_remote_code:
            raise UserInputError("--trust-remote-code: applies to Hugging Face model folders only")
    return source


def _open(model: Any, model_format: str | None, signature_name: str | None, task: str | None,
          trust_remote_code: bool) -> Source:
    if is_factory_spec(model):
        from navigator import deps
        from navigator.sources import torch_support

        if not deps.has("torch"):
            raise UserInputError(f"{model}: a PyTorch factory needs torch", hint="pip install 'navigator[torch]'")
        return open_torch(torch_support.load_factory(model), model)
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        fmt = model_format or path_kind(path)
        if fmt is None:
            if not path.exists():
                raise UserInputError(f"{path}: no such file or directory")
            else:
                raise UserInputError(f"{path}: cannot tell the model format from the name; supported here: "
                                     ".onnx, .pt/.jit (TorchScript), .pt2 files, SavedModel and Hugging Face "
                                     "(config.json) folders "
                                     "(give --model-format)")
        if not path.exists():
            raise UserInputError(f"{path}: no such file or directory")
        if fmt == "onnx":
            if path.is_dir():
                raise UserInputError(f"{path}: is a directory, expected an .onnx file")
            return open_onnx(path)
        if fmt in ("torchscript", "torch_export"):
            return open_torch_file(path, fmt)
        if fmt == "savedmodel":
            return open_saved_model(path, signature_name)
        if fmt == HUGGINGFACE:
            from navigator.sources.huggingface import open_hf_folder

            if not path.is_dir():
                raise UserInputError(f"{path}: a Hugging Face model is a folder (config.json and weights)")
            return open_hf_folder(path, task, trust_remote_code)
        raise UserInputError(f"--model-format {fmt!r} is not supported; supported: onnx, torchscript, torch_export, "
                             "savedmodel, huggingface")
    from navigator.sources import tf_support

    if tf_support.is_tf_object(model):
        return open_tf_object(model, signature_name)
    from navigator.sources import hf_support, torch_support

    if hf_support.is_hf_model(model):
        from navigator.sources.huggingface import open_hf_model

        return open_hf_model(model, task)
    if torch_support.is_torch_module(model):
        return open_torch(model, None)
    raise UserInputError(f"cannot convert an object of type {type(model).__name__}; give an nn.Module, a Keras "
                         "model, a tf.Module, a transformers PreTrainedModel, a path to an .onnx file, a "
                         "SavedModel or Hugging Face model folder, or path/to/file.py:factory")
