"""The convert-many manifest: models, each with its options over shared ``defaults:``.

    defaults: {targets: [onnx, onnx-optimized], max_batch_size: 16}   # navigator convert's options
    resources: {cpus: 1}                     # what each model's task asks the cluster for
    retries: 2                               # re-runs of a model whose node was lost
    models:
      - a.onnx                               # a path alone: the defaults apply
      - {model: cnn.py:small_cnn, shapes: "x:8x3x32x32", resources: {gpus: 1, accelerator_type: H100}}

Everything is checked here, before any work starts, and each mistake is one line naming the
entry: options go through :func:`navigator.config.from_mapping` (the CLI's and
``--config-path``'s one adapter), target keys through the format registry, model paths must
exist, and two entries may not share a workspace. Relative paths (models, ``samples``,
``triton_repo``, ``trt_plugins``) are relative to the manifest's folder. The file is read
by :func:`navigator.config.read_yaml` (a safe loader, YAML aliases refused, at most 1 MiB).
Nothing is opened or imported: a ``file.py:factory`` is only checked to exist, so the driver
never imports torch.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from navigator.config import NavigatorConfig, from_mapping
from navigator.errors import UserInputError

MANIFEST_KEYS = ("defaults", "models", "resources", "retries")
RESOURCE_KEYS = ("cpus", "memory_gb", "gpus", "accelerator_type")
# Options that name files: relative to the manifest's folder, not to wherever a task runs.
PATH_OPTIONS = ("samples", "triton_repo")
# Options a manifest may not set per model: one run has one workdir (the summary, `navigator
# gate DIR` and resuming all look there), and the manifest is itself the configuration.
RUN_OPTIONS = {"workdir": "every model of a run shares --workdir",
               "config_path": "the manifest is the configuration: put the options in defaults:"}
DEFAULT_RETRIES = 2
GIB = 1 << 30


@dataclass(frozen=True)
class Resources:
    """What one model's task asks the cluster for (Ray resource requests)."""

    cpus: float = 1.0
    gpus: float = 0.0
    memory_gb: float | None = None          # Ray's logical `memory` resource; None: not requested
    accelerator_type: str | None = None     # e.g. H100: engines are built on the GPU kind they run on

    def describe(self) -> str:
        parts = [f"{self.cpus:g} CPU"]
        if self.gpus:
            parts.append(f"{self.gpus:g} GPU")
        if self.memory_gb:
            parts.append(f"{self.memory_gb:g} GiB")
        if self.accelerator_type:
            parts.append(f"accelerator_type {self.accelerator_type}")
        return ", ".join(parts)


@dataclass(frozen=True)
class ModelEntry:
    index: int
    label: str                  # the model as the manifest wrote it, for messages
    model: str                  # an absolute path, or an absolute file.py:factory
    name: str                   # the workspace's name (<name>.nav.workspace)
    options: dict = field(repr=False, default_factory=dict)   # user spellings, paths absolute, workdir set
    config: NavigatorConfig = field(repr=False, default_factory=NavigatorConfig)
    resources: Resources = field(default_factory=Resources)

    @property
    def where(self) -> str:
        return f"models[{self.index}] ({self.label})"

    @property
    def profiles(self) -> bool:
        return not self.config.no_profile

    @property
    def is_factory(self) -> bool:
        """A ``file.py:factory``: importing it changes the importing process (sys.path, sys.modules)."""
        file, sep, _ = self.model.rpartition(":")
        return bool(sep) and file.endswith(".py")


@dataclass(frozen=True)
class Manifest:
    source: str                 # as named, for messages
    workdir: Path
    models: tuple[ModelEntry, ...]
    retries: int = DEFAULT_RETRIES
    path: str | None = None     # the file's absolute path (None for a mapping)


def load_manifest(manifest: Any, *, workdir: str | os.PathLike | None = None) -> Manifest:
    """A checked :class:`Manifest` from a YAML path or a mapping (relative paths of a mapping
    are relative to the current directory)."""
    from navigator.config import read_yaml

    if isinstance(manifest, dict):
        data, source, base = manifest, "manifest", Path.cwd()
    elif isinstance(manifest, (str, os.PathLike)):
        path = Path(manifest)
        source, base = str(path), path.resolve().parent
        data = read_yaml(path, source)     # no aliases, at most 1 MiB: as every option file
    else:
        raise UserInputError(f"manifest: expected a path to a YAML file or a mapping, got {type(manifest).__name__}")
    if not isinstance(data, dict):
        raise UserInputError(f"{source}: expected a mapping with models: at the top level")
    data = {_key(k): v for k, v in data.items()}
    unknown = sorted(k for k in data if k not in MANIFEST_KEYS)
    if unknown:
        raise UserInputError(f"{source}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(MANIFEST_KEYS)}")
    defaults = _mapping(f"{source}: defaults", data.get("defaults"))
    _refuse_run_options(f"{source}: defaults", defaults)
    shared = _resources(f"{source}: resources", data.get("resources"), Resources())
    retries = data.get("retries", DEFAULT_RETRIES)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise UserInputError(f"{source}: retries: expected an integer >= 0, got {retries!r}")
    entries = data.get("models")
    if not isinstance(entries, list) or not entries:
        raise UserInputError(f"{source}: models: expected a non-empty list of models (paths or mappings with model:)")
    root = Path(workdir if workdir is not None else NavigatorConfig.DEFAULTS["workdir"]).expanduser().resolve()
    if root.exists() and not root.is_dir():
        raise UserInputError(f"--workdir {root}: is a file, expected a folder")
    models: list[ModelEntry] = []
    seen: dict[str, ModelEntry] = {}
    for i, entry in enumerate(entries):
        m = _entry(source, base, root, i, entry, defaults, shared)
        other = seen.get(m.name)
        if other is not None:
            raise UserInputError(f"{source}: {other.where} and {m.where} would share the workspace "
                                 f"{m.name}.nav.workspace; give one of them a model_name")
        seen[m.name] = m
        models.append(m)
    path = str(Path(manifest).resolve()) if isinstance(manifest, (str, os.PathLike)) else None
    return Manifest(source=source, workdir=root, models=tuple(models), retries=retries, path=path)


