"""Format names, artifact keys and the facts per format (file name, runners)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from navigator.errors import UserInputError

FORMATS = ("torch", "torchscript", "torch_export", "aoti", "onnx", "tensorrt", "tensorrt_rtx", "torch_tensorrt",
           "savedmodel", "tf_trt", "openvino")
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "int8", "fp8")

# The file each format's artifact is stored as, inside formats/<key>/.
FILE_NAMES = {
    "torch": "source.json",
    "onnx": "model.onnx",
    "openvino": "model.xml",
    "torchscript": "model.pt",
    "torch_export": "model.pt2",
    "aoti": "model.pt2",
    "tensorrt": "model.plan",
    "tensorrt_rtx": "model.plan",
    "torch_tensorrt": "model.pt",
    "savedmodel": "model.savedmodel",
    "tf_trt": "model.savedmodel",
}

# With --no-profile, best is the first verified format in this order.
PREFERENCE = ("tensorrt", "tensorrt_rtx", "torch_tensorrt", "aoti", "openvino", "onnx", "torch_export",
              "torchscript", "tf_trt", "savedmodel", "torch")

_KEY = re.compile(r"^(?P<format>[a-z][a-z0-9_]*)(?:-(?P<variant>[a-z][a-z0-9_]*?))??(?:-(?P<precision>fp32|tf32|fp16|bf16|int8|fp8))?$")


@dataclass(frozen=True)
class Key:
    format: str
    variant: str | None = None
    precision: str = "fp32"

    def __str__(self) -> str:
        parts = [self.format]
        if self.variant:
            parts.append(self.variant)
        if self.precision != "fp32":
            parts.append(self.precision)
        return "-".join(parts)


def parse_key(text: str) -> Key:
    """``onnx-optimized-fp16`` -> Key("onnx", "optimized", "fp16")."""
    m = _KEY.match(text or "")
    if not m or m.group("format") not in FORMATS:
        raise UserInputError(f"{text!r} is not a format key (<format>[-<variant>][-<precision>], formats: "
                             f"{', '.join(FORMATS)})")
    return Key(m.group("format"), m.group("variant"), m.group("precision") or "fp32")


def file_name(fmt: str) -> str:
    return FILE_NAMES.get(fmt, "model.bin")


def preference_rank(key: str) -> tuple[int, int]:
    k = parse_key(key)
    fmt_rank = PREFERENCE.index(k.format) if k.format in PREFERENCE else len(PREFERENCE)
    return fmt_rank, (0 if k.variant else 1)
