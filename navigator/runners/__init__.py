"""Runners: how a format is executed. Each loads an artifact on a device and
maps ``{name: ndarray}`` feeds to ``{name: ndarray}`` outputs.

Runner classes are named here as strings and imported only when used, so
``import navigator.runners`` pulls in no framework.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from navigator.errors import UserInputError

# runner name -> (module, class)
_CLASSES = {
    "onnxruntime": ("navigator.runners.onnxruntime", "OnnxruntimeRunner"),
    "openvino": ("navigator.runners.openvino", "OpenVINORunner"),
    "torch": ("navigator.runners.torch", "TorchEagerRunner"),
    "torch_compile": ("navigator.runners.torch", "TorchCompileRunner"),
    "torchscript": ("navigator.runners.torch", "TorchScriptRunner"),
    "torch_export": ("navigator.runners.torch", "TorchExportRunner"),
    "aoti": ("navigator.runners.torch", "AotiRunner"),
    "tensorrt": ("navigator.runners.tensorrt", "TensorRTRunner"),
    "tensorrt_rtx": ("navigator.runners.tensorrt", "TensorRTRTXRunner"),
    "tensorflow": ("navigator.runners.tensorflow", "TensorFlowRunner"),
}


@dataclass(frozen=True)
class RunnerSpec:
    """One way to run a format: ``key`` is how status.yaml names it."""

    runner: str
    device: str
    provider: str | None = None
    requires: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.runner}-{self.provider or self.device}"

    def to_dict(self) -> dict:
        return {"runner": self.runner, "device": self.device, "provider": self.provider}


# format -> the runner specs per device
_BY_FORMAT: dict[str, dict[str, tuple[RunnerSpec, ...]]] = {
    "onnx": {
        "cpu": (RunnerSpec("onnxruntime", "cpu", None, ("onnxruntime",)),),
        "cuda": (RunnerSpec("onnxruntime", "cuda", None, ("onnxruntime",)),
                 RunnerSpec("onnxruntime", "cuda", "tensorrt", ("onnxruntime",))),
    },
    "openvino": {
        "cpu": (RunnerSpec("openvino", "cpu", None, ("openvino",)),),
        "cuda": (),
    },
    "torch": {d: (RunnerSpec("torch", d, None, ("torch",)), RunnerSpec("torch_compile", d, None, ("torch",)))
              for d in ("cpu", "cuda")},
    "torchscript": {d: (RunnerSpec("torchscript", d, None, ("torch",)),) for d in ("cpu", "cuda")},
    "torch_export": {d: (RunnerSpec("torch_export", d, None, ("torch",)),) for d in ("cpu", "cuda")},
    "aoti": {d: (RunnerSpec("aoti", d, None, ("torch",)),) for d in ("cpu", "cuda")},
    # Engines run on a GPU only. TensorRT-RTX builds on a CPU, so a CPU run lists its
    # runner too: the step is skipped with the reason instead of silently absent.
    "tensorrt": {"cpu": (), "cuda": (RunnerSpec("tensorrt", "cuda", None, ("tensorrt",)),)},
    "tensorrt_rtx": {"cpu": (RunnerSpec("tensorrt_rtx", "cpu", None, ("tensorrt_rtx",)),),
                     "cuda": (RunnerSpec("tensorrt_rtx", "cuda", None, ("tensorrt_rtx",)),)},
    "savedmodel": {d: (RunnerSpec("tensorflow", d, None, ("tensorflow",)),) for d in ("cpu", "cuda")},
}


def register_runner(name: str, module: str, cls: str, formats: dict[str, dict[str, tuple[RunnerSpec, ...]]]) -> None:
    """Add a runner class (by import path) and the formats/devices it serves."""
    _CLASSES[name] = (module, cls)
    for fmt, by_device in formats.items():
        entry = _BY_FORMAT.setdefault(fmt, {})
        for device, specs in by_device.items():
            entry[device] = tuple(s for s in entry.get(device, ()) if s.key not in {x.key for x in specs}) + specs


def known_runners() -> list[str]:
    return sorted(_CLASSES)


def specs_for(fmt: str, device: str) -> tuple[RunnerSpec, ...]:
    return _BY_FORMAT.get(fmt, {}).get(device, ())


def runner_class(name: str):
    if name not in _CLASSES:
        raise UserInputError(f"unknown runner {name!r}; known: {', '.join(sorted(_CLASSES))}")
    module, cls = _CLASSES[name]
    return getattr(importlib.import_module(module), cls)


def create(spec: RunnerSpec, path, **options):
    """An (inactive) runner for the artifact at ``path``."""
    return runner_class(spec.runner)(path, device=spec.device, provider=spec.provider, **options)