def _key(k: Any) -> str:
    return str(k).replace("-", "_")


def _mapping(where: str, value: Any) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UserInputError(f"{where}: expected a mapping, got {type(value).__name__} ({value!r})")
    return {_key(k): v for k, v in value.items()}


def _refuse_run_options(where: str, options: dict) -> None:
    for key, why in RUN_OPTIONS.items():
        if key in options:
            raise UserInputError(f"{where}: {key} cannot be set here ({why})")


def _resources(where: str, value: Any, base: Resources) -> Resources:
    spec = _mapping(where, value)
    unknown = sorted(k for k in spec if k not in RESOURCE_KEYS)
    if unknown:
        raise UserInputError(f"{where}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(RESOURCE_KEYS)}")
    out = {}
    for key in ("cpus", "gpus", "memory_gb"):
        if key in spec:
            v = spec[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (
                    key != "gpus" and v == 0):
                bound = ">= 0" if key == "gpus" else "> 0"
                raise UserInputError(f"{where}.{key}: expected a number {bound}, got {v!r}")
            out[key] = float(v)
    if "accelerator_type" in spec:
        v = spec["accelerator_type"]
        if not isinstance(v, str) or not v.strip():
            raise UserInputError(f"{where}.accelerator_type: expected a GPU kind such as H100, got {v!r}")
        out["accelerator_type"] = v.strip()
    return Resources(**{**base.__dict__, **out})


def _model_path(where: str, base: Path, text: Any) -> str:
    if not isinstance(text, str) or not text.strip():
        raise UserInputError(f"{where}: model: expected a path (model.onnx, file.py:factory, a SavedModel folder), "
                             f"got {text!r}")
    file, sep, factory = text.rpartition(":")
    if sep and file.endswith(".py"):
        path = (base / Path(file).expanduser()).resolve()
        if not path.is_file():
            raise UserInputError(f"{where}: {file}: no such file")
        if not factory.isidentifier():
            raise UserInputError(f"{where}: {text}: {factory!r} is not a function name")
        return f"{path}:{factory}"
    path = (base / Path(text).expanduser()).resolve()
    if not path.exists():
        raise UserInputError(f"{where}: {text}: no such file or directory")
    return str(path)


def _entry(source: str, base: Path, root: Path, i: int, entry: Any, defaults: dict,
           shared: Resources) -> ModelEntry:
    from navigator import formats
    from navigator.sources import default_name
    from navigator.workspace.layout import Workspace

    where = f"{source}: models[{i}]"
    if isinstance(entry, str):
        entry = {"model": entry}
    entry = _mapping(where, entry)
    if "model" not in entry:
        raise UserInputError(f"{where}: needs model: (a path, file.py:factory or a SavedModel folder)")
    label = str(entry["model"])
    where = f"{where} ({label})"
    model = _model_path(where, base, entry.pop("model"))
    resources = _resources(f"{where}: resources", entry.pop("resources", None), shared)
    _refuse_run_options(where, entry)
    options = {**defaults, **entry}
    for key in PATH_OPTIONS:
        if isinstance(options.get(key), str):
            options[key] = str((base / Path(options[key]).expanduser()).resolve())
    plugins = options.get("trt_plugins")
    if plugins is not None:
        items = plugins.split(",") if isinstance(plugins, str) else plugins
        if isinstance(items, list):
            options["trt_plugins"] = [str((base / Path(str(p).strip()).expanduser()).resolve()) for p in items]
    options["workdir"] = str(root)
    try:
        config = from_mapping(options, source=where)
    except UserInputError as e:   # messages about values name the option, not the entry: add it
        line = e.one_line()
        raise UserInputError(line if line.startswith(where) else f"{where}: {line}") from None
    for option, key in [("targets", t) for t in config.targets or ()] + [("reference", config.reference)]:
        try:
            if key:
                formats.parse_key(key)
        except UserInputError as e:
            raise UserInputError(f"{where}: {option}: {e.one_line()}") from None
    name = Workspace.for_model(root, config.model_name or default_name(model)).name
    if resources.gpus == 0 and config.device == "cuda":
        resources = Resources(**{**resources.__dict__, "gpus": 1.0})
    if resources.memory_gb is None and config.worker_memory_gb:
        # the worker's limit is what one format may use; the model's formats run one at a time
        resources = Resources(**{**resources.__dict__, "memory_gb": config.worker_memory_gb})
    if resources.accelerator_type and not resources.gpus:
        raise UserInputError(f"{where}: resources.accelerator_type {resources.accelerator_type} needs gpus >= 1 "
                             "(or device: cuda)")
    return ModelEntry(index=i, label=label, model=model, name=name, options=options, config=config,
                      resources=resources)
