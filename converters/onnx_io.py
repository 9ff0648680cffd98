"""Saving ONNX models: inline under 2 GB, external data beside the file above;
and models whose weights stay in their external-data files (never loaded)."""

from __future__ import annotations

import os
from pathlib import Path

TWO_GB = 2**31 - 1
INLINE_BUDGET = 256 * 2**20   # external tensors read into a proto for folding, in all


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


def remove_onnx(path: Path) -> None:
    """Delete an ONNX file and the ``<name>.data`` external data beside it, where they exist (an
    earlier attempt's leftovers must not be read as this one's)."""
    for leftover in (path, path.with_name(path.name + ".data")):
        if leftover.exists():
            os.unlink(leftover)


def external_tensors(model) -> list:
    """Every tensor of ``model`` (initializers, attributes, subgraphs) stored as external data."""
    import onnx

    from navigator.sources.signature import all_tensors

    return [t for t in all_tensors(model.graph) if t.data_location == onnx.TensorProto.EXTERNAL]


def _entry(tensor, key: str) -> str | None:
    return next((e.value for e in tensor.external_data if e.key == key), None)


def inline_small_external(model, base_dir: str | os.PathLike, max_bytes: int, *,
                          budget: int = INLINE_BUDGET) -> int:
    """Load external tensors of at most ``max_bytes`` each into the proto (so graph passes
    can fold them), smallest first, while their total stays within ``budget`` (the proto
    must stay far below protobuf's 2 GB); the others stay external. Returns the number loaded."""
    import onnx
    from onnx.external_data_helper import load_external_data_for_tensor

    sized = [(int(_entry(t, "length") or -1), i, t) for i, t in enumerate(external_tensors(model))]
    count = total = 0
    for length, _, t in sorted(sized, key=lambda x: (x[0], x[1])):
        if length < 0 or length > max_bytes or total + length > budget:
            continue
        load_external_data_for_tensor(t, str(base_dir))
        t.data_location = onnx.TensorProto.DEFAULT
        del t.external_data[:]
        total += length
        count += 1
    return count


def copy_external_data(model, source_dir: str | os.PathLike, out_dir: str | os.PathLike) -> None:
    """Copy the external-data files ``model`` refers to (relative to ``source_dir``) to
    ``out_dir`` with the same relative names, streamed (never read into memory). Not hard
    links: the ONNX checker refuses external data with several links (a hardlink attack)."""
    import shutil

    seen = set()
    for t in external_tensors(model):
        rel = _entry(t, "location")
        if rel is None or rel in seen:
            continue
        seen.add(rel)
        if os.path.isabs(rel) or os.path.normpath(rel).startswith(".."):
            raise ValueError(f"external data location {rel!r} leaves the model's folder")
        src, dest = Path(source_dir) / rel, Path(out_dir) / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".part")
        shutil.copyfile(src, tmp)
        os.replace(tmp, dest)


def save_proto(model, path: str | os.PathLike) -> None:
    """Write ``model`` as it is (its external tensors keep their entries) through a temporary file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".part")
    tmp.write_bytes(model.SerializeToString())
    os.replace(tmp, path)


TRANSPOSED = "__navigator_transposed"
_ALIGN = 4096


def pretranspose_matmul_weights(model, source_dir: str | os.PathLike, out_dir: str | os.PathLike,
                                data_name: str) -> tuple[object, int, int]:
    """``model`` (loaded without its external data) rewritten for OpenVINO's conversion: each 2-D
    external weight used only as MatMul's second input is stored transposed, behind a Transpose
    node named as the weight, so that conversion fuses the Transpose into the MatMul and reads the
    weight in place instead of writing a transposed copy of it (which doubled its peak memory on
    models with external data). Every external tensor goes to ``out_dir/data_name``, streamed one
    tensor at a time. Returns (the model, weights transposed, their bytes); the model is
    unchanged, and nothing is written, when no weight qualifies."""
    import numpy as np
    import onnx
    from onnx import helper

    graph = model.graph
    uses: dict[str, list[tuple[str, int]]] = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            uses.setdefault(name, []).append((node.op_type, i))
    outputs = {o.name for o in graph.output} | {i.name for i in graph.input}   # an initializer may be an input too
    external = [t for t in graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    chosen = {t.name for t in external if len(t.dims) == 2 and t.name not in outputs and uses.get(t.name)
              and all(u == ("MatMul", 1) for u in uses[t.name])
              and t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE)}
    if not chosen or len(external) != len(external_tensors(model)):   # tensors outside the initializers: as they are
        return model, 0, 0
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    out = Path(out_dir) / data_name
    moved = moved_bytes = 0
    with open(out, "wb") as f:
        for t in graph.initializer:
            if t.data_location != onnx.TensorProto.EXTERNAL:
                continue
            rel, offset, length = _entry(t, "location"), int(_entry(t, "offset") or 0), _entry(t, "length")
            if rel is None or os.path.isabs(rel) or os.path.normpath(rel).startswith(".."):
                raise ValueError(f"external data location {rel!r} leaves the model's folder")
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type))
            size = int(length) if length is not None else int(np.prod(t.dims)) * dtype.itemsize
            f.write(b"\0" * ((-f.tell()) % _ALIGN))
            at = f.tell()
            src = np.memmap(Path(source_dir) / rel, dtype=np.uint8, mode="r", offset=offset, shape=(size,))
            try:
                if t.name in chosen:
                    _write_transposed(f, src.view(dtype).reshape(tuple(t.dims)))
                    moved, moved_bytes = moved + 1, moved_bytes + size
                else:
                    for j in range(0, size, 64 << 20):
                        f.write(src[j:j + (64 << 20)].tobytes())
            finally:
                del src
            del t.external_data[:]
            for key, value in (("location", data_name), ("offset", str(at)), ("length", str(size))):
                entry = t.external_data.add()
                entry.key, entry.value = key, value
            if t.name in chosen:
                original = t.name
                t.name = original + TRANSPOSED
                t.dims[:] = [t.dims[1], t.dims[0]]
                graph.node.insert(0, helper.make_node("Transpose", [t.name], [original], perm=[1, 0],
                                                      name=original + TRANSPOSED))
    return model, moved, moved_bytes


def _write_transposed(f, w) -> None:
    """``w.T`` written to ``f`` a block of its rows at a time (~8 MiB), each block filled in tiles
    small enough for the caches (2.5x faster than numpy's transposed copy of a large block)."""
    import numpy as np

    rows, cols = w.shape
    step = max(1, min(cols, (8 << 20) // max(1, rows * w.itemsize)))
    tile = 256
    out = np.empty((step, rows), dtype=w.dtype)
    for j in range(0, cols, step):
        n = min(step, cols - j)
        for i in range(0, rows, tile):
            out[:n, i:i + tile] = w[i:i + tile, j:j + n].T
        f.write(out[:n].tobytes())
