"""What Triton serves each format with (FACTS.md, "Triton model configuration").

Declarative: one ``Serving`` record per format. A format without a native
backend here (torch_export, aoti unless asked for the PyTorch backend, any
format with ``--python-backend``) is served by the Python backend through a
generated ``model.py`` (:mod:`navigator.triton.python_backend`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from navigator.errors import UserInputError


@dataclass(frozen=True)
class Serving:
    backend: str
    platform: str = ""
    default_file: str = ""                  # name in the version folder ("" = Triton's default / none)
    devices: tuple[str, ...] = ("cpu", "gpu")
    name_convention: str = "artifact"       # artifact | pytorch (<name>__<index>) | ours (Python backend)
    note: str | None = None


NATIVE: dict[str, Serving] = {
    "onnx": Serving("onnxruntime", "onnxruntime_onnx", "model.onnx"),
    "openvino": Serving("openvino", "", "model.xml", devices=("cpu",)),
    "torchscript": Serving("pytorch", "pytorch_libtorch", "model.pt", name_convention="pytorch"),
    "torch_tensorrt": Serving("pytorch", "pytorch_libtorch", "model.pt", devices=("gpu",),
                              name_convention="pytorch"),
    "tensorrt": Serving("tensorrt", "tensorrt_plan", "model.plan", devices=("gpu",),
                        note="an engine loads only with the TensorRT version that built it, on the same GPU "
                             "architecture: check it with navigator check-engine PLAN --triton RELEASE"),
    "savedmodel": Serving("tensorflow", "tensorflow_savedmodel", "model.savedmodel",
                          note="Triton deprecated its TensorFlow backend in 25.03 and stock containers no longer "
                               "ship it: deploy the onnx format instead (same verified function, served by the "
                               "ONNX Runtime backend that every container has)"),
    "tf_trt": Serving("tensorflow", "tensorflow_savedmodel", "model.savedmodel", devices=("gpu",),
                      note="Triton deprecated its TensorFlow backend in 25.03: deploy onnx or tensorrt instead"),
}

# aoti with --aoti-native: the PyTorch backend's AOTInductor platform (beta in Triton).
AOTI_NATIVE = Serving("pytorch", "torch_aoti", "model.pt2", name_convention="pytorch",
                      note="platform torch_aoti is beta in Triton and needs the exact torch version that "
                           "compiled the package, on the device it was compiled for")

PYTHON = Serving("python", "", "model.py", name_convention="ours")

# Formats the Python backend's model.py knows how to load.
PYTHON_LOADABLE = ("onnx", "openvino", "torchscript", "torch_export", "aoti")

# Formats that are not a file artifact Triton could load.
NOT_SERVABLE = {
    "torch": "the eager PyTorch source is not an artifact; serve torchscript, torch_export or onnx",
    "tensorrt_rtx": "a TensorRT-RTX engine never loads in Triton's TensorRT backend (another runtime, another plan "
                    "header); serve the tensorrt format, built inside the Triton container with the trtexec line of "
                    "its reproduce.sh, or onnx",
}

_INDEXED = re.compile(r"^.+__\d+$")


def serving_for(fmt: str, *, python_backend: bool, aoti_native: bool) -> Serving:
    """How Triton serves ``fmt``; raises UserInputError when it cannot."""
    if fmt in NOT_SERVABLE:
        raise UserInputError(f"format {fmt} cannot be served by Triton: {NOT_SERVABLE[fmt]}")
    if python_backend:
        if fmt not in PYTHON_LOADABLE:
            raise UserInputError(f"--python-backend: the generated model.py cannot load format {fmt} "
                                 f"(it loads {', '.join(PYTHON_LOADABLE)}); serve it natively")
        return PYTHON
    if fmt == "aoti":
        return AOTI_NATIVE if aoti_native else PYTHON
    if fmt == "torch_export":
        return PYTHON
    if fmt in NATIVE:
        return NATIVE[fmt]
    raise UserInputError(f"format {fmt} has no Triton backend known to navigator")


def pytorch_names(our_names: list[str], artifact_names: list[str], prefix: str) -> tuple[list[str], bool]:
    """Triton names for the PyTorch backend, which binds tensors by ``<name>__<index>``.

    The artifact's names (the workspace's ``io_names``) are kept when they already
    follow the convention (the TorchScript export records ``INPUT__0``…); otherwise
    ``<PREFIX>__<i>`` is generated from the signature order. Returns (names, generated)."""
    if artifact_names and all(_INDEXED.match(n) for n in artifact_names) \
            and sorted(int(n.rsplit("__", 1)[1]) for n in artifact_names) == list(range(len(artifact_names))) \
            and all(n.count("__") == 1 for n in artifact_names):
        return list(artifact_names), False
    return [f"{prefix}__{i}" for i in range(len(our_names))], True
