"""Saving ONNX models: inline under 2 GB, external data beside the file above."""

from __future__ import annotations

import os
from pathlib import Path

TWO_GB = 2**31 - 1


def model_size(model) -> int:
    """Serialized size, counting external tensors (ByteSize fails above 2 GB)."""
    total = 0
    for init in model.graph.initializer:
        if init.raw_data:
            total += len(init.raw_data)
        else:
            for entry in init.external_data:
                if entry.key == "length":
                    total += int(entry.value)
    return total + sum(len(n.SerializeToString()) for n in model.graph.node)


def save_onnx(model, path: str | os.PathLike) -> None:
    """Write ``model`` to ``path``; above 2 GB the weights go to ``<name>.data``."""
    import onnx

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if model_size(model) > TWO_GB - 64 * 2**20:
        data = path.name + ".data"
        if (path.parent / data).exists():
            (path.parent / data).unlink()
        onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=data, size_threshold=1024)
    else:
        onnx.save_model(model, str(path))
