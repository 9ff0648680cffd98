"""What Navigator knows about one format, in one declarative record.

A :class:`Format` says where the artifact lives in ``formats/<key>/``, which
runners execute it on which device (or why it cannot be verified here), the
tolerance floor of its runtimes, its rank for ``best`` by preference, how
Triton serves it (a native backend, the Python backend, or why not at all)
and whether the artifact fixes its largest batch. The planner, the runners,
the tolerances, the Triton repository, the Python backend and the serving
profile all read these records; none keeps a table of its own.

Plugins add formats through the entry-point group ``navigator.formats``
(:mod:`navigator.formats.registry`): a ``Format`` (or a list of them) whose
``runner_classes`` name the runner classes it brings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class RunnerSpec:
    """One way to run a format: ``key`` is how status.yaml names it. ``provider`` is the
    runtime's backend or variant where it has several (onnxruntime's execution provider,
    torch.compile's mode); it replaces the device in the key. An ``opt_in`` runner runs only
    when ``--runners`` names its key (a variant too slow to build on every run); a
    ``serving_check`` one judges how a server runs the format (see the field)."""

    runner: str
    device: str
    provider: str | None = None
    opt_in: bool = field(default=False, compare=False)
    # runs the format as a server would where the server cannot be told our settings (OpenVINO's
    # default precision): its verdict decides whether Triton may serve the format, not the run's exit code
    serving_check: bool = field(default=False, compare=False)

    @property
    def key(self) -> str:
        return f"{self.runner}-{self.provider or self.device}"

    def to_dict(self) -> dict[str, str | None]:
        return {"runner": self.runner, "device": self.device, "provider": self.provider}


@dataclass(frozen=True)
class Serving:
    """A Triton backend for a format (FACTS.md, "Triton model configuration")."""

    backend: str
    platform: str = ""
    default_file: str = ""                  # name in the version folder ("" = Triton's default / none)
    devices: tuple[str, ...] = ("cpu", "gpu")
    name_convention: str = "artifact"       # artifact | pytorch (<name>__<index>) | ours (Python backend)
    note: str | None = None

    @property
    def implicit_state(self) -> bool:
        """Whether the backend keeps a sequence's implicit state (FACTS.md: onnxruntime, tensorrt and
        pytorch's libtorch; not openvino, tensorflow or the Python backend)."""
        return self.backend in ("onnxruntime", "tensorrt") or self.platform == "pytorch_libtorch"


# The Python backend: a generated model.py loads the artifact (navigator.triton.python_backend).
PYTHON = Serving("python", "", "model.py", name_convention="ours")


def _frozen(mapping: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class Format:
    """One format (``onnx``, ``openvino`` …). Fields are facts, never behaviour: the
    modules that act on them read them from here."""

    name: str
    artifact: str                                         # file (or folder) name inside formats/<key>/
    # device -> the runners that execute it there, in order of preference
    runners: Mapping[str, tuple[RunnerSpec, ...]] = field(default_factory=dict)
    # why a device has no runner (the format cannot be verified there), by device
    unverifiable: Mapping[str, str] = field(default_factory=dict)
    companions: tuple[str, ...] = ()                      # files beside the artifact that belong to it
    precisions: tuple[str, ...] = ("fp32",)               # precision variants the format can hold
    tolerance_floor: tuple[float, float] | None = None    # (atol, rtol) its fp32 kernels need at least
    # best by preference (--no-profile): lower first; built-ins are 0-10, a tie goes by key name
    preference: int = 100
    fixed_batch: bool = False                             # the artifact fixes its largest batch (engines)
    compiled_for_device: bool = False                     # runs only on the device it was compiled for
    # Triton: the native backend (None: the Python backend serves it, when python_loader is set)
    serving: Serving | None = None
    native_opt_in: Serving | None = None                  # a native backend used only when asked (aoti)
    python_loader: str | None = None                      # the loader model.py uses ("runner": our runner)
    python_packages: tuple[str, ...] = ()                 # pip packages that loader imports besides numpy
    python_devices: tuple[str, ...] = ("cpu", "gpu")      # instance kinds a Python-backend model can use
    not_servable: str | None = None                       # why Triton cannot serve it at all
    # As the source format of a run: its default targets ("?" = only when the edge's packages
    # are installed) and the ones added on a GPU.
    default_targets: tuple[str, ...] = ()
    cuda_default_targets: tuple[str, ...] = ()
    runner_classes: Mapping[str, str] = field(default_factory=dict)   # runner name -> "module:Class"
    # "module:function(path) -> notes" run on every converted artifact of the format before its
    # convert step may say ok; it raises when the artifact is invalid (the onnx format's graph check)
    check: str | None = None
    # "module:function(path, precision) -> share or None": the share of the artifact's weight bytes held
    # in a reduced precision's types; a key of that precision whose share is below half fails convert
    precision_share: str | None = None
    # "module:function(path) -> [paths]": files the artifact reads beside it (ONNX external data); a
    # Triton repository gets them, in the layout of the backend's default file when there are any
    data_files: str | None = None
    # the module of the fork server's preload (navigator.execution.forkserver.TORCH_PRELOAD) that a
    # worker loading or running this format's artifact needs imported before it is forked
    preload: str | None = None
    # a model file handed in with one of these suffixes is a source of this format (lower case)
    source_suffixes: tuple[str, ...] = ()
    # "module:Class" of the side `navigator debug` reads every op output of the artifact with
    # (navigator.tools.debug_sides); None: the format hides them and its nearest ONNX parent is compared
    debug_side: str | None = None

    def __post_init__(self) -> None:
        runners = {d: tuple(specs) for d, specs in dict(self.runners).items()}
        object.__setattr__(self, "runners", _frozen(runners))
        object.__setattr__(self, "unverifiable", _frozen(self.unverifiable))
        object.__setattr__(self, "runner_classes", _frozen(self.runner_classes))

    def runners_on(self, device: str) -> tuple[RunnerSpec, ...]:
        return self.runners.get(device, ())

    @property
    def servable(self) -> bool:
        return self.not_servable is None and (self.serving is not None or self.python_loader is not None)
