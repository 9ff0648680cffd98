"""Sources: what the user hands in, and how it becomes the first artifact.

Each source knows its format, a default model name, how to read its
signature, how to bring itself into the workspace (export) and how to
compute the reference outputs. ONNX files are handled here; the PyTorch and
TensorFlow issues add their sources beside it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from navigator.errors import UserInputError
from navigator.types import ModelSignature

ONNX_SUFFIXES = (".onnx",)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


@dataclass
class Source:
    format: str                    # source format: onnx, torch, savedmodel, ...
    key: str                       # key of the first artifact
    name: str                      # default model name
    path: Path | None = None
    obj: Any = None                # live object (nn.Module, Keras model)
    signature: ModelSignature | None = None
    index_bounds: dict = field(default_factory=dict)
    isolated: bool = True          # False when exported in the calling process
    reference_runner: dict | None = None   # runner spec + options computing the reference

    def sha256(self) -> str | None:
        return sha256_file(self.path) if self.path and self.path.is_file() else None

    def export(self, ws, out_path: Path) -> dict:
        raise NotImplementedError


class OnnxSource(Source):
    def export(self, ws, out_path: Path) -> dict:
        """Copy the model (and its external data, same relative names) into the workspace."""
        from navigator.signature import external_data_files, load_onnx

        out_path.parent.mkdir(parents=True, exist_ok=True)
        model = load_onnx(self.path)
        for data in external_data_files(model, self.path.parent):
            rel = os.path.relpath(data, self.path.parent)
            if rel.startswith(".."):
                raise UserInputError(f"{self.path}: external data {rel!r} lies outside the model's folder")
            dest = out_path.parent / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(data, dest)
        tmp = out_path.with_name(out_path.name + ".part")
        shutil.copyfile(self.path, tmp)
        os.replace(tmp, out_path)
        return {"exporter": "copy"}


def open_onnx(path: Path) -> OnnxSource:
    from navigator.signature import check_onnx, external_data_files, index_bounds, load_onnx, onnx_signature

    model = load_onnx(path)
    missing = [p for p in external_data_files(model, path.parent) if not p.is_file()]
    if missing:
        raise UserInputError(f"{path}: external data file {missing[0].name!r} is missing beside the model")
    check_onnx(path)
    return OnnxSource(format="onnx", key="onnx", name=path.stem, path=path, signature=onnx_signature(model),
                      index_bounds=index_bounds(model),
                      reference_runner={"runner": "onnxruntime", "device": "cpu", "provider": None,
                                        "options": {"graph_optimization_level": "disabled"}})


def open_source(model: Any, model_format: str | None = None) -> Source:
    """Recognise the model: a path (ONNX file, ...) or a live framework object."""
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        fmt = model_format
        if fmt is None:
            if path.suffix.lower() in ONNX_SUFFIXES:
                fmt = "onnx"
            elif not path.exists():
                raise UserInputError(f"{path}: no such file or directory")
            else:
                raise UserInputError(f"{path}: cannot tell the model format from the name; supported here: "
                                     ".onnx files (give --model-format)")
        if not path.exists():
            raise UserInputError(f"{path}: no such file or directory")
        if fmt == "onnx":
            if path.is_dir():
                raise UserInputError(f"{path}: is a directory, expected an .onnx file")
            return open_onnx(path)
        raise UserInputError(f"--model-format {fmt!r} is not supported; supported: onnx")
    raise UserInputError(f"cannot convert an object of type {type(model).__name__}; give a path to an .onnx file")
