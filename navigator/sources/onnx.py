"""ONNX files as sources: copied into the workspace with their external data; the
reference is onnxruntime with graph optimisations disabled."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from navigator.errors import UserInputError
from navigator.execution.jobs import RunnerTask
from navigator.sources.base import Source

FORMAT = "onnx"   # the format of this kind of source (its record in navigator.formats.builtin)


class OnnxSource(Source):
    def export(self, ws, out_path: Path) -> dict:
        """Copy the model (and its external data, same relative names) into the workspace."""
        from navigator.sources.signature import external_data_files, load_onnx

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
    from navigator.sources.signature import (check_onnx, compared_values, external_data_files, index_bounds, load_onnx,
                                             onnx_signature, short_external_data)

    model = load_onnx(path)
    missing = [p for p in external_data_files(model, path.parent) if not p.is_file()]
    if missing:
        raise UserInputError(f"{path}: external data file {missing[0].name!r} is missing beside the model")
    short = short_external_data(model, path.parent)
    if short:
        raise UserInputError(f"{path}: {short}")
    check_onnx(path)
    return OnnxSource(format=FORMAT, key=FORMAT, name=path.stem, path=path, signature=onnx_signature(model),
                      index_bounds=index_bounds(model), value_ranges=compared_values(model),
                      reference_runner=RunnerTask("onnxruntime", "cpu",
                                                  options={"graph_optimization_level": "disabled"}),
                      variation_runner=RunnerTask("onnxruntime", "cpu", options={"graph_optimization_level": "all"}))
